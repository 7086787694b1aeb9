"""The models one server serves, told apart by their language pair (``aiayn serve --model RUN_A --model RUN_B``).

A request names the pair it wants (``source`` and ``target``; either may be left out where only one model fits it) and
is routed to that model. A pair no model translates, but two do through a third language (de→en and en→fr for
de→fr), is routed through both (a pivot: English first where several languages would do), and the answer says so; any
other pair is a 400 naming the pairs that exist. A route is route.py's, its legs served models: :meth:`Models.translate`
follows it, each leg's sentences decoded by its batcher beside every other request's. Language codes are compared as
LibreTranslate compares them: ISO 639-1 codes, lower case, with its aliases (``zh-Hans`` is ``zh``, ``zh-Hant`` is
``zt``, ``pt-BR`` is ``pb``).

**Metrics (:class:`Metrics`).** The server's Prometheus metrics (``/metrics``): requests by path and status, latency,
requests in flight, the models
loaded and their engines, documents, and per route (a model's name, or a pivot's: "de-en-fr") what happened to its
requests: the sentences repaired, protected spans, the fallback, the confidence of translated texts (each request's
counts and translations, pipeline.Translated: :meth:`Metrics.translated`); whether the shared storage and the keys
database answer, and the server's own failures.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ..engines import auto
from ..engines.base import Engine, Unsupported
from ..quoting import cut
from ..rundir import RunDir
from ..runtime import cpu_only, resolve_workers
from ..translation import pipeline
from ..translation.pipeline import Prepared, Request, Translated, Translation, finish, prepare, steps
from ..translation.route import Route, canonical, language_name
from .batcher import Batcher, DecodeMetrics, Decoder, Limits, Memo, ModelMetrics, WholeBatcher
from .middleware import ServiceError

if TYPE_CHECKING:
    from ..translation.pipeline import Translated
    from .shared import Local

log = logging.getLogger(__name__)

def stored_bytes(checkpoint: Path, precision: str | None) -> int:
    """A checkpoint's weights' bytes once loaded in ``precision``, from its file's size: fp32 as stored; half for bf16,
    fp16 and int8, whose embeddings stay fp32; auto counted as fp32."""
    from ..checkpoint import MODEL

    stored = (checkpoint / MODEL).stat().st_size
    return stored // 2 if precision in ("bf16", "fp16", "int8") else stored


@dataclass(eq=False)
class Served:
    """One model of the server: its engine while loaded (``current``), its language pair (None where the run records
    none) and what /info says of it; ``batcher`` is its decoding threads while the server runs. A model loaded on
    first use (``aiayn serve --memory-budget``) has a :class:`Pool`, which loads it when a request needs it and may
    unload it when it is idle."""

    name: str                                   # "de-en", or the run dir's name when it records no languages
    current: Engine | None                      # None while not loaded
    pair: tuple[str, str] | None
    info: dict[str, Any] = field(default_factory=dict)
    batcher: Batcher | WholeBatcher | None = None
    settings: dict[str, Any] = field(default_factory=dict)   # the decoding settings it was loaded with
    decoder: Any = None                         # the batcher's translate, behind the translations remembered (batcher.py)
    pool: Pool | None = None                    # what loads it on first use (None: loaded at start, for good)
    in_use: int = 0                             # requests using it now (a model in use is never unloaded)
    last_used: int = 0                          # the pool's clock when a request last used it
    closing: bool = False                       # being unloaded: a request waits for it to load again
    processes: int = 0                          # aiayn's engine in this many worker processes (auto: once needed)
    threads: bool = False                       # worker processes could not be started here: threads from now on
    asked: str = "torch"                        # the --engine asked for (info["engine"]: the one that decodes)
    fallback: Served | None = None              # a stronger model for its texts less sure than min_confidence
    min_confidence: float = 0.5                 # (aiayn serve --fallback, --min-confidence)

    @classmethod
    def load(cls, path: str | Path, engine: str = "torch", lazy: bool = False, processes: int = 0, **decode: Any) -> Served:
        """The model of run dir (or checkpoint) ``path``, loaded now, or with ``lazy`` when :meth:`open` is called
        (its language pair and /info from the run dir alone). ``processes``: aiayn's engine on a CPU, where it decodes
        (auto: when needed), in that many worker processes (processes.ProcessEngine), not in this process."""
        if (Path(path) / "metadata.json").is_file():
            return argos_served(Path(path), **decode)
        run, ckpt = RunDir.locate(path)
        pair = (canonical(langs[0]), canonical(langs[1])) if (langs := run.languages()) else None
        me = cls(f"{pair[0]}-{pair[1]}" if pair else run.path.name, None, pair,
                 {"run": str(run.path), "checkpoint": str(ckpt), "engine": engine, "path": str(path)},
                 settings=dict(decode), asked=engine)
        me.processes = processes if engine != "ctranslate2" and cpu_only(run.config().decode.replace(**decode).device) else 0
        if not lazy:
            me.open()
        return me

    @property
    def translator(self) -> Engine:
        """The engine (RuntimeError while it is not loaded)."""
        if self.current is None:
            raise RuntimeError(f"model {self.name} is not loaded")
        return self.current

    def open(self) -> None:
        """Load the engine (Served.load's path, engine and settings; aiayn's in worker processes where it may)."""
        if self.current is None:
            self.current = auto.load(self.info["path"], self.asked, serving=0 if self.threads else self.processes,
                                     **self.settings)
            self.threads = self.threads or bool(self.processes and self.current.capabilities.stepwise)  # could not start
        self.info["engine"] = self.translator.engine

    def close(self) -> None:
        """Stop its decoders and let its engine go (a lazy model only: one given as an engine cannot load again)."""
        if self.batcher is not None:
            self.batcher.close()
        self.batcher = self.decoder = None
        if "path" in self.info:
            self.current = None

    def estimate_bytes(self) -> int:
        """Its weights' bytes once loaded: as measured when it was first loaded (Pool.ready), else its checkpoint
        file's size scaled to the precision asked for (fp32 as stored; half for bf16, fp16 and int8, whose
        embeddings stay fp32; auto counted as fp32)."""
        if "bytes" in self.info:
            return int(self.info["bytes"])
        if self.current is not None:
            return self.memory_bytes()
        return stored_bytes(Path(self.info["checkpoint"]), self.settings.get("precision"))

    @contextlib.asynccontextmanager
    async def use(self) -> AsyncIterator[Served]:
        """Held while a request prepares and translates with this model: loaded first if it is not (its pool), and
        not unloaded until the request is done."""
        self.in_use += 1
        try:
            if self.pool is not None:
                await self.pool.ready(self)
            yield self
        finally:
            self.in_use -= 1
            if self.pool is not None and not self.in_use:
                self.pool.trim_later()

    def start(self, limits: Limits, metrics: ModelMetrics, shared: Local | None = None) -> None:
        """Its decoders behind the translations remembered (batcher.py; also in ``shared``): on a CPU, aiayn's engine in
        worker processes taking whole batches (``limits.processes``) or threads with step-level batching; on a GPU, a
        thread; CTranslate2's translators, whole batches."""
        t = self.translator
        if t.capabilities.processes and limits.processes and t.device.type == "cpu" and not (self.processes or self.threads):
            from ..engines.processes import in_processes  # (loaded in this process: the workers' alone from now on)

            workers = in_processes(self.info["checkpoint"], t, resolve_workers(limits.workers, t.device), self.settings)
            self.current = t = workers or t
            self.threads = workers is None
        # stepwise: aiayn's own engine, its model in this process; worker processes, CTranslate2: whole batches
        self.batcher = (Batcher if t.capabilities.stepwise else WholeBatcher)(t, limits, metrics)
        model = f"{self.name}:{weights_hash(self.info)}" if shared is not None else ""
        self.decoder = Memo(limits.cache, metrics, shared, model, limits.cache_ttl).wrap(self.batcher.translate)

    def prepare(self, status: int, request: Callable[[], Request]) -> Prepared:
        """The ``request`` a front end makes, prepared for this model's engine (pipeline.prepare); what is refused, as
        :func:`refused` says."""
        with refused(status):
            return prepare(self.translator, request())

    async def translate(self, prepared: Prepared) -> Translated:
        """Its lines decoded by the batcher beside every other request's."""
        assert self.decoder is not None, "the server has not started"
        return await decoded(self.translator, prepared, self.decoder)

    def memory_bytes(self) -> int:
        """The bytes of its weights and buffers as loaded (int8: packed weights; CTranslate2: its model file; a
        multilingual model's: counted by its first direction, the others 0)."""
        return int(self.info["bytes"]) if self.info.get("bytes") == 0 else self.translator.memory_bytes()

    def describe(self) -> dict[str, Any]:
        """This model in /info (a model not loaded now: what its run dir says, memory_bytes 0)."""
        pair = {"name": self.name, "source": self.pair[0] if self.pair else None,
                "target": self.pair[1] if self.pair else None}
        info = {k: v for k, v in self.info.items() if k not in ("path", "bytes")}
        t = self.current
        if t is None:
            from ..checkpoint import parameter_count

            run = RunDir(Path(self.info["run"]))
            decode = run.config().decode.replace(**self.settings)
            try:
                parameters: int | None = parameter_count(Path(self.info["checkpoint"]))
            except Exception:  # noqa: BLE001 - a damaged weights file: said when a request loads it (Pool.ready)
                parameters = None
            return {**pair, "model": run.config().model.to_dict(), "parameters": parameters, "memory_bytes": 0,
                    "precision": decode.precision, "device": decode.device, "loaded": False, **info,
                    "decode": asdict(decode)}
        model, parameters = t.model_info()
        return {**pair, "model": model, "parameters": parameters, "memory_bytes": self.memory_bytes(),
                "precision": t.precision, "device": str(t.device), "loaded": True, **info, "decode": asdict(t.decode)}


async def decoded(engine: Engine, prepared: Prepared, decoder: Decoder) -> Translated:
    """A prepared request translated as the command line translates it (pipeline.steps, pipeline.finish), each call
    of its steps awaited from ``decoder`` (a batcher's ``translate``, behind the memo) where the command line blocks
    on the engine; the model's other work (word alignments) off the event loop."""
    plan = steps(engine, prepared)
    try:
        call = next(plan)
        while True:
            call = plan.send(await decoder(*call))
    except StopIteration as done:
        hyps = done.value
    if not prepared.aligns:
        return Translated(finish(engine, prepared, hyps), prepared.counts)
    out = await asyncio.get_running_loop().run_in_executor(None, finish, engine, prepared, hyps)
    return Translated(out, prepared.counts)


@contextlib.contextmanager
def refused(status: int) -> Iterator[None]:
    """What the pipeline refuses, as a ServiceError: HTML that cannot be taken apart a 400, any other option (a
    ValueError) ``status`` (aiayn's API: 422; LibreTranslate's: 400); what an engine cannot serve (engine.Unsupported)
    goes on, the server's 400 naming the feature."""
    from ..translation.htmltree import MarkupError

    try:
        yield
    except MarkupError as e:
        raise ServiceError(400, f"Invalid request: {e}") from None
    except Unsupported:
        raise
    except ValueError as e:
        raise ServiceError(status, f"Invalid request: {e}" if status == 400 else str(e)) from None


def load_all(path: str | Path, engine: str = "torch", lazy: bool = False, processes: int = 0,
             **decode: Any) -> list[Served]:
    """The models of run dir ``path``: one (:meth:`Served.load`), or for a multilingual run one for each direction it was
    trained on (multilingual.py), all over one engine loaded now, for good: its weights are counted once (by the
    first direction) and a memory budget does not unload them. The directions it was not trained on are left to
    pivot (Models.pivots)."""
    if (Path(path) / "metadata.json").is_file() or (multi := RunDir.locate(path)[0].multilingual()) is None:
        return [Served.load(path, engine, lazy, processes, **decode)]          # (an Argos package: one pair)
    from ..data.multilingual import Directed

    first = Served.load(path, engine, False, processes, **decode)
    shared = first.translator
    out: list[Served] = []
    for a, b in multi.directions:
        pair = (canonical(a), canonical(b))
        info = {k: v for k, v in first.info.items() if k != "path"}     # (no path: never unloaded, loaded again)
        me = Served(f"{pair[0]}-{pair[1]}", cast("Engine", Directed(shared, multi, a, b)), pair,
                 {**info, "multilingual": Path(info["run"]).name, **({"bytes": 0} if out else {})}, settings=dict(decode),
                 asked=engine, processes=first.processes)
        me.threads = first.threads
        out.append(me)
    return out


def argos_served(package: Path, **decode: Any) -> Served:
    """An Argos package's folder (engines/argos.py), on aiayn's CTranslate2 engine whatever --engine says, loaded now
    and for good (a memory budget does not unload it: its info has no "path" to load it again from)."""
    from ..engines import argos

    engine = argos.load(package, **decode)
    assert engine.languages is not None
    pair = (canonical(engine.languages[0]), canonical(engine.languages[1]))
    return Served(f"{pair[0]}-{pair[1]}", engine, pair,
                  {"argos": str(package), "checkpoint": str(package / "model"), "engine": engine.engine},
                  settings=dict(decode), asked="ctranslate2")


def weights_hash(info: dict[str, Any]) -> str:
    """The first 16 hex digits of the sha256 of a served model's weights file (its checkpoint's, or a CTranslate2
    model's model.bin), kept in ``info``: what names it in the shared storage, so that replicas serving the same weights
    share their translations."""
    if "weights" not in info:
        from ..checkpoint import MODEL

        path = Path(info.get("checkpoint", ""))
        weights = path / MODEL if (path / MODEL).is_file() else path / "model.bin"
        h = hashlib.sha256()
        if weights.is_file():
            with open(weights, "rb") as inp:
                while block := inp.read(1 << 20):
                    h.update(block)
        else:
            h.update(repr(sorted(info.items())).encode())
        info["weights"] = h.hexdigest()[:16]
    return str(info["weights"])


def run_dirs(paths: list[str | Path]) -> list[Path]:
    """The run dirs (or checkpoints) given; a directory that is neither stands for the run dirs directly inside it. An
    Argos package (engines/argos.py: a .argosmodel, its folder, or a folder of installed ones) stands for its folders."""
    from ..engines import argos

    found: list[Path] = []
    for p in map(Path, paths):
        if argos.is_package(p):
            found += argos.packages(p)
            continue
        try:
            RunDir.locate(p)
            found.append(p)
        except FileNotFoundError:
            inside = sorted(d for d in p.iterdir() if RunDir(d).config_file.is_file()) if p.is_dir() else []
            if not inside:
                raise
            found += inside
    return found


class Models:
    """The served models, routed by language pair (the module's docstring says how)."""

    def __init__(self, served: list[Served]) -> None:
        if not served:
            raise ValueError("no model to serve")
        names = [s.name for s in served]
        for n in names:
            if names.count(n) > 1:
                raise ValueError(f"two models for {n}: serve one model per language pair")
        if len(served) > 1 and any(s.pair is None for s in served):
            unnamed = next(s.info.get("run", s.name) for s in served if s.pair is None)
            raise ValueError(f"{unnamed} records no languages (its data dir's manifest has none): with several models "
                             "each must have its language pair")
        self.served = served
        # every pair no model translates but two do through a third language, English first where several would do:
        # (the first model, the second, the language between)
        self.pivots: dict[tuple[str, str], tuple[Served, Served, str]] = {}
        direct = {s.pair: s for s in served if s.pair}
        for (a, b), first in sorted(direct.items(), key=lambda kv: kv[0][1] != "en"):
            for (b2, c), second in direct.items():
                if b2 == b and c != a and (a, c) not in direct and (a, c) not in self.pivots:
                    self.pivots[(a, c)] = (first, second, b)
        self.routes: dict[tuple[str, str] | Served, Route[Served]] = {}    # made once each (route)
        # what the server does with each request's counts (serve.py: Metrics.translated, by the route's name)
        self.observe: Callable[[str, Translated], None] = lambda name, done: None

    @classmethod
    def load(cls, paths: list[str | Path], engine: str = "torch", lazy: bool = False, processes: int = 0,
             **decode: Any) -> Models:
        """The models of run dirs ``paths`` (run_dirs), loaded now, or with ``lazy`` on first use (see Pool);
        ``processes``: as Served.load's."""
        return cls([s for p in run_dirs(paths) for s in load_all(p, engine, lazy, processes, **decode)])

    def add_fallback(self, back: Served, min_confidence: float) -> None:
        """``back`` (loaded when the server starts) translates again the unsure texts of each model of its language
        pair (any one model where it records none); ValueError where it serves none."""
        if back.pair is not None:
            mine = [s for s in self.served if s.pair == back.pair]
        else:
            mine = list(self.served) if len(self) == 1 else []
        if not mine:
            raise ValueError(f"--fallback {back.info.get('path')}: it translates {'-'.join(back.pair or ('?', '?'))}, "
                             f"which no --model serves")
        back.name += " (fallback)"
        for s in mine:
            s.fallback, s.min_confidence = back, min_confidence
        self.routes.clear()

    def __iter__(self) -> Any:
        return iter(self.served)

    def __len__(self) -> int:
        return len(self.served)

    def pairs(self) -> str:
        return ", ".join(s.name for s in self.served)

    def direct(self, source: str | None, target: str | None) -> Served:
        """The model itself that translates ``source`` into ``target`` (what only one model can do: attention maps)."""
        return self.route(source, target, pivot=False).first()

    def route(self, source: str | None, target: str | None, pivot: bool = True) -> Route[Served]:
        """The route from ``source`` into ``target`` (either may be None where one model fits the other): the model
        that translates it, with its fallback where it has one, or two such legs through a pivot language (``pivot``,
        where both are named); ServiceError(400) naming the pairs that exist otherwise. The same route each time."""
        src, tgt = (canonical(c) if c else None for c in (source, target))
        if len(self.served) == 1 and self.served[0].pair is None:
            return self._route(self.served[0])
        fits = [s for s in self.served if s.pair and src in (None, s.pair[0]) and tgt in (None, s.pair[1])]
        if len(fits) == 1:
            return self._route(fits[0])
        if not fits and pivot and src and tgt and (src, tgt) in self.pivots:
            return self._route((src, tgt))
        if not fits:
            known = {lang for s in self.served if s.pair for lang in s.pair}
            for code in (src, tgt):
                if code is not None and code not in known:
                    raise ServiceError(400, f"{cut(code)} is not supported (models loaded: {self.pairs()})")
            raise ServiceError(400, f"no model translates {src or 'any language'} into {tgt or 'any language'} "
                                    f"(models loaded: {self.pairs()})")
        raise ServiceError(400, f"several models are loaded ({self.pairs()}): name the source and target languages")

    def _route(self, key: tuple[str, str] | Served) -> Route[Served]:
        """A model's route (its fallback with it), or a pivot's (each leg a model's route), made once."""
        if key not in self.routes:
            def leg(s: Served) -> Route[Served]:
                back = Route((s.fallback,), name=s.fallback.name) if s.fallback is not None else None
                return Route((s,), back, s.min_confidence, name=s.name)

            if isinstance(key, Served):
                self.routes[key] = leg(key)
            else:
                first, second, via = self.pivots[key]
                self.routes[key] = Route((leg(first), leg(second)), via=(via,), name=f"{key[0]}-{via}-{key[1]}")
        return self.routes[key]

    async def translate(self, route: Route[Served], status: int, asked: Request) -> list[list[Translation]]:
        """``asked`` (a front end's request, made under :func:`refused`) translated along ``route``: each leg's model
        held loaded meanwhile (its pool), every leg's and the fallback's refusals found before any work, each leg's
        sentences decoded by its batcher beside every other request's (Served.translate: the route's plan awaited
        here), the counts observed under the route's name. What is refused is a ServiceError: HTML that cannot be
        taken apart a 400, what an engine cannot serve (engine.Unsupported) a 400, any other option ``status``
        (aiayn's API: 422; LibreTranslate's: 400)."""
        async with contextlib.AsyncExitStack() as held:
            for served in route.members(fallbacks=False):   # (a fallback is loaded at start, for good)
                await held.enter_async_context(served.use())
            with refused(status):
                for served, empty in route.checks(asked):
                    prepare(served.translator, empty)
            plan = route.plan(asked)           # (driven here: nothing below calls back up into the server)
            try:
                served, leg = next(plan)
                while True:
                    prepared = served.prepare(status, lambda: leg)  # noqa: B023 - called at once
                    served, leg = plan.send(await served.translate(prepared))
            except StopIteration as finished:
                done: Translated = finished.value
        self.observe(route.name, done)
        return done.translations

    def languages(self) -> list[dict[str, Any]]:
        """Every language of the loaded pairs, LibreTranslate's /languages shape: ``{"code", "name", "targets"}``."""
        codes = sorted({lang for s in self.served if s.pair for lang in s.pair})
        pairs = [s.pair for s in self.served if s.pair] + list(self.pivots)          # (through a pivot too)
        targets = {c: sorted(b for a, b in pairs if a == c) for c in codes}
        return [{"code": c, "name": language_name(c), "targets": targets[c]} for c in codes]

    def reaches(self, source: str, target: str) -> bool:
        """Whether a model, or a chain of two, translates ``source`` into ``target``."""
        return any(s.pair == (source, target) for s in self.served) or (source, target) in self.pivots

    def sources(self) -> list[str]:
        return sorted({s.pair[0] for s in self.served if s.pair})


class Pool:
    """Models loaded on first use and unloaded, least recently used first, so that the weights loaded stay within
    ``budget`` bytes (``aiayn serve --memory-budget``, as LibreTranslate's --load-only and quickmt's LRU of models):
    before a model loads, idle models are unloaded until it fits. A model in use is never unloaded, so the budget is
    exceeded, with a warning, only while the models in use need more (idle ones are unloaded once their requests are
    done), or where one model alone is larger.

    ``start`` loads a model and starts its decoders, ``stop`` does the reverse (serve.py: with its metrics); both run
    in a worker thread, one load at a time, while requests to models already loaded go on."""

    def __init__(self, models: list[Served], budget: int, start: Callable[[Served], None],
                 stop: Callable[[Served], None]) -> None:
        self.models, self.budget, self.start, self.stop = models, budget, start, stop
        self.clock = itertools.count(1)
        self.lock = asyncio.Lock()
        self.tasks: set[asyncio.Task[None]] = set()
        for m in models:
            m.pool = self

    def loaded(self) -> list[Served]:
        return [m for m in self.models if m.batcher is not None]

    async def _unload_idle(self, room: int, keep: Served | None = None) -> int:
        """Unload idle models, least recently used first, until the others loaded leave ``room`` bytes in the
        budget (the lock held); -> the bytes the models loaded hold then (``keep`` not counted)."""
        others = sorted((m for m in self.loaded() if m is not keep), key=lambda m: m.last_used)
        used = sum(m.estimate_bytes() for m in others)
        for m in others:
            if used + room <= self.budget:
                break
            if m.in_use:
                continue
            m.closing = True
            try:
                used -= m.estimate_bytes()
                await asyncio.get_running_loop().run_in_executor(None, self.stop, m)
            finally:
                m.closing = False
        return used

    def trim_later(self) -> None:
        """Once a request is done: if the models loaded hold more than the budget (while the models in use needed
        more), unload idle ones, in the background (each model's bytes as measured once: no walk over its weights
        per request)."""
        if sum(m.estimate_bytes() for m in self.loaded()) > self.budget:
            task = asyncio.get_running_loop().create_task(self._trim())
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def _trim(self) -> None:
        async with self.lock:
            await self._unload_idle(0)

    async def ready(self, model: Served) -> None:
        """Return once ``model`` is loaded and started, unloading idle models first as the budget requires."""
        model.last_used = next(self.clock)
        if model.batcher is not None and not model.closing:
            return
        async with self.lock:
            if model.batcher is not None and not model.closing:
                return
            need = model.estimate_bytes()
            used = await self._unload_idle(need, keep=model)
            if used + need > self.budget:
                log.warning("loading %s (%d MB) holds %d MB of models, over the budget of %d MB: the others loaded "
                            "are in use", model.name, need >> 20, (used + need) >> 20, self.budget >> 20)
            try:
                await asyncio.get_running_loop().run_in_executor(None, self.start, model)
            except Exception as e:  # noqa: BLE001 - any failure to load: the model named, the server goes on
                log.error("model %s could not be loaded: %s", model.name, e)
                model.close()
                raise ServiceError(503, f"model {model.name} could not be loaded: {e}") from None
            model.info.setdefault("bytes", model.memory_bytes())


# --- The server's Prometheus metrics -------------------------------------------------------------------------------

# the confidence histogram's bounds (a text's confidence is in [0, 1])
CONFIDENCE_BOUNDS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


class Metrics:
    """Prometheus metrics of one app (its own registry, so several apps can live in one process): its requests here,
    its decoding in batcher.DecodeMetrics."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()
        self.requests = Counter("aiayn_requests", "HTTP requests", ["path", "status"], registry=self.registry)
        self.latency = Histogram("aiayn_request_seconds", "request latency", ["path"], registry=self.registry,
                                 buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))
        self.in_flight = Gauge("aiayn_requests_in_flight", "translation requests being answered", registry=self.registry)
        self.model_bytes = Gauge("aiayn_model_bytes", "bytes of a served model's weights, as loaded (0: not loaded)",
                                 ["model"], registry=self.registry)
        self.loads = Counter("aiayn_model_loads", "models loaded (at start, or on first use under --memory-budget)",
                             ["model"], registry=self.registry)
        self.unloads = Counter("aiayn_model_unloads", "models unloaded to hold --memory-budget", ["model"],
                               registry=self.registry)
        self.engine = Gauge("aiayn_model_engine", "the engine decoding a served model (--engine; auto: the one it "
                            "picked), 1", ["model", "engine"], registry=self.registry)
        self.decoding = DecodeMetrics(self.registry)
        self.repaired = Counter("aiayn_repair_sentences", "sentences whose translation degenerated (a loop, a copy of "
                                "the source, a length out of line), by kind: flagged, and repaired",
                                ["model", "kind", "outcome"], registry=self.registry)
        self.confidence = Histogram("aiayn_confidence", "the confidence of translated texts (in [0, 1], calibrated: "
                                    "hypotheses.py); a text's is its least sure sentence's", ["model"],
                                    registry=self.registry, buckets=CONFIDENCE_BOUNDS)
        self.fallback = Counter("aiayn_fallback_texts", "texts less sure than --min-confidence, by outcome: sent to "
                                "the --fallback model, and those whose translation it bettered", ["model", "outcome"],
                                registry=self.registry)
        self.spans = Counter("aiayn_protected_spans", "protected spans (placeholders, URLs, tags) of translated "
                             "texts, by outcome: kept, or lost", ["model", "outcome"], registry=self.registry)
        self.documents = Counter("aiayn_documents", "documents translated through /translate_file, by format",
                                 ["format"], registry=self.registry)
        self.document_spans = Counter("aiayn_document_spans", "the protected spans (placeholders, inline tags) of "
                                      "translated documents, by outcome: kept, or lost", ["outcome"],
                                      registry=self.registry)
        self.shared_up = Gauge("aiayn_shared_storage_up", "1 while the shared storage (--shared-storage: Redis) answers "
                               "or none is set; 0 while limits and cache are this replica's own", registry=self.registry)
        self.shared_up.set(1)
        self.shared_errors = Counter("aiayn_shared_storage_errors", "calls to the shared storage that failed (each "
                                     "answered from this replica's own state)", registry=self.registry)
        self.keys_up = Gauge("aiayn_keys_database_up", "1 while the keys database (--api-keys) answers or none is "
                             "set; 0 while the keys seen are served from memory (--keys-grace), then 503",
                             registry=self.registry)
        self.keys_up.set(1)
        self.keys_errors = Counter("aiayn_keys_database_errors", "calls to the keys database that failed",
                                   registry=self.registry)
        self.failures = Counter("aiayn_failures", "requests that failed on an error of the server's own (a 500; "
                                "logged as one line, without the request's text)", registry=self.registry)

    def translated(self, model: str, done: Translated) -> None:
        """One request's counts and its texts' confidences (pipeline.Translated), under its route's name."""
        for kind in pipeline.KINDS:
            for outcome in ("flagged", "repaired"):
                if n := done.counts[f"repair.{kind}.{outcome}"]:
                    self.repaired.labels(model, kind, outcome).inc(n)
        for outcome in ("sent", "kept"):
            if n := done.counts[f"fallback.{outcome}"]:
                self.fallback.labels(model, outcome).inc(n)
        for outcome in ("kept", "lost"):
            if n := done.counts[f"spans.{outcome}"]:
                self.spans.labels(model, outcome).inc(n)
        for ts in done.translations:
            if ts and ts[0].confidence is not None:
                self.confidence.labels(model).observe(ts[0].confidence)

    def documented(self, report: Any) -> None:
        """A translated document's report (documents.common.Report) counted."""
        self.documents.labels(report.format or "unknown").inc()
        self.document_spans.labels("kept").inc(report.kept)
        self.document_spans.labels("lost").inc(report.spans - report.kept)

    def text(self) -> bytes:
        from prometheus_client import generate_latest

        return bytes(generate_latest(self.registry))
