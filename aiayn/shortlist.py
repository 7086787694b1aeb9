"""A lexical shortlist: the output layer limited to the target tokens a batch's source makes likely.

At each decoding step the output projection (§3.4, V x D) and the softmax over V tokens are the largest single cost of
a small decoder; in a model with one or two decoder layers they are most of the step. Most of the V tokens never have a
chance in a given sentence. A shortlist (Schwenk et al. 2007; Marian's ``--shortlist``, CTranslate2's vocabulary map)
keeps, for each source token, the k target tokens most often aligned to it, plus the N most frequent target tokens, and
decodes a batch over the union of its sentences' candidates only: the projection shrinks from V rows to K, the
log-probabilities are normalized over those K, and the chosen columns are mapped back to vocabulary ids.

- :func:`build` makes one from a data dir's training pairs: co-occurrence within sentence pairs scored by Dice's
  coefficient (``method="cooc"``, the default), or word alignments of the (subword) tokens by ``eflomal`` (a
  maintained aligner, ``pip install 'aiayn[align]'``) with p(t | s) = links(s, t) / links(s); the k best per source
  token. Why cooc is the default, measured: docs/results.md.
- :class:`Shortlist` is what a run dir keeps (``shortlist.npz``, plain arrays, and ``shortlist.json``, how it was
  made), with :meth:`Shortlist.output`, the output layer over one batch's candidates.
- :class:`Output` is the output layer a search decodes with: all V tokens, or a batch's candidates.
- :func:`write_vmap` writes it as CTranslate2's vocabulary map, so that an exported model decodes over the same
  candidates (``use_vmap``): a source token's line holds its k targets, the line with an empty source the
  always-allowed ones. CTranslate2 adds UNK, BOS and EOS to every set and suppresses BOS and PAD before its softmax;
  :meth:`Shortlist.candidates` holds UNK and EOS and leaves out BOS and PAD, which no search produces, so that the
  log-probabilities are normalized over the same tokens in both.

Where the full vocabulary's best token is among the candidates, greedy search picks it: the output is the full
search's. Beam search's scores are normalized over the candidates, so its output can differ a little more (measured
in the README, "Make a model fast").
"""

from __future__ import annotations

import json
import logging
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .config import ModelConfig
from .data import DataDir, DataError
from .quantize import Int8Linear

if TYPE_CHECKING:
    from .model import Transformer

log = logging.getLogger(__name__)

Method = Literal["eflomal", "cooc"]
FILE, META = "shortlist.npz", "shortlist.json"


@dataclass(frozen=True)
class Output:
    """The output layer a search decodes with. ``ids`` (K,) the sorted vocabulary ids of its columns (None: all V);
    ``project`` hidden (..., D) -> logits (..., K) (None: the model's own); ``pad``, ``bos``, ``eos`` the columns of
    those tokens (pad and bos: None when they are not columns, as in a shortlist's)."""

    ids: Tensor | None
    project: Callable[[Tensor], Tensor] | None
    pad: int | None
    bos: int | None
    eos: int

    @staticmethod
    def full(cfg: ModelConfig) -> Output:
        return Output(None, None, cfg.pad_id, cfg.bos_id, cfg.eos_id)

    def tokens(self, cols: Tensor) -> Tensor:
        """Columns of the log-probabilities -> vocabulary ids."""
        return cols if self.ids is None else self.ids[cols]

    @property
    def size(self) -> int | None:
        return None if self.ids is None else int(self.ids.numel())


def restricted(layer: nn.Module, ids: Tensor) -> Callable[[Tensor], Tensor]:
    """``layer`` (the model's output projection: an ``nn.Linear``, or its int8 form) computing the rows ``ids`` (K,)
    only: (..., D) -> (..., K), each column equal to the full layer's column of that id (int8: the same int8 weights
    and the same per-call activation scale, so the same values)."""
    if isinstance(layer, Int8Linear):
        weight, bias = torch.ops.quantized.linear_unpack(layer.packed)
        rows = torch.quantize_per_tensor(weight.dequantize().index_select(0, ids), weight.q_scale(),
                                         weight.q_zero_point(), torch.qint8)
        packed = torch.ops.quantized.linear_prepack(rows, None if bias is None else bias.index_select(0, ids))
        return lambda h: layer.kernel(h, packed, True)
    if isinstance(layer, nn.Linear):
        w = layer.weight.index_select(0, ids)
        b = None if layer.bias is None else layer.bias.index_select(0, ids)
        return lambda h: F.linear(h, w, b)
    raise ValueError(f"a shortlist cannot restrict an output layer of type {type(layer).__name__}")


class Shortlist:
    """For each source token id, its candidate target ids (``table`` (V_src, k), -1 where a token has fewer), and the
    target ids always allowed (``always``: the N most frequent, plus UNK, BOS and EOS)."""

    def __init__(self, table: np.ndarray, always: np.ndarray, meta: dict[str, Any] | None = None) -> None:
        self.table = np.asarray(table, dtype=np.int32)
        self.always = np.unique(np.asarray(always, dtype=np.int32))
        self.meta = meta or {}
        self._on: dict[torch.device, tuple[Tensor, Tensor]] = {}

    # -- in a run dir ---------------------------------------------------------------------------------------------

    def save(self, run: str | Path) -> Path:
        path = Path(run) / FILE
        np.savez(path, table=self.table, always=self.always)
        (Path(run) / META).write_text(json.dumps(self.meta, indent=2) + "\n")
        return path

    @classmethod
    def for_run(cls, run: str | Path, wanted: bool) -> Shortlist | None:
        """:meth:`load`; a clear error when ``wanted`` (``decode.shortlist``) and the run has none (every engine)."""
        shortlist = cls.load(run)
        if wanted and shortlist is None:
            raise ValueError(f"shortlist=true: {run} has no shortlist; build one with `aiayn shortlist --model {run} "
                             "--data DATA`")
        return shortlist

    @classmethod
    def load(cls, run: str | Path) -> Shortlist | None:
        """The shortlist of the run dir ``run``, or None if it has none."""
        path = Path(run) / FILE
        if not path.is_file():
            return None
        try:
            with np.load(path, allow_pickle=False) as z:
                table, always = z["table"], z["always"]
        except (OSError, KeyError, ValueError) as e:
            raise DataError(f"{path}: not a shortlist written by `aiayn shortlist` ({e}); build it again") from None
        meta_path = Path(run) / META
        meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
        return cls(table, always, meta)

    # -- decoding ---------------------------------------------------------------------------------------------------

    def candidates(self, src: Tensor, cfg: ModelConfig) -> Tensor:
        """The sorted target ids a batch of sources src (B, S) may produce: the union of its tokens' candidates and
        the always-allowed ones, EOS and UNK, without BOS and PAD (on src's device)."""
        if src.device not in self._on:
            self._on[src.device] = (torch.from_numpy(self.table).long().to(src.device),
                                    torch.from_numpy(self.always).long().to(src.device))
        table, always = self._on[src.device]
        tokens = src.unique()
        tokens = tokens[(tokens != cfg.pad_id) & (tokens != cfg.eos_id) & (tokens != cfg.bos_id)
                        & (tokens < table.shape[0])]
        mapped = table[tokens].flatten()
        ids = torch.cat([mapped[mapped >= 0], always, torch.tensor([cfg.eos_id, cfg.unk_id], device=src.device)])
        ids = ids.unique()
        return ids[(ids != cfg.pad_id) & (ids != cfg.bos_id)]

    def output(self, model: Transformer, src: Tensor, before: Output | None = None) -> Output:
        """The output layer over the candidates of the batch src (B, S) (and ``before``'s, for sentences joining a
        running search)."""
        cfg = model.cfg
        ids = self.candidates(src, cfg)
        if before is not None and before.ids is not None:
            ids = torch.cat([ids, before.ids]).unique()
        return Output(ids, restricted(model.out_proj, ids), None, None, int(torch.searchsorted(ids, cfg.eos_id)))


def output_for(model: Transformer, src: Tensor, shortlist: Shortlist | None, use: bool,
               before: Output | None = None) -> Output:
    """The output layer a search over src uses: the shortlist's candidates if ``use`` (the decoding setting), else
    all V; a clear error if asked for a shortlist the model does not have."""
    if not use:
        return Output.full(model.cfg)
    if shortlist is None:
        raise ValueError("shortlist=true: this model has no shortlist; build one with `aiayn shortlist --model RUN "
                         "--data DATA` (it is saved in the run dir)")
    return shortlist.output(model, src, before)


# --- building -------------------------------------------------------------------------------------------------------


def _pairs(d: DataDir, split: str, limit: int = 0) -> tuple[list[np.ndarray], list[np.ndarray]]:
    src, tgt = d.split(split)
    n = len(src) if not limit else min(limit, len(src))
    return [np.asarray(src[i]) for i in range(n)], [np.asarray(tgt[i]) for i in range(n)]


def _counts(pairs: np.ndarray, v_tgt: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(n, 2) (source, target) pairs -> the distinct pairs' source, target and count."""
    codes, counts = np.unique(pairs[:, 0].astype(np.int64) * v_tgt + pairs[:, 1], return_counts=True)
    return codes // v_tgt, codes % v_tgt, counts


def _eflomal_links(src: list[np.ndarray], tgt: list[np.ndarray]) -> np.ndarray:
    """Token pairs linked by eflomal's alignment in both directions (their union), as (n, 2) ids."""
    try:
        import eflomal
    except ImportError:
        raise ValueError("method=eflomal needs the eflomal aligner: pip install 'aiayn[align]' (or eflomal), or "
                         "use method=cooc") from None
    as_text = lambda seqs: [" ".join(map(str, s.tolist())) + "\n" for s in seqs]  # noqa: E731
    with tempfile.TemporaryDirectory() as tmp:
        fwd, rev = Path(tmp) / "fwd", Path(tmp) / "rev"
        eflomal.Aligner().align(as_text(src), as_text(tgt), links_filename_fwd=str(fwd), links_filename_rev=str(rev),
                                quiet=True)
        links = []
        for path in (fwd, rev):
            for s, t, line in zip(src, tgt, path.read_text().splitlines(), strict=True):
                if line.strip():
                    ij = np.array([p.split("-") for p in line.split()], dtype=np.int64)
                    links.append(np.stack([s[ij[:, 0]], t[ij[:, 1]]], axis=1))
    return np.concatenate(links) if links else np.zeros((0, 2), np.int64)


def _top_k(s: np.ndarray, t: np.ndarray, score: np.ndarray, v_src: int, k: int) -> np.ndarray:
    """(V_src, k) the k best-scoring targets of each source token (-1 where fewer); ties broken by target id."""
    table = np.full((v_src, k), -1, dtype=np.int32)
    order = np.lexsort((t, -score, s))                       # by source, then best score first
    s, t = s[order], t[order]
    first = np.searchsorted(s, s, side="left")
    rank = np.arange(len(s)) - first
    keep = rank < k
    table[s[keep], rank[keep]] = t[keep]
    return table


def build(data: str | Path, cfg: ModelConfig, k: int = 50, frequent: int = 100, method: Method = "cooc",
          max_pairs: int = 0) -> Shortlist:
    """A shortlist from the training pairs of the data dir ``data`` (made with the model's tokenizer; the first
    ``max_pairs`` only, if given): for each source token its ``k`` best target tokens, plus the ``frequent`` most
    frequent target tokens. ``method``: cooc (sentence co-occurrence, Dice) or eflomal (alignment links)."""
    if k < 1 or frequent < 0:
        raise ValueError(f"shortlist: k={k} must be >= 1 and frequent={frequent} >= 0")
    d = DataDir(data)
    t0 = time.perf_counter()
    src, tgt = _pairs(d, "train", max_pairs)
    v_src, v_tgt = cfg.src_vocab_size, cfg.tgt_vocab_size
    tgt_all = np.concatenate(tgt)
    if tgt_all.size and int(tgt_all.max()) >= v_tgt or any(s.size and int(s.max()) >= v_src for s in src[:1000]):
        raise DataError(f"{d.path}: token ids beyond the model's vocabulary; prepare the data with the model's "
                        "tokenizer (aiayn prepare --vocab-from RUN)")
    freq = np.bincount(tgt_all, minlength=v_tgt)
    if method == "eflomal":
        s, t, c = _counts(_eflomal_links(src, tgt), v_tgt)
        per_src = np.bincount(s, weights=c, minlength=v_src)
        score = c / per_src[s]                                                    # p(t | s) from the links
    elif method == "cooc":
        both = np.concatenate([np.stack(np.meshgrid(np.unique(a), np.unique(b)), -1).reshape(-1, 2)
                               for a, b in zip(src, tgt, strict=True)])
        s, t, c = _counts(both, v_tgt)
        in_src = np.bincount(np.concatenate([np.unique(a) for a in src]), minlength=v_src)
        in_tgt = np.bincount(np.concatenate([np.unique(b) for b in tgt]), minlength=v_tgt)
        score = 2 * c / (in_src[s] + in_tgt[t])                                   # Dice's coefficient
    else:
        raise ValueError(f"shortlist: method={method!r}; expected eflomal or cooc")
    table = _top_k(s, t, score, v_src, k)
    table[[cfg.pad_id, cfg.bos_id, cfg.eos_id]] = -1       # never source tokens a shortlist is looked up by
    always = np.concatenate([np.argsort(-freq, kind="stable")[:frequent], [cfg.unk_id, cfg.bos_id, cfg.eos_id]])
    meta = {"method": method, "k": k, "frequent": frequent, "data": str(d.path), "data_hash": d.hash,
            "pairs": len(src), "seconds": round(time.perf_counter() - t0, 1)}
    sl = Shortlist(table, always, meta)
    sl.meta["valid"] = coverage(sl, d, cfg) if d.has_split("valid") else None
    return sl


def coverage(sl: Shortlist, d: DataDir, cfg: ModelConfig, split: str = "valid") -> dict[str, float]:
    """How well the shortlist covers ``split``'s references, sentence by sentence: the share of reference tokens
    among their sentence's candidates, the share of sentences fully covered, and the mean candidates per sentence."""
    src, tgt = _pairs(d, split)
    covered = total = whole = size = 0
    for s, t in zip(src, tgt, strict=True):
        ids = sl.candidates(torch.from_numpy(s.astype(np.int64))[None], cfg).numpy()
        hit = np.isin(t, ids)
        covered, total, whole, size = covered + int(hit.sum()), total + len(t), whole + bool(hit.all()), size + len(ids)
    n = max(1, len(src))
    return {"tokens": round(covered / max(1, total), 4), "sentences": round(whole / n, 4),
            "candidates_per_sentence": round(size / n, 1)}


# --- CTranslate2 ---------------------------------------------------------------------------------------------------


def write_vmap(sl: Shortlist, path: str | Path, src_piece: Callable[[int], str], tgt_piece: Callable[[int], str]) -> Path:
    """The shortlist as CTranslate2's vocabulary map: ``source_piece<TAB>target pieces``, one line per source token
    with candidates, and a line with an empty source for the always-allowed tokens."""
    lines = ["\t" + " ".join(tgt_piece(int(t)) for t in sl.always)]
    for s, row in enumerate(sl.table):
        row = row[row >= 0]
        if len(row):
            lines.append(src_piece(s) + "\t" + " ".join(tgt_piece(int(t)) for t in row))
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return Path(path)
