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

The counts are kept in shared.py's storage (this process's, or Redis shared by replicas). A key is never logged: a
client is named by its address, ``the API key`` (the shared one) or ``key ID`` (a database key's row).
Keys read from the database are remembered :data:`KEY_TTL_S` seconds, so a removed key stops working within that.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from .database import Database, Key, digest
from .guards import ServiceError, address, same_key
from .shared import Local

KEY_TTL_S = 10.0
DAY_S = 86_400


@dataclass(frozen=True)
class Client:
    """Whom a request's limits are counted for: ``name`` (never the key itself) and its key's row, if a database's."""

    name: str
    key: Key | None = None


class Access:
    """The checks of the module's docstring for the server ``cfg`` (serve.ServeConfig), counting in ``shared``."""

    MOST = 10_000       # keys remembered at once

    def __init__(self, cfg: Any, shared: Local, db: Database | None = None) -> None:
        self.cfg, self.shared, self.db = cfg, shared, db
        self.found: OrderedDict[str, tuple[float, Key | None]] = OrderedDict()

    @property
    def keyed(self) -> bool:
        """Whether the server has keys."""
        return self.cfg.api_key is not None or self.db is not None

    @property
    def required(self) -> bool:
        """Whether a request without a key is refused."""
        return self.keyed and not self.cfg.keys_optional

    async def _row(self, key: str) -> Key | None:
        assert self.db is not None
        h, now = digest(key), time.monotonic()
        hit = self.found.get(h)
        if hit is not None and hit[0] > now - KEY_TTL_S:
            return hit[1]
        row = await asyncio.get_running_loop().run_in_executor(None, self.db.find, key)
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
        return Client(f"key {row.id}", row)

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
        """429 when ``chars`` more characters would pass ``client``'s key's characters for the day; else spent."""
        daily = client.key.daily_chars if client.key is not None else None
        if daily and not await self.shared.spend(f"chars:{client.name}:{time.strftime('%Y-%m-%d', time.gmtime())}",
                                                 chars, daily, 2 * DAY_S):
            seconds = DAY_S - int(time.time()) % DAY_S
            raise ServiceError(429, f"this API key's {daily} characters for today are spent (or this request's "
                                    f"{chars} would pass them); they renew at 00:00 UTC", {"Retry-After": str(seconds)})
