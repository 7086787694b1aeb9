"""``aiayn serve``: a translation service — a JSON API batched at the decoding step, LibreTranslate's API beside it,
one model or several (routed by language pair), limits, metrics, a web page.

    POST /translate   {"text": ["line", ...], "beam": 4, "source": "de", "target": "en", ...}
                          ->  {"translations": ["...", ...]}   (source / target: needed only where several models fit)
    POST /attention   {"text": "one sentence"}                  ->  the translation and every attention map
    GET  /health  /info  /metrics (Prometheus text)  /  (the page: translate, then look at the attention)
    LibreTranslate's POST /translate (with ``q``), POST /detect, GET /languages, GET /frontend/settings

Both APIs' routes are api.py's; this module makes the app (its settings, the wrappers, /health, /info, /metrics, the
page) and runs it.

The lines of concurrent requests are decoded together, joining a running search between decoding steps (batcher.py);
each model has its own decoding threads (models.py). Every limit (ServeConfig) is answered with a JSON ``{"error":
...}``: a body over ``max_body_bytes`` (413), too many lines (413), malformed JSON, unknown fields or
wrong types (422), an unknown language pair (400), a full queue (503 with Retry-After), a request slower than
``timeout_s`` (504), a missing or wrong API key (401; LibreTranslate's API: 400 / 403), more than ``req_limit``
requests a minute from one client (429), more than ``max_chars`` characters in one request (413), an API key's own
limits where it has them and its characters per day (middleware.py). With ``shared_storage`` replicas share those counts
and their translations (shared.py). Every answer carries LibreTranslate's CORS headers.
SIGTERM / Ctrl-C: no new connections, the requests in flight are answered, then the process exits 0.

FastAPI + uvicorn + prometheus_client: ``pip install 'aiayn[serve]'``.
"""

# No `from __future__ import annotations` in this module: FastAPI reads its handlers' annotations (``Request``,
# imported inside create_app so that the module loads without FastAPI) and needs them as objects, not strings.
import asyncio
import contextlib
import logging
import signal
from collections.abc import AsyncIterator, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import check, setting
from ..engines.base import Unsupported
from . import api
from .batcher import Limits
from .database import Database
from .middleware import Access, BodyLimit, Forwarded, Guard, ServiceError, timed_protocol
from .models import Metrics, Models, Pool, Served
from .shared import Local, open_shared

if TYPE_CHECKING:      # (a server whose engine decodes in worker processes imports no PyTorch)
    from ..engines.torch import TorchEngine

log = logging.getLogger(__name__)
STATIC = Path(__file__).parent / "static"


@dataclass(frozen=True, kw_only=True)
class ServeConfig:
    """The server's settings, each a flag of ``aiayn serve`` (config.setting: ``max_batch_tokens`` is
    ``--max-batch-tokens``) with its bounds; the decoding settings are the run's DecodeConfig."""

    host: str = setting("127.0.0.1", "address to bind (127.0.0.1: this machine only)")
    port: int = setting(8080, "port to listen on", ge=0, le=65535)
    max_batch_tokens: int = setting(6000, "source tokens of the sentences one decoding thread runs at once; waiting "
                                    "sentences join its running batch between decoding steps", ge=1)
    max_wait_ms: float = setting(0.0, "how long an idle decoding thread waits for a burst of requests before its "
                                 "first step (0: a burst's requests join at the next step; 10 cost a lone request "
                                 "14%)", ge=0)
    processes: bool = setting(True, "CPU: decode in worker processes, one per decoding worker, each with its own copy "
                              "of the model, taking the requests waiting when it is free (measured faster under load: "
                              "docs/deploy.md); --no-processes: threads of the server's process, where waiting "
                              "sentences join a running batch (see --join); on a GPU one thread decodes")
    join: bool = setting(True, "with --no-processes (or on a GPU): waiting sentences join a busy decoding thread's "
                         "running batch between its steps (step-level batching); false: they wait for a free thread, "
                         "which decodes them together to the end")
    max_body_bytes: int = setting(1 << 20, "largest request body", ge=1)
    max_lines: int = setting(256, "lines per request", ge=1)
    max_chars: int = setting(50000, "characters per request, all of its texts together (each is cut into sentences, "
                             "decoded together); an API key's own char_limit replaces it (aiayn keys)", ge=1)
    max_file_texts: int = setting(20000, "texts (lines, paragraphs, cues, units) in a document sent to "
                                  "/translate_file (its bytes: --max-body-bytes)", ge=1)
    max_file_expanded: int = setting(256 << 20, "bytes a document that is an archive (docx, pptx, odt, epub) may "
                                     "unpack to, in all; checked from its directory before anything is unpacked, with "
                                     "one part at most 64 MiB and each entry's ratio at most 100; a PDF's streams, "
                                     "each inflated with that bound", ge=1)
    max_file_pages: int = setting(2000, "pages of a PDF sent to /translate_file, counted before any is read", ge=1)
    file_workers: int = setting(2, "documents of /translate_file read and written at once, each in a thread of its "
                                "own (their texts are decoded with every other request's)", ge=1)
    file_queue: int = setting(8, "documents waiting for a free --file-workers thread; an upload past them gets 429",
                              ge=0)
    file_timeout_s: float = setting(300.0, "seconds a document sent to /translate_file has from its arrival before "
                                    "504, its work then stopped (a document holds many requests' text: "
                                    "docs/deploy.md)", gt=0, flag="--file-timeout")
    file_ttl: float = setting(30.0, "minutes a translated document can be downloaded", gt=0)
    files_dir: str | None = setting(None, "a folder every replica reads and writes (a shared volume) where translated "
                                    "documents are kept for download (without: a temporary folder of this process, "
                                    "and with --shared-storage, Redis too, so that any replica serves them)")
    public_url: str | None = setting(None, "the address clients reach the service at (https://translate.example.org"
                                     "/prefix), for /translate_file's download links (without: the request's own, "
                                     "as a trusted proxy forwards it: --forwarded-allow-ips)")
    max_queue_lines: int = setting(8192, "lines waiting over all requests before new ones get 503", ge=1)
    cache: int = setting(10000, "sentences whose translations each model remembers, answered again without decoding "
                         "(batcher.py; least recently used forgotten first; 0: none)", ge=0)
    max_beam: int = setting(16, "largest beam (and nbest) a request may ask for", ge=1)
    max_len_a_cap: float = setting(3.0, "largest max_len_a a request may set (its output length limit is max_len_a "
                                   "x its source tokens + max_len_b)", ge=0)
    max_len_b_cap: int = setting(256, "largest max_len_b, and min_len, a request may set (tokens)", ge=0)
    read_timeout_s: float = setting(10.0, "seconds a client has to send a request's headers, and then its body; "
                                    "past either: 408 and the connection closed", gt=0, flag="--read-timeout")
    timeout_s: float = setting(60.0, "seconds per request before 504", gt=0, flag="--timeout")
    workers: int = setting(0, "decoding threads, each running its own batch with its share of the cores (0: one "
                           "per core, at most 4; 1 on GPUs)", ge=0)
    api_key: str | None = setting(None, "require this key (header X-API-Key or Authorization: Bearer; LibreTranslate's "
                                  "api_key field) on all but /health, the page, /languages and /frontend/settings")
    api_keys: str | None = setting(None, "the database of API keys (a SQLite file, or PostgreSQL's URL: aiayn keys "
                                   "--help), each with its own limits: aiayn keys add; a request shows one as "
                                   "--api-key's is shown")
    keys_grace: float = setting(300.0, "with --api-keys: seconds the keys already seen keep working from memory "
                                "while the keys database does not answer; past them, and for keys not seen, 503 "
                                "(serving/middleware.py)", ge=0)
    keys_ttl: float = setting(10.0, "with --api-keys: seconds a key's row read from the keys database is trusted "
                              "from memory, so a removed or changed key takes effect within that (fewer reads of the "
                              "database against a slower effect)", gt=0)
    keys_optional: bool = setting(False, "with --api-keys: a request without a key is served too, as its address, "
                                  "under --req-limit and --max-chars (LibreTranslate's --api-keys)")
    shared_storage: str | None = setting(None, "redis://HOST:PORT/N: the request counts, the translations "
                                         "remembered and the translated files, shared by every replica using it "
                                         "(without: each process's own); Redis gone: this process's own, with a "
                                         "warning")
    cache_ttl: int = setting(86400, "with --shared-storage: seconds a translation stays there", ge=1)
    suggestions: str | None = setting(None, "store POST /suggest's corrections in this database (a SQLite file or a "
                                      "SQLAlchemy URL; it may be --api-keys's): aiayn suggestions export")
    memory_budget: float = setting(0.0, "MiB of model weights loaded at once (0: every model loaded at start): each "
                                   "model loads on its first request, and the least recently used idle ones are "
                                   "unloaded to make room (serving.models.Pool), as LibreTranslate's --load-only",
                                   ge=0)
    req_limit: int = setting(0, "translation requests per minute from one client (its API key, else its address) "
                             "before 429, in both APIs, as LibreTranslate's --req-limit (0: no limit)", ge=0)
    forwarded_allow_ips: str = setting("127.0.0.1", "addresses of the load balancers whose X-Forwarded-For names "
                                       "the client (its address then counts for --req-limit; uvicorn's "
                                       "--forwarded-allow-ips; * for any)")
    fallback: str | None = setting(None, "a stronger model's run dir (the teacher behind a student, or the same run "
                                   "with a wider beam in its recipe): each text less sure than --min-confidence is "
                                   "translated again by it, and its translation kept where surer (docs/confidence.md)")
    min_confidence: float = setting(0.5, "with --fallback: the confidence under which a text goes to it", ge=0, le=1)

    def __post_init__(self) -> None:
        check(self)

    def limits(self) -> Limits:
        """What the batcher is given."""
        return Limits(workers=self.workers, max_batch_tokens=self.max_batch_tokens, max_wait_ms=self.max_wait_ms,
                      max_queue_lines=self.max_queue_lines, timeout_s=self.timeout_s, join=self.join,
                      processes=self.processes, cache=self.cache, cache_ttl=self.cache_ttl)


# --- the app ----------------------------------------------------------------------------------------------------------


def create_app(models: "Models | TorchEngine", cfg: ServeConfig | None = None,
               description: dict[str, Any] | None = None) -> Any:
    """The ASGI app serving ``models`` (or one TorchEngine). ``description``: extra fields for /info (version; with
    a TorchEngine, its languages and checkpoint)."""
    from fastapi import FastAPI

    cfg, description = cfg or ServeConfig(), dict(description or {})
    if not isinstance(models, Models):                      # one engine
        langs = description.pop("languages", None)
        pair = (langs[0], langs[1]) if langs else None
        models = Models([Served(f"{pair[0]}-{pair[1]}" if pair else "model", models, pair,
                                {k: description.pop(k) for k in ("checkpoint", "run") if k in description})])
    metrics, state = Metrics(), {}
    models.observe = metrics.translated                     # each request's counts, by its route's name
    shared = open_shared(cfg.shared_storage, metrics)
    keys = Database(cfg.api_keys) if cfg.api_keys else None
    suggestions = keys if keys is not None and cfg.suggestions == cfg.api_keys else \
        Database(cfg.suggestions) if cfg.suggestions else None
    access = Access(cfg, shared, keys, metrics)

    def start(served: Served) -> None:
        served.open()
        served.start(cfg.limits(), metrics.decoding.model(served.name), shared if cfg.shared_storage else None)
        metrics.model_bytes.labels(served.name).set(served.memory_bytes())
        metrics.engine.labels(served.name, served.translator.engine).set(1)
        metrics.loads.labels(served.name).inc()

    def stop(served: Served) -> None:
        served.close()
        metrics.model_bytes.labels(served.name).set(0)
        metrics.unloads.labels(served.name).inc()

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        if cfg.memory_budget:                    # each model on its first request
            Pool(list(models), int(cfg.memory_budget * (1 << 20)), start, stop)
        else:
            for served in models:
                start(served)
        for back in {id(s.fallback): s.fallback for s in models if s.fallback is not None}.values():
            start(back)                          # (a fallback is loaded at start, whatever the budget)
        state["ready"] = True
        try:
            yield
        finally:                                 # uvicorn has answered every request in flight by now
            if getattr(app.state, "files", None) is not None:
                app.state.files.close()          # (documents stopped, their folder removed)
            for served in models:
                await asyncio.get_running_loop().run_in_executor(None, served.close)
            state.clear()
            await shared.close()

    app = FastAPI(title="aiayn", lifespan=lifespan, docs_url=None, redoc_url=None)
    _errors_and_limits(app, cfg, metrics, access)
    speak_libretranslate = api.add_routes(app, models, cfg, access, suggestions)
    api.add_aiayn_routes(app, models, cfg, access, speak_libretranslate)
    _service_routes(app, models, cfg, description, state, metrics, shared)
    app.state.metrics = metrics
    return app


def _errors_and_limits(app: Any, cfg: ServeConfig, metrics: Metrics, access: Access) -> None:
    """Errors as JSON, the body limit, the API key, and the request metrics, for every path."""
    from fastapi import Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse

    @app.exception_handler(ServiceError)
    async def service_error(request: Request, e: ServiceError) -> JSONResponse:
        return JSONResponse({"error": e.message}, status_code=e.status, headers=e.headers)

    @app.exception_handler(Unsupported)
    async def unsupported(request: Request, e: Unsupported) -> JSONResponse:
        return JSONResponse({"error": str(e)}, status_code=400)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, e: RequestValidationError) -> JSONResponse:
        return JSONResponse({"error": "; ".join(api.describe(err, ()) for err in e.errors()[:5])}, status_code=422)

    app.add_middleware(BodyLimit, limit=cfg.max_body_bytes, timeout_s=cfg.read_timeout_s)   # inside Guard: counted
    app.add_middleware(Guard, access=access, metrics=metrics)
    app.add_middleware(Forwarded, trusted=cfg.forwarded_allow_ips)        # outermost: who sent it, and where to


def _service_routes(app: Any, models: Models, cfg: ServeConfig, description: dict[str, Any],
                    state: dict[str, Any], metrics: Metrics, shared: Local) -> None:
    """GET /health, /info, /metrics, the page and its static files."""
    from fastapi.responses import FileResponse, JSONResponse, Response
    from fastapi.staticfiles import StaticFiles

    @app.get("/health")
    async def health() -> Any:
        if "ready" not in state:
            return JSONResponse({"error": "the model is not loaded yet"}, status_code=503)
        return {"status": "ok"}

    @app.get("/info")
    async def info() -> dict[str, Any]:
        """The served models (the first also at the top level, as when one model was served) and the limits."""
        listed = [m.describe() for m in models]
        first = listed[0]
        return {**{k: first[k] for k in ("model", "decode", "parameters", "precision", "device")},
                "languages": [first["source"], first["target"]] if first["source"] else None,
                "checkpoint": first.get("checkpoint"), **description, "models": listed,
                "pivots": [{"source": a, "target": c, "via": [b], "name": f"{a}-{b}-{c}"}
                           for (a, c), (_, _, b) in models.pivots.items()],
                "limits": {k: v for k, v in asdict(cfg).items() if k not in SECRET}}

    @app.get("/metrics")
    async def prometheus() -> Response:
        await shared.check()                    # (whether the shared storage answers, asked now)
        return Response(metrics.text(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/")
    async def page() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    app.mount("/static", StaticFiles(directory=STATIC), name="static")


# settings /info does not show: the key, and where the databases and Redis are (a URL can hold a password)
SECRET = ("api_key", "api_keys", "shared_storage", "suggestions")


def serve(models: "Models | TorchEngine", cfg: ServeConfig, description: dict[str, Any] | None = None) -> None:
    """Run the service until SIGTERM or Ctrl-C: then no new connections, the requests in flight are answered,
    and it returns (exit status 0; a second Ctrl-C stops at once)."""
    import uvicorn

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            files = getattr(app.state, "files", None)
            if files is not None:                # documents stop now (503), not after the grace period (a 500)
                files.closing()
            super().handle_exit(sig, frame)

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            # uvicorn's own version re-raises the signal after its graceful shutdown (the process then dies by it)
            previous = {s: signal.signal(s, self.handle_exit) for s in (signal.SIGINT, signal.SIGTERM)}
            try:
                yield
            finally:
                for s, handler in previous.items():
                    signal.signal(s, handler)

    app = create_app(models, cfg, description)
    log.info("serving on http://%s:%d (Ctrl-C to stop)", cfg.host, cfg.port)
    Server(uvicorn.Config(app, host=cfg.host, port=cfg.port, log_level="warning", timeout_keep_alive=5,
                          timeout_graceful_shutdown=int(cfg.timeout_s) + 5,
                          http=timed_protocol(cfg.read_timeout_s), proxy_headers=False)).run()   # (Forwarded's)
