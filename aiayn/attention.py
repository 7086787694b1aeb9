"""The machinery under the model's attention and dropout: masks, fast kernels, beam grouping, CPU dropout.

model.py states the mathematics (Eq. (1) written out, §5.4's dropout); this module computes the same
numbers faster and is tested against it (tests/test_model.py). Why each fast path exists, with the
measurements, is in docs/performance.md.

Shape legend: B batch (or hypotheses), H heads, T queries, S keys, K d_k.

Masks are boolean with True = "may attend" (the convention of ``scaled_dot_product_attention``), or
additive (0 = may attend, -inf = may not) where one mask serves many decoding steps; causality is a
flag, never a stored matrix. Rows with nothing to attend to give zeros, never NaN.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

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


# --- dropout (§5.4) ------------------------------------------------------------------------------------------


def _keep_mask(shape: torch.Size, p: float) -> tuple[Tensor, float]:
    """CPU dropout's keep decisions: a bool tensor of ``shape`` with P(True) = 1 - p, and the scale 1 / (1 - p).

    Deviation (speed): the decisions come from 16-bit slices of 64-bit random words, so p is rounded to
    a multiple of 1/65536 (PyTorch's CPU dropout draws one float per element; docs/performance.md).
    """
    threshold = round(p * 65536)
    n = shape.numel()
    words = torch.empty((n + 3) // 4, dtype=torch.int64).random_(-(2**63), 2**63 - 1)
    keep = words.view(torch.int16)[:n].view(shape) >= threshold - 32768      # P(keep) = 1 - t/65536
    return keep, 65536 / (65536 - threshold)


def dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """Dropout (Srivastava et al., 2014): zero each element with probability p, scale the rest by 1 / (1 - p).

    On CPU the keep decisions come from :func:`_keep_mask`; on GPUs, ``F.dropout``.
    """
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu":
        return F.dropout(x, p, training=True)
    keep, scale = _keep_mask(x.shape, p)
    return torch.where(keep, x * scale, 0.0)


def add_dropout(x: Tensor, y: Tensor, p: float, training: bool) -> Tensor:
    """x + dropout(y), the residual connection's sum (§5.4), in one pass on CPU: addcmul(x, y, keep, scale)."""
    if not training or p == 0.0:
        return x + y
    if p >= 1.0:
        return x + torch.zeros_like(y)
    if y.device.type != "cpu":
        return x + F.dropout(y, p, training=True)
    keep, scale = _keep_mask(y.shape, p)
    return torch.addcmul(x, y, keep.to(y.dtype), value=scale)


class Dropout(nn.Module):
    """:func:`dropout` as a module."""

    def __init__(self, p: float) -> None:
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability {p} is not in [0, 1]")
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        if self.p >= 1.0:
            return torch.zeros_like(x) if self.training else x
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"


# --- Eq. (1) by the fastest kernel -----------------------------------------------------------------------------


def fast_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool, p_drop: float, training: bool
) -> Tensor:
    """Eq. (1) by the fastest kernel for the device, dtype and shape: q (B, H, T, K) -> (B, H, T, K).

    k and v (and mask) may hold B/g rows, each the source of g consecutive rows of q (beam search's beams
    of one sentence): those queries are laid side by side and attend to one copy of the keys.
    Kernels: PyTorch's fused ``scaled_dot_product_attention`` on GPUs and for fp32 on CPU; a few
    queries per row outside training (incremental decoding) on CPU: :func:`few_query_attention`;
    bf16/fp16 on CPU: the explicit Eq. (1) of model.py, faster there than the fused kernel.
    """
    g = q.shape[0] // k.shape[0]
    if g > 1:
        assert not causal, "only encoder-decoder attention shares keys between rows"
        return _ungroup(fast_attention(_group(q, g), k, v, mask, False, p_drop, training), g)
    T, S = q.shape[-2], k.shape[-2]
    if causal and T == 1:
        causal = False        # a single query, the newest position, may see every key
    if q.device.type == "cpu" and T <= 8 and not causal and not training:
        return few_query_attention(q, k, v, mask)
    if causal and T != S:
        tri = causal_mask(T, S, q.device)
        mask, causal = (tri if mask is None else mask & tri), False
    if q.device.type != "cpu" or (q.dtype == torch.float32 and T > 1):
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=p_drop if training else 0.0, is_causal=causal and mask is None,
        )
    from .model import attention  # Eq. (1) as written (model.py imports this module, so not at the top)

    return attention(q, k, v, mask, causal, p_drop, training)[0]


def few_query_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
    """Eq. (1) for a few queries per row without a causal mask (incremental decoding on CPU), (B, H, T, K).

    The same arithmetic as model.attention in fewer passes over the scores: scaled and masked in place,
    with the mask additive where the caller made it once for many steps. A query with no key it may
    attend to gets probabilities 0 (output 0), as in model.attention.
    """
    scores = torch.matmul(q, k.transpose(-2, -1)).mul_(q.shape[-1] ** -0.5)        # (B, H, T, S)
    if mask is not None:
        scores = scores.add_(mask) if mask.is_floating_point() else scores.masked_fill_(~mask, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1).nan_to_num_(0.0), v)          # all -inf -> NaN -> 0


def _group(q: Tensor, g: int) -> Tensor:
    """Queries of rows b*g .. b*g+g-1, which share source b, side by side: (B, H, T, K) -> (B/g, H, g*T, K)."""
    B, H, T, K = q.shape
    return q.reshape(B // g, g, H, T, K).transpose(1, 2).reshape(B // g, H, g * T, K)


def _ungroup(x: Tensor, g: int) -> Tensor:
    """The inverse of :func:`_group`: (B/g, H, g*T, K) -> (B, H, T, K)."""
    Bs, H, gT, K = x.shape
    return x.view(Bs, H, g, gT // g, K).transpose(1, 2).reshape(Bs * g, H, gT // g, K)
