"""The translations a server remembers (serving/batcher.py): a sentence asked again is answered from memory, with the
same output as decoded, its hits counted in /metrics; the table keeps at most its size; --cache 0 remembers none."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aiayn import Translator
from aiayn.config import DecodeConfig
from aiayn.decoding.hypotheses import Hypothesis
from aiayn.serving.batcher import Memo

from ..helpers import Server, copy_lines


class Counted:
    def __init__(self) -> None:
        self.n = 0

    def inc(self, k: int = 1) -> None:
        self.n += k


def test_the_table_answers_what_it_holds_and_forgets_the_least_recently_used() -> None:
    calls: list[list[list[int]]] = []

    async def decoder(ids: list[list[int]], decode: Any, cons: Any) -> list[list[Hypothesis]]:
        calls.append(ids)
        return [[Hypothesis(x, -1.0, -1.0, attention=[[1.0]] * len(x))] for x in ids]

    metrics = type("M", (), {"cache_lookups": Counted(), "cache_hits": Counted()})()
    memo = Memo(2, metrics)
    wrapped = memo.wrap(decoder)

    def decode(ids: list[list[int]], settings: DecodeConfig, cons: Any) -> list[list[int]]:
        return [hs[0].tokens for hs in asyncio.run(wrapped(ids, settings, cons))]

    d, other = DecodeConfig(), DecodeConfig(beam=2)
    assert decode([[1], [2]], d, None) == [[1], [2]] and calls == [[[1], [2]]]
    assert decode([[2], [1]], d, None) == [[2], [1]] and len(calls) == 1                  # both remembered
    assert decode([[1]], other, None) == [[1]] and calls[-1] == [[1]]                      # other settings
    assert decode([[2]], d, None) == [[2]] and calls[-1] == [[2]]                          # [2] was forgotten
    assert decode([[3]], d, [object()]) and calls[-1] == [[3]]                             # constraints: decoded
    assert (metrics.cache_lookups.n, metrics.cache_hits.n) == (6, 2)
    # a hypothesis's attention is given to the request that decoded it, not kept (kilobytes a line)
    assert asyncio.run(wrapped([[4]], d, None))[0][0].attention == [[1.0]]
    assert asyncio.run(wrapped([[4]], d, None))[0][0].attention is None and calls[-1] == [[4]]
    assert Memo(0, metrics).wrap(decoder) is decoder                                      # --cache 0: none


@pytest.fixture(scope="module")
def server(copy_model: Path) -> Iterator[Server]:
    s = Server("--no-processes", model=copy_model)
    yield s
    assert s.stop() == 0


def test_repeated_input_is_answered_from_memory_with_the_same_output(server: Server, copy_model: Path) -> None:
    lines = copy_lines(20, seed=21)
    want = Translator.load(copy_model, "torch", device="cpu").translate(lines)
    hits = server.metric("aiayn_cache_hits_total")
    for _ in range(3):
        status, _, body = server.post("/translate", {"text": lines})
        assert status == 200 and body["translations"] == want, body
    assert server.metric("aiayn_cache_hits_total") - hits == 2 * len(lines)        # the second and third time
    assert server.metric("aiayn_cache_lookups_total") >= 3 * len(lines)
