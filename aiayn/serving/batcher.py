"""Decoding for ``aiayn serve``: the translations it remembers (:class:`Memo`), then step-level (continuous) batching
(:class:`Batcher`): the lines of many requests decoded together, joining a running
search between two of its steps and leaving it as soon as they are done.

``workers`` decoding threads each run one search (search.BeamSearch) per group of decoding settings
(DecodeConfig.batch_key: sentences that differ in anything but their length limit and nbest are never decoded
together) over at most ``max_batch_tokens`` source tokens. Between two steps a busy thread admits waiting lines (while
no thread is idle); a request is answered once its last line is done; a request that timed out or whose client went
away is dropped at the next step. Each thread keeps its share of the CPU's intra-op threads (runtime.ThreadShare over
all ``workers``) even while the others are idle: measured on a 2-core AVX2 CPU, PyTorch's matrix products do not run in
parallel when called from a thread other than the process's main one, and a lone decoding thread given both cores
decoded a one-line request 25-55% slower than with one. Sampling requests are decoded whole, as ``aiayn translate``
does.

**Remembered translations (:class:`Memo`).** Translations the server remembers: a sentence asked again (a page
reloaded, a post translated by many readers, a
document sent twice) is answered from memory instead of decoded again.

A least-recently-used table per served model, keyed by the decoding settings and the sentence's source ids (what
decides its hypotheses: the same key gives the same output, with the table or without it; int8, whose activation
scale is per call, is the one exception within rounding). Sentences with constraints are always decoded. Its size is
``aiayn serve --cache N`` sentences per model (0: none); ``/metrics`` counts lookups and hits
(``aiayn_cache_lookups_total``, ``aiayn_cache_hits_total``).

With ``--shared-storage`` (shared.py: Redis) a sentence not in this process's table is looked up there too, and every
sentence decoded is stored there for ``--cache-ttl`` seconds, so that replicas answer each other's sentences
(``aiayn_cache_shared_hits_total``). There a key names the model by its weights' hash (two replicas share only what the
same weights would decode) and a translation is JSON, never a pickle.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..config import DecodeConfig
from ..decoding.hypotheses import Hypothesis, Stopped
from ..engines.base import Call, Engine, Plan, Search, plan
from ..runtime import ThreadShare, resolve_workers
from .middleware import ServiceError

if TYPE_CHECKING:
    from ..decoding.constraints import Constraints
    from .shared import Local

log = logging.getLogger(__name__)



async def planned(steps: Plan, decode: Callable[[list[list[int]], Any], Awaitable[list[list[Hypothesis]]]]) \
        -> list[list[Hypothesis]]:
    """The hypotheses an engine's plan (engines.base.plan) returns, each of its calls awaited from ``decode`` (a
    batcher's queue) where an engine's ``hypotheses`` makes it in its thread."""
    try:
        call: Call = next(steps)
        while True:
            call = steps.send(await decode(*call))
    except StopIteration as done:
        return done.value

class DecodeMetrics:
    """The decoding side's Prometheus metrics on the app's registry, one series per served model (label ``model``):
    ``DecodeMetrics(registry).model("de-en")`` is what that model's Batcher counts with."""

    def __init__(self, registry: Any) -> None:
        from prometheus_client import Counter, Gauge, Histogram

        by = ["model"]
        self.families = dict(
            batch_lines=Histogram("aiayn_batch_lines", "sentences in each decoding step", by, registry=registry,
                                  buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)),
            src_tokens=Counter("aiayn_source_tokens", "source tokens translated", by, registry=registry),
            tgt_tokens=Counter("aiayn_target_tokens", "target tokens produced", by, registry=registry),
            steps=Counter("aiayn_decoding_steps", "decoding steps", by, registry=registry),
            step_seconds=Counter("aiayn_decoding_seconds", "seconds spent in decoding steps", by, registry=registry),
            joined=Counter("aiayn_joined_lines", "lines that joined a search already decoding", by, registry=registry),
            queue_lines=Gauge("aiayn_queue_lines", "lines waiting to join a search", by, registry=registry),
            cache_lookups=Counter("aiayn_cache_lookups", "sentences looked up in the translations remembered (batcher.py)",
                                  by, registry=registry),
            cache_hits=Counter("aiayn_cache_hits", "sentences answered from the translations remembered", by,
                               registry=registry),
            cache_shared_hits=Counter("aiayn_cache_shared_hits", "of those, sentences answered from the shared "
                                      "storage (--shared-storage: another replica may have translated them)", by,
                                      registry=registry),
            stopped=Counter("aiayn_stopped_lines", "lines left undecoded or stopped unfinished: their requests "
                            "timed out or went away", by, registry=registry))

    def model(self, name: str) -> ModelMetrics:
        return ModelMetrics(**{k: family.labels(name) for k, family in self.families.items()})


@dataclass(frozen=True)
class ModelMetrics:
    """One model's decoding metrics (DecodeMetrics.model)."""

    batch_lines: Any
    src_tokens: Any
    tgt_tokens: Any
    steps: Any
    step_seconds: Any
    joined: Any
    queue_lines: Any
    cache_lookups: Any
    cache_hits: Any
    cache_shared_hits: Any
    stopped: Any

    def step(self, sentences: int, seconds: float) -> None:
        """One decoding step of ``sentences`` sentences."""
        self.batch_lines.observe(sentences)
        self.steps.inc()
        self.step_seconds.inc(seconds)


@dataclass(eq=False)
class Job:
    """One request's lines (their source ids, encoded once: :meth:`Batcher.translate`), waiting or being decoded;
    answered when its last line is done."""

    ids: list[list[int]]
    tokens: int                                   # source tokens, EOS included
    decode: DecodeConfig
    future: asyncio.Future[list[Any]]
    loop: asyncio.AbstractEventLoop
    constraints: list[Constraints | None] | None = None     # each line's (constraints.py), checked by the server
    results: list[Any] = field(default_factory=list)
    left: int = 0
    cancelled: bool = False
    queued: float = field(default_factory=time.perf_counter)

    def answer(self, index: int, hyps: list[Hypothesis]) -> None:
        """Line ``index`` is done (from a decoding thread); the request is answered with its last line."""
        self.results[index] = hyps
        self.left -= 1
        if self.left == 0:
            self.loop.call_soon_threadsafe(_resolve, self.future, self.results)

    def fail(self, error: BaseException) -> None:
        self.cancelled = True
        self.loop.call_soon_threadsafe(_resolve, self.future, error)

    def start(self, translator: Engine) -> list[int]:
        """A sampling request decoded whole (as ``aiayn translate`` does; stopped if the request goes away); the
        indices of the lines left to decode (no line is blank: engine.plan)."""
        self.results, self.left = [None] * len(self.ids), len(self.ids)
        if self.decode.sampling:
            for i, hyps in enumerate(translator.decode_lines(self.ids, self.decode, None, stop=lambda: self.cancelled)):
                self.answer(i, hyps)
            return []
        return list(range(len(self.ids)))

    def best(self, hyps: list[Hypothesis]) -> list[Hypothesis]:
        """``nbest`` hypotheses as ``aiayn translate`` gives them: with beam 1 (greedy) the score is the
        log-probability."""
        if self.decode.beam == 1:
            hyps = [replace(h, score=h.logprob) for h in hyps]
        return hyps[: max(1, self.decode.nbest)]


def to_decode(job: Job, metrics: ModelMetrics) -> bool:
    """Whether a job leaving the queue is decoded: one whose request is gone is counted among the stopped lines."""
    if job.cancelled:
        metrics.stopped.inc(len(job.ids))
    return not job.cancelled


def new_job(ids: list[list[int]], decode: DecodeConfig, waiting: int, most: int,
            constraints: list[Constraints | None] | None = None) -> Job:
    """A request's Job (its lines' source ids), counted in source tokens; ServiceError(503) when ``waiting`` lines
    and these would pass ``most``."""
    if waiting + len(ids) > most:
        raise ServiceError(503, f"the server is busy ({waiting} lines queued); retry shortly", {"Retry-After": "1"})
    tokens = sum(len(x) for x in ids) + len(ids)
    loop = asyncio.get_running_loop()
    return Job(ids, tokens, decode, loop.create_future(), loop, constraints)


async def answered(job: Job, timeout_s: float) -> list[list[Hypothesis]]:
    """The job's hypotheses once decoded; ServiceError(504) after ``timeout_s``, (500) when decoding failed."""
    try:
        return await asyncio.wait_for(asyncio.shield(job.future), timeout_s)
    except asyncio.TimeoutError:
        raise ServiceError(504, f"translation took longer than {timeout_s:g} s") from None
    except (ValueError, RuntimeError, OSError) as e:   # logged where it happened (a worker's death: OSError)
        raise ServiceError(500, f"translation failed: {e}") from None
    finally:
        job.cancelled = job.cancelled or not job.future.done()   # timed out, or the client went away


def _resolve(future: asyncio.Future[list[Any]], outcome: Any) -> None:
    if not future.done():
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)


def _step(search: Search, running: dict[Any, Job], metrics: ModelMetrics) -> bool:
    """One decoding step of one of a decoding thread's searches: drop the sentences whose request is gone, answer
    those now done. False when the search is empty afterwards."""
    if not search.active:
        return False
    gone = {s for s in search.keys if s is not None and running[s].cancelled}
    if gone:
        search.drop(gone)
        metrics.stopped.inc(len(gone))
    t0 = time.perf_counter()
    try:
        done = search.step()
    except Exception as e:  # noqa: BLE001 - every request in this search gets the error; serving goes on
        log.exception("decoding step failed")
        for s in search.keys:
            if s is not None:
                running.pop(s).fail(e)
        return False
    metrics.step(search.active + len(done), time.perf_counter() - t0)
    for s in gone | {s for s, _ in done}:
        running.pop(s, None)
    for (job, i), hyps in done:
        metrics.tgt_tokens.inc(len(hyps[0].tokens) + 1)             # the best translation's, EOS included
        job.answer(i, job.best(hyps))
    return bool(search.active)


@dataclass(frozen=True)
class Limits:
    """What the batcher is given by the server's settings (serve.ServeConfig)."""

    workers: int                # decoding threads (0: one per core, at most 4; 1 on GPUs)
    max_batch_tokens: int       # source tokens of the sentences one decoding thread runs at once
    max_wait_ms: float          # how long an idle decoding thread waits for a burst of requests
    max_queue_lines: int        # waiting lines over all requests; beyond: 503
    timeout_s: float            # per request; beyond: 504
    join: bool = True           # waiting lines join a busy thread's running search (else only a free thread takes them)
    processes: bool = False     # aiayn's engine decodes in worker processes (processes.py, WholeBatcher)
    cache: int = 0              # sentences whose translations are remembered, per model (batcher.py; 0: none)
    cache_ttl: int = 86400      # seconds one stays in the shared storage (--shared-storage), where there is one


class Batcher:
    """The decoding threads and the queue of lines waiting to join them (the module's docstring says how)."""

    def __init__(self, translator: Engine, limits: Limits, metrics: ModelMetrics) -> None:
        self.translator, self.limits, self.metrics = translator, limits, metrics
        self.workers = resolve_workers(limits.workers, translator.device)
        self.threads = ThreadShare()           # the CPU's intra-op threads, shared among the decoding threads
        self.queue: list[Job] = []
        self.waiting_lines = 0
        self.lock = threading.Condition()
        self.stopping = False
        self.idle = 0                  # decoding threads with nothing to decode
        self.decoders = [threading.Thread(target=self._decode_loop, name=f"aiayn-decode-{i}", daemon=True)
                         for i in range(self.workers)]
        for t in self.decoders:
            t.start()

    async def translate(self, ids: list[list[int]], decode: DecodeConfig,
                        constraints: list[Constraints | None] | None = None) -> list[list[Hypothesis]]:
        """The hypotheses of lines encoded once (pipeline.prepare) by engine.plan (blank lines are not decoded; with
        ``decode.keep_plain``, only the lines whose unconstrained translation lacks a phrase are decoded again with
        their constraints, as every engine does); ``constraints``: each line's, from the engine's ``constraints``.
        Raises ServiceError(503) when the queue is full, (504) on timeout."""
        return await planned(plan(ids, decode, constraints), lambda x, c: self._translate(x, decode, c))

    async def _translate(self, ids: list[list[int]], decode: DecodeConfig,
                         constraints: list[Constraints | None] | None) -> list[list[Hypothesis]]:
        job = new_job(ids, decode, self.waiting_lines, self.limits.max_queue_lines, constraints)
        with self.lock:
            self.queue.append(job)
            self.waiting_lines += len(ids)
            self.metrics.queue_lines.set(self.waiting_lines)
            self.lock.notify()
        return await answered(job, self.limits.timeout_s)

    def take(self, in_flight: int, idle: bool) -> list[Job] | None:
        """The admission policy: waiting jobs for a decoding thread with ``in_flight`` source tokens running (oldest
        first, within max_batch_tokens; at least one when idle, waiting for it); None when the server is stopping.
        A busy thread takes nothing while another thread is idle (the waiting requests are that one's), nor at all
        without ``join``."""
        with self.lock:
            if not idle and (self.idle or not self.limits.join):
                return []
            self.idle += idle
            while idle and not self.queue and not self.stopping:
                self.lock.wait()
            # an idle thread gives a burst of requests max_wait_ms to arrive, but only while another thread is decoding
            # (under load: a batch of what its requests' clients send next); a lone request never waits
            if idle and self.queue and self.idle < self.workers:
                until = self.queue[0].queued + self.limits.max_wait_ms / 1000
                while not self.stopping and time.perf_counter() < until and \
                        sum(j.tokens for j in self.queue) < self.limits.max_batch_tokens:
                    self.lock.wait(until - time.perf_counter())
            self.idle -= idle
            if self.stopping:
                return None
            taken: list[Job] = []
            while self.queue and (not taken and idle or
                                  in_flight + self.queue[0].tokens <= self.limits.max_batch_tokens):
                job = self.queue.pop(0)
                self.waiting_lines -= len(job.ids)
                if to_decode(job, self.metrics):
                    taken.append(job)
                    in_flight += job.tokens
                    idle = False
            self.metrics.queue_lines.set(self.waiting_lines)
            return taken

    def _decode_loop(self) -> None:
        """One decoding thread: admit, step every running search once, answer what is done; until stopped."""
        searches: dict[tuple[Any, ...], Search] = {}
        running: dict[Any, Job] = {}                  # sentence key (job, line) -> its job, for drops
        while True:
            jobs = self.take(sum(job.tokens for job in set(running.values())), idle=not running)
            if jobs is None:
                return
            self.threads.take(self.workers)      # its share, also while the others are idle (the module says why)
            admit(self.translator, jobs, searches, running, self.metrics)
            for key, search in list(searches.items()):
                if not _step(search, running, self.metrics):
                    del searches[key]

    def close(self) -> None:
        with self.lock:
            self.stopping = True
            self.lock.notify_all()
        for t in self.decoders:
            t.join()


def admit(engine: Engine, jobs: list[Job], searches: dict[tuple[Any, ...], Search],
          running: dict[Any, Job], metrics: ModelMetrics) -> None:
    """Start the lines of ``jobs`` in ``searches`` (by DecodeConfig.batch_key); the lines of jobs with the same
    settings join their running search in one admission (one encoder call: the engine's ``admit``)."""
    t = engine
    groups: dict[DecodeConfig, tuple[list[list[int]], list[tuple[Job, int]], list[Constraints | None]]] = {}
    for job in jobs:
        metrics.src_tokens.inc(job.tokens)
        try:
            todo = job.start(t)
        except Stopped:                                  # a sampling request that went away while it was decoded
            continue
        except Exception as e:  # noqa: BLE001 - this request gets the error; serving goes on
            job.fail(e)
            continue
        ids, keys, cons = groups.setdefault(job.decode, ([], [], []))
        ids += [job.ids[i] for i in todo]
        keys += [(job, i) for i in todo]
        cons += [job.constraints[i] if job.constraints else None for i in todo]
    for decode, (ids, keys, cons) in groups.items():
        if not keys:
            continue
        search = searches.get(decode.batch_key())
        if search is not None and search.active:
            metrics.joined.inc(len(keys))
        search = search or searches.setdefault(decode.batch_key(), t.search(decode))
        try:
            t.admit(search, ids, keys, decode, cons)
        except Exception as e:  # noqa: BLE001
            log.exception("admitting requests failed")
            for job, _ in keys:
                job.fail(e)
            continue
        running.update({key: key[0] for key in keys})


class WholeBatcher:
    """Batching for an engine that decodes whole batches (CTranslate2: ctranslate2.CTranslate2Engine; aiayn's in worker
    processes: processes.ProcessEngine): when one of the
    ``workers`` decoding threads is free, the requests waiting with the same settings (within max_batch_tokens) are
    decoded together as one batch. Runs in the event loop's thread; the batches in the engine's."""

    def __init__(self, translator: Any, limits: Limits, metrics: ModelMetrics) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.translator, self.limits, self.metrics = translator, limits, metrics
        self.workers = translator.workers                     # the engine's own translators, side by side
        self.pool = ThreadPoolExecutor(self.workers, thread_name_prefix="aiayn-engine")
        self.waiting: list[Job] = []
        self.waiting_lines = self.busy = 0
        self.decoding = 0                                     # source tokens of the batches being decoded

    async def translate(self, ids: list[list[int]], decode: DecodeConfig,
                        constraints: list[Constraints | None] | None = None) -> list[list[Hypothesis]]:
        """As Batcher.translate; each batch by the engine's ``decode_lines`` (in worker processes: processes.py). What
        the engine cannot do was refused before (pipeline.prepare)."""
        return await planned(plan(ids, decode, constraints), lambda x, c: self._translate(x, decode, c))

    async def _translate(self, ids: list[list[int]], decode: DecodeConfig,
                         constraints: list[Constraints | None] | None) -> list[list[Hypothesis]]:
        job = new_job(ids, decode, self.waiting_lines, self.limits.max_queue_lines, constraints)
        self.waiting.append(job)
        self.waiting_lines += len(ids)
        self._start()
        return await answered(job, self.limits.timeout_s)

    def _start(self) -> None:
        """Hand the waiting requests to the free decoding threads, one batch each, each batch at most its thread's
        share of the source tokens in the server (waiting or being decoded): under load the threads' batches stay
        even, instead of one taking every request and the next finding none (the clients answered together send
        their next requests together)."""
        while self.busy < self.workers and self.waiting:
            first = next((j for j in self.waiting if not j.cancelled), None)
            if first is None:
                self.metrics.stopped.inc(self.waiting_lines)
                self.waiting, self.waiting_lines = [], 0
                break
            batch: list[Job] = []
            tokens = 0
            share = -(-(sum(j.tokens for j in self.waiting) + self.decoding) // self.workers)
            most = min(self.limits.max_batch_tokens, share)
            for job in list(self.waiting):
                alike = job.decode == first.decode and (job.constraints is None) == (first.constraints is None)
                if job.cancelled or alike and (not batch or tokens + job.tokens <= most):
                    self.waiting.remove(job)
                    self.waiting_lines -= len(job.ids)
                    if to_decode(job, self.metrics):
                        batch.append(job)
                        tokens += job.tokens
            self.busy += 1
            self.decoding += tokens
            self.metrics.queue_lines.set(self.waiting_lines)
            future = asyncio.get_running_loop().run_in_executor(self.pool, self._decode, batch)
            future.add_done_callback(functools.partial(self._finished, tokens))

    def _decode(self, batch: list[Job]) -> None:
        ids = [x for job in batch for x in job.ids]
        cons = [c for job in batch for c in (job.constraints or [None] * len(job.ids))]
        t0 = time.perf_counter()
        stop = lambda: all(job.cancelled for job in batch)      # noqa: E731 - every request of the batch is gone
        try:
            hyps = self.translator.decode_lines(ids, batch[0].decode,
                                                cons if any(c is not None for c in cons) else None, stop=stop)
        except Stopped:                                   # nobody waits for these requests' answers any more
            log.info("a batch of %d lines stopped: its requests timed out or went away", len(ids))
            self.metrics.stopped.inc(len(ids))
            return
        except Exception as e:  # noqa: BLE001 - these requests get the error; serving goes on
            log.exception("decoding a batch failed")
            for job in batch:
                job.fail(e)
            return
        self.metrics.step(len(ids), time.perf_counter() - t0)
        at = 0
        for job in batch:
            self.metrics.src_tokens.inc(job.tokens)
            job.results, job.left = [None] * len(job.ids), len(job.ids)
            for i in range(len(job.ids)):
                self.metrics.tgt_tokens.inc(len(hyps[at][0].tokens) + 1)
                job.answer(i, job.best(hyps[at]))
                at += 1

    def _finished(self, tokens: int, _: Any = None) -> None:
        self.busy -= 1
        self.decoding -= tokens
        self._start()

    def close(self) -> None:
        self.pool.shutdown(wait=True)
        self.translator.close()


# --- Remembered translations: a sentence asked again is answered from memory ---------------------------------------

Decoder = Callable[[list[list[int]], "DecodeConfig", "list[Constraints | None] | None"],
                   Awaitable[list[list["Hypothesis"]]]]


class Memo:
    """The table (the module's docstring); :meth:`wrap` puts it in front of a decoder (a batcher's ``translate``)."""

    def __init__(self, size: int, metrics: Any, shared: Local | None = None, model: str = "", ttl_s: int = 86400) -> None:
        """``shared``: the storage replicas share (None: this process's table alone); ``model``: what names the model
        there (its weights' hash)."""
        self.size, self.metrics, self.shared, self.model, self.ttl_s = size, metrics, shared, model, ttl_s
        self.items: OrderedDict[tuple[Any, tuple[int, ...]], list[Hypothesis]] = OrderedDict()
        self.lock = threading.Lock()

    def _get(self, key: tuple[Any, tuple[int, ...]]) -> list[Hypothesis] | None:
        with self.lock:
            found = self.items.get(key)
            if found is not None:
                self.items.move_to_end(key)
            return found

    def _put(self, key: tuple[Any, tuple[int, ...]], hyps: list[Hypothesis]) -> None:
        hyps = [replace(h, attention=None) for h in hyps]       # (its attention: kilobytes a line, rarely asked)
        with self.lock:
            self.items[key] = hyps
            self.items.move_to_end(key)
            while len(self.items) > self.size:
                self.items.popitem(last=False)

    def wrap(self, decoder: Decoder) -> Decoder:
        if self.size <= 0:
            return decoder

        async def decode(ids: list[list[int]], settings: DecodeConfig,
                         constraints: list[Constraints | None] | None) -> list[list[Hypothesis]]:
            if constraints is not None and any(c is not None for c in constraints):
                return await decoder(ids, settings, constraints)
            keys = [(settings, tuple(x)) for x in ids]
            found = [self._get(k) for k in keys]
            todo = [i for i, hyps in enumerate(found) if hyps is None]
            self.metrics.cache_lookups.inc(len(keys))
            self.metrics.cache_hits.inc(len(keys) - len(todo))
            if todo and self.shared is not None:
                todo = await self._recall(keys, found, todo)
            if todo:
                decoded = await decoder([ids[i] for i in todo], settings, None)
                for i, hyps in zip(todo, decoded, strict=True):
                    found[i] = hyps
                    self._put(keys[i], list(hyps))
                if self.shared is not None:
                    await self.shared.remember({self._name(keys[i]): _dumps(hyps)
                                                for i, hyps in zip(todo, decoded, strict=True)},
                                               self.ttl_s)
            return [list(hyps or []) for hyps in found]

        return decode

    def _name(self, key: tuple[Any, tuple[int, ...]]) -> str:
        """A sentence's key in the shared storage."""
        return f"{self.model}:{hashlib.sha256(repr(key).encode()).hexdigest()[:32]}"

    async def _recall(self, keys: list[tuple[Any, tuple[int, ...]]], found: list[list[Hypothesis] | None],
                      todo: list[int]) -> list[int]:
        """The sentences of ``todo`` found in the shared storage put in ``found`` (and this table); those left."""
        assert self.shared is not None
        left = []
        for i, value in zip(todo, await self.shared.recall([self._name(keys[i]) for i in todo]), strict=True):
            hyps = _loads(value) if value is not None else None
            if hyps is None:
                left.append(i)
            else:
                found[i] = hyps
                self._put(keys[i], list(hyps))
        self.metrics.cache_hits.inc(len(todo) - len(left))
        self.metrics.cache_shared_hits.inc(len(todo) - len(left))
        return left


def _dumps(hyps: list[Hypothesis]) -> bytes:
    return json.dumps([[h.tokens, h.score, h.logprob, h.runner_up] for h in hyps]).encode()


def _loads(value: bytes) -> list[Hypothesis] | None:
    """A translation as the shared storage holds it (None: not one, which is decoded again)."""
    try:
        return [Hypothesis([int(t) for t in tokens], float(score), float(logprob),
                           None if up is None else (float(up[0]), [int(t) for t in up[1]]))
                for tokens, score, logprob, up in json.loads(value)]
    except (ValueError, TypeError, IndexError):
        return None
