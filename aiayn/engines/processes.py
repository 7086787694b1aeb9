"""Decoding in worker processes (on a CPU, ``aiayn serve``'s default and ``aiayn translate``'s): each worker process
holds its own copy of the model and decodes whole batches in its main thread with its share of the cores, so that
decoding never waits on another thread for Python's GIL, which the threads of one process share. The server hands a
free worker the requests waiting (batcher.WholeBatcher), as it does with CTranslate2's translators; the command line
hands each of its calls' batches to the next free worker. docs/deploy.md and docs/performance.md measure both ways.

Each batch is decoded by TorchEngine.decode_lines in the worker, so its output is ``aiayn translate --no-processes``'.
A worker is reached through its own pipe: a batch out, its hypotheses back. A batch whose requests have all timed out
or gone away is stopped: the server sets the worker's stop event, which its search checks before each decoding step,
so the worker is free again within a step.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import queue
import signal
import sys
import threading
from collections.abc import Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import DecodeConfig
from ..decoding.hypotheses import Hypothesis, Stop, Stopped
from ..rundir import RunDir
from ..runtime import DeviceName, cores
from .base import About, Capabilities, Engine, EngineBase, decode_batches, with_fixed

if TYPE_CHECKING:          # (this process needs no PyTorch: the workers have the model)
    from ..decoding.constraints import Constraints

log = logging.getLogger(__name__)
WORK = ("decode_lines", "alignments", "attention")   # what the server asks of a worker: its TorchEngine's methods


def _serve(conn: Connection, path: str, settings: dict[str, Any], threads: int, stop: Any) -> None:
    """A worker process: the model, then work until the pipe closes (a method of :data:`WORK`, its arguments, the
    intra-op threads the server gives it); each answer is ("ok", value), ("stopped", None) when ``stop`` (an Event) was
    set during a batch, or ("error", message). Ctrl-C is left to the process that started it, which stops or closes
    it; once that one is gone, it ends."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        _work(conn, path, settings, threads, stop)
    except (BrokenPipeError, ConnectionResetError):
        pass
    sys.stderr.flush()
    os._exit(0)         # nothing left to save: skip the interpreter's teardown of PyTorch (~0.2 s a process)


def _work(conn: Connection, path: str, settings: dict[str, Any], threads: int, stop: Any) -> None:
    import torch

    from ..runtime import configure
    from .torch import TorchEngine

    configure(threads)
    try:
        translator = TorchEngine.load(path, **{**settings, "workers": 1})
    except Exception as e:  # noqa: BLE001 - the process that started it says what went wrong
        conn.send(("error", f"{type(e).__name__}: {e}"))
        return
    conn.send(("ok", {"pid": os.getpid(), "weight_bytes": translator.memory_bytes(), "info": translator.model_info(),
                      "device": str(translator.device), "precision": translator.precision}))
    while True:
        try:
            method, args, kwargs, threads = conn.recv()
        except EOFError:
            return
        torch.set_num_threads(threads)
        try:
            assert method in WORK, method
            kw = {"stop": stop.is_set} if method == "decode_lines" else {}
            conn.send(("ok", getattr(translator, method)(*args, **kwargs, **kw)))
        except Stopped:
            conn.send(("stopped", None))
        except Exception as e:  # noqa: BLE001 - the server answers this batch's requests with the error
            conn.send(("error", f"{type(e).__name__}: {e}"))


def _context() -> Any:
    """Where workers come from: a fork server (one process per server or command, started with PyTorch and aiayn's
    engine imported, that forks each worker: a worker skips the ~1.5 s of importing PyTorch, and nothing it inherits
    ran a thread), else (Windows) a fresh interpreter per worker. Never a fork of the caller: a fork of a process that
    runs threads, the event loop's or PyTorch's, may inherit locks held."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "aiayn.engines.torch", "aiayn.engines.processes", "aiayn.engines.forkserver"])
    return ctx


SMALL = 4        # lines of a batch small enough to get every core when no other batch is being decoded
POLL_S = 0.05    # how often the server asks whether a batch being decoded is still wanted


class Workers:
    """``n`` worker processes (:func:`_serve`), each with aiayn's engine loaded from ``path`` with ``settings``: started
    at once (from a fork server: :func:`_context`), called one batch at a time (:meth:`call`, the next free one),
    started again when one dies, and ended."""

    def __init__(self, path: str, settings: dict[str, Any], n: int, restart: bool = True) -> None:
        """``restart``: a worker that dies is started again (a server); else the others stop too, and every call
        fails with what happened (a command that ends on the error)."""
        self.path, self.settings, self.n, self.cores, self.restart = path, settings, n, cores(), restart
        self.busy, self.lock, self.closed = 0, threading.Lock(), False
        self.broken = ""                                           # why every call fails (restart False)
        self.ctx = _context()
        self.free: queue.Queue[int] = queue.Queue()
        self.stops = [self.ctx.Event() for _ in range(n)]          # set: the worker's batch is no longer wanted
        self.processes: list[tuple[Any, Connection]] = []
        # started from a thread: a fork server answers once it has imported PyTorch (seconds), and this process has
        # its own loading to do meanwhile; ready, close and kill wait for it (call follows ready)
        self.start_error: BaseException | None = None
        self.starter = threading.Thread(target=self._start, name="aiayn-start-workers", daemon=True)
        self.starter.start()

    def _start(self) -> None:
        try:
            for i in range(self.n):
                self.processes.append(self._spawn(i))
        except BaseException as e:  # noqa: BLE001 - raised again by ready, in the caller's thread
            self.start_error = e

    def ready(self) -> dict[str, Any]:
        """Once every worker has loaded its model: what the first says of it (its size, configuration, device and
        precision). A worker that could not load it is a ValueError naming why, and every worker is ended."""
        self.starter.join()
        if self.start_error is not None:
            self.kill()                                 # those started before it
            raise self.start_error
        hellos = []
        for p, conn in self.processes:
            try:
                hellos.append(self._answer(conn, p))
            except (RuntimeError, EOFError) as e:
                self.kill()
                p.join(timeout=5)
                raise ValueError(f"{self.path}: a decoding worker process could not load the model: "
                                 f"{str(e) or f'process {p.pid} ended (exit code {p.exitcode})'}") from None
        for i in range(self.n):
            self.free.put(i)
        return dict(hellos[0])

    def _spawn(self, i: int) -> tuple[Any, Connection]:
        mine, theirs = self.ctx.Pipe()
        p = self.ctx.Process(target=_serve, args=(theirs, self.path, self.settings, max(1, self.cores // self.n),
                                                  self.stops[i]), daemon=True, name="aiayn-decode")
        p.start()
        theirs.close()
        return p, mine

    def call(self, method: str, args: tuple[Any, ...], lines: int, kwargs: dict[str, Any] | None = None,
             stop: Stop | None = None, whole: bool = False) -> Any:
        """``method`` of the next free worker's TorchEngine (one of :data:`WORK`), called with ``args``; ``whole``:
        the caller's only batch (``split``), which gets every core when no other is being decoded."""
        i = self.free.get()
        if self.broken:
            self.free.put(i)
            raise ChildProcessError(self.broken)
        with self.lock:
            self.busy += 1
            # a small batch decoded alone gets every core (a lone request's latency), any other its share: a batch
            # keeps its threads to its end, and one that outlasts a second batch would overbook the cores
            alone = self.busy == 1 and (lines <= SMALL or whole)
            threads = self.cores if alone else max(1, self.cores // self.n)
        p, conn = self.processes[i]
        try:
            conn.send((method, args, kwargs or {}, threads))
            while stop is not None and not conn.poll(POLL_S):
                if stop():
                    self.stops[i].set()
                    break
            return self._answer(conn, p)
        except Stopped:
            if self.broken:                       # stopped because another worker died
                raise ChildProcessError(self.broken) from None
            raise
        except (EOFError, OSError):
            if self.closed:                       # closed while it decoded: its caller is going too
                raise Stopped from None
            p.join(timeout=5)
            died = f"decoding worker process {p.pid} died (exit code {p.exitcode})"
            if not self.restart:
                self.broken = died
                for event in self.stops:
                    event.set()
                raise ChildProcessError(died) from None
            self.processes[i] = self._spawn(i)
            self._answer(self.processes[i][1], self.processes[i][0])
            raise ChildProcessError(f"{died}; a new one was started") from None
        finally:
            self.stops[i].clear()                 # before the worker is given its next batch
            with self.lock:
                self.busy -= 1
            self.free.put(i)

    @staticmethod
    def _answer(conn: Connection, process: Any) -> Any:
        """A worker's answer; EOFError if it died, Stopped if its batch was stopped."""
        status, value = conn.recv()
        if status == "stopped":
            raise Stopped
        if status != "ok":
            raise RuntimeError(f"decoding worker process {process.pid}: {value}")
        return value

    def close(self) -> None:
        """The workers end: a batch they are decoding stops at its next step (the caller has gone: Ctrl-C, an
        error), then their pipes close."""
        self.closed = True
        self.starter.join()
        for event in self.stops:
            event.set()
        for _, conn in self.processes:
            conn.close()                                # the worker's recv ends: it exits
        for p, _ in self.processes:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()

    def kill(self) -> None:
        self.starter.join()
        for p, _ in self.processes:
            p.kill()


class ProcessEngine(EngineBase):
    """aiayn's engine with its model in worker processes (engine.Engine, :class:`Workers`): each decodes one batch at
    a time, and computes the word alignments and attention maps asked of it; this process keeps only the tokenizer and
    the settings (no model, and no PyTorch unless it had them already). A worker that dies fails the batch it had (a
    server's requests get a 500 naming it) and is started again. Its capabilities are aiayn's engine's, but that it
    decodes whole batches.

    Two callers: ``aiayn serve`` (its batcher hands each batch to the next free worker) and ``aiayn translate``
    (``split``: :meth:`load`), whose calls each hold many batches, cut as aiayn's engine cuts them
    (engine.decode_batches) and shared out among the workers, so that the output is that of one process decoding
    them (``--no-processes``, threads) while no two batches share an interpreter."""

    engine = "torch"
    capabilities = Capabilities(constraints=True, alignments=True, attention=True, stepwise=False, processes=True)

    def __init__(self, path: str | Path, like: Engine | None, workers: int, settings: dict[str, Any],
                 split: bool = False) -> None:
        """``like``: the engine loaded from ``path`` in this process (or a closed ProcessEngine: a server
        started again), whose tokenizer and settings are kept; None: read from the run dir, and the device,
        precision and model's size from the first worker (:meth:`load`). ``split``: see the class."""
        settings = {k: v for k, v in settings.items() if v is not None}
        self.workers, self.path, self.loaded_with, self.split = workers, str(path), settings, split
        self.calls_at_once = 2 if split and workers > 1 else 1    # a call's last batches leave workers free
        # first: they load their models while this process goes on
        self.pool = Workers(self.path, settings, workers, restart=not split)
        try:
            if like is None:
                run, _ = RunDir.locate(path)
                config = run.config()
                self.vocab, self.decode, self.cfg = run.vocab(), config.decode.replace(**settings), config.model
                super().__init__(About.of_run(run))
            else:
                self.vocab, self.decode, self.cfg = like.vocab, like.decode, like.cfg
                super().__init__(About(like.languages, like.norms, like.calibration, like.multilingual))
        except BaseException:
            self.pool.kill()
            raise
        hello = self.pool.ready()
        self.weight_bytes, self.info = hello["weight_bytes"], hello["info"]
        self.device = like.device if like is not None else DeviceName.parse(hello["device"])
        self.precision = like.precision if like is not None else hello["precision"]

    @classmethod
    def load(cls, path: str | Path, processes: int, **settings: Any) -> ProcessEngine:
        """aiayn's engine on run dir (or checkpoint) ``path`` in ``processes`` workers, for a caller that makes one
        call at a time (``aiayn translate``): as torch.TorchEngine.load with the same settings, its output that of
        one TorchEngine decoding with as many threads (``workers``)."""
        return cls(path, None, processes, settings, split=True)

    def settings(self, decode: DecodeConfig | None = None, **overrides: object) -> DecodeConfig:
        return with_fixed(self.decode, decode, overrides)

    def constraints(self, lines: Sequence[str], phrases: Sequence[Sequence[str] | None] | None,
                    decode: DecodeConfig) -> list[Constraints | None] | None:
        from .torch import line_constraints  # (PyTorch: the constraints' tensors)

        return line_constraints(self.vocab, self.cfg, lines, phrases, decode)

    def alignments(self, lines: Sequence[str], outputs: Sequence[Sequence[int]], source: bool = False,
                   ids: Sequence[Sequence[int]] | None = None, attention: Sequence[Any] | None = None) -> list[str]:
        """As TorchEngine.alignments, in a worker process (``attention``: none of its hypotheses has any)."""
        return list(self.pool.call("alignments", (list(lines), [list(o) for o in outputs], source,
                                                  None if ids is None else [list(x) for x in ids]), len(lines)))

    def attention(self, line: str, **overrides: Any) -> dict[str, Any]:
        """As TorchEngine.attention, in a worker process."""
        return dict(self.pool.call("attention", (line,), 1, kwargs=overrides))

    def memory_bytes(self) -> int:
        return int(self.weight_bytes)

    def model_info(self) -> tuple[dict[str, Any], int]:
        return self.info

    def decode_lines(self, ids: list[list[int]], decode: DecodeConfig, cons: list[Constraints | None] | None,
                     stop: Stop | None = None, first: int | None = None) -> list[list[Hypothesis]]:
        """As TorchEngine.decode_lines, in the next free worker process (``split``: each batch in the next free one);
        ``stop`` is asked every POLL_S while it decodes, and once it is true the worker stops between two steps
        (engine.Stopped is raised here)."""
        def one(batch: list[int], whole: bool = False) -> list[list[Hypothesis]]:
            return list(self.pool.call("decode_lines", ([list(ids[i]) for i in batch], decode,
                                                        None if cons is None else [cons[i] for i in batch]),
                                       len(batch), {"first": first}, stop=stop, whole=whole))

        batches = decode_batches(ids, self.cfg.max_positions, decode) \
            if self.split and self.workers > 1 and not decode.sampling else []
        if len(batches) <= 1:       # (sampling: its random draws stay in one process, in order)
            return one(list(range(len(ids))), whole=self.split)
        out: list[list[Hypothesis]] = [[] for _ in ids]
        with ThreadPoolExecutor(self.workers, thread_name_prefix="aiayn-batches") as pool:
            futures = [pool.submit(one, batch) for batch in batches]
            wait(futures, return_when=FIRST_EXCEPTION)          # a failed batch fails the call at once
            try:
                for batch, future in zip(batches, futures, strict=True):
                    for i, h in zip(batch, future.result(), strict=True):
                        out[i] = h
            except BaseException:
                for future in futures:                          # (the batches not yet begun)
                    future.cancel()
                raise
        return out

    def close(self) -> None:
        self.pool.close()


def in_processes(path: str | Path, like: Engine | None, n: int, settings: dict[str, Any],
                 split: bool = False) -> ProcessEngine | None:
    """aiayn's engine in ``n`` worker processes (``split``: for the command line, :meth:`ProcessEngine.load`), or
    None, with a warning naming ``path``, where they cannot be started (a sandbox without shared-memory semaphores,
    say): the caller decodes in threads."""
    try:
        return ProcessEngine.load(path, n, **settings) if split else ProcessEngine(path, like, n, settings)
    except OSError as e:
        log.warning("%s decodes in threads: worker processes could not be started (%s)", path, e)
        return None
