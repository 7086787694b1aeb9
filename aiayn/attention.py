"""§3.2.1 Scaled dot-product attention: Eq. (1) written out, its masks, and the fastest kernel for the same numbers.

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V                                        (Eq. 1)

:func:`attention` is the equation as written; it returns the probabilities (for plots and the web page) and
is the oracle the fast path is tested against (tests/model/test_model.py). :func:`fast_attention` picks, for the
device, dtype and shape, between PyTorch's fused ``scaled_dot_product_attention`` and the written-out form
(faster on CPU for a few queries, and for bf16/fp16), and lays the beams of one sentence side by side so
that they read one copy of its keys. Why each choice, with measurements: benchmarks/NOTEBOOK.md.
Multi-head attention (§3.2.2), which calls these, is in model.py.

Shape legend: B batch (or hypotheses), H heads, T queries, S keys, K d_k.

Masks are boolean with True = "may attend" (the convention of ``scaled_dot_product_attention``), or
additive (0 = may attend, -inf = may not) where one mask serves many decoding steps; causality is a
flag, never a stored matrix. Rows with nothing to attend to give zeros, never NaN.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .dropout import dropout

# --- masks -------------------------------------------------------------------------------------------------


def padding_mask(tokens: Tensor, pad_id: int) -> Tensor:
    """(B, S) token ids -> (B, 1, 1, S) bool, True where a key is a real token (may be attended)."""
    return (tokens != pad_id)[:, None, None, :]


def causal_mask(T: int, S: int, device: torch.device) -> Tensor:
    """(T, S) bool: query t may see keys up to t, aligned bottom-right (the queries are the last T of S
    positions when the keys extend a cached prefix)."""
    return torch.ones(T, S, dtype=torch.bool, device=device).tril(S - T)


def additive_mask(mask: Tensor, dtype: torch.dtype) -> Tensor:
    """A bool mask (True = may attend) as the term softmax's input adds: 0 where allowed, -inf where not."""
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(~mask, float("-inf"))


# --- Eq. (1) -----------------------------------------------------------------------------------------------


def attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False,
    p_drop: float = 0.0, training: bool = False,
) -> tuple[Tensor, Tensor]:
    """Eq. (1), written out: Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V.

    q (B, H, T, K), k and v (B, H, S, K); mask broadcastable to (B, H, T, S): bool with True = may attend,
    or additive (0 = may attend, -inf = may not). ``causal``: query t may not see keys after t.
    ``p_drop``: dropout on the probabilities while ``training`` (not in the paper; tensor2tensor's option).
    Returns the output (B, H, T, K) and the attention probabilities (B, H, T, S), before dropout.
    """
    scores = torch.matmul(q, k.transpose(-2, -1)).mul_(q.shape[-1] ** -0.5)        # (B, H, T, S)
    allowed = None
    if mask is not None and mask.is_floating_point():
        scores = scores.add_(mask)
    else:
        allowed = mask
    if causal:
        tri = causal_mask(scores.shape[-2], scores.shape[-1], q.device)           # (T, S)
        allowed = tri if allowed is None else allowed & tri
    if allowed is not None:
        scores = scores.masked_fill_(~allowed, float("-inf"))
    probs = torch.softmax(scores, dim=-1)                                         # over the keys
    # A row with no key it may attend to is all -inf, NaN after softmax: its probabilities become 0.
    probs = probs.nan_to_num(0.0) if probs.requires_grad else probs.nan_to_num_(0.0)
    # the probabilities returned are those before dropout (what a plot shows, what guided alignment trains)
    return torch.matmul(dropout(probs, p_drop, training), v), probs              # (B, H, T, K), (B, H, T, S)


def fast_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool, p_drop: float, training: bool
) -> Tensor:
    """Eq. (1) by the fastest kernel for the device, dtype and shape: q (B, H, T, K) -> (B, H, T, K).

    k and v (and mask) may hold B/g rows, each the source of g consecutive rows of q (beam search's beams
    of one sentence): those queries are laid side by side and attend to one copy of the keys.
    Kernels: PyTorch's fused ``scaled_dot_product_attention`` on GPUs and for fp32 on CPU; on CPU the
    written-out :func:`attention` for a few queries per row outside training (incremental decoding: fewer
    passes than the fused kernel's set-up) and for bf16/fp16 (the fused kernel's backward is slower there).
    """
    g = q.shape[0] // k.shape[0]
    if g > 1:
        assert not causal, "only encoder-decoder attention shares keys between rows"
        return _ungroup(fast_attention(_group(q, g), k, v, mask, False, p_drop, training), g)
    T, S = q.shape[-2], k.shape[-2]
    if causal and T == 1:
        causal = False        # a single query, the newest position, may see every key
    few_queries = T <= 8 and not causal and not training            # incremental decoding
    if q.device.type == "cpu" and (few_queries or q.dtype != torch.float32 or T == 1):
        return attention(q, k, v, mask, causal, p_drop, training)[0]
    if causal and (mask is not None or T != S):
        # the fused kernel's is_causal takes no mask and aligns top-left: the triangle joins the mask instead
        mask, causal = _with_causal(mask, causal_mask(T, S, q.device)), False
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, dropout_p=p_drop if training else 0.0, is_causal=causal,
    )


def _with_causal(mask: Tensor | None, tri: Tensor) -> Tensor:
    """A mask (bool or additive, or None) that also forbids what the causal triangle ``tri`` (T, S) forbids."""
    if mask is None:
        return tri
    if mask.is_floating_point():
        return torch.where(tri, mask, float("-inf"))
    return mask & tri


def _group(q: Tensor, g: int) -> Tensor:
    """Queries of rows b*g .. b*g+g-1, which share source b, side by side: (B, H, T, K) -> (B/g, H, g*T, K)."""
    B, H, T, K = q.shape
    return q.reshape(B // g, g, H, T, K).transpose(1, 2).reshape(B // g, H, g * T, K)


def _ungroup(x: Tensor, g: int) -> Tensor:
    """The inverse of :func:`_group`: (B/g, H, g*T, K) -> (B, H, T, K)."""
    Bs, H, gT, K = x.shape
    return x.view(Bs, H, g, gT // g, K).transpose(1, 2).reshape(Bs * g, H, gT // g, K)
