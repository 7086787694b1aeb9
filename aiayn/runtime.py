"""Where computation runs: the CPU's instruction sets, device auto-detection, threads, decoding workers, memory
settings and readings.

Process-wide settings (intra-op threads, the allocator's treatment of freed memory) change only through
:func:`configure`, called once by the command line at start-up, or by a program that uses the library
(``aiayn.configure()``). Constructors (``Trainer``, ``Translator``) never change them. Threads that decode at once
(:func:`map_in_threads`' workers, ``aiayn serve``'s decoding threads) each take their share of those intra-op threads
for themselves, by one policy: :class:`ThreadShare`.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import resource
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:          # (imported where used: the command line on CTranslate2 runs without PyTorch)
    import torch

    from .engines.base import Device


@functools.cache
def cpu_flags() -> frozenset[str]:
    """The instruction-set flags /proc/cpuinfo lists for this CPU (none where there is no such file)."""
    try:
        with open("/proc/cpuinfo") as f:
            return frozenset(next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), ()))
    except OSError:
        return frozenset()


@dataclass(frozen=True)
class DeviceName:
    """A device as named without PyTorch (engines.base.Device): ``type`` cpu, cuda or mps, and a GPU's ``index`` if one was
    named; CTranslate2's devices (ctranslate2.device_of), and those aiayn's worker processes report (processes.py)."""

    type: str
    index: int | None = None

    def __str__(self) -> str:                      # as torch.device's: "cpu", "cuda", "cuda:1"
        return self.type if self.index is None else f"{self.type}:{self.index}"

    @classmethod
    def parse(cls, name: str) -> DeviceName:
        kind, _, index = name.partition(":")
        return cls(kind, int(index) if index else None)


def cores() -> int:
    """The cores this process may use (PyTorch's default number of intra-op threads)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


AUTO_WORKERS = 4    # decode.workers 0 (auto) on a CPU: one worker per core, at most this many


def cpu_workers(workers: int, threads: int = 0) -> int:
    """``decode.workers`` on a CPU: as set, or for 0 (auto) one per core (``threads``: PyTorch's intra-op threads
    where they are known, else this process's cores), at most :data:`AUTO_WORKERS`. Needs no PyTorch."""
    return workers or min(AUTO_WORKERS, threads or cores())


def cpu_only(name: str) -> bool:
    """Whether ``decode.device`` ``name`` resolves to the CPU (as :func:`resolve_device`), told without importing
    PyTorch: ``cpu``, or ``auto`` on a machine with no GPU driver (NVIDIA's or AMD's) that is not a Mac (MPS)."""
    if name == "cpu":
        return True
    gpu = ("/proc/driver/nvidia/version", "/dev/nvidiactl", "/dev/kfd")
    return name == "auto" and sys.platform != "darwin" and not any(os.path.exists(p) for p in gpu)


def resolve_device(name: str = "auto") -> torch.device:
    """``auto``: CUDA if present, else Apple MPS, else CPU. Anything else is passed to ``torch.device``."""
    import torch

    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ValueError(f"device={name!r}: expected auto, cpu, cuda, cuda:N or mps") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={name!r} but CUDA is not available here; use device=cpu or auto")
    return device


def configure(threads: int | None = None) -> int:
    """Tune this process for aiayn, once, at start-up: freed memory kept for reuse (:func:`keep_freed_memory`)
    and ``threads`` intra-op threads (0: every core this process may use; None: PyTorch's default).
    Returns the number of threads."""
    import torch

    keep_freed_memory()
    return set_threads(threads) if threads is not None else torch.get_num_threads()


def set_threads(n: int = 0) -> int:
    """Use ``n`` intra-op threads (0: all cores this process may use). Returns the number set."""
    import torch

    if n <= 0:
        n = cores()
    torch.set_num_threads(n)
    return n


T = TypeVar("T")
R = TypeVar("R")


def resolve_workers(workers: int, device: Device) -> int:
    """How many batches to decode at once (see :func:`map_in_threads`): ``workers`` if set; 0 (auto) is one per
    intra-op thread on a CPU, at most 4, and 1 on GPUs (one stream of kernels keeps a GPU busy)."""
    import torch

    if workers > 0:
        return workers
    return cpu_workers(0, torch.get_num_threads()) if device.type == "cpu" else 1


class ThreadShare:
    """How the intra-op threads are shared out among threads that decode at once, the one policy: each of the
    ``busy`` ones gets an equal share of ``total`` (default: this process's), at least 1, so that a lone one gets
    them all. Decoding a batch is hundreds of small operations per step; on few cores, each of them split across
    all the threads leaves the threads waiting on one another, while separate batches on separate threads keep every
    core busy (PyTorch releases the GIL inside its operations)."""

    def __init__(self, total: int | None = None) -> None:
        import torch

        self.total = total or torch.get_num_threads()
        self._mine = threading.local()

    def of(self, busy: int) -> int:
        """The intra-op threads of each of ``busy`` threads decoding at once."""
        return max(1, self.total // max(1, busy))

    def take(self, busy: int) -> None:
        """The calling thread uses its share while ``busy`` threads decode (set only when it changes)."""
        import torch

        n = self.of(busy)
        if getattr(self._mine, "threads", None) != n:
            torch.set_num_threads(n)
            self._mine.threads = n


def map_in_threads(fn: Callable[[T], R], items: Sequence[T], workers: int) -> list[R]:
    """``[fn(x) for x in items]``, computed by ``workers`` threads at once, in order, each with its
    :class:`ThreadShare`. ``fn`` must not depend on the order in which items run."""
    import torch

    if workers <= 1 or len(items) <= 1:
        return [fn(x) for x in items]
    share, workers = ThreadShare(), min(workers, len(items))
    try:
        with ThreadPoolExecutor(workers, initializer=share.take, initargs=(workers,)) as pool:
            return list(pool.map(fn, items))
    finally:
        torch.set_num_threads(share.total)   # the workers' setting is also the default of threads started later


def keep_freed_memory() -> None:
    """Ask glibc's malloc to keep freed memory instead of returning it to the OS.

    By default every buffer over 32 MB (and the top of the heap) goes back to the kernel when freed
    and is page-faulted back in, zero-filled, at the next step: measured here, that made a 65 MB
    copy 4x slower and a whole small-model training step 20-40% slower. Same effect as setting
    MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_ in the environment. No-op off glibc.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 1 << 30)   # M_MMAP_THRESHOLD: serve allocations up to 1 GiB from the heap
        libc.mallopt(-1, 1 << 31)   # M_TRIM_THRESHOLD: keep up to 2 GiB of free heap
    except (OSError, AttributeError):
        pass


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far, in MiB."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1 << 20) if sys.platform == "darwin" else peak / 1024


@contextlib.contextmanager
def eval_mode(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """Temporarily switch a model to eval mode (no dropout), restoring its mode afterwards. A model whose modules are
    all in eval mode already (a translator's, at every call) is left as it is: switching and restoring the demo model's
    191 modules took 0.98 ms a call, against 0.14 ms to look (benchmarks/results/overhead/overhead-20261127.txt)."""
    if not any(m.training for m in model.modules()):
        yield model
        return
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)
