"""The decoder's step in the forms that make inference fast, apart from the paper's model (model.py): recorded by
``torch.jit.trace`` (:class:`TracedSteps`, which a CPU engine decodes with), and with shapes that do not change from step
to step (:func:`static_step`, which ``decode.compile`` compiles). Each computes what ``Transformer.decode_step`` does
(tests/test_search.py holds them to it).

Shapes as model.py's: N rows, H heads, T the cache's length, K d_k, S source length, L layers, D d_model, V vocabulary.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable

import torch
from torch import Tensor, nn

from .model import DecoderLayer, MultiHeadAttention, Transformer, log_probs, step_hidden

# one trace at a time: what the tracer warns of is caught through the warnings module, whose state is the process's
_TRACING = threading.Lock()


class DecoderStep(nn.Module):
    """A decoding step from the tokens to the log-probabilities over the whole vocabulary (:func:`step_hidden`, then
    the output layer) as a module over tensors alone: the form ``torch.jit.trace`` records (:class:`TracedSteps`).
    It holds the model's own decoder-side modules (taken after any quantization, which copies: quantize.int8)."""

    def __init__(self, model: Transformer) -> None:
        super().__init__()
        self.tgt_embed, self.tgt_pos, self.decoder = model.tgt_embed, model.tgt_pos, model.decoder
        self.dec_norm, self.out_proj = model.dec_norm, model.out_proj

    def forward(self, tokens: Tensor, vectors: Tensor, src_mask: Tensor, *args: Tensor) -> Tensor:
        """-> (N, V) log-probabilities; the arguments are :func:`step_hidden`'s."""
        return log_probs(self.out_proj(step_hidden(self, tokens, vectors, src_mask, *args)))[:, 0]


class TracedSteps:
    """A model's decoding step (:class:`DecoderStep`) as recorded by ``torch.jit.trace``: the same operators, without
    the Python between them. One trace for each number of rows per source, with and without the self-attention
    mask, each made after its first ``after`` uses. engines.torch.TorchEngine decodes with them on CPUs
    (``model.traced = TracedSteps(model)``; docs/performance.md); a model whose weights change must not. Steps over
    a shortlist's output layer stay plain."""

    def __init__(self, model: Transformer, after: int = 256) -> None:
        """``after``: calls of a step before it is traced (:class:`_TracedStep`)."""
        self.module, self.after = DecoderStep(model), after
        self.steps: dict[tuple[int, bool], _TracedStep] = {}

    def step(self, g: int, masked: bool) -> Callable[..., Tensor]:
        """The step for g rows per source, with or without the self-attention mask."""
        key = (g, masked)
        step = self.steps.get(key)
        return step if step is not None else self.steps.setdefault(key, _TracedStep(self.module, self.after))


class _TracedStep:
    """A DecoderStep run as it is for its first ``after`` calls, then traced (from that call's arguments) and run as
    traced from then on. Tracing and the executor's first optimized run cost ~0.18 s for the demo model (int8), and
    a traced step saves ~0.7-1.6 ms (docs/performance.md): ``after`` = 256 calls, about where the steps run plain
    have cost what the trace will, so a short run (a one-line translation, a small file) never pays it, and a long
    one pays at most about twice the least it could have.

    A trace records the branches the step took: those on its shapes (attention.py's rows per source g, one query, no
    causal triangle) and on the mask's presence, which the key of :meth:`TracedSteps.step` fixes. The tracer
    warns of each ("Converting a tensor to a Python boolean"); any other warning (a number that would be fixed in the
    record), or a PyTorch without ``torch.jit.trace``, leaves the step untraced."""

    def __init__(self, module: DecoderStep, after: int) -> None:
        self.step: Callable[..., Tensor] = module.forward
        self.module, self.untraced, self.traced = module, after, False

    def __call__(self, *args: Tensor) -> Tensor:
        if self.untraced > 0:
            self.untraced -= 1
        elif not self.traced:
            try:
                with _TRACING, warnings.catch_warnings(record=True) as caught:   # (one trace at a time: _TRACING)
                    warnings.simplefilter("always")
                    traced = torch.jit.trace(self.module, args, check_trace=False)  # (it runs the step once)
                if all(not issubclass(w.category, torch.jit.TracerWarning)
                       or str(w.message).startswith("Converting a tensor to a Python boolean") for w in caught):
                    self.step = traced
            except Exception:  # noqa: BLE001 - no tracing here: the plain step, as untraced
                pass
            self.traced = True
        return self.step(*args)


def static_step(model: Transformer, tokens: Tensor, pos: Tensor, k_cache: Tensor, v_cache: Tensor,
                memory_k: Tensor, memory_v: Tensor, src_mask: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``model.decode_step`` with shapes that do not change from step to step (cache.StaticCache decodes with it,
    compiled by search.compiled_step for ``decode.compile``; a function beside the class, which holds the training
    and the dynamic step): tokens (N,) at positions ``pos`` (N,) (each row's own: sentences that joined later are at
    earlier positions); the self-attention caches of every layer allocated at their length limit, k_cache and
    v_cache (L, N, H, T, K), of which each row reads its positions before its ``pos``; the encoder-decoder keys and
    values memory_k and memory_v (L, N, H, S, K); src_mask (N, 1, 1, S) additive. -> log-probabilities (N, V) and
    the new keys and values (L, N, H, 1, K), which the caller writes at ``pos``."""
    x = model.tgt_embed(tokens[:, None])
    x = x + model.tgt_pos.table().index_select(0, pos).to(x.dtype)[:, None]                 # (N, 1, D)
    earlier = torch.where(torch.arange(k_cache.shape[3], device=tokens.device) < pos[:, None], 0.0,
                          float("-inf")).to(x.dtype)[:, None, None]                           # (N, 1, 1, T)
    keys, values = [], []
    for i, layer in enumerate(model.decoder):
        x, k, v = static_layer(layer, x, k_cache[i], v_cache[i], earlier, (memory_k[i], memory_v[i]), src_mask)
        keys.append(k)
        values.append(v)
    return model.generator(model.dec_norm(x))[:, 0], torch.stack(keys), torch.stack(values)


def static_layer(layer: DecoderLayer, x: Tensor, k_cache: Tensor, v_cache: Tensor, earlier: Tensor,
                 memory_kv: tuple[Tensor, Tensor], src_mask: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """DecoderLayer.forward of the newest position x (N, 1, D) with a self-attention cache of fixed length
    (:func:`static_self`) -> (N, 1, D) and the position's key and value (N, H, 1, K)."""
    y, k, v = static_self(layer.self_attn, layer.res_self.before(x), k_cache, v_cache, earlier)
    x = layer.res_self.after(x, y)
    y, _, _ = layer.cross_attn(layer.res_cross.before(x), mask=src_mask, memory_kv=memory_kv)
    x = layer.res_cross.after(x, y)
    return layer.res_ffn.after(x, layer.ffn(layer.res_ffn.before(x))), k, v


def static_self(attn: MultiHeadAttention, x: Tensor, k_cache: Tensor, v_cache: Tensor,
                earlier: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Self-attention of the newest position over a cache of fixed length (static-shape decoding, :func:`static_step`):
    x (N, 1, D), k_cache and v_cache (N, H, T, K), ``earlier`` (N, 1, 1, T) additive: 0 at the positions each row
    decoded before, -inf elsewhere. The new position's own key and value attend as one more column, so nothing is
    written here. -> the output (N, 1, D), and the new key and value (N, H, 1, K) for the caller to write."""
    q, k, v = attn._heads(attn.qkv_proj(x), 3)
    scale = q.shape[-1] ** -0.5
    scores = torch.cat([torch.matmul(q, k_cache.transpose(-2, -1)) * scale + earlier,
                        (q * k).sum(-1, keepdim=True) * scale], -1)                 # (N, H, 1, T + 1)
    p = torch.softmax(scores, dim=-1)
    out = torch.matmul(p[..., :-1], v_cache) + p[..., -1:] * v                    # (N, H, 1, K)
    N, H, T, K = out.shape
    return attn.out_proj(out.transpose(1, 2).reshape(N, T, H * K)), k, v
