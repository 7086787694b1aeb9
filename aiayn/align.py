"""Word alignments between a source line and its translation, read from the model's encoder-decoder attention
(§3.2.3: each target position attends over the source positions), printed as fairseq and Marian print them:
``i-j`` pairs, source word i linked with target word j, both counted from 0.

For a translation y_1 .. y_n of a source x_1 .. x_m (SentencePiece pieces), the decoder is run once on the whole
translation (teacher forcing: input BOS y_1 .. y_n) and the attention probabilities of one layer, averaged over its
heads, give each target piece a distribution over the source pieces. Target piece y_t is linked with the source
piece it attends to most, read at the decoder position where y_t is the *input* (``shift=1``: the position that
predicts y_{t+1}) or where it is the output (``shift=0``); which layer and which shift align best is measured
(``python -m benchmarks alignments``, docs/terminology.md), not assumed. EOS takes no link. Pieces are grouped into
words where SentencePiece marks a word start (``▁``), so the links are between whitespace-separated words of the
source line and of the detokenized translation; a word pair is linked when any of their pieces are.

Agreement with a reference alignment (:func:`agreement`): precision, recall and the alignment error rate (Och & Ney
2003) with every reference link counted as sure: AER = 1 - 2|A ∩ G| / (|A| + |G|).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .config import ModelConfig
from .data import DataDir, DataError, TokenArray
from .model import Transformer

Links = list[tuple[int, int]]
# The layer (counted from 0; the last one where a model has fewer) and the shift that agree best with eflomal on the
# validation set (python -m benchmarks alignments, docs/terminology.md), for a model not trained to align.
LAYER, SHIFT = 0, 0


def method(model: Transformer | ModelConfig) -> tuple[int, int, int | None]:
    """(layer, shift, heads) the links of ``model`` are read from: the heads trained to align (guided alignment,
    ``ModelConfig.alignment_heads``: heads 0 .. k-1 of ``alignment_layer``, each target piece at the row where it is
    the output), or else the measured :data:`LAYER` and :data:`SHIFT` over all heads (None)."""
    cfg = model.cfg if isinstance(model, Transformer) else model
    if cfg.alignment_heads:
        return cfg.aligning_layer, 0, cfg.alignment_heads
    return (LAYER if LAYER < cfg.decoder_layers else -1), SHIFT, None


def words(pieces: Sequence[str]) -> list[int]:
    """The word index of each piece: a piece that starts with ``▁`` starts a new word (the first piece always)."""
    out, w = [], -1
    for i, p in enumerate(pieces):
        if i == 0 or p.startswith("\u2581"):
            w += 1
        out.append(max(w, 0))
    return out


def token_links(cross: torch.Tensor, n_src: int, n_tgt: int, shift: int, source: bool = False) -> Links:
    """cross (T, S) attention probabilities of a decoder input BOS y_1 .. y_n (T = n + 1 rows) over the source
    pieces and EOS (S >= n_src + 1) -> (source piece, target piece) links: target piece t linked with the source
    piece (EOS excluded) that row ``t + shift`` attends to most; with shift 1 the last piece reads the row of its EOS
    prediction. ``source``: the other way, each source piece with the target piece whose row attends to it most."""
    if n_tgt == 0 or n_src == 0:
        return []
    rows = torch.arange(n_tgt) + shift
    probs = cross[rows, :n_src]                                                # (n_tgt, n_src)
    if source:
        return [(s, t) for s, t in enumerate(probs.argmax(0).tolist())]
    return [(s, t) for t, s in enumerate(probs.argmax(-1).tolist())]


def word_links(links: Links, src_pieces: Sequence[str], tgt_pieces: Sequence[str]) -> Links:
    ws, wt = words(src_pieces), words(tgt_pieces)
    return sorted({(ws[s], wt[t]) for s, t in links})


def align(model: Transformer, pieces: tuple[Callable[[int], str], Callable[[int], str]],
          sources: Sequence[Sequence[int]], outputs: Sequence[Sequence[int]], layer: int, shift: int,
          device: torch.device, source: bool = False, heads: int | None = None) -> list[Links]:
    """Word links of each (source ids, output ids) pair (no BOS/EOS in either), from ``layer``'s encoder-decoder
    attention averaged over its heads (negative: counted from the last; ``heads``: over its first k heads only).
    ``pieces``: the source and target tokenizers' id -> piece."""
    cfg = model.cfg
    out: list[Links] = []
    for start in range(0, len(sources), 64):
        src = [list(s)[: cfg.max_positions - 1] + [cfg.eos_id] for s in sources[start : start + 64]]
        tgt = [[cfg.bos_id] + list(o)[: cfg.max_positions - 1] for o in outputs[start : start + 64]]
        S, T = max(map(len, src)), max(map(len, tgt))
        src_t = torch.tensor([s + [cfg.pad_id] * (S - len(s)) for s in src], device=device)
        tgt_t = torch.tensor([t + [cfg.pad_id] * (T - len(t)) for t in tgt], device=device)
        with torch.inference_mode():
            cross = model.attention_maps(src_t, tgt_t).cross[layer][:, :heads].float().mean(1).cpu()  # (B, T, S)
        for b, (s, t) in enumerate(zip(src, tgt, strict=True)):
            links = token_links(cross[b], len(s) - 1, len(t) - 1, shift, source)
            out.append(word_links(links, [pieces[0](i) for i in s[:-1]], [pieces[1](i) for i in t[1:]]))
    return out


def format_links(links: Links) -> str:
    return " ".join(f"{i}-{j}" for i, j in links)


def parse_links(text: str, where: str = "alignment") -> Links:
    """``"0-0 1-2"`` -> [(0, 0), (1, 2)]; a clear error naming ``where`` otherwise."""
    out = []
    for pair in text.split():
        i, dash, j = pair.partition("-")
        if not dash or not i.isdigit() or not j.isdigit():
            raise ValueError(f"{where}: {pair!r} is not an alignment link i-j")
        out.append((int(i), int(j)))
    return out


def agreement(predicted: Sequence[Links], reference: Sequence[Links]) -> dict[str, float]:
    """Precision, recall and AER of ``predicted`` against ``reference`` links over a corpus (percent)."""
    a = g = both = 0
    for p, r in zip(predicted, reference, strict=True):
        ps, rs = set(p), set(r)
        a, g, both = a + len(ps), g + len(rs), both + len(ps & rs)
    return {"precision": round(100 * both / max(1, a), 2), "recall": round(100 * both / max(1, g), 2),
            "aer": round(100 * (1 - 2 * both / max(1, a + g)), 2)}


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
