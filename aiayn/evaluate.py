"""Scores with sacreBLEU: cased BLEU (13a tokenization, the WMT standard), lowercased BLEU (what most
Multi30k/IWSLT papers report) and chrF — always against the raw reference text, every line."""

from __future__ import annotations

from typing import Any

from sacrebleu.metrics import BLEU, CHRF


def score(hypotheses: list[str], references: list[str]) -> dict[str, Any]:
    """Corpus-level scores of line-aligned hypotheses and references."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} references: every line must be scored")
    refs = [references]
    bleu, bleu_lc, chrf = BLEU(), BLEU(lowercase=True), CHRF()
    b = bleu.corpus_score(hypotheses, refs)
    return {
        "bleu": round(b.score, 2),
        "bleu_lc": round(bleu_lc.corpus_score(hypotheses, refs).score, 2),
        "chrf": round(chrf.corpus_score(hypotheses, refs).score, 2),
        "signature": str(bleu.get_signature()),
        "signature_lc": str(bleu_lc.get_signature()),
        "signature_chrf": str(chrf.get_signature()),
        "bleu_detail": str(b),
        "sentences": len(hypotheses),
    }
