"""The Transformer of "Attention Is All You Need" (Vaswani et al., 2017), §3, in the paper's order:
scaled dot-product attention (§3.2.1, Eq. (1): attention.py), multi-head attention (§3.2.2), the position-wise
feed-forward network (§3.3), embeddings and softmax (§3.4), positional encoding (§3.5), then the
encoder and decoder layers and stacks (§3.1) and the whole model (Figure 1).

Shape legend (batch-first everywhere):
    B batch    S source length    T target length    D d_model    H heads
    K d_k = d_v = D / H    F d_ff    V vocabulary    L layers

Masks are boolean with True = "may attend"; rows with nothing to attend to give zeros, never NaN.
What this file leaves to others: Eq. (1) with its masks and fast kernels (attention.py), dropout
(dropout.py), the incremental-decoding cache (cache.py), decoding strategies (search.py), the loss (loss.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import Tensor, nn

from .attention import attention, fast_attention, padding_mask
from .cache import DecoderCache, KeyValueCache, NewPositions
from .config import ModelConfig
from .dropout import Dropout, add_dropout

__all__ = ["Transformer", "make_model", "attention", "AttentionMaps"]


# --- §3.2.1 Scaled dot-product attention -----------------------------------------------------------------
#
# Eq. (1), Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V, is written out in attention.py as `attention`, beside
# its masks and the fused kernels that compute the same numbers faster (`fast_attention`); it is re-exported here.


# --- §3.2.2 Multi-head attention ---------------------------------------------------------------------------


class MultiHeadAttention(nn.Module):
    """§3.2.2: MultiHead(Q, K, V) = Concat(head_1..head_H) W^O, head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V).

    The H per-head projections are fused into one matrix each: self-attention projects Q, K and V
    with a single (D -> 3D) matmul; encoder-decoder attention projects the query with (D -> D) and
    the memory's keys and values once per source with (D -> 2D) (:meth:`project_memory`).
    """

    def __init__(self, d_model: int, n_heads: int, p_attn: float, *, cross: bool) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        self.n_heads, self.p_attn, self.cross = n_heads, p_attn, cross
        if cross:
            self.q_proj = nn.Linear(d_model, d_model)
            self.kv_proj = nn.Linear(d_model, 2 * d_model)
        else:
            self.qkv_proj = nn.Linear(d_model, 3 * d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def reset_fused(self) -> None:
        """Its fused projection initialized one Xavier fan per (D x D) block, as if W^Q, W^K, W^V were separate."""
        fused = self.kv_proj if self.cross else self.qkv_proj
        for block in fused.weight.data.split(fused.in_features, dim=0):
            nn.init.xavier_uniform_(block)

    def _heads(self, x: Tensor, n: int) -> tuple[Tensor, ...]:
        """(B, T, n*D) -> n tensors (B, H, T, K)."""
        B, T, _ = x.shape
        x = x.view(B, T, n, self.n_heads, -1).permute(2, 0, 3, 1, 4)             # (n, B, H, T, K)
        return tuple(x.unbind(0))

    def project_memory(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """Keys and values of the encoder output, computed once per source: (B, S, D) -> 2 x (B, H, S, K)."""
        k, v = self._heads(self.kv_proj(memory), 2)
        return k, v

    def forward(
        self, x: Tensor, *, mask: Tensor | None = None, causal: bool = False,
        memory_kv: tuple[Tensor, Tensor] | None = None, past_kv: KeyValueCache | NewPositions | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None, KeyValueCache | NewPositions | None]:
        """x (B, T, D) -> (output (B, T, D), probabilities (B, H, T, S) or None, extended ``past_kv`` or None).

        Self-attention: pass ``causal`` for the decoder; with ``past_kv`` (the keys/values of earlier
        positions, cache.py, or where the new ones go: cache.NewPositions) the new keys/values are appended and x
        attends to all of them.
        Encoder-decoder attention (§3.2.3): queries from x, keys and values ``memory_kv`` from
        :meth:`project_memory` of the encoder output.
        """
        if self.cross:
            assert memory_kv is not None, "encoder-decoder attention needs memory_kv"
            (q,), (k, v) = self._heads(self.q_proj(x), 1), memory_kv
        else:
            q, k, v = self._heads(self.qkv_proj(x), 3)
            if past_kv is not None:
                past_kv, k, v = past_kv.append(k, v)                                   # (B, H, t+T, K)
        if need_weights:
            out, probs = attention(q, k, v, mask, causal, self.p_attn, self.training)
        else:   # the same numbers by the fastest kernel for this device, dtype and shape
            out, probs = fast_attention(q, k, v, mask, causal, self.p_attn, self.training), None
        B, H, T, K = out.shape
        return self.out_proj(out.transpose(1, 2).reshape(B, T, H * K)), probs, past_kv   # Concat(heads) W^O


# --- §3.3 Position-wise feed-forward networks --------------------------------------------------------------


# The FFN's nonlinearity: the paper's ReLU, or another one a pretrained model was trained with (Marian's swish).
ACTIVATIONS = {"relu": torch.relu, "swish": nn.functional.silu, "gelu": nn.functional.gelu}


class FeedForward(nn.Module):
    """§3.3, Eq. (2): FFN(x) = max(0, x W_1 + b_1) W_2 + b_2, applied to each position; (B, T, D) -> (B, T, D).
    ``activation`` replaces max(0, .) for models trained with another one (ModelConfig.activation)."""

    def __init__(self, d_model: int, d_ff: int, p_ffn: float, activation: str = "relu") -> None:
        super().__init__()
        self.w1, self.w2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.dropout = Dropout(p_ffn)   # Deviation: 0 by default (the paper's); tensor2tensor's relu_dropout
        self.act = ACTIVATIONS[activation]

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(self.dropout(self.act(self.w1(x))))


# --- §3.4 Embeddings and softmax; §3.5 Positional encoding -------------------------------------------------


class Embedding(nn.Module):
    """§3.4: learned embeddings multiplied by sqrt(d_model); (B, T) ids -> (B, T, D)."""

    def __init__(self, vocab_size: int, d_model: int, pad_id: int) -> None:
        super().__init__()
        self.lut = nn.Embedding(vocab_size, d_model, padding_idx=pad_id)
        self.scale = math.sqrt(d_model)

    def forward(self, tokens: Tensor) -> Tensor:
        return self.lut(tokens) * self.scale


def sinusoids(n_positions: int, d_model: int) -> Tensor:
    """§3.5: PE(pos, 2i) = sin(pos / 10000^(2i/D)), PE(pos, 2i+1) = cos(pos / 10000^(2i/D)); (P, D)."""
    pos = torch.arange(n_positions, dtype=torch.float64)[:, None]                 # (P, 1)
    inv_freq = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)   # (D/2,)
    pe = torch.zeros(n_positions, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(pos * inv_freq)
    pe[:, 1::2] = torch.cos(pos * inv_freq)
    return pe.float()


class PositionalEncoding(nn.Module):
    """§3.5: add position information to the embeddings, then dropout on the sum (§5.4).

    ``learned=False`` (the paper's choice): the sinusoids, a fixed non-persistent buffer recomputed at load
    time; ``learned=True``: learned position embeddings, the alternative of Table 3 row (E).
    """

    def __init__(self, d_model: int, max_positions: int, p_drop: float, *, learned: bool) -> None:
        super().__init__()
        self.learned: nn.Embedding | None = None
        if learned:
            self.learned = nn.Embedding(max_positions, d_model)
        else:
            self.pe: Tensor
            self.register_buffer("pe", sinusoids(max_positions, d_model), persistent=False)
        self.max_positions = max_positions
        self.dropout = Dropout(p_drop)

    def table(self) -> Tensor:
        """(P, D): the vector added at each position."""
        return self.learned.weight if self.learned is not None else self.pe

    def forward(self, x: Tensor, offset: int | Tensor = 0) -> Tensor:
        """x (B, T, D) embeddings of positions offset..offset+T-1 -> (B, T, D); ``offset`` an int, or (B,) one
        per row (sentences decoded side by side that started at different steps, cache.py)."""
        return self.add(x, self.at(offset, x.shape[1]))

    def at(self, offset: int | Tensor, T: int = 1) -> Tensor:
        """The vectors of positions offset..offset+T-1: (T, D) for an int ``offset``, (B, T, D) for (B,) offsets."""
        last = (offset if isinstance(offset, int) else int(offset.max())) + T
        if last > self.max_positions:
            raise ValueError(f"sequence of {last} tokens exceeds max_positions={self.max_positions}")
        if isinstance(offset, int):
            return self.table()[offset : offset + T]                                            # (T, D)
        return self.table()[offset[:, None] + torch.arange(T, device=offset.device)]            # (B, T, D)

    def add(self, x: Tensor, vectors: Tensor) -> Tensor:
        """x (B, T, D) plus :meth:`at`'s vectors, then dropout (§5.4)."""
        return self.dropout(x + vectors.to(x.dtype))


# --- §3.1 Encoder and decoder stacks -----------------------------------------------------------------------


class Residual(nn.Module):
    """§3.1 + §5.4: the connection around each sub-layer, with residual dropout on the sub-layer output.

    post-norm (the paper):           x <- LayerNorm(x + Dropout(Sublayer(x)))
    pre-norm (Annotated Transformer): x <- x + Dropout(Sublayer(LayerNorm(x)))
    Use as ``y = sublayer(res.before(x)); x = res.after(x, y)``.
    """

    def __init__(self, d_model: int, p_drop: float, pre_norm: bool) -> None:
        super().__init__()
        self.norm, self.dropout, self.pre_norm = nn.LayerNorm(d_model), Dropout(p_drop), pre_norm

    def before(self, x: Tensor) -> Tensor:
        return self.norm(x) if self.pre_norm else x

    def after(self, x: Tensor, y: Tensor) -> Tensor:
        x = add_dropout(x, y, self.dropout.p, self.training)       # x + Dropout(y), one pass (dropout.py)
        return x if self.pre_norm else self.norm(x)


class EncoderLayer(nn.Module):
    """§3.1: multi-head self-attention, then the position-wise FFN, each inside a :class:`Residual`."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, p_drop: float, p_attn: float, p_ffn: float,
                 *, pre_norm: bool, activation: str = "relu") -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, p_attn, cross=False)
        self.ffn = FeedForward(d_model, d_ff, p_ffn, activation)
        self.res_attn, self.res_ffn = Residual(d_model, p_drop, pre_norm), Residual(d_model, p_drop, pre_norm)

    def forward(self, x: Tensor, src_mask: Tensor, need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        """x (B, S, D), src_mask (B, 1, 1, S) -> (B, S, D), self-attention probabilities or None."""
        y, probs, _ = self.self_attn(self.res_attn.before(x), mask=src_mask, need_weights=need_weights)
        x = self.res_attn.after(x, y)
        x = self.res_ffn.after(x, self.ffn(self.res_ffn.before(x)))
        return x, probs


class DecoderLayer(nn.Module):
    """§3.1: masked self-attention, encoder-decoder attention, then the FFN, each inside a :class:`Residual`."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, p_drop: float, p_attn: float, p_ffn: float,
                 *, pre_norm: bool, activation: str = "relu") -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, p_attn, cross=False)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, p_attn, cross=True)
        self.ffn = FeedForward(d_model, d_ff, p_ffn, activation)
        self.res_self, self.res_cross, self.res_ffn = (Residual(d_model, p_drop, pre_norm) for _ in range(3))

    def forward(
        self, x: Tensor, memory_kv: tuple[Tensor, Tensor], src_mask: Tensor,
        past_kv: KeyValueCache | NewPositions | None = None, need_weights: bool = False,
        self_mask: Tensor | None = None, cross_weights: bool = False,
    ) -> tuple[Tensor, KeyValueCache | NewPositions | None, tuple[Tensor | None, Tensor | None]]:
        """x (B, T, D) -> (B, T, D), the extended ``past_kv`` (None without it), (self, cross) probabilities
        (``cross_weights``: the cross probabilities only, for the guided-alignment loss).

        Without ``past_kv`` the self-attention is causal over the T positions (training, scoring);
        with it, x holds the newest position(s) and attends to the whole cached prefix (less the positions
        ``self_mask`` hides: those written before the row's sentence joined, cache.DecoderCache.start).
        """
        causal = x.shape[1] > 1   # a single query is the newest position: it may see every key
        y, p_self, kv = self.self_attn(
            self.res_self.before(x), mask=self_mask, causal=causal, past_kv=past_kv, need_weights=need_weights
        )
        x = self.res_self.after(x, y)
        y, p_cross, _ = self.cross_attn(
            self.res_cross.before(x), mask=src_mask, memory_kv=memory_kv, need_weights=need_weights or cross_weights
        )
        x = self.res_cross.after(x, y)
        x = self.res_ffn.after(x, self.ffn(self.res_ffn.before(x)))
        return x, kv, (p_self, p_cross)

    def step(self, x: Tensor, k_slot: Tensor, v_slot: Tensor, keys: Tensor, values: Tensor, memory_k: Tensor,
             memory_v: Tensor, src_mask: Tensor, *self_mask: Tensor) -> Tensor:
        """:meth:`forward` of the newest position over tensors alone (Transformer.decode_step; the form
        ``torch.jit.trace`` records, :class:`DecoderStep`): x (N, 1, D); where its keys and values go
        (cache.NewPositions: k_slot and v_slot (1, N, H, K), keys and values (N, H, t+1, K)); the encoder-decoder
        keys and values (N/g, H, S, K); src_mask; and, where rows joined late, the additive self-attention mask."""
        x, _, _ = self(x, (memory_k, memory_v), src_mask, past_kv=NewPositions(k_slot, v_slot, keys, values),
                       self_mask=self_mask[0] if self_mask else None)
        return x


class Steps(Protocol):
    """A model's decoding step in another form (steps.TracedSteps: recorded by torch.jit.trace), by the number of rows
    per source and whether rows joined late (the self-attention mask): the arguments are :func:`step_hidden`'s."""

    def step(self, g: int, masked: bool) -> Callable[..., Tensor]: ...


# --- The model (Figure 1) -------------------------------------------------------------------------------------


@dataclass
class AttentionMaps:
    """Attention probabilities per layer: encoder (B, H, S, S), decoder self (B, H, T, T), cross (B, H, T, S)."""

    encoder: list[Tensor]
    decoder_self: list[Tensor]
    cross: list[Tensor]


class Transformer(nn.Module):
    """The encoder-decoder Transformer (§3, Figure 1).

    The seam used by training and search is ``encode`` -> ``decode`` -> ``generator``:
    ``decode`` returns hidden states so the loss can project them to the vocabulary in chunks.
    ``forward(src, tgt_in)`` composes the three and returns (B, T, V) log-probabilities.
    Incremental decoding (search.py): ``init_cache`` once per batch of sources, then ``decode_step``.
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        layer = dict(d_model=cfg.d_model, n_heads=cfg.n_heads, d_ff=cfg.d_ff, p_drop=cfg.p_drop, p_attn=cfg.p_attn,
                     p_ffn=cfg.p_ffn, pre_norm=cfg.norm == "pre", activation=cfg.activation)
        self.src_embed = Embedding(cfg.src_vocab_size, cfg.d_model, cfg.pad_id)
        self.tgt_embed = self.src_embed if cfg.tie == "all" else Embedding(cfg.tgt_vocab_size, cfg.d_model, cfg.pad_id)
        self.src_pos, self.tgt_pos = (PositionalEncoding(cfg.d_model, cfg.max_positions, cfg.p_drop,
                                                         learned=cfg.positions == "learned") for _ in range(2))
        self.encoder = nn.ModuleList([EncoderLayer(**layer) for _ in range(cfg.encoder_layers)])  # type: ignore[arg-type]
        self.decoder: list[DecoderLayer] = nn.ModuleList(  # type: ignore[assignment]
            [DecoderLayer(**layer) for _ in range(cfg.decoder_layers)])  # type: ignore[arg-type]
        # Pre-norm leaves the residual stream un-normalized: a final LayerNorm closes each stack.
        pre = cfg.norm == "pre"
        self.enc_norm = nn.LayerNorm(cfg.d_model) if pre else nn.Identity()
        self.dec_norm = nn.LayerNorm(cfg.d_model) if pre else nn.Identity()
        # §3.4: the pre-softmax linear transformation, sharing the embedding matrix; no bias in the paper, one
        # (V,) vector in models trained with it (Marian's, imported by pretrained.py: ModelConfig.output_bias).
        self.out_proj = nn.Linear(cfg.d_model, cfg.tgt_vocab_size, bias=cfg.output_bias)
        self.reset_parameters()
        if cfg.tie != "none":
            self.out_proj.weight = self.tgt_embed.lut.weight
        self.traced: Steps | None = None      # its step, traced (inference alone: steps.TracedSteps, steps.decode_step)

    def reset_parameters(self) -> None:
        """Initialization of the paper's reference code (tensor2tensor), also used by fairseq.

        Linear weights: Xavier-uniform, each of the fused Q/K/V blocks on its own (D x D) fan; biases 0.
        Embeddings: N(0, D^-0.5), so that after the sqrt(D) scaling (§3.4) they have unit variance;
        the padding row is 0.
        """
        tied = self.out_proj.weight is self.tgt_embed.lut.weight
        for module in self.modules():
            if isinstance(module, nn.Linear) and not (module is self.out_proj and tied):
                nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, 0.0, module.embedding_dim ** -0.5)
                if module.padding_idx is not None:
                    nn.init.zeros_(module.weight.data[module.padding_idx])
        for module in self.modules():
            if isinstance(module, MultiHeadAttention):
                module.reset_fused()
        if self.out_proj.bias is not None:
            nn.init.zeros_(self.out_proj.bias)

    # -- encoder -----------------------------------------------------------------------------------------

    def _encode(self, src: Tensor, need_weights: bool) -> tuple[Tensor, list[Tensor]]:
        src_mask = padding_mask(src, self.cfg.pad_id)                             # (B, 1, 1, S)
        x = self.src_pos(self.src_embed(src))                                     # (B, S, D)
        maps = []
        for layer in self.encoder:
            x, probs = layer(x, src_mask, need_weights)
            maps.append(probs)
        return self.enc_norm(x), maps

    def encode(self, src: Tensor) -> Tensor:
        """src (B, S) ids -> memory (B, S, D)."""
        return self._encode(src, need_weights=False)[0]

    # -- decoder -----------------------------------------------------------------------------------------

    def _decode(
        self, tgt_in: Tensor, memory: Tensor, src: Tensor, need_weights: bool, cross_of: int | None = None
    ) -> tuple[Tensor, list[Tensor], list[Tensor]]:
        src_mask = padding_mask(src, self.cfg.pad_id)
        x = self.tgt_pos(self.tgt_embed(tgt_in))                                  # (B, T, D)
        self_maps, cross_maps = [], []
        for i, layer in enumerate(self.decoder):
            x, _, (p_self, p_cross) = layer(x, layer.cross_attn.project_memory(memory), src_mask,
                                            need_weights=need_weights, cross_weights=i == cross_of)
            self_maps.append(p_self)
            cross_maps.append(p_cross)
        return self.dec_norm(x), self_maps, cross_maps

    def decode(self, tgt_in: Tensor, memory: Tensor, src: Tensor) -> Tensor:
        """tgt_in (B, T) ids (BOS y_1 .. y_{T-1}), memory (B, S, D), src (B, S) -> hidden states (B, T, D).

        Target padding needs no mask: padding sits to the right, where causality already hides it
        from every real position.
        """
        return self._decode(tgt_in, memory, src, need_weights=False)[0]

    def decode_aligning(self, tgt_in: Tensor, memory: Tensor, src: Tensor) -> tuple[Tensor, Tensor]:
        """:meth:`decode`, and the encoder-decoder attention of the heads trained to align (``cfg.alignment_heads``
        of ``cfg.alignment_layer``, the guided-alignment loss): hidden (B, T, D), probabilities (B, k, T, S)."""
        layer = self.cfg.aligning_layer
        hidden, _, cross = self._decode(tgt_in, memory, src, need_weights=False, cross_of=layer)
        return hidden, cross[layer][:, : self.cfg.alignment_heads]

    def logits(self, hidden: Tensor) -> Tensor:
        """(..., D) -> (..., V) pre-softmax scores."""
        return self.out_proj(hidden)

    def generator(self, hidden: Tensor, project: Callable[[Tensor], Tensor] | None = None) -> Tensor:
        """(..., D) -> (..., V) log-probabilities over the target vocabulary (softmax over the last axis, fp32).
        ``project``: another output projection, (..., D) -> (..., K): a shortlist's rows (shortlist.py)."""
        return log_probs((project or self.logits)(hidden))

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        """src (B, S), tgt_in (B, T) -> (B, T, V) log-probabilities of the next target token."""
        return self.generator(self.decode(tgt_in, self.encode(src), src))

    def attention_maps(self, src: Tensor, tgt_in: Tensor) -> AttentionMaps:
        """All attention probabilities, by the explicit Eq. (1) path (for plots and inspection)."""
        memory, enc_maps = self._encode(src, need_weights=True)
        _, self_maps, cross_maps = self._decode(tgt_in, memory, src, need_weights=True)
        return AttentionMaps(encoder=enc_maps, decoder_self=self_maps, cross=cross_maps)

    # -- incremental decoding (the cache: cache.py) ------------------------------------------------------------

    def init_cache(self, memory: Tensor, src: Tensor, max_len: int = 16) -> DecoderCache:
        """Start incremental decoding of memory (B, S, D): every layer's encoder-decoder keys/values, once.
        ``max_len``: the most tokens the search will decode."""
        memory_kv = [layer.cross_attn.project_memory(memory) for layer in self.decoder]
        return DecoderCache.start(memory_kv, padding_mask(src, self.cfg.pad_id), max_len)

    def step_inputs(self, tokens: Tensor, cache: DecoderCache) -> tuple[tuple[Tensor, ...], list[Any]]:
        """A step's arguments for :func:`step_hidden` (tokens (N,) at position ``cache.step``: the tensors alone, so
        that a recorded form of the step takes them too: steps.py), and each layer's reserved cache position."""
        reserved = [past_kv.reserve() for past_kv in cache.self_kv]   # each cache a position longer, and where it goes
        self_mask = cache.self_mask()                                   # None unless rows joined late
        args = (tokens, self.tgt_pos.at(cache.positions()), cache.src_mask,
                *(t for (_, new), memory_kv in zip(reserved, cache.memory_kv, strict=True)
                  for t in (new.k_slot, new.v_slot, new.keys, new.values, *memory_kv)),
                *(() if self_mask is None else (self_mask,)))
        return args, reserved

    def decode_step(self, tokens: Tensor, cache: DecoderCache,
                    project: Callable[[Tensor], Tensor] | None = None) -> tuple[Tensor, DecoderCache]:
        """One step: tokens (N,) at position ``cache.step`` -> log-probabilities (N, V) and the next cache
        (``project``: the output layer over a shortlist's K candidates, giving (N, K): :meth:`generator`).

        The prefix is never recomputed: each layer attends to its cached keys/values plus the new one.
        """
        args, reserved = self.step_inputs(tokens, cache)
        logp = self.generator(step_hidden(self, *args), project)[:, 0]
        return logp, cache.advance([kv for kv, _ in reserved])                          # (N, V)


def log_probs(logits: Tensor) -> Tensor:
    """(..., V) scores -> log-probabilities, the softmax over the last axis in fp32 at least."""
    return torch.log_softmax(logits.to(torch.promote_types(logits.dtype, torch.float32)), dim=-1)


def step_hidden(parts: Any, tokens: Tensor, vectors: Tensor, src_mask: Tensor,
                *args: Tensor) -> Tensor:
    """The body of a decoding step over tensors alone: tokens (N,) and their positions' vectors
    (PositionalEncoding.at: (1, D), or (N, 1, D) where rows joined late) -> the final LayerNorm's output (N, 1, D).
    ``args``: six per decoder layer (DecoderLayer.step's: where the new position's key and value go, the keys and
    values it attends to, the encoder-decoder keys and values), then the self-attention mask where rows joined late.
    ``parts``: the model, or the steps.DecoderStep that holds its decoder's modules under the same names."""
    x = parts.tgt_pos.add(parts.tgt_embed(tokens[:, None]), vectors)                    # (N, 1, D)
    mask = args[6 * len(parts.decoder):]
    for i, layer in enumerate(parts.decoder):
        x = layer.step(x, *args[6 * i: 6 * i + 6], src_mask, *mask)
    return parts.dec_norm(x)


def make_model(
    src_vocab: int, tgt_vocab: int, N: int = 6, d_model: int = 512, d_ff: int = 2048, h: int = 8, dropout: float = 0.1
) -> Transformer:
    """The Annotated Transformer's constructor, for its readers: a post-norm model with these sizes."""
    cfg = ModelConfig(
        src_vocab_size=src_vocab, tgt_vocab_size=tgt_vocab, n_layers=N, d_model=d_model, d_ff=d_ff, n_heads=h,
        p_drop=dropout, tie="all" if src_vocab == tgt_vocab else "decoder",
    )
    return Transformer(cfg)
