"""The walkthrough (docs/walkthrough/): both editions run from start to end in their fast mode, say the same
thing section by section with the same code, and their assertions fail when the code they check is broken."""

from __future__ import annotations

import io
import os
import re
import runpy
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest
import torch

import aiayn.attention

HERE = Path(__file__).parents[2] / "docs" / "walkthrough"
EDITIONS = [HERE / "walkthrough.py", HERE / "walkthrough.zh.py"]
FIGURES = {"masks", "batch-masks", "heads", "positional-encoding", "learning-rate", "label-smoothing", "copy-loss",
           "attention"}


def _cells(path: Path) -> list[tuple[str, str]]:
    """(kind, text) per jupytext percent cell."""
    cells = re.split(r"(?m)^# %%", path.read_text(encoding="utf-8"))[1:]
    return [("markdown" if c.startswith(" [markdown]") else "code", c) for c in cells]


def _code_only(source: str) -> list[str]:
    """The code's tokens without comments and string literals (those are the edition's language)."""
    skip = {tokenize.COMMENT, tokenize.STRING, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT}
    skip |= {getattr(tokenize, n) for n in ("FSTRING_START", "FSTRING_MIDDLE", "FSTRING_END") if hasattr(tokenize, n)}
    return [t.string for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type not in skip]


@pytest.mark.ci          # (make test leaves it to CI, which also runs both editions in full: make walkthrough)
@pytest.mark.parametrize("edition", EDITIONS, ids=lambda p: p.name)
def test_the_walkthrough_runs_to_the_end_and_draws_its_figures(edition: Path, tmp_path: Path) -> None:
    env = {**os.environ, "AIAYN_WALKTHROUGH_FAST": "1", "AIAYN_WALKTHROUGH_FIGURES": str(tmp_path),
           "MPLBACKEND": "Agg"}
    run = subprocess.run([sys.executable, str(edition)], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=850)  # a hang guard, not a bound on speed
    assert run.returncode == 0, run.stderr[-3000:]
    assert {p.stem for p in tmp_path.glob("*.png")} == FIGURES


def test_both_editions_have_the_same_sections_and_the_same_code() -> None:
    en, zh = (_cells(p) for p in EDITIONS)
    assert [kind for kind, _ in en] == [kind for kind, _ in zh]
    for (kind, a), (_, b) in zip(en, zh, strict=True):
        if kind == "markdown":       # the same section numbers (§3.2.1 ...) and formulas' count, in order
            assert re.findall(r"§[\d.]+\d", a) == re.findall(r"§[\d.]+\d", b), (a[:80], b[:80])
            assert a.count("$$") == b.count("$$") and (a.count("$") == b.count("$")), (a[:80], b[:80])
        else:
            assert _code_only(a) == _code_only(b), a[:200]
    assert re.search(r"[\u4e00-\u9fff]", zh[0][1]), "the Chinese edition's text is Chinese"


def test_a_broken_mask_fails_the_walkthrough(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The walkthrough's assertions check the library: with the seeds' masked_fill(1e-9) bug put into aiayn's
    Eq. (1), the walkthrough stops at its padding assertion."""
    real = aiayn.attention.attention

    def leaky(q, k, v, mask=None, causal=False, p_drop=0.0, training=False):  # type: ignore[no-untyped-def]
        if mask is None or causal:
            return real(q, k, v, mask, causal, p_drop, training)
        scores = (q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5).masked_fill(~mask, 1e-9)
        probs = torch.softmax(scores, -1)
        return probs @ v, probs

    monkeypatch.setattr(aiayn.attention, "attention", leaky)
    monkeypatch.setenv("AIAYN_WALKTHROUGH_FAST", "1")
    monkeypatch.setenv("AIAYN_WALKTHROUGH_FIGURES", str(tmp_path))
    with pytest.raises(AssertionError, match="padding keys get probability exactly 0"):
        runpy.run_path(str(EDITIONS[0]), run_name="__main__")


def test_an_off_by_one_causal_mask_fails_the_walkthrough(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The causal assertion checks aiayn's mask against positions, not against aiayn's own causal_mask: a mask that
    lets each position see the next one stops the walkthrough there, before any training."""
    monkeypatch.setattr(aiayn.attention, "causal_mask", lambda T, S, device: torch.ones(T, S, dtype=torch.bool,
                                                                                         device=device).tril(S - T + 1))
    monkeypatch.setenv("AIAYN_WALKTHROUGH_FAST", "1")
    monkeypatch.setenv("AIAYN_WALKTHROUGH_FIGURES", str(tmp_path))
    with pytest.raises(AssertionError, match="no position attends to a later one"):
        runpy.run_path(str(EDITIONS[0]), run_name="__main__")
