"""A deliberately naive transcription of the paper's equations, kept only as a test oracle.

One sentence at a time (no padding, no masks beyond causality), one head at a time with its own
W_i^Q, W_i^K, W_i^V (paper §3.2.2), plain Python loops over layers and heads, float64 throughout.
It shares no code with ``aiayn.model``; :func:`reference_log_probs` reads the weights of an
``aiayn.Transformer`` and splits its fused projections back into per-head matrices.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def layer_norm(x: Tensor, gain: Tensor, bias: Tensor, eps: float = 1e-5) -> Tensor:
    """Ba et al. (2016): (x - mean) / sqrt(var + eps), biased variance over the features."""
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return gain * (x - mean) / torch.sqrt(var + eps) + bias


def scaled_dot_product(q: Tensor, k: Tensor, v: Tensor, causal: bool) -> Tensor:
    """Eq. (1) for one head: q (T, K), k and v (S, K)."""
    scores = q @ k.T / math.sqrt(q.shape[-1])
    if causal:
        for i in range(scores.shape[0]):
            for j in range(i + 1, scores.shape[1]):
                scores[i, j] = -math.inf
    weights = torch.exp(scores - scores.max(-1, keepdim=True).values)
    weights = weights / weights.sum(-1, keepdim=True)
    return weights @ v


def multi_head(p: dict[str, Tensor], prefix: str, x: Tensor, mem: Tensor, n_heads: int, causal: bool,
               cross: bool) -> Tensor:
    D = x.shape[-1]
    K = D // n_heads
    if cross:
        wq, bq = p[prefix + "q_proj.weight"], p[prefix + "q_proj.bias"]
        wk, wv = p[prefix + "kv_proj.weight"].split(D)
        bk, bv = p[prefix + "kv_proj.bias"].split(D)
    else:
        wq, wk, wv = p[prefix + "qkv_proj.weight"].split(D)
        bq, bk, bv = p[prefix + "qkv_proj.bias"].split(D)
    heads = []
    for i in range(n_heads):
        rows = slice(i * K, (i + 1) * K)
        q = x @ wq[rows].T + bq[rows]
        k = mem @ wk[rows].T + bk[rows]
        v = mem @ wv[rows].T + bv[rows]
        heads.append(scaled_dot_product(q, k, v, causal))
    return torch.cat(heads, -1) @ p[prefix + "out_proj.weight"].T + p[prefix + "out_proj.bias"]


def ffn(p: dict[str, Tensor], prefix: str, x: Tensor) -> Tensor:
    """Eq. (2)."""
    h = torch.clamp(x @ p[prefix + "w1.weight"].T + p[prefix + "w1.bias"], min=0.0)
    return h @ p[prefix + "w2.weight"].T + p[prefix + "w2.bias"]


def sublayer(p: dict[str, Tensor], norm: str, x: Tensor, f) -> Tensor:  # type: ignore[no-untyped-def]
    g, b = p[norm + ".norm.weight"], p[norm + ".norm.bias"]
    return layer_norm(x + f(x), g, b)  # post-norm: LayerNorm(x + Sublayer(x))


def positions(T: int, D: int) -> Tensor:
    pe = torch.zeros(T, D, dtype=torch.float64)
    for pos in range(T):
        for i in range(0, D, 2):
            pe[pos, i] = math.sin(pos / 10000 ** (i / D))
            pe[pos, i + 1] = math.cos(pos / 10000 ** (i / D))
    return pe


def reference_log_probs(model, src: list[int], tgt_in: list[int]) -> Tensor:  # type: ignore[no-untyped-def]
    """Log-probabilities (T, V) for one unpadded sentence pair, post-norm, sinusoidal positions."""
    cfg = model.cfg
    assert cfg.norm == "post" and cfg.positions == "sinusoidal"
    p = {k: v.detach().double() for k, v in model.state_dict().items()}
    D, H = cfg.d_model, cfg.n_heads
    x = p["src_embed.lut.weight"][src] * math.sqrt(D) + positions(len(src), D)
    for n in range(cfg.encoder_layers):
        e = f"encoder.{n}."
        x = sublayer(p, e + "res_attn", x, lambda h, e=e: multi_head(p, e + "self_attn.", h, h, H, False, False))
        x = sublayer(p, e + "res_ffn", x, lambda h, e=e: ffn(p, e + "ffn.", h))
    memory = x
    y = p["tgt_embed.lut.weight" if "tgt_embed.lut.weight" in p else "src_embed.lut.weight"][tgt_in]
    y = y * math.sqrt(D) + positions(len(tgt_in), D)
    for n in range(cfg.decoder_layers):
        d = f"decoder.{n}."
        y = sublayer(p, d + "res_self", y, lambda h, d=d: multi_head(p, d + "self_attn.", h, h, H, True, False))
        y = sublayer(p, d + "res_cross", y,
                     lambda h, d=d: multi_head(p, d + "cross_attn.", h, memory, H, False, True))
        y = sublayer(p, d + "res_ffn", y, lambda h, d=d: ffn(p, d + "ffn.", h))
    logits = y @ p["out_proj.weight"].T
    return logits - torch.logsumexp(logits, -1, keepdim=True)
