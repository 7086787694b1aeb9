"""Token-bucketed batches (paper §5.1: "sentence pairs were batched together by approximate sequence length"): a
sampler of batches of about ``max_tokens`` tokens (``TokenBatchSampler``, resumable, sharded over processes), the
padded tensors of one (``collate``, ``Batch``), and concatenated examples (``Joiner``, ``train.concat``). Shape legend: B
sentences, S source length, T target length.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:          # (imported where batches are made: reading a data dir's records needs no PyTorch)
    import torch

from ..config import BOS_ID, EOS_ID, PAD_ID
from .datadir import TokenArray


@dataclass
class Batch:
    """Padded tensors of one batch; source ends with EOS, target input starts with BOS (teacher forcing)."""

    src: torch.Tensor       # (B, S)  x_1 .. x_n EOS, then padding
    tgt_in: torch.Tensor    # (B, T)  BOS y_1 .. y_m, then padding
    tgt_out: torch.Tensor   # (B, T)  y_1 .. y_m EOS, then padding
    indices: np.ndarray     # (B,) example numbers in the split
    n_src_tokens: int       # non-padding tokens
    n_tgt_tokens: int
    align: torch.Tensor | None = None   # (B, T, S) what the aligning heads should attend to (lexicon.GuidedTargets)

    def to(self, device: torch.device | str) -> Batch:
        import torch

        nb = torch.device(device).type == "cuda"
        return dataclasses.replace(self, src=self.src.to(device, non_blocking=nb),
                                   tgt_in=self.tgt_in.to(device, non_blocking=nb),
                                   tgt_out=self.tgt_out.to(device, non_blocking=nb),
                                   align=None if self.align is None else self.align.to(device, non_blocking=nb))


def collate(src: TokenArray, tgt: TokenArray, indices: np.ndarray,
            guide: Callable[..., torch.Tensor] | None = None,
            rows: tuple[list[np.ndarray], list[np.ndarray]] | None = None) -> Batch:
    """Build a :class:`Batch` from example numbers (``guide``: the guided-alignment targets, lexicon.GuidedTargets),
    or from ``rows`` made of them (:class:`Joiner`: sources and targets, ``indices`` then each row's first)."""
    import torch

    xs, ys = rows or ([src[i] for i in indices], [tgt[i] for i in indices])
    B = len(xs)
    ls, lt = np.array([len(x) for x in xs]) + 1, np.array([len(y) for y in ys]) + 1
    s = np.full((B, int(ls.max())), PAD_ID, dtype=np.int64)
    t_in = np.full((B, int(lt.max())), PAD_ID, dtype=np.int64)
    t_out = np.full_like(t_in, PAD_ID)
    for row, (x, y) in enumerate(zip(xs, ys, strict=True)):
        s[row, : len(x)] = x
        s[row, len(x)] = EOS_ID
        t_in[row, 0] = BOS_ID
        t_in[row, 1 : len(y) + 1] = y
        t_out[row, : len(y)] = y
        t_out[row, len(y)] = EOS_ID
    return Batch(torch.from_numpy(s), torch.from_numpy(t_in), torch.from_numpy(t_out), np.asarray(indices),
                 int(ls.sum()), int(lt.sum()), guide(indices, s, t_out, ls - 1, lt - 1) if guide else None)


class Joiner:
    """Concatenated training examples (``train.concat``; the augmentation of Marian's and Bergamot's pipelines, not the
    paper's): a share ``rate`` of batches has its pairs joined two or three to a row (neighbours in a batch sorted by
    length, so the batch keeps its token count), and each joined pair loses its final stop on both sides half the
    time, so that the model learns to translate sentences run together, with or without their stops, whole. The
    choices are drawn from (seed, epoch, position): a resumed run joins the same batches alike."""

    def __init__(self, rate: float, seed: int, src_stops: set[int], tgt_stops: set[int], longest: int) -> None:
        self.rate, self.seed, self.stops, self.longest = rate, seed, (src_stops, tgt_stops), longest

    @staticmethod
    def stop_ids(piece: Callable[[int], str | None], size: int) -> set[int]:
        """The ids of a vocabulary's pieces that are a sentence's final stop (``.``, ``!``, ``?``, with or without
        the word-start mark)."""
        return {i for i in range(size) if (piece(i) or "").lstrip("\u2581") in (".", "!", "?", "。", "！", "？")}

    def rows(self, src: TokenArray, tgt: TokenArray, indices: np.ndarray, epoch: int,
             position: int) -> tuple[np.ndarray, tuple[list[np.ndarray], list[np.ndarray]]] | None:
        """The rows of the batch ``indices`` (the batch's ``position`` in ``epoch``) joined, with each row's first
        example number; None for a batch left as it is. A group longer than ``longest`` tokens a side (EOS/BOS
        not counted) stays apart."""
        rng = np.random.default_rng([self.seed, epoch, position, 7])
        if self.rate <= 0 or len(indices) < 2 or rng.random() >= self.rate:
            return None
        k = int(rng.integers(2, 4))
        xs, ys, firsts = [], [], []
        for start in range(0, len(indices), k):
            group = indices[start:start + k]
            parts = [(src[i], tgt[i]) for i in group]
            strip = rng.random(len(parts)) < 0.5
            parts = [(x[:-1], y[:-1]) if cut and len(x) > 1 and len(y) > 1 and x[-1] in self.stops[0]
                     and y[-1] in self.stops[1] else (x, y) for (x, y), cut in zip(parts, strip, strict=True)]
            if max(sum(len(x) for x, _ in parts), sum(len(y) for _, y in parts)) > self.longest:
                xs += [src[i] for i in group]
                ys += [tgt[i] for i in group]
                firsts += list(group)
                continue
            xs.append(np.concatenate([x for x, _ in parts]))
            ys.append(np.concatenate([y for _, y in parts]))
            firsts.append(group[0])
        return np.asarray(firsts), (xs, ys)


class TokenBatchSampler:
    """Batches of sentence pairs grouped by length, each within ``max_tokens`` (paper §5.1).

    A batch of n pairs costs n x (longest source) source tokens and n x (longest target) target
    tokens, padding included; both must be <= max_tokens. Pairs are sorted by length (random tie
    order per epoch), cut greedily into batches, and the batch order is shuffled per epoch from
    ``seed``; the same (seed, epoch) always gives the same batches, so training resumes from
    (epoch, position) exactly. With ``world`` data-parallel ranks, the batch count is made a multiple
    of ``world`` by splitting the largest batches, and rank r takes every world-th batch: ranks get
    disjoint batches of equal count and every pair appears exactly once per epoch.
    """

    def __init__(self, src_lengths: np.ndarray, tgt_lengths: np.ndarray, max_tokens: int, seed: int = 1,
                 shuffle: bool = True, rank: int = 0, world: int = 1) -> None:
        self.ls, self.lt = np.asarray(src_lengths, np.int64), np.asarray(tgt_lengths, np.int64)
        longest = int(max(self.ls.max(initial=0), self.lt.max(initial=0)))
        if longest > max_tokens:
            raise ValueError(f"max_tokens={max_tokens} is smaller than the longest example ({longest} tokens); "
                             "raise max_tokens or prepare the data with a smaller --max-len")
        if not 0 <= rank < world:
            raise ValueError(f"rank={rank} must be in [0, world={world})")
        self.max_tokens, self.seed, self.shuffle, self.rank, self.world = max_tokens, seed, shuffle, rank, world
        self._cache: tuple[int, list[np.ndarray]] | None = None

    def _all_batches(self, epoch: int) -> list[np.ndarray]:
        rng = np.random.default_rng([self.seed, epoch])
        tie = rng.random(len(self.ls)) if self.shuffle else np.arange(len(self.ls))
        # by the longer side (which sets the batch size), then target, then source length: 4.2% padding on
        # Multi30k at 4,096 tokens, against 6.4% sorting by (target, source)
        order = np.lexsort((tie, self.ls, self.lt, np.maximum(self.ls, self.lt)))
        batches, start, max_s, max_t = [], 0, 0, 0
        ls, lt, cap = self.ls[order].tolist(), self.lt[order].tolist(), self.max_tokens
        for j in range(len(order)):
            s, t = max(max_s, ls[j]), max(max_t, lt[j])
            if (j - start + 1) * max(s, t) > cap:
                batches.append(order[start:j])
                start, s, t = j, ls[j], lt[j]
            max_s, max_t = s, t
        if start < len(order):
            batches.append(order[start:])
        while len(batches) % self.world:                     # equal counts per rank: split the largest batch
            big = max(range(len(batches)), key=lambda i: len(batches[i]))
            if len(batches[big]) < 2:
                raise ValueError(f"cannot give {self.world} ranks a batch each: only {len(self.ls)} examples")
            half = len(batches[big]) // 2
            batches[big : big + 1] = [batches[big][:half], batches[big][half:]]
        if self.shuffle:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        return batches

    def epoch_batches(self, epoch: int) -> list[np.ndarray]:
        """This rank's batches of ``epoch`` (lists of example numbers), in training order."""
        if self._cache is None or self._cache[0] != epoch:
            self._cache = (epoch, self._all_batches(epoch)[self.rank :: self.world])
        return self._cache[1]

    def __len__(self) -> int:
        return len(self.epoch_batches(0))
