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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from ..config import ModelConfig
from ..data.datadir import DataError

if TYPE_CHECKING:          # (imported where used: engines/ctranslate2.py reads and checks a shortlist without PyTorch)
    import torch
    from torch import Tensor, nn

    from ..model import Transformer

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
    import torch
    import torch.nn.functional as F
    from torch import nn

    from ..quantize import Int8Linear

    if isinstance(layer, Int8Linear):
        weight, bias = torch.ops.quantized.linear_unpack(layer.packed)
        rows = torch.quantize_per_tensor(weight.dequantize().index_select(0, ids), weight.q_scale(),
                                         weight.q_zero_point(), torch.qint8)
        packed = torch.ops.quantized.linear_prepack(rows, None if bias is None else bias.index_select(0, ids))
        return lambda h: layer.kernel(h, packed, layer.reduce_range)
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
        import torch

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
        import torch

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
