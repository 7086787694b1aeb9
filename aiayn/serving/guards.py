"""What ``aiayn serve`` checks of every request before it does any work for it, in both of its APIs (serve.py,
libretranslate.py): the JSON body, the text as Unicode, the API key's comparison, and clients too
slow to send their request. One place for each rule:

- **JSON**: a body that is not valid JSON (or not UTF-8) is a 400 ``Invalid request: malformed JSON ...``, whichever
  API it meant to speak, before the key is asked for.
- **Unicode**: JSON can carry a lone surrogate (``"\\ud800"``), which no encoder can write; such text is refused
  with a 400 naming the field, not repaired, since what the client meant is unknown and the answer must be text it
  can read back. Form fields and query strings are decoded by Starlette, which replaces bytes that are not UTF-8 by
  U+FFFD (as browsers do), so they always arrive as valid text.
- **Errors quote little**: a message names what it refuses by at most :data:`QUOTE` characters of it.
- **The key** is compared whole, in constant time (``hmac.compare_digest``).
- **Keys and limits** are access.py's (who a client is, its requests per minute and characters), counted in
  shared.py's storage.
- **Proxies**: a request from a trusted proxy (``--forwarded-allow-ips``) is taken as the proxy says it came
  (:class:`Forwarded`): its client, scheme and host, so that limits count the real client and download links name the
  address the client used.
- **Forms** are read as UTF-8, or the charset the request declares (:func:`form_fields`), as LibreTranslate reads
  them; Starlette reads a url-encoded body's unescaped bytes as Latin-1.
- **Slow clients**: the headers of a request must arrive within ``read_timeout_s`` of its first byte (of the
  connection, or of the end of the previous request on it), and its body within ``read_timeout_s`` of its headers;
  past either the server answers 408 and closes the connection. uvicorn bounds idle keep-alive connections
  (``timeout_keep_alive``) but not a request sent slowly, hence :class:`TimedH11Protocol`.
"""

from __future__ import annotations

import asyncio
import codecs
import hmac
import ipaddress
import json
import time
from typing import Any
from urllib.parse import parse_qsl

from ..quoting import cut


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
    comes first there: libretranslate.api_key)."""
    return request.headers.get("x-api-key") or request.headers.get("authorization", "").removeprefix("Bearer ") or None


def address(request: Any) -> str:
    return request.client.host if request.client else "?"


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


class BodyLimit:
    """ASGI middleware: 413 for a request body over ``limit`` bytes, judged by its Content-Length or, when it is
    sent in chunks, as it arrives (so no oversized body is ever held in memory); 408, and the connection closed, for
    a body not all there ``timeout_s`` after the request's headers (guards.py: slow clients)."""

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
