"""LibreTranslate's file door: ``POST /translate_file`` (multipart ``file``, ``source``, ``target``, ``api_key``;
aiayn's own ``fuzzy``: false to trust the machine translations; ``bilingual``: true for a PDF's bilingual edition) and
``GET /download_file/NAME``.

A document is translated in its own format (documents/formats.py), its texts through the same batcher as every
request, in chunks, so that a long document shares the decoders with ``/translate`` instead of holding them. What
keeps the door from being held or blown up by what comes through it:

- **Its own workers.** Documents are read and written in a pool of their own (``--file-workers``), never in the
  executor the decoding needs (word alignments, language detection): a burst of uploads cannot starve the work they
  wait for. Past the workers and ``--file-queue`` waiting documents, an upload is answered 429 at once.
- **A deadline.** Each document has ``--file-timeout`` seconds from its arrival: past it the answer is a 504, and the
  work stops at its next chunk (the chunk being decoded is cancelled); shutting down cancels every document.
- **Limits checked while reading** (documents/archive.py): an archive's unpacked size in all, per part, by its
  compression ratio and in entries, from its central directory before anything is unpacked; the number of texts.
- **Names.** The stored files are named by a random token and the client's name, sanitised and shortened (what the
  download is called). Translations expire ``--file-ttl`` minutes after they are made, and the folder is removed on
  shutdown; folders left by a server that died are removed at start.

**Any replica serves a download.** Behind a load balancer the download may reach a replica other than the one that
translated the file. A translation is kept where every replica finds it: in ``--files-dir`` (a folder the replicas
share, expired by its files' age), else, with ``--shared-storage``, in Redis beside the cache (bounded by its
``maxmemory``, expiring with ``--file-ttl``; a document over :data:`IN_REDIS` bytes stays with its replica, with a
warning). The link names the address the client used (the Host, or a trusted
proxy's X-Forwarded-Host and X-Forwarded-Proto: middleware.Forwarded), or ``--public-url``.
"""

# No `from __future__ import annotations`: FastAPI reads the handlers' annotations (serve.py says why).
import asyncio
import concurrent.futures
import logging
import mimetypes
import os
import re
import secrets
import shutil
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ..documents.common import DocumentError, Limits, Options, Report, Scored
from ..documents.formats import find, translate_document
from ..translation.pipeline import Request
from ..translation.route import canonical
from .middleware import ServiceError, form_fields
from .models import Models, refused
from .shared import Local

log = logging.getLogger(__name__)
PREFIX = "aiayn-files-"
SWEEP_S = 30.0          # how often the shared folder (--files-dir) is looked over for expired translations
IN_REDIS = 8 << 20      # the largest translated document kept in Redis (one call of it must fit shared.TIMEOUT_S)


def download_url(request: Any, token: str, name: str, public_url: str | None = None) -> str:
    """Where a translation is downloaded: under ``public_url`` (``--public-url``), else the address the request was
    sent to; its name percent-encoded (a name may hold any character, and a client's URL library may take ASCII
    only)."""
    base = public_url or str(request.base_url)
    return f"{base.rstrip('/')}/download_file/{quote(token + '.' + name)}"


TOKEN = re.compile(r"([0-9a-f]{32})\.[\w.-]+")


def _warn(report: Report) -> None:
    """A document with texts left untranslated, or none translated, logged: its counts only (a note may quote it)."""
    if report.left or report.nothing:
        log.warning("a %s document: %d of its %d texts left untranslated (they failed their format's check)%s",
                    report.format, report.left, report.texts, "; nothing translated" if report.nothing else "")


def shutting() -> ServiceError:
    """What a document is answered while the server shuts down (its translation stopped, or never started)."""
    return ServiceError(503, "The server is shutting down: send the file again (another replica will take it)",
                        {"Retry-After": "5"})


class Stopped(Exception):
    """A document's work stopped: its deadline passed, or the server is shutting down."""


@dataclass(eq=False)
class Job:
    """One document's work, which its request (or the server's shutdown) can stop."""

    deadline: float
    stopped: threading.Event = field(default_factory=threading.Event)
    chunk: concurrent.futures.Future[Any] | None = None

    def stop(self) -> None:
        self.stopped.set()
        if self.chunk is not None:
            self.chunk.cancel()

    def check(self) -> None:
        if self.stopped.is_set() or time.monotonic() > self.deadline:
            raise Stopped


def display_name(filename: str | None) -> str:
    """What a download is called: the client's file name without folders or odd characters, its stem at most 64
    characters, its extension kept."""
    name = re.sub(r"[^\w.-]", "_", Path(filename or "file").name).lstrip(".") or "file"
    stem, dot, ext = name.rpartition(".")
    if not dot:
        stem, ext = name, ""
    return (stem[:64] or "file") + (("." + ext[:16]) if dot else "")


def sweep_stale(root: Path) -> int:
    """Folders a server that is no longer running left in ``root`` (its process id in their name): removed."""
    removed = 0
    for d in root.glob(PREFIX + "*"):
        m = re.match(PREFIX + r"(\d+)-", d.name)
        if not m or int(m.group(1)) == os.getpid():
            continue
        try:
            os.kill(int(m.group(1)), 0)
        except ProcessLookupError:
            shutil.rmtree(d, ignore_errors=True)
            removed += 1
        except PermissionError:
            pass
    return removed


def writable(folder: Path) -> Path:
    """``folder`` (``--files-dir``), made if missing; ValueError where this process cannot write there."""
    folder = folder.expanduser()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise ValueError(f"--files-dir {folder}: cannot write there ({e.strerror})") from None
    return folder


def expire(made: dict[str, Any], seconds: float, shared_dir: Path | None = None) -> None:
    """The translations in ``made`` (token -> (path, name, when made)) older than ``seconds`` removed, files and all;
    and those in ``shared_dir`` (``--files-dir``) older than that by their time of change, whichever replica made
    them."""
    old = time.monotonic() - seconds
    for token, (path, _, when) in list(made.items()):
        if when < old:
            path.unlink(missing_ok=True)
            del made[token]
    if shared_dir is not None:
        before = time.time() - seconds
        for path in shared_dir.iterdir():
            try:
                if TOKEN.fullmatch(path.name) and path.stat().st_mtime < before:
                    path.unlink()
            except OSError:
                pass                                # (another replica removed it first)


async def asked(request: Any, authorize: Callable[[dict[str, Any], Any], Awaitable[Any]],
                models: Models) -> tuple[Any, Any, str, Options, Any]:
    """An upload's request read: the upload, its route, the name it is called by, its options and its client;
    ServiceError for a request refused."""
    texts, form = await form_fields(request)
    f = {**texts, **dict(request.query_params)}
    client = await authorize(f, request)
    upload = form.get("file") if form is not None else None
    if upload is None or isinstance(upload, str):
        raise ServiceError(400, "Invalid request: missing file parameter")
    for field_ in ("source", "target"):
        if not isinstance(f.get(field_), str) or not f[field_]:
            raise ServiceError(400, f"Invalid request: missing {field_} parameter")
    if canonical(f["source"]) == "auto":
        raise ServiceError(400, "Invalid request: name the file's source language (auto is for texts)")
    review = str(f.get("fuzzy", "true")).strip().lower() not in ("false", "0", "no", "off")
    bilingual = str(f.get("bilingual", "false")).strip().lower() in ("true", "1", "yes", "on")
    route = models.route(f["source"], f["target"])
    name = display_name(upload.filename)
    try:
        find(Path(name))
    except DocumentError as e:
        raise ServiceError(400, f"Invalid request: {e}") from None
    return upload, route, name, Options(canonical(f["source"]), canonical(f["target"]), review,
                                        bilingual=bilingual), client


async def download(name: str, made: dict[str, Any], shared_dir: Path | None, shared: Local) -> Any:
    """The answer to ``GET /download_file/NAME``: the translation of NAME's token, from ``made`` (this replica's),
    ``shared_dir`` (``--files-dir``) or ``shared`` (Redis's), else a 404."""
    from fastapi.responses import FileResponse, JSONResponse, Response

    m = TOKEN.fullmatch(name)
    if m is None:
        return JSONResponse({"error": "File not found"}, status_code=404)
    token = m.group(1)
    found = made.get(token)
    if found is not None and found[0].is_file():
        return FileResponse(found[0], filename=found[1])
    if shared_dir is not None and (shared_dir / name).is_file():     # (NAME is the file's: TOKEN.display-name)
        return FileResponse(shared_dir / name, filename=name[len(token) + 1:])
    kept = await shared.file(token)
    if kept is None:
        return JSONResponse({"error": "File not found"}, status_code=404)
    shown, data = kept
    disposition = FileResponse(__file__, filename=shown).headers["content-disposition"]   # (as for a file)
    return Response(data, media_type=mimetypes.guess_type(shown)[0] or "application/octet-stream",
                    headers={"content-disposition": disposition})


class Files:
    """The routes' work (the module's docstring): ``cfg`` the ServeConfig, ``authorize`` LibreTranslate's key check and
    request limit of a request's fields (middleware.py: the client it returns), ``charge`` what spends a client's
    characters of the day (middleware.Access.charge: a document's texts, chunk by chunk, before each is translated; past
    them the upload is a 429), ``names`` its words for the options (pipeline), ``counted`` what is told of each
    translated document's report (/metrics)."""

    CHUNK = 32                                      # texts per request to the batcher

    def __init__(self, models: Models, cfg: Any, authorize: Callable[[dict[str, Any], Any], Awaitable[Any]],
                 names: dict[str, str], counted: Callable[[Report], None] | None = None,
                 charge: Callable[[Any, int], Awaitable[None]] | None = None, shared: Local | None = None) -> None:
        self.models, self.cfg, self.counted, self.charge = models, cfg, counted, charge
        self.authorize, self.names, self.shared = authorize, names, shared or Local()
        sweep_stale(Path(tempfile.gettempdir()))
        self.dir = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-"))
        self.shared_dir = writable(Path(cfg.files_dir)) if getattr(cfg, "files_dir", None) else None
        self.swept, self.warned_size = 0.0, False
        self.pool = concurrent.futures.ThreadPoolExecutor(cfg.file_workers, thread_name_prefix="aiayn-file")
        self.jobs: set[Job] = set()
        self.waiting = 0                            # documents taken and not yet finished (running or queued)
        self.made: dict[str, tuple[Path, str, float]] = {}    # token -> (file, download name, when made)
        self.limits = Limits(texts=cfg.max_file_texts, expanded=cfg.max_file_expanded, pages=cfg.max_file_pages)
        self.shutting = False

    def closing(self) -> None:
        """The server is going down (SIGTERM, Ctrl-C): every document stopped at once, answered 503, and no new one
        taken, so that shutting down waits for no document (signal-safe: it sets events and cancels futures)."""
        self.shutting = True
        for job in list(self.jobs):
            job.stop()

    def close(self) -> None:
        """Every document stopped, the pool let go, the folder removed."""
        self.closing()
        self.pool.shutdown(wait=False, cancel_futures=True)
        shutil.rmtree(self.dir, ignore_errors=True)

    def expire(self) -> None:
        """Translations older than ``--file-ttl`` minutes removed (the shared folder's looked over at most every
        :data:`SWEEP_S` seconds: it may hold every replica's thousands)."""
        sweep = self.shared_dir is not None and time.monotonic() - self.swept > SWEEP_S
        if sweep:
            self.swept = time.monotonic()
        expire(self.made, self.cfg.file_ttl * 60, self.shared_dir if sweep else None)

    async def translate(self, request: Any) -> dict[str, Any]:
        arrived = time.monotonic()
        self.expire()
        upload, route, name, options, client = await asked(request, self.authorize, self.models)
        if self.shutting:
            raise shutting()
        if self.waiting >= self.cfg.file_workers + self.cfg.file_queue:
            raise ServiceError(429, f"Too many documents are being translated ({self.waiting}); try again later",
                               {"Retry-After": "10"})
        token = secrets.token_hex(16)
        ext = Path(name).suffix.lower()
        src, dst = self.dir / f"in-{token}{ext}", (self.shared_dir or self.dir) / f"{token}.{name}"
        job = Job(arrived + self.cfg.file_timeout_s)
        translated = self._texts(route, job, asyncio.get_running_loop(), client)

        def work() -> Report:
            try:
                job.check()
                return translate_document(src, dst, translated, self.limits, options, name=name)
            finally:
                src.unlink(missing_ok=True)

        self.waiting += 1
        self.jobs.add(job)
        future: asyncio.Future[Report] | None = None
        try:
            with open(src, "wb") as out:
                while data := await upload.read(1 << 20):
                    out.write(data)
            future = asyncio.get_running_loop().run_in_executor(self.pool, work)
            future.add_done_callback(lambda f: self._done(job, f))
            report = await self._answer(future, job, name)
        finally:
            if future is None:                      # (it never started)
                self._done(job)
                src.unlink(missing_ok=True)
        if self.counted is not None:
            self.counted(report)
        _warn(report)
        self.made[token] = (dst, name, time.monotonic())
        if self.shared_dir is None and dst.stat().st_size <= IN_REDIS:   # (kept in Redis too: any replica serves it)
            await self.shared.keep_file(token, name, dst.read_bytes(), int(self.cfg.file_ttl * 60))
        elif self.shared_dir is None and not self.warned_size:
            self.warned_size = True
            log.warning("a translated document of %d bytes is kept by this replica only (Redis keeps those of at most "
                        "%d): --files-dir keeps every one where all replicas find it", dst.stat().st_size, IN_REDIS)
        return {"translatedFileUrl": download_url(request, token, name, getattr(self.cfg, "public_url", None))}

    def _texts(self, route: Any, job: Job, loop: asyncio.AbstractEventLoop, client: Any) -> Callable[..., list[str]]:
        """What a document's worker thread translates its texts with: chunks of them through the event loop's
        route (and so the batcher), one at a time, the job checked before each."""
        async def texts(chunk: list[str], fmt: str, kinds: tuple[str, ...]) -> list[str]:
            if self.charge is not None:
                await self.charge(client, sum(len(t) for t in chunk))
            with refused(400):
                asked = Request(chunk, format=fmt, names=self.names, protect=kinds)
            out = await self.models.translate(route, 400, asked)
            return [Scored(ts[0].text, ts[0].confidence) for ts in out]

        def translated(items: list[str], fmt: str, kinds: tuple[str, ...]) -> list[str]:
            out: list[str] = []
            for i in range(0, len(items), self.CHUNK):
                job.check()
                job.chunk = asyncio.run_coroutine_threadsafe(texts(items[i:i + self.CHUNK], fmt, kinds), loop)
                try:
                    out += job.chunk.result()
                except concurrent.futures.CancelledError:
                    raise Stopped from None
            return out

        return translated

    async def _answer(self, future: "asyncio.Future[Report]", job: Job, name: str) -> Report:
        """The document's report, or the error its request is answered with (its work stopped)."""
        late = ServiceError(504, f"{name} was not translated within {self.cfg.file_timeout_s:g} s (--file-timeout)")
        try:
            return await asyncio.wait_for(asyncio.shield(future), max(0.0, job.deadline - time.monotonic()))
        except asyncio.TimeoutError:
            job.stop()
            raise late from None
        except asyncio.CancelledError:
            job.stop()
            raise
        except Stopped:
            raise (shutting() if self.shutting else late) from None
        except DocumentError as e:
            raise ServiceError(400, f"Invalid request: {e}") from None

    def _done(self, job: Job, future: "asyncio.Future[Report] | None" = None) -> None:
        """A document's work over (its exception, if its request gave up waiting, read here: no one else will)."""
        if future is not None and not future.cancelled():
            future.exception()
        if job in self.jobs:
            self.jobs.discard(job)
            self.waiting -= 1

    async def download(self, name: str) -> Any:
        """A translation by its token: this replica's, the shared folder's, or Redis's (the module's docstring)."""
        self.expire()
        return await download(name, self.made, self.shared_dir, self.shared)
