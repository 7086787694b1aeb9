"""What wraps every request ``aiayn serve`` answers, outermost first, before any handler sees it (serve.py adds them
to the app in this order, innermost last): who sent it (:class:`Forwarded`), its API key, metrics and CORS headers
(:class:`Guard`), and a body too large or too slow (:class:`BodyLimit`); with the connection's own deadline for a
request's headers (:func:`timed_protocol`). The rules they keep are guards.py's (the module's docstring); a handler
reads the body through :class:`BodyLimit`'s ``receive``, ASGI's way of handing it the body as it arrives.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import time
import traceback
from collections.abc import MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .database import Unavailable
from .guards import ServiceError, header_key

if TYPE_CHECKING:
    from .access import Access
    from .metrics import Metrics

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

    def __init__(self, app: Any, access: Access, metrics: Metrics) -> None:
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
