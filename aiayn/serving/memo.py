"""Translations the server remembers: a sentence asked again (a page reloaded, a post translated by many readers, a
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

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..decoding.hypotheses import Hypothesis

if TYPE_CHECKING:
    from ..config import DecodeConfig
    from ..decoding.constraints import Constraints
    from .shared import Local

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
