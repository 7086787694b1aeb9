"""The door: what every request ``aiayn serve`` answers passes before any work is done for it. The wrappers, the rules
each request is checked by, and who may translate how much (keys and limits).

The wrappers, outermost first, before any handler sees it (serve.py adds them
to the app in this order, innermost last): who sent it (:class:`Forwarded`), its API key, metrics and CORS headers
(:class:`Guard`), and a body too large or too slow (:class:`BodyLimit`); with the connection's own deadline for a
request's headers (:func:`timed_protocol`). The rules they keep are below; a handler
reads the body through :class:`BodyLimit`'s ``receive``, ASGI's way of handing it the body as it arrives.

**The rules.** What ``aiayn serve`` checks of every request before it does any work for it, in both of its APIs
(serve.py,
api.py): the JSON body, the text as Unicode, the API key's comparison, and clients too
slow to send their request. One place for each rule (what wraps every request, middleware.py, keeps some of them):

- **JSON**: a body that is not valid JSON (or not UTF-8) is a 400 ``Invalid request: malformed JSON ...``, whichever
  API it meant to speak, before the key is asked for.
- **Unicode**: JSON can carry a lone surrogate (``"\ud800"``), which no encoder can write; such text is refused
  with a 400 naming the field, not repaired, since what the client meant is unknown and the answer must be text it
  can read back. Form fields and query strings are decoded by Starlette, which replaces bytes that are not UTF-8 by
  U+FFFD (as browsers do), so they always arrive as valid text.
- **Errors quote little**: a message names what it refuses by at most :data:`QUOTE` characters of it.
- **The key** is compared whole, in constant time (``hmac.compare_digest``).
- **Keys and limits** are middleware.py's (who a client is, its requests per minute and characters), counted in
  shared.py's storage.
- **Proxies**: a request from a trusted proxy (``--forwarded-allow-ips``) is taken as the proxy says it came
  (middleware.Forwarded): its client, scheme and host, so that limits count the real client and download links name the
  address the client used.
- **Forms** are read as UTF-8, or the charset the request declares (:func:`form_fields`), as LibreTranslate reads
  them; Starlette reads a url-encoded body's unescaped bytes as Latin-1.
- **Slow clients**: the headers of a request must arrive within ``read_timeout_s`` of its first byte (of the
  connection, or of the end of the previous request on it), and its body within ``read_timeout_s`` of its headers;
  past either the server answers 408 and closes the connection. uvicorn bounds idle keep-alive connections
  (``timeout_keep_alive``) but not a request sent slowly, hence middleware.timed_protocol (the headers) and
  middleware.BodyLimit (the body, and its size).

**Keys and limits (:class:`Access`).** Who may translate how much: the API key a request shows, and its limits, in
both of the server's APIs.

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
import codecs
import hmac
import ipaddress
import json
import logging
import time
import traceback
from collections import OrderedDict
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qsl

from ..quoting import cut
from .database import Database, Key, Unavailable, digest
from .shared import Local

log = logging.getLogger("aiayn.serving.serve")


KNOWN_PATHS = ("/translate", "/attention", "/health", "/info", "/metrics", "/", "/detect", "/languages",
               "/frontend/settings", "/translate_file", "/suggest")
OPEN_PATHS = ("/health", "/", "/languages", "/frontend/settings")
# POST /translate is checked by its handler once it knows which API the request speaks; /detect by LibreTranslate's
SELF_CHECKED = ("/translate", "/detect", "/translate_file", "/suggest")
CORS = {"Access-Control-Allow-Origin": "*", "Access-Control-Allow-Headers": "Authorization, Content-Type, X-API-Key",
        "Access-Control-Allow-Methods": "GET, POST", "Access-Control-Max-Age": "1728000"}


class Forwarded:
    """ASGI middleware: a request whose peer is one of ``trusted`` (addresses or networks, comma-separated; ``*``:
    any) is taken as it says it came: its client from X-Forwarded-For (the nearest address that is not itself a
    trusted proxy), its scheme from X-Forwarded-Proto, its Host from X-Forwarded-Host. (uvicorn's proxy headers take
    no host, and a link built from the Host nginx sends by default, its upstream's name, reaches nobody.)"""

    def __init__(self, app: Any, trusted: str) -> None:
        self.app, self.any, self.nets = app, False, []
        for item in (t.strip() for t in trusted.split(",")):
            if item == "*":
                self.any = True
            elif item:
                try:
                    self.nets.append(ipaddress.ip_network(item, strict=False))
                except ValueError:
                    raise ValueError(f"--forwarded-allow-ips: {item!r} is not an address or a network") from None

    def trusts(self, host: str) -> bool:
        if self.any:
            return True
        try:
            ip = ipaddress.ip_address(host)
        except ValueError:
            return False
        return any(ip in net for net in self.nets)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        peer = scope.get("client")
        if scope["type"] in ("http", "websocket") and peer and self.trusts(peer[0]):
            headers = {k: v.decode("latin-1") for k, v in scope["headers"]}
            scope = dict(scope)
            if hops := [h.strip() for h in headers.get(b"x-forwarded-for", "").split(",") if h.strip()]:
                client = next((h for h in reversed(hops) if not self.trusts(h)), hops[0])
                scope["client"] = (client, 0)
            if proto := headers.get(b"x-forwarded-proto", "").split(",")[-1].strip().lower():
                if proto in ("http", "https", "ws", "wss"):
                    scope["scheme"] = proto if scope["type"] == "http" else {"http": "ws", "https": "wss"}.get(
                        proto, proto)
            if host := headers.get(b"x-forwarded-host", "").split(",")[-1].strip():
                scope["headers"] = [(k, v) for k, v in scope["headers"] if k != b"host"] + \
                    [(b"host", host.encode("latin-1"))]
        await self.app(scope, receive, send)


class Guard:
    """ASGI middleware: the API key and the request metrics for every request, the CORS headers on every answer.
    (Starlette's ``@app.middleware("http")`` did this at the cost of a task group and a streamed response per
    request: a third of the server's own CPU time under load, docs/deploy.md.)"""

    def __init__(self, app: Any, access: Access, metrics: Any) -> None:     # (models.Metrics)
        self.app, self.access, self.metrics = app, access, metrics

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        from starlette.datastructures import MutableHeaders
        from starlette.requests import Request
        from starlette.responses import Response

        t0, path, status = time.perf_counter(), scope["path"], 500      # 500: no answer started (an error)
        label = path if path in KNOWN_PATHS else "other"
        busy = label in ("/translate", "/attention", "/detect")

        started = False

        async def with_cors(message: MutableMapping[str, Any]) -> None:
            nonlocal status, started
            if message["type"] == "http.response.start":
                status, started = message["status"], True
                MutableHeaders(scope=message).update(CORS)
            await send(message)

        self.metrics.in_flight.inc(busy)
        try:
            if scope["method"] == "OPTIONS":                  # a browser's CORS preflight
                await Response(status_code=204)(scope, receive, with_cors)
            elif (refused := await _check_key(Request(scope), self.access)) is not None:
                await refused(scope, receive, with_cors)
            else:
                await self.app(scope, receive, with_cors)
        except Exception as e:  # noqa: BLE001 - answered, and logged in one line that carries no text of the request
            if isinstance(e, Unavailable):
                answer = ServiceError(503, "The database is unavailable: try again shortly", {"Retry-After": "10"})
            else:
                self.metrics.failures.inc()
                frame = traceback.extract_tb(e.__traceback__)[-1]
                log.error("%s %s failed: %s at %s:%d (in %s)", scope["method"], label, e.__class__.__name__,
                          Path(frame.filename).name, frame.lineno or 0, frame.name)
                answer = ServiceError(500, "Internal error: the server could not answer this request")
            if not started:
                from starlette.responses import JSONResponse

                await JSONResponse({"error": answer.message}, answer.status, answer.headers)(scope, receive, with_cors)
        finally:
            self.metrics.in_flight.dec(busy)
            self.metrics.requests.labels(label, str(status)).inc()
            self.metrics.latency.labels(label).observe(time.perf_counter() - t0)


async def _check_key(request: Any, access: Access) -> Any:
    """401 unless the request carries an API key (X-API-Key or Authorization: Bearer), where the server has keys; the
    paths that check their own (SELF_CHECKED) and the open ones pass."""
    path = request.url.path
    if not access.keyed or path in OPEN_PATHS or path in SELF_CHECKED or path.startswith(("/static/", "/download_file/")):
        return None
    from fastapi.responses import JSONResponse

    try:
        await access.identify(request, header_key(request), False)
    except ServiceError as e:
        return JSONResponse({"error": e.message}, status_code=e.status)
    return None


class BodyLimit:
    """ASGI middleware: 413 for a request body over ``limit`` bytes, judged by its Content-Length or, when it is
    sent in chunks, as it arrives (so no oversized body is ever held in memory); 408, and the connection closed, for
    a body not all there ``timeout_s`` after the request's headers (middleware.py: slow clients)."""

    class _TooLarge(Exception):
        pass

    class _TooSlow(Exception):
        pass

    def __init__(self, app: Any, limit: int, timeout_s: float = 10.0) -> None:
        self.app, self.limit, self.timeout_s = app, limit, timeout_s

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.limit):
            return await self._refuse(send, 413, f"request body larger than {self.limit} bytes")
        received, started, complete = 0, False, False
        deadline = time.monotonic() + self.timeout_s

        async def counted() -> dict[str, Any]:
            nonlocal received, complete
            if complete:                          # the body is in: what is left to hear of is a disconnect
                return dict(await receive())
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - time.monotonic()))
            except asyncio.TimeoutError:
                raise BodyLimit._TooSlow from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                complete = not message.get("more_body", False)
            if received > self.limit:
                raise BodyLimit._TooLarge
            return dict(message)

        async def watched(message: dict[str, Any]) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, watched)
        except BodyLimit._TooLarge:
            if not started:
                await self._refuse(send, 413, f"request body larger than {self.limit} bytes")
        except BodyLimit._TooSlow:
            if not started:
                await self._refuse(send, 408, f"the request's body did not arrive within {self.timeout_s:g} s", True)

    @staticmethod
    async def _refuse(send: Any, status: int, message: str, close: bool = False) -> None:
        body = json.dumps({"error": message}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status,
                    "headers": headers + ([(b"connection", b"close")] if close else [])})
        await send({"type": "http.response.body", "body": body})


def timed_protocol(read_timeout_s: float) -> type:
    """uvicorn's h11 protocol class with a deadline for each request's headers (the module's docstring)."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class TimedH11Protocol(H11Protocol):
        """A connection whose next request's headers do not arrive within ``read_timeout_s`` of its first byte (or
        of the connection) is answered 408 and closed."""

        deadline: Any = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()

        def _arm(self) -> None:
            self.deadline = self.loop.call_later(read_timeout_s, self._too_slow)

        def _disarm(self) -> None:
            if self.deadline is not None:
                self.deadline.cancel()
                self.deadline = None

        def data_received(self, data: bytes) -> None:
            waiting = self.cycle is None or self.cycle.response_complete     # for the headers of a request
            if waiting and self.deadline is None:
                self._arm()                                                  # a new request on a kept-alive connection
            super().data_received(data)
            if self.cycle is not None and not self.cycle.response_complete:
                self._disarm()                                               # its headers are in

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _too_slow(self) -> None:
            self.deadline = None
            if self.transport.is_closing() or (self.cycle is not None and not self.cycle.response_complete):
                return
            body = json.dumps({"error": f"the request's headers did not arrive within {read_timeout_s:g} s"}).encode()
            self.transport.write(b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
                                 b"connection: close\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            self.transport.close()

    return TimedH11Protocol


# --- The rules every request is checked by -------------------------------------------------------------------------


class ServiceError(Exception):
    """A request answered with an error: its HTTP ``status`` (from the batcher, 503: the queue is full, 504: it took
    longer than its timeout, 500: decoding failed; the server adds its own), a message, and headers."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


async def json_body(request: Any) -> Any:
    """The request's body parsed as JSON (once per request, kept on ``request.state``); ServiceError(400) when it is
    not JSON, (400) naming the field where a string is not valid Unicode."""
    if not hasattr(request.state, "json"):
        body = await request.body()
        try:
            data = json.loads(body)
        except UnicodeDecodeError as e:
            raise ServiceError(400, f"Invalid request: malformed JSON: the body is not UTF-8 (byte {e.start})") from None
        except json.JSONDecodeError as e:
            raise ServiceError(400, f"Invalid request: malformed JSON: {e}") from None
        except RecursionError:                        # arrays or objects nested a thousand deep
            raise ServiceError(400, "Invalid request: malformed JSON: nested too deep") from None
        check_unicode(data)
        request.state.json = data
    return request.state.json


def check_unicode(value: Any) -> None:
    """ServiceError(400) naming the field (``text[2]``, ``glossary.Hund``) of a string in ``value`` (JSON data:
    dicts, lists, strings) that is not valid Unicode: a lone surrogate, which UTF-8 cannot encode. Walked with a
    stack of its own, so that no nesting exhausts Python's."""
    todo: list[tuple[Any, str]] = [(value, "")]
    while todo:
        v, where = todo.pop()
        if isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError as e:
                raise ServiceError(400, f"Invalid request: {cut(where) or 'the body'} is not valid Unicode (a lone "
                                        f"surrogate at character {e.start})") from None
        elif isinstance(v, list):
            todo += [(x, f"{where}[{i}]") for i, x in enumerate(v)]
        elif isinstance(v, dict):
            dot = "." if where else ""
            todo += [(k, f"{where}{dot}(a field name)") for k in v] + [(x, f"{where}{dot}{k}") for k, x in v.items()]


def same_key(given: str | None, required: str) -> bool:
    """Whether ``given`` is the whole of ``required``, compared in constant time."""
    return bool(given) and hmac.compare_digest(str(given).encode(), required.encode())


def header_key(request: Any) -> str | None:
    """The API key in aiayn's headers: X-API-Key, else Authorization: Bearer (LibreTranslate's ``api_key`` field
    comes first there: api.api_key)."""
    return request.headers.get("x-api-key") or request.headers.get("authorization", "").removeprefix("Bearer ") or None


def address(request: Any) -> str:
    return request.client.host if request.client else "?"


async def form_fields(request: Any) -> tuple[dict[str, str], Any]:
    """A form's text fields (url-encoded or multipart) and the form itself (its uploads; None for a url-encoded
    one): each field decoded as UTF-8 or the request's declared charset, bytes that are not of it replaced by U+FFFD
    (the module's docstring)."""
    kind, _, params = request.headers.get("content-type", "").partition(";")
    if kind.strip().lower() != "application/x-www-form-urlencoded":
        form = await request.form()
        return {k: v for k, v in form.items() if isinstance(v, str)}, form
    charset = "utf-8"
    for param in params.split(";"):
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset" and value.strip():
            charset = value.strip().strip('"')
    try:
        charset = codecs.lookup(charset).name
    except LookupError:
        raise ServiceError(400, f"Invalid request: unknown charset {cut(charset)!r}") from None
    text = (await request.body()).decode(charset, errors="replace")
    return dict(parse_qsl(text, keep_blank_values=True, encoding=charset, errors="replace")), None




# --- Keys and limits: who may translate how much -------------------------------------------------------------------

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
