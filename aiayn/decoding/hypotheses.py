"""What a search gives for each line, how it is stopped, and how sure its translation is: the types every engine and
the searches share (search.py, engines/), in a module that needs no PyTorch (numpy only), so that an engine without it
(CTranslate2, aiayn's worker processes) shares them without importing the searches.

**Confidence (:class:`Calibration`).** How sure a translation is: a confidence in [0, 1] for every sentence,
calibrated on the run's own validation split.

Not in the paper. A sentence's confidence is the probability, by a logistic regression over what the search already
knows of it (:func:`features`), that its translation scores at least :data:`THRESHOLD` sentence chrF against a human
reference. The features cost nothing beyond decoding: they are read off the best hypothesis and the runner-up that
beam search kept beside it (both engines), the source, and the run's length norms (config.Norms):

- the mean log-probability of its tokens (EOS included), and the margin of its score over the runner-up's;
- the agreement of the two (token F1: a search torn between different translations is less sure of either);
- its length against the source's, and how far that ratio lies outside the norms of the run's training data;
- an untranslated copy or a loop (pipeline.flag), and the share of source tokens unknown to the vocabulary;
- the source's length.

Per-token minima and entropies would need the whole distribution at each step (CTranslate2 returns it only for
greedy search) or a second, forced pass (20-28 % of beam search's time, measured: above the 5 % this may cost).

``aiayn calibrate --model RUN`` fits the regression (:func:`fit`: Newton's method on standardized features, numpy
only: a handful of features and a thousand sentences need no scikit-learn) on the validation split and stores it in
the run directory as ``calibration.json`` (a multilingual run's holds one more per direction, fitted on that
direction's validation lines: :meth:`Calibration.for_direction`); an engine loaded from a run without one uses the
calibration shipped in the package (bundled/calibration.json, fitted on the ``make demo`` model), and says so in
``/metrics``-free terms: :attr:`Calibration.source`. A text of several sentences is as sure as its least sure
sentence (:func:`of_text`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from ..config import Norms


class Stopped(Exception):
    """A search given ``stop`` found it true between two steps (``aiayn serve``: every request of the batch timed out
    or went away), and stopped without results."""


Stop = Callable[[], bool]


@dataclass
class Hypothesis:
    """One translation of a line, as every engine gives it."""

    tokens: list[int]      # without BOS and EOS
    score: float           # log-probability / length penalty (what beam search ranks by)
    logprob: float         # sum of token log-probabilities, EOS included
    # the runner-up's (score, tokens), where the search kept one beside it (beam search, both engines): how torn
    # the search was (:func:`features`)
    runner_up: tuple[float, list[int]] | None = None
    # its encoder-decoder attention where the engine returned it while decoding (CTranslate2's return_attention, the
    # layer and heads its word alignments read): a row per token of ``tokens``, a column per source piece and EOS;
    # its word alignment is read from it without decoding the line again (engine.alignments); its first row None
    # where the search returns that row wrong (CTranslate2's beam search), filled in when first asked. Not compared.
    attention: Any = field(default=None, compare=False, repr=False)


def max_length(n_src_tokens: int, a: float, b: int, max_positions: int) -> int:
    """The longest output (tokens before EOS) allowed for a source sentence of ``n_src_tokens`` tokens (EOS not
    counted): floor(a * n + b), at least 1, and within the model's positions. The length rule of every engine
    aiayn drives (search.py, CTranslate2 through engines/ctranslate2.py, transformers through export.py)."""
    return max(1, min(max_positions - 1, math.floor(a * n_src_tokens + b)))


# --- Confidence: how sure a translation is -------------------------------------------------------------------------


# sentence chrF at or above which a translation is acceptable: on Multi30k's validation captions, 50 chrF is about
# where a caption's meaning stops coming through (a wrong subject or verb, or half of it missing) in the sentences
# read for the note of issue 68; a run may be calibrated at another (aiayn calibrate --threshold)
THRESHOLD = 50.0
FILE = "calibration.json"
BUNDLED = Path(__file__).parents[1] / "bundled" / FILE
NAMES = ("mean_logprob", "margin", "agreement", "log_ratio", "off_norms", "copy", "loop", "unknown", "log_src_len")


def features(src_ids: Sequence[int], hyp: Hypothesis, norms: Norms, flagged: str | None, unk_id: int) -> list[float]:
    """The features (:data:`NAMES`) of one sentence's best hypothesis ``hyp`` for its source ids ``src_ids``;
    ``flagged``: pipeline.flag's verdict on it. A feature the engine did not give (no runner-up: greedy search) is NaN,
    and the calibration puts its mean in its place."""
    n_src, n_out = len(src_ids), len(hyp.tokens)
    second = hyp.runner_up
    margin = agreement = math.nan
    if second is not None:
        margin = hyp.score - second[0]
        agreement = _f1(hyp.tokens, second[1])
    log_ratio = math.log((n_out + 1) / (n_src + 1))
    off = 0.0
    if norms.ratio and n_src:
        lo, hi = norms.ratio
        r = (n_out + 1) / (n_src + 1)
        off = max(0.0, math.log(max(lo, 1e-3) / r), math.log(r / max(hi, 1e-3)))
    unknown = sum(1 for t in src_ids if t == unk_id) / max(1, n_src)
    return [hyp.logprob / (n_out + 1), margin, agreement, log_ratio, off, float(flagged == "copy"),
            float(flagged == "loop"), unknown, math.log1p(n_src)]


def _f1(a: Sequence[int], b: Sequence[int]) -> float:
    """Token F1 of two token sequences as bags."""
    if not a and not b:
        return 1.0
    from collections import Counter

    common = sum((Counter(a) & Counter(b)).values())
    return 2.0 * common / (len(a) + len(b))


@dataclass
class Calibration:
    """A fitted logistic regression from :func:`features` to P(sentence chrF >= ``threshold``)."""

    weights: list[float]
    bias: float
    mean: list[float]
    std: list[float]
    threshold: float = THRESHOLD
    names: list[str] = field(default_factory=lambda: list(NAMES))
    fitted: dict[str, Any] = field(default_factory=dict)     # what it was fitted on, and how well it did
    source: str = ""                                          # where it was read from (not saved)
    directions: dict[str, Calibration] = field(default_factory=dict)   # a multilingual run's, one per direction

    def for_direction(self, name: str) -> Calibration:
        """The calibration of one direction (``de-en``) of a multilingual run: its own where it was fitted, else
        this one (fitted on every direction's sentences together)."""
        return self.directions.get(name, self)

    def __call__(self, rows: Sequence[Sequence[float]]) -> list[float]:
        """The confidence in [0, 1] of each row of features."""
        if not len(rows):
            return []
        x = np.asarray(rows, dtype=np.float64)
        mean, std = np.asarray(self.mean), np.asarray(self.std)
        z = np.where(np.isnan(x), 0.0, (x - mean) / std)
        logit = np.clip(z @ np.asarray(self.weights) + self.bias, -500.0, 500.0)      # (exp stays finite)
        return (1.0 / (1.0 + np.exp(-logit))).tolist()

    def save(self, path: Path) -> None:
        import os

        d = asdict(self)
        for x in (d, *d["directions"].values()):
            x.pop("source")
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(d, indent=1) + "\n", encoding="utf-8")
        os.replace(tmp, path)                               # (a reader sees the old file or the new, whole)

    @staticmethod
    def load(path: Path) -> Calibration:
        """A calibration file; ValueError naming it where it is not one (or not of these features)."""
        try:
            d = json.loads(path.read_text(encoding="utf-8"))
            me = Calibration.from_dict(d)
            me.directions = {str(k): Calibration.from_dict(v) for k, v in d.get("directions", {}).items()}
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as e:
            raise ValueError(f"{path}: not a calibration file ({e})") from None
        for one in (me, *me.directions.values()):
            if list(one.names) != list(NAMES) or not len(one.weights) == len(one.mean) == len(one.std) == len(NAMES):
                raise ValueError(f"{path}: calibrated on other features ({', '.join(one.names)}); run aiayn calibrate "
                                 "again")
            one.source = str(path)
        return me

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Calibration:
        return Calibration(**{k: d[k] for k in ("weights", "bias", "mean", "std", "threshold", "names", "fitted")
                              if k in d})


def for_run(run_dir: Path | None) -> Calibration:
    """The calibration of a run (its calibration.json), else the one shipped with the package."""
    if run_dir is not None and (run_dir / FILE).is_file():
        return Calibration.load(run_dir / FILE)
    return Calibration.load(BUNDLED)


def fit(x: Sequence[Sequence[float]], good: Sequence[bool], threshold: float = THRESHOLD, l2: float = 1.0,
        steps: int = 50) -> Calibration:
    """A logistic regression of ``good`` on ``x`` (standardized; NaN as the mean) by Newton's method, with an L2
    penalty ``l2`` on the weights (not the bias)."""
    a = np.asarray(x, dtype=np.float64)
    y = np.asarray(good, dtype=np.float64)
    seen = (~np.isnan(a)).sum(0)                     # a feature no row has (greedy: no runner-up) gets weight 0
    mean = np.where(seen > 0, np.nansum(a, axis=0) / np.maximum(seen, 1), 0.0)
    std = np.sqrt(np.where(seen > 0, np.nansum((a - mean) ** 2, axis=0) / np.maximum(seen, 1), 1.0))
    std = np.where(~np.isfinite(std) | (std < 1e-9), 1.0, std)
    z = np.where(np.isnan(a), 0.0, (a - mean) / std)
    z1 = np.hstack([z, np.ones((len(z), 1))])
    w = np.zeros(z1.shape[1])
    penalty = np.full(z1.shape[1], l2)
    penalty[-1] = 0.0
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-(z1 @ w)))
        grad = z1.T @ (p - y) + penalty * w
        hess = (z1 * (p * (1 - p))[:, None]).T @ z1 + np.diag(penalty) + 1e-9 * np.eye(len(w))
        delta = np.linalg.solve(hess, grad)
        w -= delta
        if float(np.abs(delta).max()) < 1e-8:
            break
    return Calibration(w[:-1].tolist(), float(w[-1]), mean.tolist(), std.tolist(), threshold)


def pearson(a: Sequence[float], b: Sequence[float]) -> float:
    """Pearson's r (NaN where either is constant)."""
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if len(x) < 2 or x.std() == 0 or y.std() == 0:
        return math.nan
    return float(np.corrcoef(x, y)[0, 1])


def roc_auc(scores: Sequence[float], positive: Sequence[bool]) -> float:
    """The area under the ROC curve of ``scores`` for finding the ``positive`` ones (the Mann-Whitney statistic,
    ties counted half); NaN without both classes."""
    s, p = np.asarray(scores, dtype=np.float64), np.asarray(positive, dtype=bool)
    n_pos, n_neg = int(p.sum()), int((~p).sum())
    if not n_pos or not n_neg:
        return math.nan
    order = s.argsort(kind="mergesort")
    ranks = np.empty(len(s))
    sorted_s = s[order]
    i = 0
    while i < len(s):                                   # average ranks over ties
        j = i
        while j + 1 < len(s) and sorted_s[j + 1] == sorted_s[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return float((ranks[p].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def of_text(confidences: Sequence[float | None]) -> float | None:
    """A text's confidence from its sentences': the least sure one's (None: none known; a blank text: 1)."""
    known = [c for c in confidences if c is not None]
    if not confidences:
        return 1.0
    return min(known) if known else None
