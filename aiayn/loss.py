"""Label-smoothed cross-entropy (paper §5.4, eps_ls = 0.1), plain and chunked.

Shape legend: N target tokens (batch x length, flattened), D d_model, V vocabulary.

The smoothed target distribution q for a token y puts 1 - eps on y and spreads eps evenly over the
V - 2 classes that are neither y nor padding; padding positions (y == pad) contribute nothing.
The loss of a token is the cross-entropy H(q, p) = -sum_c q_c log p_c; ``nll`` is -log p_y.

:func:`chunked_label_smoothed_loss` computes the same numbers from decoder hidden states, a chunk of
tokens at a time, and works out the gradient analytically as it goes (dH/dz = p - q), so the
(N x V) logits never exist at once and nothing is recomputed in the backward pass. This is the
seeds' ``loss_backprop`` memory optimization done as a proper autograd function: no detached
graphs, no manual ``.backward()`` calls, correct gradients for tied weights.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor


def smoothed_targets(target: Tensor, vocab_size: int, eps: float, pad_id: int) -> Tensor:
    """target (N,) -> q (N, V): 1 - eps on the target, eps / (V - 2) elsewhere, 0 on padding (column and rows)."""
    q = torch.full((target.shape[0], vocab_size), eps / (vocab_size - 2), device=target.device)
    q.scatter_(1, target[:, None], 1.0 - eps)
    q[:, pad_id] = 0.0
    q[target == pad_id] = 0.0
    return q


def label_smoothed_loss(logp: Tensor, target: Tensor, eps: float, pad_id: int) -> tuple[Tensor, Tensor]:
    """logp (N, V) log-probabilities, target (N,) -> (summed smoothed loss, summed NLL) over non-pad tokens."""
    logp = logp.float()
    V = logp.shape[-1]
    valid = target != pad_id
    nll = -logp.gather(1, target[:, None]).squeeze(1)                             # (N,)
    # -sum of log p_c over the V - 2 smoothing classes: all classes, less the target (log p_y = -nll), less padding
    others = -(logp.sum(-1) + nll - logp[:, pad_id])                              # (N,)
    loss = (1.0 - eps) * nll + eps / (V - 2) * others
    zero = torch.zeros((), device=logp.device)
    return torch.where(valid, loss, zero).sum(), torch.where(valid, nll, zero).sum()


def _chunk(
    z: Tensor, y: Tensor, eps: float, pad_id: int, grad_dtype: torch.dtype | None
) -> tuple[Tensor, Tensor, Tensor | None]:
    """Loss, NLL and (optionally) dH/dz = softmax(z) - q for a chunk of fp32 logits z (n, V) of non-pad targets y.

    Works from z without a log-softmax tensor (log p_c = z_c - lse):
        nll    = lse - z_y
        others = -(sum_c log p_c - log p_y - log p_pad) = (V - 2) lse - sum(z) + z_y + z_pad
    and overwrites z with exp(z - max) to get the softmax: 6 passes over the (n x V) block.
    """
    V = z.shape[-1]
    c = eps / (V - 2)
    z_y = z.gather(1, y[:, None]).squeeze(1)
    z_pad, z_sum = z[:, pad_id].clone(), z.sum(-1)
    top = z.amax(-1, keepdim=True)
    # clamp: exp of anything below -80 is < 2e-35, and would be a slow denormal float on CPUs
    e = z.sub_(top).clamp_(min=-80.0).exp_()                                  # (n, V), in place of z
    total = e.sum(-1, keepdim=True)
    lse = (top + total.log()).squeeze(1)
    nll = lse - z_y
    loss = (1.0 - eps) * nll + c * ((V - 2) * lse - z_sum + z_y + z_pad)
    if grad_dtype is None:
        return loss.sum(), nll.sum(), None
    # g = softmax - q: q is c everywhere, 1 - eps on the target, 0 on padding
    g = e.mul_(total.reciprocal()).sub_(c).to(grad_dtype)                   # softmax - c
    rows = torch.arange(len(y), device=y.device)
    g[rows, y] += c - (1.0 - eps)
    g[:, pad_id] += c
    return loss.sum(), nll.sum(), g


def _non_pad(hidden: Tensor, target: Tensor, pad_id: int) -> tuple[Tensor, Tensor, Tensor]:
    """The rows of hidden (N, D) and target (N,) whose target is not padding, and their indices."""
    keep = (target != pad_id).nonzero().squeeze(1)
    return keep, hidden.index_select(0, keep), target.index_select(0, keep)


def _matmul_dtype(x: Tensor) -> torch.dtype:
    """The dtype autocast would run a matmul of x in (x's own dtype outside autocast)."""
    device = x.device.type
    return torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else x.dtype


class _ChunkedLoss(torch.autograd.Function):
    """Forward computes loss, NLL and both gradients chunk by chunk; backward only scales them."""

    @staticmethod
    def forward(
        ctx: Any, hidden: Tensor, weight: Tensor, bias: Tensor | None, target: Tensor, eps: float, pad_id: int,
        chunk: int,
    ) -> tuple[Tensor, Tensor]:
        keep, h_all, y_all = _non_pad(hidden, target, pad_id)                   # padding costs nothing
        # Under autocast, cast the states and the matrix once here (not in each of the 3 matmuls per chunk)
        # and keep dH/dz in the matmul dtype: the matmuls would round it to that dtype anyway.
        dtype = _matmul_dtype(hidden)
        h_all, w = h_all.to(dtype), weight.to(dtype)
        grad_h = torch.empty_like(h_all)
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
        grad_b = None if bias is None else torch.zeros(bias.shape, dtype=torch.float32, device=bias.device)
        loss = torch.zeros((), dtype=torch.float32, device=hidden.device)
        nll = torch.zeros((), dtype=torch.float32, device=hidden.device)
        for start in range(0, h_all.shape[0], chunk):
            h, y = h_all[start : start + chunk], y_all[start : start + chunk]    # (n, D), (n,)
            z = _logits(h, w, bias)                                               # (n, V) fp32 logits
            chunk_loss, chunk_nll, g = _chunk(z, y, eps, pad_id, dtype)
            loss += chunk_loss
            nll += chunk_nll
            assert g is not None
            grad_h[start : start + chunk] = g @ w                                 # (n, D) (mm with out= is slower)
            grad_w += (g.t() @ h).float()                                         # (V, D)
            if grad_b is not None:
                grad_b += g.sum(0, dtype=torch.float32)                           # (V,)
        full_grad_h = torch.zeros_like(hidden).index_copy_(0, keep, grad_h.to(hidden.dtype))
        ctx.save_for_backward(full_grad_h, grad_w, grad_b)
        ctx.weight_dtype = weight.dtype
        ctx.mark_non_differentiable(nll)
        return loss, nll

    @staticmethod
    def backward(ctx: Any, grad_loss: Tensor, _grad_nll: Tensor) -> tuple[Tensor | None, ...]:
        grad_h, grad_w, grad_b = ctx.saved_tensors
        db = None if grad_b is None else (grad_b * grad_loss).to(ctx.weight_dtype)
        return (grad_h * grad_loss.to(grad_h.dtype), (grad_w * grad_loss).to(ctx.weight_dtype), db,
                None, None, None, None)


def _logits(h: Tensor, w: Tensor, bias: Tensor | None) -> Tensor:
    """fp32 logits (n, V) of states h (n, D): h W^T, plus the output bias of models that have one."""
    z = (h @ w.t()).float()
    return z if bias is None else z.add_(bias.float())


def chunked_label_smoothed_loss(
    hidden: Tensor, weight: Tensor, target: Tensor, eps: float, pad_id: int, chunk: int = 2048,
    bias: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """hidden (N, D) decoder states, weight (V, D) pre-softmax matrix, target (N,) -> (summed loss, summed NLL).

    Same values and gradients as ``label_smoothed_loss(log_softmax(hidden @ weight.T + bias), ...)``, with peak
    memory of one (chunk x V) block instead of (N x V). ``chunk <= 0`` processes everything at once.
    ``bias`` (V,): the output bias of models that have one (ModelConfig.output_bias).
    """
    if chunk <= 0:
        chunk = max(1, hidden.shape[0])
    if not (torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad)):
        # evaluation: the same sums, chunk by chunk, without working out gradients
        loss = nll = torch.zeros((), device=hidden.device)
        _, h_all, y_all = _non_pad(hidden, target, pad_id)
        dtype = _matmul_dtype(hidden)
        h_all, w = h_all.to(dtype), weight.to(dtype)
        for start in range(0, h_all.shape[0], chunk):
            z = _logits(h_all[start : start + chunk], w, bias)
            chunk_loss, chunk_nll, _ = _chunk(z, y_all[start : start + chunk], eps, pad_id, None)
            loss, nll = loss + chunk_loss, nll + chunk_nll
        return loss, nll
    loss, nll = _ChunkedLoss.apply(hidden, weight, bias, target, eps, pad_id, chunk)
    return loss, nll


class SequenceLoss(torch.nn.Module):
    """The training objective of a batch: encode, decode, then the chunked smoothed loss on hidden states.

    ``forward(src, tgt_in, tgt_out, align=None) -> (summed loss, summed NLL)``. With ``guided`` > 0 and the batch's
    guided-alignment targets ``align`` (B, T, S), the loss adds ``guided`` times :func:`guided_alignment_loss` of the
    heads trained to align. Wrapping the model in a module lets data parallelism (DDP) and ``torch.compile`` see one
    forward that ends in the loss.
    """

    def __init__(self, model: Any, eps: float, chunk: int, guided: float = 0.0) -> None:
        super().__init__()
        self.model, self.eps, self.chunk, self.guided = model, eps, chunk, guided

    def forward(self, src: Tensor, tgt_in: Tensor, tgt_out: Tensor,
                align: Tensor | None = None) -> tuple[Tensor, Tensor]:
        m = self.model
        memory = m.encode(src)
        if self.guided and align is not None:
            hidden, probs = m.decode_aligning(tgt_in, memory, src)               # (B, T, D), (B, k, T, S)
        else:
            hidden, probs = m.decode(tgt_in, memory, src), None
        loss, nll = chunked_label_smoothed_loss(
            hidden.reshape(-1, hidden.shape[-1]), m.out_proj.weight, tgt_out.reshape(-1), self.eps, m.cfg.pad_id,
            self.chunk, m.out_proj.bias,
        )
        if probs is not None and align is not None:
            loss = loss + self.guided * guided_alignment_loss(probs, align)
        return loss, nll


def guided_alignment_loss(probs: Tensor, align: Tensor) -> Tensor:
    """Guided alignment (Garg et al. 2019, as Marian's ``ce``): the cross-entropy of the aligning heads' attention
    (B, k, T, S), averaged over the k heads, against the reference distributions ``align`` (B, T, S) from word
    links (lexicon.GuidedTargets), summed over the target positions that have links (their rows sum to 1)."""
    attn = probs.float().mean(1)                                                  # (B, T, S)
    return -(align * attn.clamp_min(1e-9).log()).sum()
