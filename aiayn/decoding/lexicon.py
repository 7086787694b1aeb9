"""What a parallel corpus says of its words, built once from a data dir, before training or decoding:

- the lexical shortlist's table (:func:`build`, ``aiayn shortlist``; shortlist.py keeps and decodes with it): the k
  target tokens each source token goes with, by sentence co-occurrence (Dice) or eflomal's links, and how well it
  covers the validation references (:func:`coverage`);
- eflomal's word links of the training pairs (:func:`align_corpus`, ``aiayn align``), symmetrized
  (:func:`symmetrize`), and the attention targets guided alignment trains a head on (:class:`GuidedTargets`).

Decode-time alignments (the model's attention read as links) are align.py's; the shortlist as a decoder uses it is
shortlist.py's.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..config import ModelConfig
from ..data.datadir import DataDir, DataError, TokenArray
from .align import Links, parse_links
from .shortlist import Method, Shortlist

# --- the shortlist's table -------------------------------------------------------------------------------------


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


# --- word links of a corpus ----------------------------------------------------------------------------------------


def symmetrize(forward: Links, reverse: Links) -> Links:
    """grow-diag-final-and (Koehn et al. 2003, as Moses' and fast_align's atools): the intersection of two directed
    alignments, grown with union links next to (also diagonally) an aligned pair, then with union links whose two
    words are both still unaligned."""
    f, r = set(forward), set(reverse)
    union, links = f | r, f & r
    neighbours = [(-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1)]
    grew = True
    while grew:
        grew = False
        for i, j in sorted(links):
            for di, dj in neighbours:
                c = (i + di, j + dj)
                if c in union and c not in links and (all(s != c[0] for s, _ in links) or
                                                      all(t != c[1] for _, t in links)):
                    links.add(c)
                    grew = True
    for directed in (f, r):
        for c in sorted(directed):
            if c not in links and all(s != c[0] for s, _ in links) and all(t != c[1] for _, t in links):
                links.add(c)
    return sorted(links)


# --- guided alignment (Garg et al. 2019): word links of the training pairs, and the targets they give a head -------


def word_starts(piece: Callable[[int], str], size: int) -> np.ndarray:
    """(V,) bool: the ids whose piece starts a word (SentencePiece's ``▁``)."""
    return np.array([piece(i).startswith("\u2581") for i in range(size)], dtype=bool)


def batch_words(ids: np.ndarray, lengths: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """(B, L) padded ids -> (B, L) the word number of each piece (:func:`words` on ids; the first piece starts a
    word, marked or not), -1 past each sentence's ``lengths``."""
    real = np.arange(ids.shape[1])[None, :] < lengths[:, None]
    new = starts[ids] & real
    if ids.shape[1]:
        new[:, 0] = real[:, 0]
    return np.where(real, np.cumsum(new, axis=1) - 1, -1)


def piece_words(ids: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """:func:`batch_words` of one sentence: (n,) -> (n,)."""
    return batch_words(ids[None, :], np.array([len(ids)]), starts)[0]


def word_text(ids: np.ndarray, starts: np.ndarray, piece: Callable[[int], str]) -> str:
    """The sentence's words as the pieces group them, lowercased and space-separated: what the aligner reads, so that
    its word i is the model's word i (an all-``▁`` word is written ``_``, spaces inside a word are dropped)."""
    out: list[list[str]] = []
    for i, w in zip(ids.tolist(), piece_words(ids, starts).tolist(), strict=True):
        if w == len(out):
            out.append([])
        out[-1].append(piece(i))
    # whitespace inside a piece (a no-break space) would split the aligner's word in two: it is left out
    return " ".join("".join("".join(p).replace("\u2581", "").lower().split()) or "_" for p in out)


def align_corpus(data_dir: str | Path, split: str = "train") -> dict[str, Any]:
    """Word-align a data dir's ``split`` with eflomal (both directions, grow-diag-final-and) over the words its
    tokenizers make, and store the links in the data dir for guided alignment (``train.guided_alignment``)."""
    try:
        import eflomal
    except ImportError:
        raise DataError("aligning a corpus needs the eflomal aligner: pip install 'aiayn[align]'") from None
    import tempfile

    data = DataDir(data_dir)
    vocab, (src, tgt) = data.vocab(), data.split(split)
    s_starts = word_starts(vocab.src.piece, vocab.src.vocab_size)
    t_starts = word_starts(vocab.tgt.piece, vocab.tgt.vocab_size)
    t0 = time.perf_counter()
    src_text = [word_text(np.asarray(src[i]), s_starts, vocab.src.piece) + "\n" for i in range(len(src))]
    tgt_text = [word_text(np.asarray(tgt[i]), t_starts, vocab.tgt.piece) + "\n" for i in range(len(tgt))]
    with tempfile.TemporaryDirectory() as tmp:
        fwd, rev = Path(tmp) / "fwd", Path(tmp) / "rev"
        eflomal.Aligner().align(src_text, tgt_text, links_filename_fwd=str(fwd), links_filename_rev=str(rev),
                                quiet=True)
        links = [symmetrize(parse_links(a), parse_links(b)) for a, b in
                 zip(fwd.read_text().splitlines(), rev.read_text().splitlines(), strict=True)]
    info = {"aligner": "eflomal", "symmetrized": "grow-diag-final-and", "pairs": len(links),
            "links": sum(map(len, links)), "seconds": round(time.perf_counter() - t0, 1)}
    data.write_alignments(split, [[k for link in x for k in link] for x in links], info)
    return info


class GuidedTargets:
    """What the aligning heads of a batch should attend to: for target piece t of pair b, the source pieces of the
    words its word is linked with, each 1/k of the row; rows of unlinked pieces (and EOS, and padding) are 0.

    ``targets(indices, src, tgt, src_len, tgt_len)`` -> (B, T, S): ``src`` (B, S) and ``tgt`` (B, T) the batch's
    padded source and target-output ids, ``*_len`` (B,) their lengths without EOS. Row t is the decoder position
    whose output is y_t (shift 0: where :func:`method` reads a trained head). One vectorized pass over the batch."""

    def __init__(self, links: TokenArray, n_pairs: int, src_starts: np.ndarray, tgt_starts: np.ndarray,
                 where: Path) -> None:
        if len(links) != n_pairs:
            raise DataError(f"{where}: {len(links)} alignments for {n_pairs} pairs; re-run `aiayn align`")
        self.links, self.where, self.src_starts, self.tgt_starts = links, where, src_starts, tgt_starts

    def __call__(self, indices: np.ndarray, src: np.ndarray, tgt: np.ndarray, src_len: np.ndarray,
                 tgt_len: np.ndarray) -> torch.Tensor:
        B = len(indices)
        ws, wt = batch_words(src, src_len, self.src_starts), batch_words(tgt, tgt_len, self.tgt_starts)
        per = [np.asarray(self.links[i], dtype=np.int64) for i in indices]
        pairs = np.concatenate(per).reshape(-1, 2) if per else np.zeros((0, 2), np.int64)
        rows = np.repeat(np.arange(B), [len(p) // 2 for p in per])
        n_src, n_tgt = ws.max(1) + 1, wt.max(1) + 1                                # words per sentence
        bad = (pairs[:, 0] >= n_src[rows]) | (pairs[:, 1] >= n_tgt[rows])
        if bad.any():
            b = int(rows[bad.argmax()])
            raise DataError(f"{self.where}: the alignment of pair {int(indices[b]) + 1} links words beyond its "
                            f"{n_src[b]} source / {n_tgt[b]} target words; re-run `aiayn align`")
        linked = np.zeros((B, int(n_src.max(initial=0)) + 1, int(n_tgt.max(initial=0)) + 1), dtype=np.float32)
        linked[rows, pairs[:, 0], pairs[:, 1]] = 1.0                               # (B, source words, target words)
        a = linked[np.arange(B)[:, None, None], ws[:, None, :], wt[:, :, None]]     # (B, T, S); -1 reads the spare
        a *= (ws >= 0)[:, None, :] & (wt >= 0)[:, :, None]                         # ... last row/column: cleared
        return torch.from_numpy(a / np.maximum(a.sum(-1, keepdims=True), 1.0))


def guided_targets(data: DataDir, split: str = "train") -> GuidedTargets:
    """The :class:`GuidedTargets` of a data dir's split, or a clear error if it has not been aligned."""
    links = data.alignments(split)
    if links is None:
        raise DataError(f"train.guided_alignment needs word alignments of {data.path}'s {split} pairs: run `aiayn "
                        f"align {data.path}` first (pip install 'aiayn[align]')")
    vocab = data.vocab()
    return GuidedTargets(links, data.pairs(split), word_starts(vocab.src.piece, vocab.src.vocab_size),
                         word_starts(vocab.tgt.piece, vocab.tgt.vocab_size), data.alignment_stem(split))
