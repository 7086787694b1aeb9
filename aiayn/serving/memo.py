"""Translations the server remembers: a sentence asked again (a page reloaded, a post translated by many readers, a
document sent twice) is answered from memory instead of decoded again.

A least-recently-used table per served model, keyed by the decoding settings and the sentence's source ids (what
decides its hypotheses: the same key gives the same output, with the table or without it; int8, whose activation
scale is per call, is the one exception within rounding). Sentences with constraints are always decoded. Its size is
``aiayn serve --cache N`` sentences per model (0: none); ``/metrics`` counts lookups and hits
(``aiayn_cache_lookups_total``, ``aiayn_cache_hits_total``).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..config import DecodeConfig
    from ..constraints import Constraints
    from ..engines.base import Hypothesis

Decoder = Callable[[list[list[int]], "DecodeConfig", "list[Constraints | None] | None"],
                   Awaitable[list[list["Hypothesis"]]]]


class Memo:
    """The table (the module's docstring); :meth:`wrap` puts it in front of a decoder (a batcher's ``translate``)."""

    def __init__(self, size: int, metrics: Any) -> None:
        self.size, self.metrics = size, metrics
        self.items: OrderedDict[tuple[Any, tuple[int, ...]], list[Hypothesis]] = OrderedDict()
        self.lock = threading.Lock()

    def _get(self, key: tuple[Any, tuple[int, ...]]) -> list[Hypothesis] | None:
        with self.lock:
            found = self.items.get(key)
            if found is not None:
                self.items.move_to_end(key)
            return found

    def _put(self, key: tuple[Any, tuple[int, ...]], hyps: list[Hypothesis]) -> None:
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
            if todo:
                for i, hyps in zip(todo, await decoder([ids[i] for i in todo], settings, None), strict=True):
                    found[i] = hyps
                    self._put(keys[i], list(hyps))
            return [list(hyps or []) for hyps in found]

        return decode
