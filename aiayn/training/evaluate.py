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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sacrebleu.metrics import BLEU, CHRF, TER

from ..translation import pipeline

# What evaluate translates with: a translator.Translator (along its route: an engine, a pivot, a fallback), or an engine
Translates = Any


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
    flagged and repaired by kind (pipeline.py), and where the hypotheses are."""
    multi = ref_lines and not isinstance(ref_lines[0], str)
    for r in (ref_lines if multi else [ref_lines]):
        if len(src_lines) != len(r):
            raise ValueError(f"{len(src_lines)} source lines but {len(r)} reference lines")
    from ..translation.pipeline import Request, one_line_each
    from ..translation.route import Route

    route = translator.route if hasattr(translator, "route") else Route((translator,))
    t0 = time.perf_counter()
    done = route.follow(Request.of(src_lines, **{**overrides, "nbest": 1}))
    seconds = time.perf_counter() - t0
    out = [ts[0] for ts in done.translations]
    hyps = one_line_each([[t] for t in out])
    repaired = {kind: {outcome: done.counts[f"repair.{kind}.{outcome}"] for outcome in ("flagged", "repaired")}
                for kind in pipeline.KINDS}
    if hypotheses is not None:
        hypotheses.parent.mkdir(parents=True, exist_ok=True)
        hypotheses.write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
    s = score(hyps, ref_lines, lang, tokenize, ter)
    keep = ("bleu", "bleu_lc", "chrf", "ter", "signature", "tokenize", "references", "note")
    first = [str(x) for x in (ref_lines[0] if multi else ref_lines)]
    return {**{k: s[k] for k in keep if k in s}, "confidence": _confidence(route.last(), out, hyps, first),
            "sentences": len(hyps), "seconds": round(seconds, 2),
            "sentences_per_s": round(len(hyps) / max(seconds, 1e-9), 1), "repair": repaired,
            "hypotheses": None if hypotheses is None else str(hypotheses)}


def _confidence(engine: Any, out: Sequence[Any], hyps: Sequence[str], refs: Sequence[str]) -> dict[str, Any] | None:
    """How the translations' confidences agree with their sentence chrF against the first references (None where
    an engine gave none)."""
    if not out or any(t.confidence is None for t in out):
        return None
    cal = engine.calibration
    chrf = CHRF()
    scores = [chrf.sentence_score(h, [r]).score for h, r in zip(hyps, refs, strict=True)]
    return {**agreement([t.confidence for t in out], scores, cal.threshold), "threshold": cal.threshold,
            "calibration": cal.source}


def calibrate(engine: Any, sources: Sequence[str], references: Sequence[str], threshold: float,
              held_out: tuple[Sequence[str], Sequence[str]] | None = None, **overrides: Any) -> tuple[Any, dict[str, Any]]:
    """``aiayn calibrate``'s work: each source line translated as one sentence by ``engine`` (its run's settings,
    ``overrides``), its features (hypotheses.features) against its sentence chrF, and a logistic regression fitted to
    find those at or above ``threshold`` (hypotheses.fit). Returns the calibration and how well it does: Pearson's r of
    its confidence with sentence chrF, and the ROC AUC of its confidence for finding the sentences below the
    threshold, on the lines it was fitted on and on ``held_out`` (sources, references) where given."""
    x, chrf = sentence_features(engine, sources, references, **overrides)
    _fittable(chrf, threshold)
    held = sentence_features(engine, *held_out, **overrides) if held_out is not None else None
    return _fitted(engine, x, chrf, threshold, held)


def _one_sided(chrf: Sequence[float], threshold: float) -> str:
    """'none' or 'every one' where all sentences lie on one side of ``threshold`` (nothing to fit), else ''."""
    good = sum(c >= threshold for c in chrf)
    return "none" if good == 0 else "every one" if good == len(chrf) else ""


def _fittable(chrf: Sequence[float], threshold: float) -> None:
    """ValueError where every sentence lies on one side of ``threshold``: there is nothing to fit."""
    if good := _one_sided(chrf, threshold):
        raise ValueError(f"{good} of the {len(chrf)} sentences scores chrF {threshold:g} or more: a calibration "
                         "cannot tell good from bad there; choose another --threshold")


def _fitted(engine: Any, x: list[list[float]], chrf: list[float], threshold: float,
            held: tuple[list[list[float]], list[float]] | None = None) -> tuple[Any, dict[str, Any]]:
    """The calibration fitted on features ``x`` against sentence chrF ``chrf`` (hypotheses.fit), and its report on
    them and on ``held``'s held-out features and chrF."""
    from ..decoding.hypotheses import fit

    cal = fit(x, [c >= threshold for c in chrf], threshold)
    report = {"fitted": {**agreement(cal(x), chrf, threshold), "sentences": len(x)}, "engine": engine.engine,
              "threshold": threshold}
    if held is not None:
        report["held_out"] = {**agreement(cal(held[0]), held[1], threshold), "sentences": len(held[0])}
    cal.fitted = report
    return cal, report


def calibrate_directions(engine: Any, multi: Any, valid: tuple[Sequence[str], Sequence[str]], threshold: float,
                         test: tuple[Sequence[str], Sequence[str]] | None = None) -> tuple[Any, dict[str, Any]]:
    """:func:`calibrate` for a multilingual run (``multi``: config.Multilingual; ``valid``/``test``: the splits' untagged
    lines, every direction's one after another, where ``multi.ranges`` says): one calibration per direction, fitted
    on that direction's validation lines and held out on its test lines, inside one fitted on all of them together
    (for a direction whose sentences all lie on one side of the threshold). Returns it and the report of each."""
    from ..data.multilingual import for_direction

    rows: list[list[float]] = []
    chrfs: list[float] = []
    per = {}
    for name, (first, end) in multi.ranges.get("valid", {}).items():
        view = for_direction(engine, *name.split("-", 1))
        x, chrf = sentence_features(view, valid[0][first:end], valid[1][first:end])
        rows, chrfs = rows + x, chrfs + chrf
        if _one_sided(chrf, threshold):
            continue                # nothing to tell apart: the pooled calibration serves this direction
        a, b = multi.ranges.get("test", {}).get(name, (0, 0))
        held = sentence_features(view, test[0][a:b], test[1][a:b]) if test is not None and b > a else None
        per[name] = _fitted(view, x, chrf, threshold, held)[0]
    _fittable(chrfs, threshold)
    cal, report = _fitted(engine, rows, chrfs, threshold)
    cal.directions, report["directions"] = per, {name: c.fitted for name, c in per.items()}
    return cal, report


def sentence_features(engine: Any, sources: Sequence[str], references: Sequence[str],
                      **overrides: Any) -> tuple[list[list[float]], list[float]]:
    """Each line's features (hypotheses.features, each line one sentence) and the sentence chrF of its best
    translation against its reference."""
    from ..translation.pipeline import feature_rows

    if len(sources) != len(references):
        raise ValueError(f"{len(sources)} source lines but {len(references)} reference lines")
    decode = engine.settings(**{**overrides, "nbest": 1})
    ids = engine.encode(sources)
    hyps = [hs[0] for hs in engine.hypotheses(ids, decode, None)]
    texts = engine.detokenize([h.tokens for h in hyps])
    chrf = CHRF()
    return (feature_rows(engine, list(zip(sources, ids, strict=True)), hyps, texts),
            [chrf.sentence_score(t, [r]).score for t, r in zip(texts, references, strict=True)])


def agreement(confidence: Sequence[float], chrf: Sequence[float], threshold: float) -> dict[str, Any]:
    """How well confidences tell good translations from bad: Pearson's r with sentence chrF, the ROC AUC of
    1 - confidence for finding the sentences under ``threshold``, and their share."""
    import math

    from ..decoding.hypotheses import pearson, roc_auc

    def kept(x: float) -> float | None:                 # (NaN, where one class is missing: None, for JSON)
        return None if math.isnan(x) else round(x, 4)

    low = [c < threshold for c in chrf]
    return {"pearson": kept(pearson(confidence, chrf)), "roc_auc": kept(roc_auc([-c for c in confidence], low)),
            "below_threshold": round(sum(low) / max(1, len(low)), 4)}
