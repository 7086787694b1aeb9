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

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..config import ModelConfig

if TYPE_CHECKING:          # (imported where used: CTranslate2's alignments need no PyTorch)
    import torch

    from ..model import Transformer

Links = list[tuple[int, int]]
# The layer (counted from 0; the last one where a model has fewer) and the shift that agree best with eflomal on the
# validation set (python -m benchmarks alignments, docs/terminology.md), for a model not trained to align.
LAYER, SHIFT = 0, 0


def method(model: Transformer | ModelConfig) -> tuple[int, int, int | None]:
    """(layer, shift, heads) the links of ``model`` are read from: the heads trained to align (guided alignment,
    ``ModelConfig.alignment_heads``: heads 0 .. k-1 of ``alignment_layer``, each target piece at the row where it is
    the output), or else the measured :data:`LAYER` and :data:`SHIFT` over all heads (None)."""
    cfg = model if isinstance(model, ModelConfig) else model.cfg
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


def token_links(cross: torch.Tensor | Any, n_src: int, n_tgt: int, shift: int, source: bool = False) -> Links:
    """cross (T, S) attention probabilities of a decoder input BOS y_1 .. y_n (T = n + 1 rows) over the source
    pieces and EOS (S >= n_src + 1) -> (source piece, target piece) links: target piece t linked with the source
    piece (EOS excluded) that row ``t + shift`` attends to most; with shift 1 the last piece reads the row of its EOS
    prediction. ``source``: the other way, each source piece with the target piece whose row attends to it most.
    ``cross``: a torch tensor or a numpy array (CTranslate2's attention); ties go to the first piece in both."""
    if n_tgt == 0 or n_src == 0:
        return []
    rows = list(range(shift, n_tgt + shift))
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
    import torch

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
