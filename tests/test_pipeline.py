"""The request pipeline behind every front end: one engine interface (engine.py) and what the server's batchers do with
a request's lines. Fast: the tiny fixture model, no server process."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from aiayn import Translator
from aiayn.batcher import Batcher, DecodeMetrics, Limits, WholeBatcher
from aiayn.config import DecodeConfig
from aiayn.engine import Unsupported, require
from aiayn.pipeline import Request, prepare, translate_async

LEGACY = Path(__file__).parent / "fixtures" / "legacy-f06e6aa" / "run"
LINES = ["Ein Mann fährt mit dem Fahrrad.", "   ", "Zwei Hunde spielen im Schnee."]


@pytest.fixture(scope="module")
def legacy() -> Translator:
    return Translator.load(LEGACY, device="cpu", beam=2, workers=1)


@pytest.mark.parametrize("kind", [Batcher, WholeBatcher])
def test_a_served_line_is_encoded_once_and_answered_as_the_cli(kind: Any, legacy: Translator,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from prometheus_client import CollectorRegistry

    want = legacy.translate_hypotheses(LINES, nbest=2)
    encoded: list[list[str]] = []
    original = legacy.vocab.src.encode

    def counted(lines: list[str]) -> Any:
        encoded.append(list(lines))
        return original(lines)

    monkeypatch.setattr(legacy.vocab.src, "encode", counted)

    async def run() -> Any:
        limits = Limits(workers=1, max_batch_tokens=6000, max_wait_ms=0, max_queue_lines=100, timeout_s=30)
        b = kind(legacy, limits, DecodeMetrics(CollectorRegistry()).model("m"))
        try:
            prepared = prepare(legacy, Request(LINES, {"nbest": 2}, alignments=True))
            return await b.translate(prepared.ids, prepared.decode), await translate_async(legacy, prepared,
                                                                                          b.translate)
        finally:
            b.close()

    got, translations = asyncio.run(run())
    assert encoded == [LINES], encoded             # once, the request's lines together (the alignments reuse the ids)
    assert [[h.tokens for h in hs] for hs in got] == [[h.tokens for h in hs] for hs in want]
    texts = [legacy.detokenize([h.tokens for h in hs]) for hs in want]
    assert [[t.text for t in ts] for ts in translations] == texts
    assert all(t.alignment is not None for ts in translations for t in ts)


def test_what_an_engine_cannot_do_is_refused_by_name(legacy: Translator) -> None:
    from aiayn.ct2 import CTranslate2Translator

    for feature in ("constraints", "alignments", "html", "attention"):
        require(legacy, feature)                                  # aiayn's own engine does all of it
        with pytest.raises(Unsupported, match="need aiayn's own engine"):
            require(CTranslate2Translator.__new__(CTranslate2Translator), feature)


def test_one_rule_for_nbest_and_the_beam() -> None:
    from aiayn.config import beam_for_nbest

    assert beam_for_nbest({"nbest": 3}, 2) == {"nbest": 3, "beam": 3}          # a beam not given grows to nbest
    assert beam_for_nbest({"nbest": 3}, 5) == {"nbest": 3}                     # the engine's beam is enough
    assert beam_for_nbest({"nbest": 1}, 1) == {"nbest": 1}
    assert beam_for_nbest({"nbest": 3, "beam": 2}, 4) == {"nbest": 3, "beam": 2}   # one given is kept: then refused
    with pytest.raises(ValueError, match="nbest=3 cannot exceed beam=2"):
        DecodeConfig(**beam_for_nbest({"nbest": 3, "beam": 2}, 4))
