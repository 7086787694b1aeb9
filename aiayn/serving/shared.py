"""What the replicas of one service share: the counters behind its limits, and the translations it remembers.

``aiayn serve --shared-storage redis://HOST:PORT/N`` keeps them in Redis, so that replicas behind a load balancer
enforce one limit and answer from one cache (as LibreTranslate's ``--shared-storage``); without it each process
counts on its own (:class:`Local`, the default). Three operations, each atomic in Redis (a Lua script):

- :meth:`Local.admit`: one more request of ``name``, unless ``limit`` of them came in the last ``window_s`` seconds (a
  sliding window: a client never gets twice its limit by straddling a minute's edge). Redis's clock decides, so that
  replicas whose clocks differ agree.
- :meth:`Local.spend`: ``amount`` more of a budget, unless that and the largest total :meth:`Local.seen` of it
  would pass it (what keys spend while the keys database is away, counted against what it last said they had
  spent: middleware.py; the record of what keys spend is that database).
- :meth:`Redis.recall` / :meth:`Redis.remember`: translations by key (batcher.py), each kept ``ttl_s`` seconds; and
  :meth:`Redis.keep_file` / :meth:`Redis.file`: translated documents (files.py), so that any replica serves the
  download. Redis's ``maxmemory`` bounds them (docs/deploy.md starts it with ``--maxmemory-policy allkeys-lru``):
  nothing in Redis is a record that must last.

**Redis going away is not an error.** A call that fails (or takes longer than :data:`TIMEOUT_S`) is answered from this
process's own state, a warning is logged once per outage, ``aiayn_shared_storage_up`` reads 0 and
``aiayn_shared_storage_errors_total`` counts; Redis is tried again :data:`RETRY_S` later, and once it answers, state is
shared again (the counts of the outage stay local: limits are per replica while it lasts).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")
TIMEOUT_S = 0.5         # a Redis call slower than this counts as Redis gone
RETRY_S = 2.0           # how long after a failure Redis is tried again


class Local:
    """This process's own counters (the module's docstring); at most :data:`MOST` names are kept, the one used least
    recently forgotten first, as are windows and budgets that have run out."""

    MOST = 100_000

    def __init__(self) -> None:
        self.times: OrderedDict[str, deque[float]] = OrderedDict()      # least recently seen first
        self.spent: OrderedDict[str, int] = OrderedDict()
        self.totals: OrderedDict[str, int] = OrderedDict()

    async def admit(self, name: str, limit: int, window_s: float = 60.0) -> bool:
        now = time.monotonic()
        while self.times:                                   # forget the names whose requests are all out of the window
            oldest = next(iter(self.times.values()))
            if oldest and oldest[-1] > now - window_s:
                break
            self.times.popitem(last=False)
        times = self.times.pop(name, deque())
        while times and times[0] <= now - window_s:
            times.popleft()
        self.times[name] = times                            # now the most recently seen
        if len(self.times) > self.MOST:
            self.times.popitem(last=False)
        if len(times) >= limit:
            return False
        times.append(now)
        return True

    async def spend(self, name: str, amount: int, budget: int, ttl_s: int) -> bool:
        """``name`` names its period (a key's day: ``chars:UID:2026-11-28``), so a new period starts at 0."""
        used = self.spent.pop(name, 0)
        self.spent[name] = used
        if len(self.spent) > self.MOST:
            self.spent.popitem(last=False)
        if used + self.totals.get(name, 0) + amount > budget:
            return False
        self.spent[name] = used + amount
        return True

    async def seen(self, name: str, total: int, ttl_s: int) -> None:
        """``total`` of ``name``'s budget spent elsewhere (the keys database), kept if it is the largest seen."""
        self.totals[name] = max(total, self.totals.pop(name, 0))
        if len(self.totals) > self.MOST:
            self.totals.popitem(last=False)

    async def unspend(self, name: str, amount: int) -> None:
        """``amount`` of what :meth:`spend` counted given back (written elsewhere since, and :meth:`seen` there)."""
        if name in self.spent:
            self.spent[name] = max(0, self.spent[name] - amount)

    async def recall(self, keys: list[str]) -> list[bytes | None]:
        return [None] * len(keys)               # (this process's translations are batcher.py's own table)

    async def remember(self, items: dict[str, bytes], ttl_s: int) -> None:
        pass

    async def keep_file(self, token: str, name: str, data: bytes, ttl_s: int) -> bool:
        """A translated document kept for every replica (False: not kept, the storage is this process's)."""
        return False

    async def file(self, token: str) -> tuple[str, bytes] | None:
        """A document kept by :meth:`keep_file`: its download name and bytes (None: not there)."""
        return None

    def describe(self) -> str:
        return "this process"

    async def close(self) -> None:
        pass

    async def check(self) -> None:
        """Ask the storage whether it answers (``/metrics`` does before it is read)."""


ADMIT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local window = tonumber(ARGV[2]) * 1000000
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], now, now .. ':' .. ARGV[3])
redis.call('PEXPIRE', KEYS[1], math.ceil(window / 1000))
return 1
"""
SPEND = """
local used = tonumber(redis.call('GET', KEYS[1]) or '0') +
  math.max(tonumber(redis.call('GET', KEYS[2]) or '0'), tonumber(ARGV[4]))
if used + tonumber(ARGV[1]) > tonumber(ARGV[2]) then return 0 end
redis.call('INCRBY', KEYS[1], ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[3])
return 1
"""
SEEN = """
if tonumber(ARGV[1]) > tonumber(redis.call('GET', KEYS[1]) or '0') then
  redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
end
return 1
"""


class Redis(Local):
    """The counters and translations in Redis at ``url``, this process's own (:class:`Local`) while it cannot be
    reached. ``metrics``: the app's (models.Metrics), whose shared-storage gauge and counter it sets."""

    def __init__(self, url: str, metrics: Any = None, prefix: str = "aiayn") -> None:
        super().__init__()
        try:
            import redis.asyncio as aioredis
            from redis.exceptions import RedisError
        except ImportError:
            raise ValueError("--shared-storage needs the redis library: pip install 'aiayn[serve]'") from None
        if not url.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError(f"--shared-storage {url!r}: expected redis://HOST:PORT/N (or rediss://, unix://)")
        self.url, self.metrics, self.prefix, self.errors = url, metrics, prefix, (RedisError, OSError, TimeoutError)
        self.client = aioredis.Redis.from_url(url, socket_timeout=TIMEOUT_S, socket_connect_timeout=TIMEOUT_S)
        self._admit, self._spend = self.client.register_script(ADMIT), self.client.register_script(SPEND)
        self._seen = self.client.register_script(SEEN)
        self.down_until, self.down = 0.0, False
        self._up(True)

    def _up(self, up: bool) -> None:
        if self.metrics is not None:
            self.metrics.shared_up.set(int(up))

    async def _try(self, call: Callable[[], Awaitable[T]], local: Callable[[], Awaitable[T]]) -> T:
        """``call``'s answer from Redis, else (Redis gone, or resting after a failure) ``local``'s."""
        if time.monotonic() < self.down_until:
            return await local()
        try:
            answer = await call()
        except self.errors as e:
            self.down_until = time.monotonic() + RETRY_S
            if self.metrics is not None:
                self.metrics.shared_errors.inc()
            if not self.down:
                self.down = True
                self._up(False)
                log.warning("shared storage %s unreachable (%s: %s): limits and cache are this replica's own until "
                            "it answers", self.describe(), e.__class__.__name__, e)
            return await local()
        if self.down:
            self.down = False
            self._up(True)
            log.warning("shared storage %s answers again: limits and cache are shared", self.describe())
        return answer

    async def admit(self, name: str, limit: int, window_s: float = 60.0) -> bool:
        token = secrets.token_hex(6)
        return bool(await self._try(
            lambda: self._admit(keys=[f"{self.prefix}:req:{name}"], args=[limit, window_s, token]),
            lambda: super(Redis, self).admit(name, limit, window_s)))

    async def spend(self, name: str, amount: int, budget: int, ttl_s: int) -> bool:
        return bool(await self._try(
            lambda: self._spend(keys=[f"{self.prefix}:spent:{name}", f"{self.prefix}:total:{name}"],
                                args=[amount, budget, ttl_s, self.totals.get(name, 0)]),
            lambda: super(Redis, self).spend(name, amount, budget, ttl_s)))

    async def seen(self, name: str, total: int, ttl_s: int) -> None:
        await Local.seen(self, name, total, ttl_s)          # (kept here too, for when Redis is away)
        await self._try(lambda: self._seen(keys=[f"{self.prefix}:total:{name}"], args=[total, ttl_s]),
                        lambda: asyncio.sleep(0))

    async def unspend(self, name: str, amount: int) -> None:
        await self._try(lambda: self.client.decrby(f"{self.prefix}:spent:{name}", amount),
                        lambda: super(Redis, self).unspend(name, amount))

    async def recall(self, keys: list[str]) -> list[bytes | None]:
        async def get() -> list[bytes | None]:
            got = await self.client.mget([f"{self.prefix}:mt:{k}" for k in keys])
            return [v.encode() if isinstance(v, str) else v for v in got]

        return await self._try(get, lambda: super(Redis, self).recall(keys))

    async def remember(self, items: dict[str, bytes], ttl_s: int) -> None:
        async def put() -> None:
            async with self.client.pipeline(transaction=False) as p:
                for k, v in items.items():
                    p.set(f"{self.prefix}:mt:{k}", v, ex=ttl_s)
                await p.execute()

        await self._try(put, lambda: super(Redis, self).remember(items, ttl_s))

    async def keep_file(self, token: str, name: str, data: bytes, ttl_s: int) -> bool:
        async def put() -> bool:
            await self.client.set(f"{self.prefix}:file:{token}", name.encode() + b"\0" + data, ex=ttl_s)
            return True

        return await self._try(put, lambda: super(Redis, self).keep_file(token, name, data, ttl_s))

    async def file(self, token: str) -> tuple[str, bytes] | None:
        async def get() -> tuple[str, bytes] | None:
            value = await self.client.get(f"{self.prefix}:file:{token}")
            if value is None:
                return None
            name, _, data = (value.encode() if isinstance(value, str) else bytes(value)).partition(b"\0")
            return name.decode(), data

        return await self._try(get, lambda: super(Redis, self).file(token))

    async def check(self) -> None:
        """While Redis is thought gone, ask it again (at most every RETRY_S): ``aiayn_shared_storage_up`` then says
        whether it answers, even where no request needed it (no limits, every answer in this process's cache)."""
        if self.down:
            await self._try(self.client.ping, lambda: Local.check(self))

    async def close(self) -> None:
        with contextlib.suppress(*self.errors):
            await self.client.aclose()

    def describe(self) -> str:
        from urllib.parse import urlsplit

        u = urlsplit(self.url)                       # (never its password)
        return f"{u.scheme}://{u.hostname or ''}{f':{u.port}' if u.port else ''}{u.path}"


def open_shared(url: str | None, metrics: Any = None) -> Local:
    """Redis at ``url`` (``--shared-storage``), else this process's own state."""
    return Redis(url, metrics) if url else Local()
