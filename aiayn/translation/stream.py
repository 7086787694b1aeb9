"""A stream of input lines translated in chunks, in order, while the next chunk is read: ``aiayn translate`` on stdin or a
file (a chunk is what has arrived, so that an interactive user gets each line at once; an engine that takes calls side
by side gets the next while it decodes one).
"""

from __future__ import annotations

import collections
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")


def stream(lines: Iterable[str], translate: Callable[[list[str]], list[T]], max_lines: int = 2000,
           read_ahead: int = 8000, in_flight: int = 1) -> Iterator[T]:
    """``translate`` applied to ``lines`` chunk by chunk, yielding one result per line, in order, as soon as its
    chunk is done. A chunk is every line that has arrived by the time it is taken (at most ``max_lines``, in blocks
    of 64), so a line typed into a pipe is translated at once, and a file goes in full chunks, the same in every run
    (batches are made within a chunk, and int8's results depend on the batch). A thread reads at most ``read_ahead``
    lines ahead: memory stays bounded on inputs of any length. ``in_flight``: chunks translated at once, for an
    engine whose calls run side by side (worker processes: the next chunk's batches keep them busy while the last of
    this one's finish); the chunks are the same, and a chunk's results go out before waiting for input."""
    chunks = _Chunks(lines, max_lines, read_ahead)
    running: collections.deque[Future[list[T]]] = collections.deque()
    pool = ThreadPoolExecutor(in_flight, thread_name_prefix="aiayn-chunk") if in_flight > 1 else None
    try:
        while True:
            if running and chunks.would_wait():               # the next chunk would wait for input
                while running:
                    yield from running.popleft().result()
            if (chunk := chunks.next()) is None:
                break
            if pool is None:
                yield from translate(chunk)
                continue
            if len(running) >= in_flight:
                yield from running.popleft().result()
            running.append(pool.submit(translate, chunk))
        while running:
            yield from running.popleft().result()
    finally:
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)


class _Chunks:
    """:func:`stream`'s chunks of ``lines``, read ahead by a thread."""

    def __init__(self, lines: Iterable[str], max_lines: int, read_ahead: int) -> None:
        self.lines, self.max_lines = lines, max_lines
        self.pending: queue.Queue[tuple[tuple[str, ...], bool] | BaseException | None] = \
            queue.Queue(maxsize=max(1, read_ahead // 64))
        threading.Thread(target=self._read, name="aiayn-read", daemon=True).start()

    def _read(self) -> None:
        try:
            block: list[str] = []
            for line in self.lines:
                block.append(line)
                # hand over small blocks whenever the reader would wait, big ones otherwise (fewer queue operations),
                # saying whether another follows without waiting for input
                if len(block) >= 64 or not _more_ready(self.lines):
                    self.pending.put((tuple(block), len(block) >= 64 and _more_ready(self.lines)))
                    block = []
            if block:
                self.pending.put((tuple(block), True))
            self.pending.put(None)
        except BaseException as e:  # noqa: BLE001 - handed to the consumer, which raises it
            self.pending.put(e)

    def would_wait(self) -> bool:
        """Whether taking the next chunk would wait for input."""
        return self.pending.empty()

    def next(self) -> list[str] | None:
        """The next chunk, None at the end."""
        item = self.pending.get()                             # wait for at least one line
        out: list[str] = []
        while item is not None:
            if isinstance(item, BaseException):
                raise item
            block, more = item
            out.extend(block)
            if len(out) >= self.max_lines:
                break
            try:                                              # the next block, if it comes without waiting for input
                item = self.pending.get() if more else self.pending.get_nowait()
            except queue.Empty:
                break
        if item is None:
            self.pending.put(None)                            # (the end, for the next call)
        return out or None


def _more_ready(lines: Iterable[str]) -> bool:
    """Whether more input can be read without waiting (files: always; a pipe or terminal: only if data waits)."""
    more = getattr(lines, "more_ready", None)
    return bool(more()) if callable(more) else True
