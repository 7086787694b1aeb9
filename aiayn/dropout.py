"""Dropout (§5.4; Srivastava et al., 2014): zero each element with probability p, scale the rest by 1 / (1 - p).

The paper applies it to each sub-layer's output before the residual sum, and to the sums of embeddings and
positional encodings; tensor2tensor's options add it to the attention probabilities and inside the FFN. On
CPU the keep decisions are drawn faster than ``torch.nn.functional.dropout`` draws them (benchmarks/NOTEBOOK.md);
on GPUs, PyTorch's kernel is used.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def _keep_mask(shape: torch.Size, p: float) -> tuple[Tensor, float]:
    """CPU dropout's keep decisions: a bool tensor of ``shape`` with P(True) = 1 - p, and the scale 1 / (1 - p).

    Deviation (speed): the decisions come from 16-bit slices of 64-bit random words, so p is rounded to
    a multiple of 1/65536 (PyTorch's CPU dropout draws one float per element; benchmarks/NOTEBOOK.md).
    """
    threshold = round(p * 65536)
    n = shape.numel()
    words = torch.empty((n + 3) // 4, dtype=torch.int64).random_(-(2**63), 2**63 - 1)
    keep = words.view(torch.int16)[:n].view(shape) >= threshold - 32768      # P(keep) = 1 - t/65536
    return keep, 65536 / (65536 - threshold)


def dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """Dropout of ``x`` with probability ``p`` while ``training``; the identity otherwise."""
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
