"""Output that never degenerates (pipeline.py, driven by pipeline.py): what is flagged, a model made to loop repaired in
the Python API and in a server (its counts in /metrics), a copy model never flagged for copying, the no-repeat
setting in every search, and the same output every time."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from aiayn import Translator
from aiayn.config import Norms
from aiayn.training.evaluate import evaluate
from aiayn.translation.pipeline import Request, _loops, flag

from ..helpers import Server, copy_lines

NORMS = Norms(40, (0.5, 2.0), 0.0)


def test_what_is_flagged() -> None:
    ids = list(range(10, 20))
    assert flag("a b c d e f", ids, "x y z", [5, 6, 7, 8, 9, 10, 11], NORMS) is None
    assert flag("a b c d e f", ids, "", [5, 6, 5, 6, 5, 6, 5, 6, 9], NORMS) == "loop"
    assert flag("ha ha ha ha", [3, 3, 3, 3, 3, 3], "", [3, 3, 3, 3, 3, 3], NORMS) is None   # the source loops too
    assert flag("Ein Hund läuft schnell", ids, "Ein Hund läuft schnell", ids, NORMS) == "copy"
    assert flag("Ein Hund läuft schnell", ids, "Ein Hund läuft schnell", ids, Norms(40, (0.5, 2.0), 0.9)) is None
    assert flag("a b c d e f", ids, "x", [5, 6, 7], NORMS) == "short"                  # 3 + 1 < 0.5 x 10
    assert flag("a b c d e f", ids, "x", [5, 6, 7, 8], NORMS) is None                  # (a token's slack)
    assert flag("a b c d e f", ids, "x", list(range(22)), NORMS) == "long"             # 22 - 1 > 2 x 10
    assert flag("a b c d e f", ids, "x", list(range(21)), NORMS) is None
    assert flag("a b c d e f", ids, "", [], NORMS) == "short"                                 # nothing at all
    assert flag("a b", [1, 2], "x", list(range(9)), NORMS) is None                         # too short a source to tell
    assert _loops([1, 2, 3, 4] * 4) and not _loops([1, 2, 3, 4] * 3 + [1, 2, 3])


@pytest.fixture(scope="module")
def looping(copy_model: Path) -> Iterator[Translator]:
    """The copy model with its output pulled towards one letter: it writes that letter over and over."""
    t = Translator.load(copy_model, "torch", device="cpu", beam=4)
    letter = t.engine.vocab.tgt.encode(["a"])[0][-1]
    plain = t.engine.model.logits

    def pulled(hidden: torch.Tensor) -> torch.Tensor:
        out = plain(hidden)
        out[..., letter] += 10.0
        return out

    # the pull replaces a method, which the traced step (model.DecoderStep: the output layer itself) does not call
    traced, t.engine.model.traced = t.engine.model.traced, None
    t.engine.model.logits = pulled  # type: ignore[method-assign]
    yield t
    t.engine.model.logits, t.engine.model.traced = plain, traced  # type: ignore[method-assign]


def test_a_model_made_to_loop_has_its_looping_lines_repaired(looping: Translator) -> None:
    lines = copy_lines(40, seed=3)
    ids = looping.engine.encode(lines)
    before = looping.translate(lines, repair=False)
    loops = [i for i, out in enumerate(before) if _loops(looping.engine.encode([out])[0]) and not _loops(ids[i])]
    assert len(loops) >= 10, before                                  # (the perturbation does loop)
    after = looping.translate(lines, repair=True)
    assert after == looping.translate(lines, repair=True)            # the same input, the same output
    assert not [i for i, out in enumerate(after) if _loops(looping.engine.encode([out])[0]) and not _loops(ids[i])]
    flagged = [flag(line, x, out, looping.engine.encode([out])[0], looping.engine.norms)
               for line, x, out in zip(lines, ids, before, strict=True)]
    assert [a for a, f in zip(after, flagged, strict=True) if f is None] == \
        [b for b, f in zip(before, flagged, strict=True) if f is None]       # only the flagged lines change
    counts = looping.request(Request.of(lines, repair=True)).counts           # what happened comes back with it
    assert counts["repair.loop.flagged"] >= len(loops) and counts["repair.loop.repaired"] >= len(loops)
    # evaluate --json reports them (flagged are counted with repair off too, the default)
    assert looping.translate(lines) == before
    r = evaluate(looping, lines, lines)
    assert r["repair"]["loop"]["flagged"] >= len(loops) and r["repair"]["copy"]["flagged"] == 0


def test_a_copy_model_copies_unflagged_and_no_repeat_holds_in_every_search(copy_model: Path) -> None:
    t = Translator.load(copy_model, "torch", device="cpu", beam=4)
    assert t.engine.norms.copies == 1.0 and t.engine.norms.ratio == (1.0, 1.0)
    lines = ["a b c a b c a b c d", "e e e e f", "a b c d e f g h i j"]
    assert t.translate(lines, repair=True) == lines    # copies ("e e e", short of one, decoded again at its length)
    assert t.request(Request.of(lines, repair=True)).counts["repair.copy.flagged"] == 0   # copying is its job
    for beam in (1, 4):
        for out in t.translate(lines, beam=beam, no_repeat_ngram=2, repair=False):
            words = out.split()
            pairs = list(zip(words, words[1:], strict=False))
            assert len(pairs) == len(set(pairs)), out                # no bigram twice


def test_the_servers_answers_are_repaired_and_counted(server: Server, copy_model: Path) -> None:
    """A request asking for min_len past what the copy model's data shows: too long, decoded again with the length
    rule (its answer equals the Python API's), and counted in /metrics."""
    t = Translator.load(copy_model, "torch", device="cpu")
    lines = copy_lines(6, seed=5)
    ask: dict[str, Any] = {"min_len": 30, "repair": True}
    want = t.translate(lines, **ask)
    assert want != t.translate(lines, **{**ask, "repair": False})
    status, _, body = server.post("/translate", {"text": lines, **ask})
    assert status == 200 and body["translations"] == want, body
    assert server.metric('aiayn_repair_sentences_total{kind="long",outcome="flagged"}') >= 1
