"""Scores with sacreBLEU: cased BLEU, lowercased BLEU (what most Multi30k/IWSLT papers report), chrF and,
optionally, TER — always against the raw reference text, every line, one or several references.

BLEU's tokenizer follows the target language (:func:`bleu_tokenizer`): ``zh`` for Chinese, ``ja-mecab`` and
``ko-mecab`` for Japanese and Korean (``char`` with a note when their packages are missing), ``char`` for
scripts written without spaces (Thai, Lao, Khmer, Burmese), and ``13a``, the WMT standard, for the rest. The
signature records the choice. :func:`evaluate` is the whole job of ``aiayn evaluate`` and of the demo's
test-set score: translate, time, keep the hypotheses, score.
"""

from __future__ import annotations

import functools
import logging
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from sacrebleu.metrics import BLEU, CHRF, TER

from . import repair


class Translates(Protocol):
    """What evaluate needs: an engine (translate.Translator, ...) or engines in a chain (pipeline.Pivot)."""

    def translate(self, lines: Sequence[str], **overrides: Any) -> list[str]: ...


log = logging.getLogger(__name__)

_BY_LANGUAGE = {"zh": "zh", "ja": "ja-mecab", "ko": "ko-mecab", "th": "char", "lo": "char", "km": "char",
                "my": "char"}
_EXTRA = {"ja-mecab": "sacrebleu[ja]", "ko-mecab": "sacrebleu[ko]"}


@functools.cache
def _available(tokenize: str) -> str | None:
    """None when sacreBLEU can use ``tokenize`` here, else why not."""
    try:
        BLEU(tokenize=tokenize).corpus_score(["a"], [["a"]])
        return None
    except Exception as e:  # noqa: BLE001 - sacreBLEU raises several kinds for a missing tokenizer package
        return f"{type(e).__name__}: {e}"


def bleu_tokenizer(lang: str | None) -> tuple[str, str | None]:
    """sacreBLEU's tokenizer for a target language code (``zh``, ``zh-TW``, ``ja_JP``, ...), and a note when
    the right one is unavailable and a fallback is used."""
    base = (lang or "").replace("_", "-").split("-")[0].lower()
    name = _BY_LANGUAGE.get(base, "13a")
    why = _available(name) if name in _EXTRA else None
    if why is None:
        return name, None
    return "char", (f"BLEU for {lang!r} should use sacreBLEU's {name} tokenizer, which is not installed "
                    f"(pip install '{_EXTRA[name]}'); scoring with 'char' instead")


def score(hypotheses: Sequence[str], references: Sequence[str] | Sequence[Sequence[str]], lang: str | None = None,
          tokenize: str | None = None, ter: bool = False) -> dict[str, Any]:
    """Corpus-level scores of line-aligned hypotheses and references: one reference list, or several (each
    line-aligned). BLEU's tokenizer: ``tokenize`` if given, else chosen from the target language ``lang``."""
    refs: list[list[str]] = ([[str(r) for r in references]] if not references or isinstance(references[0], str)
                             else [[str(x) for x in r] for r in references])
    for r in refs:
        if len(hypotheses) != len(r):
            raise ValueError(f"{len(hypotheses)} hypotheses for {len(r)} references: every line must be scored")
    note = None
    if tokenize is None:
        tokenize, note = bleu_tokenizer(lang)
        if note:
            log.warning("%s", note)
    hyps = list(hypotheses)
    bleu, bleu_lc, chrf = BLEU(tokenize=tokenize), BLEU(tokenize=tokenize, lowercase=True), CHRF()
    b = bleu.corpus_score(hyps, refs)
    out = {
        "bleu": round(b.score, 2),
        "bleu_lc": round(bleu_lc.corpus_score(hyps, refs).score, 2),
        "chrf": round(chrf.corpus_score(hyps, refs).score, 2),
        "signature": str(bleu.get_signature()),
        "signature_lc": str(bleu_lc.get_signature()),
        "signature_chrf": str(chrf.get_signature()),
        "tokenize": tokenize,
        "bleu_detail": str(b),
        "sentences": len(hyps),
        "references": len(refs),
    }
    if note:
        out["note"] = note
    if ter:
        t = TER()
        out.update(ter=round(t.corpus_score(hyps, refs).score, 2), signature_ter=str(t.get_signature()))
    return out


def evaluate(translator: Translates, src_lines: Sequence[str], ref_lines: Sequence[str] | Sequence[Sequence[str]],
             hypotheses: Path | None = None, lang: str | None = None, tokenize: str | None = None, ter: bool = False,
             **overrides: Any) -> dict[str, Any]:
    """Translate ``src_lines`` (any decoding ``overrides``), write the translations to ``hypotheses`` if given,
    and score them against ``ref_lines`` (one list, or several) in target language ``lang``. Returns BLEU,
    lowercased BLEU, chrF (and TER), the signature, the sentence count, the translation time and speed, the sentences
    flagged and repaired by kind (repair.py), and where the hypotheses are."""
    multi = ref_lines and not isinstance(ref_lines[0], str)
    for r in (ref_lines if multi else [ref_lines]):
        if len(src_lines) != len(r):
            raise ValueError(f"{len(src_lines)} source lines but {len(r)} reference lines")
    before = Counter(repair.COUNTS)
    t0 = time.perf_counter()
    hyps = translator.translate(src_lines, **overrides)
    seconds = time.perf_counter() - t0
    repaired = {kind: {outcome: repair.COUNTS[(kind, outcome)] - before[(kind, outcome)]
                       for outcome in ("flagged", "repaired")} for kind in repair.KINDS}
    if hypotheses is not None:
        hypotheses.parent.mkdir(parents=True, exist_ok=True)
        hypotheses.write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
    s = score(hyps, ref_lines, lang, tokenize, ter)
    keep = ("bleu", "bleu_lc", "chrf", "ter", "signature", "tokenize", "references", "note")
    return {**{k: s[k] for k in keep if k in s},
            "sentences": len(hyps), "seconds": round(seconds, 2),
            "sentences_per_s": round(len(hyps) / max(seconds, 1e-9), 1), "repair": repaired,
            "hypotheses": None if hypotheses is None else str(hypotheses)}
