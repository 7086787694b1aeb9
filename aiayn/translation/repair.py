"""Output that never degenerates: each sentence's translation checked, and a flagged one decoded again.

Small and undertrained models fail in three recurring ways, and each has a setting that prevents it:

- **a repetition loop** ("salad salad salad …"): a run of 1-4 target tokens repeated :data:`LOOP` times in a row,
  where the source has no such run. Decoded again never repeating a trigram (``no_repeat_ngram=3``).
- **an untranslated copy**: the translation is its source, word for word (3 words or more), from a model whose
  training data rarely copies (``Norms.copies`` under 1%; a model trained to copy is never flagged). Decoded again
  with twice the beam, and no repeated trigram.
- **a length out of line with the training data**: target/source tokens outside the ratios of its training pairs
  (``Norms.ratio``: their 0.1st and 99.9th percentiles, with a token's slack; sources of ``Norms.MIN_TOKENS`` tokens
  or more). Too short (half translated): decoded again with ``min_len`` at the shortest ratio; too long: with the
  length rule at the longest.

The translation kept is the one with the lesser failure (none; a length; a copy; a loop), and of two alike the better-
scoring (length-normalised log-probability); a sentence is counted repaired when its failure got lesser. Decoding is
deterministic, so the same input always gives the same output. How many sentences were flagged and repaired, by kind,
is counted in the request's counts (``repair.<kind>.flagged``, ``.repaired``: pipeline.Translated): ``aiayn evaluate
--json`` reports them, and ``/metrics`` as ``aiayn_repair_sentences_total``. Sentences are always checked and counted;
they are decoded again with the request's ``repair`` (``--repair``, ``"repair": true`` in a request), which is off by
default: a repair changes what a model says, so that aiayn's engine and CTranslate2 (whose no-repeat rule is its own)
no longer give the same text, and on the demo model it moved BLEU by 0.01-0.04
(benchmarks/results/repair/repair-20261127-0319.json). pipeline.py drives it, for every engine.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Generator, Sequence
from typing import TYPE_CHECKING

from ..config import DecodeConfig, Norms

if TYPE_CHECKING:
    from ..decoding.constraints import Constraints
    from ..decoding.hypotheses import Hypothesis

LOOP = 4                  # times a run of tokens is repeated in a row for a loop
COPIES = 0.01             # training data copying more often than this: copies are not flagged
KINDS = ("loop", "copy", "short", "long")

Call = tuple[list[list[int]], DecodeConfig, "list[Constraints | None] | None"]


def _loops(tokens: Sequence[int]) -> bool:
    """Whether some run of 1-4 tokens is repeated :data:`LOOP` times in a row: for some n, (LOOP - 1) x n tokens in a
    row each equal to the one n before it (one pass per n)."""
    for n in range(1, 5):
        same = 0
        for i in range(n, len(tokens)):
            same = same + 1 if tokens[i] == tokens[i - n] else 0
            if same >= (LOOP - 1) * n:
                return True
    return False


def flag(source: str, src_ids: Sequence[int], output: str, tokens: Sequence[int], norms: Norms) -> str | None:
    """The kind of failure a translation shows (one of :data:`KINDS`), or None."""
    if not tokens:
        return "short" if len(src_ids) >= Norms.MIN_TOKENS and norms.ratio else None
    if _loops(tokens) and not _loops(src_ids):
        return "loop"
    words = source.split()
    if norms.copies < COPIES and len(words) >= 3 and output.split() == words:
        return "copy"
    if norms.ratio and len(src_ids) >= Norms.MIN_TOKENS:           # (a token's slack either way)
        if len(tokens) + 1 < norms.ratio[0] * len(src_ids):
            return "short"
        if len(tokens) - 1 > norms.ratio[1] * len(src_ids):
            return "long"
    return None


SEVERITY = {None: 0, "short": 1, "long": 1, "copy": 2, "loop": 3}


def settings(kind: str, decode: DecodeConfig, n_src: int, norms: Norms) -> DecodeConfig:
    """The settings that prevent ``kind`` for a source of ``n_src`` tokens."""
    if kind == "loop":
        return decode.replace(no_repeat_ngram=3)
    if kind == "copy":
        return decode.replace(beam=max(4, 2 * decode.beam), no_repeat_ngram=3)
    assert norms.ratio is not None
    if kind == "short":
        return decode.replace(min_len=max(decode.min_len, math.ceil(norms.ratio[0] * n_src)))
    return decode.replace(max_len_a=norms.ratio[1], max_len_b=1)


def repaired(texts: Sequence[str], ids: Sequence[Sequence[int]], cons: Sequence[Constraints | None] | None,
             hyps: list[list[Hypothesis]], decode: DecodeConfig, norms: Norms,
             detokenize: Callable[[list[list[int]]], list[str]], repair: bool, counts: Counter[str]) -> Generator[
                 Call, list[list[Hypothesis]], list[list[Hypothesis]]]:
    """The sentences' hypotheses with those flagged decoded again (the module's docstring): a plan, as engine.plan, that
    yields the calls to make (ids, settings, constraints) and is sent their hypotheses. ``detokenize``: ids -> text;
    ``repair``: the request's option (off: the flagged are only counted, in ``counts``)."""
    if decode.sampling or not hyps:
        return hyps
    outputs = detokenize([hs[0].tokens if hs else [] for hs in hyps])
    flags = [flag(t, x, o, hs[0].tokens if hs else [], norms) if x else None
             for t, x, o, hs in zip(texts, ids, outputs, hyps, strict=True)]
    groups: dict[DecodeConfig, list[int]] = {}
    for i, kind in enumerate(flags):
        if kind is not None:
            counts[f"repair.{kind}.flagged"] += 1
            if repair:
                groups.setdefault(settings(kind, decode, len(ids[i]), norms), []).append(i)
    for again, rows in groups.items():
        new = yield [list(ids[i]) for i in rows], again, None if cons is None else [cons[i] for i in rows]
        redone = detokenize([hs[0].tokens if hs else [] for hs in new])
        for i, hs, text in zip(rows, new, redone, strict=True):
            kind, was = flag(texts[i], ids[i], text, hs[0].tokens if hs else [], norms), SEVERITY[flags[i]]
            if hs and (SEVERITY[kind] < was or SEVERITY[kind] == was and hs[0].score > hyps[i][0].score):
                hyps[i] = hs
                counts[f"repair.{flags[i]}.repaired"] += SEVERITY[kind] < was
    return hyps
