"""Who may translate how much: the API key a request shows, and its limits, in both of the server's APIs.

A server takes one shared key (``--api-key``), keys from a database (``--api-keys DB``: database.py, each with its
own limits and origin), both, or none. Three checks, in this order, each refusing with a JSON error:

1. :meth:`Access.identify`: the key (a missing one: aiayn 401, LibreTranslate's 400; a wrong one: 401 / 403), and a
   database key's origin (403 where a browser page of another origin uses it). With ``--keys-optional`` a request
   without a key is served as its address, under the server's own limits (LibreTranslate's ``--api-keys`` without
   ``--require-api-key-*``). Without keys, every client is its address.
2. :meth:`Access.admit`: requests per minute (the key's, else ``--req-limit``): 429.
3. :meth:`Access.spend`: the characters of the request, all its texts together (the key's ``char_limit``, else
   ``--max-chars``: aiayn 413, LibreTranslate's 400), and a database key's characters per day (UTC): 429. A document
   (``/translate_file``) is charged to the day by :meth:`Access.charge` as its texts are translated.

Requests per minute are counted in shared.py's storage (this process's, or Redis shared by replicas: a Redis restart
forgets at most a minute of them); characters per day in the keys database itself (database.py says why), by each
key's never-reused ``uid``. A key is never logged: a client is named by its address, ``the API key`` (the shared one)
or ``key ID`` (a database key's row).

Keys read from the database are remembered ``--keys-ttl`` seconds (10), so a removed key stops working within that.

**A keys database that goes away** (stopped, unreachable, locked): the keys this process has seen keep working from
their remembered rows for ``--keys-grace`` seconds from the first failure, their characters of the day counted here
against what the database last said they had spent and written to it once it answers; a key not seen before, and
every key past the grace, is answered 503 with ``Retry-After``. One warning when the outage starts and one when it
ends; ``aiayn_keys_database_up`` reads 0 meanwhile and ``aiayn_keys_database_errors_total`` counts. The database is
asked again at most every :data:`RETRY_S` seconds, by one request at a time.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from .database import Database, Key, Unavailable, digest
from .guards import ServiceError, address, same_key
from .shared import Local

log = logging.getLogger(__name__)
T = TypeVar("T")
RETRY_S = 2.0
DAY_S = 86_400


@dataclass(frozen=True)
class Client:
    """Whom a request's limits are counted for: ``name`` (never the key itself) and its key's row, if a database's."""

    name: str
    key: Key | None = None


class Outages:
    """The keys database's outages (the module's docstring): since when it has not answered, when it is asked again,
    one warning as each starts and ends, and ``metrics``' gauge and counter."""

    def __init__(self, db: Database, grace_s: float, metrics: Any = None) -> None:
        self.db, self.grace_s, self.metrics = db, grace_s, metrics
        self.down_since: float | None = None         # when the database stopped answering (None: it answers)
        self.next_try = 0.0                          # the earliest the database is asked again while it is away
        self.asking = False                          # a request is asking it now
        if metrics is not None:
            metrics.keys_up.set(1)

    @property
    def in_grace(self) -> bool:
        return self.down_since is None or time.monotonic() - self.down_since <= self.grace_s

    @staticmethod
    def unavailable() -> ServiceError:
        return ServiceError(503, "The keys database is unavailable: try again shortly",
                            {"Retry-After": str(int(RETRY_S * 5))})

    async def ask(self, work: Callable[[], T]) -> tuple[T, bool]:
        """``work()`` (a call of the database) in a thread, and whether the database just answered again;
        Unavailable, without asking, while it is resting after a failure or another request is asking it."""
        if self.down_since is not None and (time.monotonic() < self.next_try or self.asking):
            raise Unavailable("resting")
        self.asking = True
        try:
            answer = await asyncio.get_running_loop().run_in_executor(None, work)
        except Unavailable as e:
            self.next_try = time.monotonic() + RETRY_S
            if self.metrics is not None:
                self.metrics.keys_errors.inc()
            if self.down_since is None:
                self.down_since = time.monotonic()
                if self.metrics is not None:
                    self.metrics.keys_up.set(0)
                log.warning("%s: the keys seen are served from memory for %g s, then 503 until it answers", e,
                            self.grace_s)
            raise
        finally:
            self.asking = False
        if self.down_since is None:
            return answer, False
        log.warning("the keys database %s answers again after %.0f s", self.db.where, time.monotonic() - self.down_since)
        self.down_since = None
        if self.metrics is not None:
            self.metrics.keys_up.set(1)
        return answer, True


class Access:
    """The checks of the module's docstring for the server ``cfg`` (serve.ServeConfig), counting in ``shared``."""

    MOST = 10_000       # keys remembered at once

    def __init__(self, cfg: Any, shared: Local, db: Database | None = None, metrics: Any = None) -> None:
        self.cfg, self.shared, self.db, self.metrics = cfg, shared, db, metrics
        self.found: OrderedDict[str, tuple[float, Key | None]] = OrderedDict()
        self.outages = Outages(db, cfg.keys_grace, metrics) if db is not None else None
        self.owed: dict[tuple[str, str], int] = {}          # (uid, day) -> spent while it was away, to be written

    @property
    def keyed(self) -> bool:
        """Whether the server has keys."""
        return self.cfg.api_key is not None or self.db is not None

    @property
    def required(self) -> bool:
        """Whether a request without a key is refused."""
        return self.keyed and not self.cfg.keys_optional

    # --- the database, and its outages ---------------------------------------------------------------------------

    async def _ask(self, work: Callable[[], T]) -> T:
        """``work()`` asked of the database (Outages.ask); once it answers again, what was owed it is written."""
        assert self.outages is not None
        answer, back = await self.outages.ask(work)
        if back:
            await self._settle()
        return answer

    async def _settle(self) -> None:
        """What keys spent while the database was away, written to it (added whatever their budgets)."""
        assert self.db is not None
        db = self.db
        while self.owed:
            (uid, day), chars = next(iter(self.owed.items()))
            total = await asyncio.get_running_loop().run_in_executor(None, db.add_spent, uid, day, chars)
            del self.owed[(uid, day)]
            await self.shared.seen(f"chars:{uid}:{day}", total, 2 * DAY_S)
            await self.shared.unspend(f"chars:{uid}:{day}", chars)

    async def _row(self, key: str) -> Key | None:
        assert self.db is not None
        db = self.db
        h, now, outages = digest(key), time.monotonic(), self.outages
        assert outages is not None
        if not outages.in_grace:                        # the database away past the grace period: no key is trusted
            try:
                await self._ask(db.ping)
            except Unavailable:
                raise outages.unavailable() from None
        hit = self.found.get(h)
        if hit is not None and hit[0] > now - self.cfg.keys_ttl:
            return hit[1]
        try:
            row = await self._ask(lambda: db.find(key))
        except Unavailable:
            if hit is not None and outages.in_grace:
                return hit[1]                           # (its time not renewed: the database is asked again)
            raise outages.unavailable() from None
        self.found[h] = (now, row)
        self.found.move_to_end(h)
        if len(self.found) > self.MOST:
            self.found.popitem(last=False)
        return row

    async def identify(self, request: Any, given: str | None, libretranslate: bool) -> Client:
        """The client ``request`` is, by the key ``given`` (None: none sent)."""
        if not self.keyed or (not given and not self.required):
            return Client(address(request))
        if not given:
            raise ServiceError(400, "Please contact the server operator to get an API key (send it as api_key)") \
                if libretranslate else ServiceError(401, "missing or wrong API key (send it as X-API-Key)")
        if self.cfg.api_key is not None and same_key(given, self.cfg.api_key):
            return Client("the API key")
        row = await self._row(given) if self.db is not None and len(given) < 200 else None
        if row is None:
            raise ServiceError(403, "Invalid API key") if libretranslate else \
                ServiceError(401, "missing or wrong API key (send it as X-API-Key)")
        origin = request.headers.get("origin", "").rstrip("/")
        if row.origin and origin != row.origin:
            raise ServiceError(403, f"this API key is for the pages of {row.origin} (the request's Origin: "
                                    f"{origin or 'none'})")
        return Client(f"key {row.uid}", row)

    async def admit(self, client: Client) -> None:
        """429 when ``client`` has had its requests for this minute."""
        limit = client.key.req_limit if client.key is not None and client.key.req_limit else self.cfg.req_limit
        if limit and not await self.shared.admit(client.name, limit, 60.0):
            raise ServiceError(429, f"Slowdown: {limit} per 1 minute", {"Retry-After": "60"})

    async def spend(self, client: Client, chars: int, libretranslate: bool) -> None:
        """Refuse a request of ``chars`` characters over its client's limit per request, or its key's for the day."""
        most = client.key.char_limit if client.key is not None and client.key.char_limit else self.cfg.max_chars
        if chars > most:
            if libretranslate:
                raise ServiceError(400, f"Invalid request: request ({chars} characters) exceeds text limit ({most} "
                                        "characters)")
            raise ServiceError(413, f"{chars} characters in one request; at most {most}")
        await self.charge(client, chars)

    async def charge(self, client: Client, chars: int) -> None:
        """429 when ``chars`` more characters would pass ``client``'s key's characters for the day; else spent (in
        the database; while it is away, here: the module's docstring)."""
        key, db = client.key, self.db
        daily = key.daily_chars if key is not None else None
        if not daily or key is None or db is None:
            return
        day, uid = time.strftime("%Y-%m-%d", time.gmtime()), key.uid
        name = f"chars:{uid}:{day}"
        try:
            if self.owed:
                await self._ask(db.ping)                # (what this replica owes the database is written first)
            spent, total = await self._ask(lambda: db.spend(uid, day, chars, daily))
            await self.shared.seen(name, total, 2 * DAY_S)  # (the largest total seen, for every replica, for an outage)
        except Unavailable:
            if self.outages is not None and not self.outages.in_grace:
                raise self.outages.unavailable() from None
            # counted in the shared storage (so that replicas together stay within the budget) on top of the
            # largest total any replica last had from the database, and owed by this replica to the database
            spent = await self.shared.spend(name, chars, daily, 2 * DAY_S)
            if spent:
                self.owed[(uid, day)] = self.owed.get((uid, day), 0) + chars
        if not spent:
            seconds = DAY_S - int(time.time()) % DAY_S
            raise ServiceError(429, f"this API key's {daily} characters for today are spent (or this request's "
                                    f"{chars} would pass them); they renew at 00:00 UTC", {"Retry-After": str(seconds)})
