"""Which engine decodes: ``--engine torch`` (aiayn's own, torch.TorchEngine), ``ctranslate2`` (the run's model on
CTranslate2, ctranslate2.CTranslate2Engine: converted on first use by export.py and cached in the run dir) or
``auto``, the command line's default (:class:`AutoEngine`: CTranslate2 where it is installed, aiayn's own engine for
what CTranslate2 cannot do). :func:`load` makes any of them from a run dir. Like engines/ctranslate2.py this module
needs no PyTorch until aiayn's own engine is asked for, or a conversion is to be made.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..checkpoint import MODEL, parameter_count
from ..decoding.shortlist import Shortlist
from ..rundir import RunDir
from ..runtime import cpu_only, cpu_workers
from .base import About, Engine
from .ctranslate2 import AutoEngine, CTranslate2Engine, ctranslate2_refuses, device_of, precision_of

__all__ = ["ENGINES", "AutoEngine", "ctranslate2", "decode_processes", "load"]
log = logging.getLogger(__name__)


def weights_hash(ckpt: Path) -> str:
    """sha256 of a checkpoint's weights file (what the conversion cache is keyed by)."""
    h = hashlib.sha256()
    with open(ckpt / MODEL, "rb") as inp:
        while block := inp.read(1 << 20):
            h.update(block)
    return h.hexdigest()


CONVERSION = 2    # what a conversion holds (2: the attention its word alignments read); a new one converts again


def conversion_of(path: str | Path, quantization: str | None) -> tuple[RunDir, Path, Path]:
    """(the run, its checkpoint, where the CTranslate2 conversion of its weights in ``quantization`` is cached): a
    directory named by the weights' hash, so that new weights are converted again."""
    run, ckpt = RunDir.locate(path)
    key = f"{ckpt.name}-{quantization or 'float32'}"
    digest = hashlib.sha256(f"{weights_hash(ckpt)}-{CONVERSION}".encode()).hexdigest()[:16]
    return run, ckpt, run.engine_cache("ctranslate2") / f"{key}-{digest}"


def converted(path: str | Path, quantization: str | None) -> Path:
    """The cached CTranslate2 conversion of run (or checkpoint) ``path``, made now (conversion.convert) if missing or
    stale."""
    run, ckpt, out = conversion_of(path, quantization)
    if (out / "model.bin").is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    # Replicas (or worker processes) started at once on a fresh model: one converts, the others wait for its lock
    # (an advisory lock on the cache's folder, released by the system if its holder dies) and then find it made.
    folder = os.open(out.parent, os.O_RDONLY)
    try:
        fcntl.flock(folder, fcntl.LOCK_EX)
        if not (out / "model.bin").is_file():
            from .conversion import convert

            convert(run, ckpt, out, quantization)
    finally:
        os.close(folder)                                    # (the lock goes with it)
    return out


def ctranslate2(path: str | Path, **settings: Any) -> CTranslate2Engine:
    """CTranslate2 on run dir (or checkpoint) ``path``, with the run's decoding settings and any overrides (as
    TorchEngine.load): its conversion, made on first use and cached (:func:`converted`)."""
    run, ckpt = RunDir.locate(path)
    cfg = run.config()
    decode = cfg.decode.replace(**settings)
    ctranslate2_refuses(decode)
    Shortlist.for_run(run.path, decode.shortlist)           # checked (its vocabulary map is in the conversion)
    out = converted(path, "int8" if precision_of(decode.precision, device_of(decode.device)) == "int8" else None)
    me = CTranslate2Engine(out, run.vocab(), cfg.model, decode, about=About.of_run(run))
    if not me.parameters:                                   # a conversion made before they were recorded
        me.parameters = parameter_count(ckpt)
    return me


def decode_processes(path: str | Path, settings: dict[str, Any]) -> int:
    """How many worker processes aiayn's engine decodes in for ``aiayn translate`` (processes.ProcessEngine),
    told before PyTorch is imported: ``decode.workers`` (0: one per core, at most 4) on a CPU, or 0 (decode in this
    process) where that is 1, on a GPU, or when sampling (whose random draws stay in one process)."""
    decode = RunDir.locate(path)[0].config().decode.replace(**settings)
    workers = cpu_workers(decode.workers)
    return workers if workers > 1 and cpu_only(decode.device) and not decode.sampling else 0


def _auto(path: str | Path, processes: bool, serving: int, **settings: Any) -> Engine:
    """CTranslate2 where it is installed and can decode with ``settings`` (an AutoEngine, aiayn's own engine beside
    it for what it cannot do), else aiayn's own (logged)."""
    import importlib.util

    if importlib.util.find_spec("ctranslate2") is None:
        log.info("--engine auto: aiayn's own engine (CTranslate2 is not installed: pip install 'aiayn[export]')")
        return _torch(path, processes, serving, **settings)
    try:
        fast = ctranslate2(path, **settings)
    except ValueError as e:                   # settings it cannot decode with
        log.info("--engine auto: aiayn's own engine (CTranslate2 cannot: %s)", e)
        return _torch(path, processes, serving, **settings)
    log.info("--engine auto: CTranslate2 (aiayn's own engine for what it cannot do, if asked)")
    given = {k: v for k, v in settings.items() if v is not None}
    return AutoEngine(fast, lambda: _torch(path, processes, serving, **given))


def _torch(path: str | Path, processes: bool, serving: int, **settings: Any) -> Engine:
    """aiayn's own engine: in worker processes where ``serving`` or ``processes`` (:func:`decode_processes`) say so
    and they can be started, else in this process."""
    if workers := serving or (decode_processes(path, settings) if processes else 0):
        from .processes import in_processes

        if (in_workers := in_processes(path, None, workers, settings, split=not serving)) is not None:
            return in_workers
    from .torch import TorchEngine

    return TorchEngine.load(path, **settings)


def _ctranslate2(path: str | Path, processes: bool, serving: int, **settings: Any) -> Engine:
    return ctranslate2(path, **settings)


# --engine NAME -> its loader (path, processes, serving, **settings): a new engine is its module and its line here
ENGINES: dict[str, Callable[..., Engine]] = {"auto": _auto, "torch": _torch, "ctranslate2": _ctranslate2}


def load(path: str | Path, engine: str = "torch", processes: bool = False, serving: int = 0,
         **settings: Any) -> Engine:
    """The engine ``engine`` names (:data:`ENGINES`) for run dir ``path``: a TorchEngine (torch), a
    CTranslate2Engine (ctranslate2), or with auto an AutoEngine where CTranslate2 is installed and a TorchEngine where
    it is not (logged). ``processes``: aiayn's engine, where it decodes, decodes in worker processes where
    :func:`decode_processes` says so (a ProcessEngine: its model is the workers', loaded while this process goes on
    without PyTorch). ``serving``: a server's: aiayn's engine, where it decodes, in that many worker processes, each
    started again if it dies (0: as ``processes`` says). Where processes cannot be started, it decodes in this process
    (logged). An Argos package (engines/argos.py: a .argosmodel or its folder) is a CTranslate2Engine whatever
    ``engine`` says."""
    if engine not in ENGINES:
        raise ValueError(f"--engine {engine!r}: expected one of {', '.join(ENGINES)}")
    from . import argos

    if argos.is_package(path):
        found = argos.packages(path)
        if len(found) != 1:
            raise ValueError(f"{path} holds {len(found)} Argos packages: name one (aiayn serve takes them all)")
        return argos.load(found[0], **settings)
    return ENGINES[engine](path, processes, serving, **settings)
