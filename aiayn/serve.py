"""``aiayn serve``: a translation service — a JSON API batched at the decoding step, limits, metrics, a web page.

    POST /translate   {"text": ["line", ...], "beam": 4, ...}  ->  {"translations": ["...", ...]}
    POST /attention   {"text": "one sentence"}                  ->  the translation and every attention map
    GET  /health  /info  /metrics (Prometheus text)  /  (the page: translate, then look at the attention)

Step-level (continuous) batching: ``workers`` decoding threads, sharing the CPU threads among those busy (a
lone request gets all of them, as one ``aiayn translate`` call does; with all busy, 1/workers each), each running
one search (search.BeamSearch) per group of decoding settings over at most ``max_batch_tokens`` source tokens;
between two steps the lines of new requests join the running search, and a request is answered once its last line
is done. An idle thread may wait ``max_wait_ms`` for a burst of requests (0 by default: new requests join at the
next step anyway). Every limit is answered with a JSON ``{"error": ...}``: a body over ``max_body_bytes`` (413),
too many lines or too long a line (413), malformed JSON, unknown fields or wrong types (422), a full queue (503
with Retry-After), a request slower than ``timeout_s`` (504), a missing or wrong API key (401).
SIGTERM / Ctrl-C: no new connections, the requests in flight are answered, then the process exits 0.

FastAPI + uvicorn + prometheus_client: ``pip install 'aiayn[serve]'``.
"""

# No `from __future__ import annotations` in this module: FastAPI reads its handlers' annotations (``Request``,
# imported inside create_app so that the module loads without FastAPI) and needs them as objects, not strings.
import asyncio
import contextlib
import dataclasses
import hmac
import json
import logging
import signal
import threading
import time
import typing
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from .config import DecodeConfig
from .runtime import resolve_workers
from .search import BeamSearch, Hypothesis
from .translate import Translator, source_batch, source_ids

log = logging.getLogger(__name__)
STATIC = Path(__file__).parent / "static"


@dataclass(frozen=True)
class ServeConfig:
    host: str = "127.0.0.1"
    port: int = 8080
    max_batch_tokens: int = 6000       # source tokens of the sentences one decoding thread runs at once
    max_wait_ms: float = 0.0           # how long an idle decoding thread waits for a burst of requests (0: the
                                       # requests of a burst join at the next step; 10 cost a lone request 14%)
    max_body_bytes: int = 1 << 20
    max_lines: int = 256               # per request
    max_chars: int = 2000              # per line
    max_queue_lines: int = 8192        # waiting lines over all requests; beyond: 503
    max_beam: int = 16
    timeout_s: float = 60.0
    workers: int = 0                   # decoding threads (0: one per core, at most 4; 1 on GPUs)
    api_key: str | None = None


class ServiceError(Exception):
    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


# --- step-level batching ---------------------------------------------------------------------------------------------


@dataclass(eq=False)
class _Job:
    """One request's lines, waiting or being decoded; answered when its last line is done."""

    lines: list[str]
    tokens: int                                   # source tokens, EOS included
    options: dict[str, Any]
    future: asyncio.Future[list[Any]]
    loop: asyncio.AbstractEventLoop
    results: list[Any] = field(default_factory=list)
    left: int = 0
    cancelled: bool = False
    decode: DecodeConfig | None = None
    queued: float = field(default_factory=time.perf_counter)

    def answer(self, index: int, hyps: list[Any]) -> None:
        """Line ``index`` is done (from a decoding thread); the request is answered with its last line."""
        self.results[index] = hyps
        self.left -= 1
        if self.left == 0:
            self.loop.call_soon_threadsafe(_resolve, self.future, self.results)

    def fail(self, error: BaseException) -> None:
        self.cancelled = True
        self.loop.call_soon_threadsafe(_resolve, self.future, error)


def _resolve(future: asyncio.Future[list[Any]], outcome: Any) -> None:
    if not future.done():
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)


def _step(search: BeamSearch, running: dict[Any, _Job], metrics: "Metrics") -> bool:
    """One decoding step of one of a decoding thread's batches (Batcher): drop the sentences whose request is gone,
    answer those now done. False when the batch is empty afterwards."""
    if not search.active:
        return False
    gone = {s for s in search.keys if s is not None and running[s].cancelled}
    if gone:
        search.drop(gone)
    t0 = time.perf_counter()
    try:
        with torch.inference_mode():
            done = search.step()
    except Exception as e:  # noqa: BLE001 - every request in this batch gets the error; serving goes on
        log.exception("decoding step failed")
        for s in search.keys:
            if s is not None:
                running.pop(s).fail(e)
        return False
    metrics.step(search.active + len(done), time.perf_counter() - t0)
    for s in gone | {s for s, _ in done}:
        running.pop(s, None)
    for (job, i), hyps in done:
        metrics.produced(len(hyps[0].tokens) + 1)
        job.answer(i, _as_translate_gives(hyps, job.decode))
    return bool(search.active)


class Batcher:
    """Step-level (continuous) batching: ``workers`` threads, each decoding its batch with search.BeamSearch, step by
    step. Between steps a busy thread admits waiting sentences (while no thread is idle), up to ``max_batch_tokens``
    source tokens in flight; a request is answered as soon as its last line is done. Other decoding settings run
    as their own batch, a step each in turn; sampling requests are decoded whole, as ``aiayn translate`` does. A
    request that times out or whose client goes away is dropped from the batch at the next step."""

    def __init__(self, translator: Translator, cfg: ServeConfig, metrics: "Metrics") -> None:
        self.translator, self.cfg, self.metrics = translator, cfg, metrics
        self.workers = resolve_workers(cfg.workers, translator.device)
        self.threads = torch.get_num_threads()          # shared out among the threads with something to decode
        self.queue: list[_Job] = []
        self.waiting_lines = 0
        self.lock = threading.Condition()
        self.stopping = False
        self.idle = 0                  # decoding threads with nothing to decode
        self.decoders = [threading.Thread(target=self._decode_loop, name=f"aiayn-decode-{i}", daemon=True)
                         for i in range(self.workers)]
        for t in self.decoders:
            t.start()

    async def translate(self, lines: list[str], options: dict[str, Any]) -> list[Any]:
        """The hypotheses of ``lines``; raises ServiceError(503) when the queue is full, (504) on timeout."""
        if self.waiting_lines + len(lines) > self.cfg.max_queue_lines:
            raise ServiceError(503, f"the server is busy ({self.waiting_lines} lines queued); retry shortly",
                               {"Retry-After": "1"})
        tokens = sum(len(ids) for ids in self.translator.vocab.src.encode(lines)) + len(lines)
        loop = asyncio.get_running_loop()
        job = _Job(lines, tokens, options, loop.create_future(), loop)
        with self.lock:
            self.queue.append(job)
            self.waiting_lines += len(lines)
            self.metrics.queue_lines.set(self.waiting_lines)
            self.lock.notify()
        try:
            return await asyncio.wait_for(asyncio.shield(job.future), self.cfg.timeout_s)
        except asyncio.TimeoutError:
            raise ServiceError(504, f"translation took longer than {self.cfg.timeout_s:g} s") from None
        except (ValueError, RuntimeError) as e:            # logged where it happened, in the decoding thread
            raise ServiceError(500, f"translation failed: {e}") from None
        finally:
            job.cancelled = job.cancelled or not job.future.done()   # timed out, or the client went away

    def _take(self, in_flight: int, idle: bool) -> list[_Job] | None:
        """Waiting jobs for a decoding thread with ``in_flight`` source tokens running (oldest first, within
        max_batch_tokens; at least one when idle, waiting for it); None when the server is stopping."""
        with self.lock:
            if not idle and self.idle:        # another thread has nothing to do: the waiting requests are its
                return []
            self.idle += idle
            while idle and not self.queue and not self.stopping:
                self.lock.wait()
            if idle and self.queue:           # an idle thread gives a burst of requests max_wait_ms to arrive
                until = self.queue[0].queued + self.cfg.max_wait_ms / 1000
                while not self.stopping and time.perf_counter() < until and \
                        sum(j.tokens for j in self.queue) < self.cfg.max_batch_tokens:
                    self.lock.wait(until - time.perf_counter())
            self.idle -= idle
            if self.stopping:
                return None
            taken: list[_Job] = []
            while self.queue and (not taken and idle or in_flight + self.queue[0].tokens <= self.cfg.max_batch_tokens):
                job = self.queue.pop(0)
                self.waiting_lines -= len(job.lines)
                if not job.cancelled:
                    taken.append(job)
                    in_flight += job.tokens
                    idle = False
            self.metrics.queue_lines.set(self.waiting_lines)
            return taken

    def _decode_loop(self) -> None:
        """One decoding thread: admit, step every running batch once, answer what is done; until stopped."""
        searches: dict[tuple[Any, ...], BeamSearch] = {}
        running: dict[Any, _Job] = {}                 # sentence key (job, line) -> its job, for drops
        threads = 0
        while True:
            jobs = self._take(sum(job.tokens for job in set(running.values())), idle=not running)
            if jobs is None:
                return
            # this step's share of the CPU threads: all of them while the other decoding threads are idle (a lone
            # request decodes as fast as one translate call), 1/workers of them once all are busy
            share = max(1, self.threads // max(1, self.workers - self.idle))
            if share != threads:
                torch.set_num_threads(threads := share)
            self._admit(jobs, searches, running)
            for key, search in list(searches.items()):
                if not _step(search, running, self.metrics):
                    del searches[key]

    def _admit(self, jobs: list[_Job], searches: dict[tuple[Any, ...], BeamSearch], running: dict[Any, _Job]) -> None:
        """Start the lines of ``jobs``: those with the same settings join their running batch in one admission
        (one encoder call)."""
        t = self.translator
        groups: dict[tuple[Any, ...], tuple[list[str], list[tuple[_Job, int]]]] = {}
        for job in jobs:
            self.metrics.src_tokens.inc(job.tokens)
            try:
                todo = _start(t, job)
            except Exception as e:  # noqa: BLE001 - this request gets the error; serving goes on
                job.fail(e)
                continue
            d = job.decode
            assert d is not None
            options = (d.beam, d.lenpen, d.min_len, d.length_norm)        # one search; each sentence has its own
            lines, keys = groups.setdefault((options, d.max_len_a, d.max_len_b), ([], []))   # length limit
            lines += [job.lines[i] for i in todo]
            keys += [(job, i) for i in todo]
        for (options, a, b), (lines, keys) in groups.items():
            if not keys:
                continue
            search = searches.get(options) or searches.setdefault(options, BeamSearch(t.model, *options))
            try:
                seqs = [source_ids(t.model, ids) for ids in t.vocab.src.encode(lines)]
                with torch.inference_mode():       # the model is in its inference precision already (Translator)
                    search.admit(source_batch(t.model, seqs, t.device), keys, a, b)
            except Exception as e:  # noqa: BLE001
                log.exception("admitting requests failed")
                for job, _ in keys:
                    job.fail(e)
                continue
            running.update({key: key[0] for key in keys})

    def close(self) -> None:
        with self.lock:
            self.stopping = True
            self.lock.notify_all()
        for t in self.decoders:
            t.join()


def _start(translator: Translator, job: _Job) -> list[int]:
    """A job's settings; its blank lines answered at once, a sampling request decoded whole (as ``aiayn
    translate`` does); the indices of the lines left to decode."""
    t = translator
    job.decode = decode = t.settings(**job.options)
    job.results, job.left = [None] * len(job.lines), len(job.lines)
    if decode.sampling:
        for i, hyps in enumerate(t.translate_hypotheses(job.lines, **job.options)):
            job.answer(i, hyps)
        return []
    todo = [i for i, line in enumerate(job.lines) if line.strip()]
    for i in set(range(len(job.lines))) - set(todo):          # a blank line translates to a blank line
        job.answer(i, [Hypothesis([], 0.0, 0.0)] * max(1, decode.nbest))
    return todo


def _as_translate_gives(hyps: list[Any], decode: DecodeConfig | None) -> list[Any]:
    """``nbest`` hypotheses as ``aiayn translate`` gives them: with beam 1 (greedy) the score is the log-probability."""
    assert decode is not None
    if decode.beam == 1:
        hyps = [Hypothesis(h.tokens, h.logprob, h.logprob) for h in hyps]
    return hyps[: max(1, decode.nbest)]


# --- metrics ---------------------------------------------------------------------------------------------------------


class Metrics:
    """Prometheus metrics of one app (its own registry, so several apps can live in one process)."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()
        self.requests = Counter("aiayn_requests", "HTTP requests", ["path", "status"], registry=self.registry)
        self.latency = Histogram("aiayn_request_seconds", "request latency", ["path"], registry=self.registry,
                                 buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))
        self.batch_lines = Histogram("aiayn_batch_lines", "sentences in each decoding step", registry=self.registry,
                                     buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024))
        self.src_tokens = Counter("aiayn_source_tokens", "source tokens translated", registry=self.registry)
        self.tgt_tokens = Counter("aiayn_target_tokens", "target tokens produced", registry=self.registry)
        self.steps = Counter("aiayn_decoding_steps", "decoding steps", registry=self.registry)
        self.step_seconds = Counter("aiayn_decoding_seconds", "seconds spent in decoding steps", registry=self.registry)
        self.queue_lines = Gauge("aiayn_queue_lines", "lines waiting to join a search", registry=self.registry)
        self.in_flight = Gauge("aiayn_requests_in_flight", "translation requests being answered", registry=self.registry)

    def step(self, sentences: int, seconds: float) -> None:
        """One decoding step of ``sentences`` sentences."""
        self.batch_lines.observe(sentences)
        self.steps.inc()
        self.step_seconds.inc(seconds)

    def produced(self, tgt_tokens: int) -> None:
        """A sentence is done: its best translation's tokens, EOS included."""
        self.tgt_tokens.inc(tgt_tokens)

    def text(self) -> bytes:
        from prometheus_client import generate_latest

        return bytes(generate_latest(self.registry))


# --- the app ----------------------------------------------------------------------------------------------------------


def request_models(cfg: ServeConfig) -> tuple[Any, Any]:
    """The bodies of ``POST /translate`` and ``POST /attention`` as pydantic models (422 on anything else).

    /translate's optional fields are the DecodeConfig fields marked ``per_request``, with their types and bounds
    (config.setting); the server only adds its own cap on the beam (``max_beam``, which also caps nbest)."""
    from pydantic import ConfigDict, Field, create_model

    caps = {"beam": cfg.max_beam, "nbest": cfg.max_beam}
    hints = typing.get_type_hints(DecodeConfig)
    options: dict[str, Any] = {}
    for f in dataclasses.fields(DecodeConfig):
        if f.metadata.get("per_request"):
            bounds = {k: f.metadata[k] for k in ("ge", "gt", "le") if f.metadata.get(k) is not None}
            if f.name in caps:
                bounds["le"] = min(bounds.get("le", caps[f.name]), caps[f.name])
            options[f.name] = (hints[f.name] | None, Field(None, description=f.metadata["help"], **bounds))
    strict = ConfigDict(extra="forbid", strict=True)
    translate = create_model("TranslateRequest", __config__=strict, text=(list[str], ...), **options)
    attention = create_model("AttentionRequest", __config__=strict, text=(str, Field(max_length=cfg.max_chars)),
                             beam=options["beam"])
    return translate, attention


def create_app(translator: Translator, cfg: ServeConfig | None = None, description: dict[str, Any] | None = None) -> Any:
    """The ASGI app serving ``translator``. ``description``: extra fields for /info (languages, checkpoint)."""
    from fastapi import FastAPI

    cfg = cfg or ServeConfig()
    metrics, state = Metrics(), {}

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        batcher = Batcher(translator, cfg, metrics)
        state["batcher"] = batcher
        try:
            yield
        finally:                                 # uvicorn has answered every request in flight by now
            await asyncio.get_running_loop().run_in_executor(None, batcher.close)
            state.clear()

    app = FastAPI(title="aiayn", lifespan=lifespan, docs_url=None, redoc_url=None)
    _errors_and_limits(app, cfg, metrics)
    _translation_routes(app, translator, cfg, state)
    _service_routes(app, translator, cfg, description or {}, state, metrics)
    app.state.metrics = metrics
    return app


def _errors_and_limits(app: Any, cfg: ServeConfig, metrics: Metrics) -> None:
    """Errors as JSON, the body limit, the API key, and the request metrics, for every path."""
    from fastapi import Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse

    @app.exception_handler(ServiceError)
    async def service_error(request: Request, e: ServiceError) -> JSONResponse:
        return JSONResponse({"error": e.message}, status_code=e.status, headers=e.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, e: RequestValidationError) -> JSONResponse:
        return JSONResponse({"error": "; ".join(_describe(err, ()) for err in e.errors()[:5])}, status_code=422)

    app.add_middleware(BodyLimit, limit=cfg.max_body_bytes)     # inside guard: its 413s are counted

    @app.middleware("http")
    async def guard(request: Request, call_next: Callable[[Request], Awaitable[Any]]) -> Any:
        """API key and metrics for every request."""
        t0, path = time.perf_counter(), request.url.path
        label = path if path in ("/translate", "/attention", "/health", "/info", "/metrics", "/") else "other"
        busy = label in ("/translate", "/attention")
        metrics.in_flight.inc(busy)
        try:
            response = _check_key(request, cfg) or await call_next(request)
        finally:
            metrics.in_flight.dec(busy)
        metrics.requests.labels(label, str(response.status_code)).inc()
        metrics.latency.labels(label).observe(time.perf_counter() - t0)
        return response


async def _parse(request: Any, model: Any) -> Any:
    """The body as JSON (whatever Content-Type says) validated by ``model``; 422 naming what is wrong."""
    from pydantic import ValidationError

    try:
        return model.model_validate_json(await request.body())
    except ValidationError as e:
        raise ServiceError(422, "; ".join(_describe(err, model.model_fields) for err in e.errors()[:5])) from None


def _translation_routes(app: Any, translator: Translator, cfg: ServeConfig, state: dict[str, Any]) -> None:
    """POST /translate and POST /attention."""
    from fastapi import Request

    TranslateRequest, AttentionRequest = request_models(cfg)

    @app.post("/translate")
    async def translate(request: Request) -> dict[str, Any]:
        req = await _parse(request, TranslateRequest)
        if len(req.text) > cfg.max_lines:
            raise ServiceError(413, f"{len(req.text)} lines in one request; at most {cfg.max_lines}")
        for i, line in enumerate(req.text):
            if len(line) > cfg.max_chars:
                raise ServiceError(413, f"text[{i}] has {len(line)} characters; at most {cfg.max_chars}")
        options = {k: v for k, v in req.model_dump().items() if k != "text" and v is not None}
        try:
            translator.settings(**options)                                 # validated before it waits in line
        except ValueError as e:
            raise ServiceError(422, str(e)) from None
        if not req.text:
            return {"translations": []}
        hyps = await state["batcher"].translate(list(req.text), options)
        texts = [translator.detokenize([h.tokens for h in hs]) for hs in hyps]
        if options.get("nbest", 1) > 1:
            return {"translations": [[{"text": t, "score": round(h.score, 4)} for t, h in zip(ts, hs, strict=True)]
                                     for ts, hs in zip(texts, hyps, strict=True)]}
        return {"translations": [ts[0] for ts in texts]}

    @app.post("/attention")
    async def attention(request: Request) -> dict[str, Any]:
        req = await _parse(request, AttentionRequest)
        if not req.text.strip():
            raise ServiceError(422, "text is empty")
        options = {"beam": req.beam} if req.beam else {}
        return dict(await asyncio.get_running_loop().run_in_executor(      # one sentence: not batched
            None, lambda: translator.attention(req.text, **options, workers=1)))


def _service_routes(app: Any, translator: Translator, cfg: ServeConfig, description: dict[str, Any],
                    state: dict[str, Any], metrics: Metrics) -> None:
    """GET /health, /info, /metrics, the page and its static files."""
    from fastapi.responses import FileResponse, JSONResponse, Response
    from fastapi.staticfiles import StaticFiles

    @app.get("/health")
    async def health() -> Any:
        if "batcher" not in state:
            return JSONResponse({"error": "the model is not loaded yet"}, status_code=503)
        return {"status": "ok"}

    @app.get("/info")
    async def info() -> dict[str, Any]:
        return {"model": translator.model.cfg.to_dict(), "decode": asdict(translator.decode),
                "parameters": sum(p.numel() for p in translator.model.parameters()),
                "precision": translator.precision, "device": str(translator.device), **description,
                "limits": {k: v for k, v in asdict(cfg).items() if k != "api_key"}}

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(metrics.text(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/")
    async def page() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    app.mount("/static", StaticFiles(directory=STATIC), name="static")


OPEN_PATHS = ("/health", "/")


def _check_key(request: Any, cfg: ServeConfig) -> Any:
    """401 unless the request carries the API key (X-API-Key or Authorization: Bearer), when one is set."""
    if cfg.api_key is None or request.url.path in OPEN_PATHS or request.url.path.startswith("/static/"):
        return None
    from fastapi.responses import JSONResponse

    given = request.headers.get("x-api-key") or request.headers.get("authorization", "").removeprefix("Bearer ")
    if given and hmac.compare_digest(given.encode(), cfg.api_key.encode()):
        return None
    return JSONResponse({"error": "missing or wrong API key (send it as X-API-Key)"}, status_code=401)


class BodyLimit:
    """ASGI middleware: 413 for a request body over ``limit`` bytes, judged by its Content-Length or, when it is
    sent in chunks, as it arrives (so no oversized body is ever held in memory)."""

    class _TooLarge(Exception):
        pass

    def __init__(self, app: Any, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.limit):
            return await self._refuse(send)
        received, started = 0, False

        async def counted() -> dict[str, Any]:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b"")) if message["type"] == "http.request" else 0
            if received > self.limit:
                raise BodyLimit._TooLarge
            return message

        async def watched(message: dict[str, Any]) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, watched)
        except BodyLimit._TooLarge:
            if not started:
                await self._refuse(send)

    async def _refuse(self, send: Any) -> None:
        body = json.dumps({"error": f"request body larger than {self.limit} bytes"}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


def _describe(err: Any, known: Iterable[str]) -> str:
    """One pydantic error in words; ``known``: the request's fields, listed when an unknown one is sent."""
    where = ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "the body"
    if err.get("type") == "json_invalid":
        return f"malformed JSON: {err.get('ctx', {}).get('error', err.get('msg'))}"
    if err.get("type") == "extra_forbidden":
        return f"unknown field {where!r} (known: {', '.join(known)})"
    return f"{where}: {err.get('msg')}"


def serve(translator: Translator, cfg: ServeConfig, description: dict[str, Any] | None = None) -> None:
    """Run the service until SIGTERM or Ctrl-C: then no new connections, the requests in flight are answered,
    and it returns (exit status 0; a second Ctrl-C stops at once)."""
    import uvicorn

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            # uvicorn's own version re-raises the signal after its graceful shutdown (the process then dies by it)
            previous = {s: signal.signal(s, self.handle_exit) for s in (signal.SIGINT, signal.SIGTERM)}
            try:
                yield
            finally:
                for s, handler in previous.items():
                    signal.signal(s, handler)

    app = create_app(translator, cfg, description)
    log.info("serving on http://%s:%d (Ctrl-C to stop)", cfg.host, cfg.port)
    Server(uvicorn.Config(app, host=cfg.host, port=cfg.port, log_level="warning", timeout_keep_alive=5,
                          timeout_graceful_shutdown=int(cfg.timeout_s) + 5)).run()
