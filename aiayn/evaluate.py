"""Scores with sacreBLEU: cased BLEU (13a tokenization, the WMT standard), lowercased BLEU (what most
Multi30k/IWSLT papers report) and chrF — always against the raw reference text, every line.

:func:`evaluate` is the whole job of ``aiayn evaluate`` and of the demo's test-set score: translate,
time, keep the hypotheses, score.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sacrebleu.metrics import BLEU, CHRF

if TYPE_CHECKING:
    from .translate import Translator


def score(hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, Any]:
    """Corpus-level scores of line-aligned hypotheses and references."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} references: every line must be scored")
    hyps, refs = list(hypotheses), [list(references)]
    bleu, bleu_lc, chrf = BLEU(), BLEU(lowercase=True), CHRF()
    b = bleu.corpus_score(hyps, refs)
    return {
        "bleu": round(b.score, 2),
        "bleu_lc": round(bleu_lc.corpus_score(hyps, refs).score, 2),
        "chrf": round(chrf.corpus_score(hyps, refs).score, 2),
        "signature": str(bleu.get_signature()),
        "signature_lc": str(bleu_lc.get_signature()),
        "signature_chrf": str(chrf.get_signature()),
        "bleu_detail": str(b),
        "sentences": len(hyps),
    }


def evaluate(translator: Translator, src_lines: Sequence[str], ref_lines: Sequence[str],
             hypotheses: Path | None = None, **overrides: Any) -> dict[str, Any]:
    """Translate ``src_lines`` (any decoding ``overrides``), write the translations to ``hypotheses`` if given,
    and score them against ``ref_lines``. Returns BLEU, lowercased BLEU, chrF, the signature, the sentence
    count, the translation time and speed, and where the hypotheses are."""
    if len(src_lines) != len(ref_lines):
        raise ValueError(f"{len(src_lines)} source lines but {len(ref_lines)} reference lines")
    t0 = time.perf_counter()
    hyps = translator.translate(src_lines, **overrides)
    seconds = time.perf_counter() - t0
    if hypotheses is not None:
        hypotheses.parent.mkdir(parents=True, exist_ok=True)
        hypotheses.write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
    s = score(hyps, ref_lines)
    return {"bleu": s["bleu"], "bleu_lc": s["bleu_lc"], "chrf": s["chrf"], "signature": s["signature"],
            "sentences": len(hyps), "seconds": round(seconds, 2),
            "sentences_per_s": round(len(hyps) / max(seconds, 1e-9), 1),
            "hypotheses": None if hypotheses is None else str(hypotheses)}
