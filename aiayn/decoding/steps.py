"""The decoder's step in the forms that make inference fast, apart from the paper's model (model.py): recorded by
``torch.jit.trace`` (:class:`TracedSteps`, which a CPU engine decodes with), and with shapes that do not change from step
to step (:func:`static_step`, which ``decode.compile`` compiles). Each computes what ``Transformer.decode_step`` does
(tests/model/test_search.py holds them to it).

Shapes as model.py's: N rows, H heads, T the cache's length, K d_k, S source length, L layers, D d_model, V vocabulary.
"""

from __future__ import annotations

import functools
import threading
import warnings
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from ..cache import DecoderCache, KeyValueCache
from ..model import DecoderLayer, MultiHeadAttention, Transformer, log_probs, step_hidden

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
    (``model.traced = TracedSteps(model)``; benchmarks/NOTEBOOK.md); a model whose weights change must not. Steps over
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
    a traced step saves ~0.7-1.6 ms (benchmarks/NOTEBOOK.md): ``after`` = 256 calls, about where the steps run plain
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
    """``model.decode_step`` with shapes that do not change from step to step (steps.StaticCache decodes with it,
    compiled by steps.compiled_step for ``decode.compile``; a function beside the class, which holds the training
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


# --- the static-shape cache (decode.compile) -----------------------------------------------------------------------

_FREE: dict[tuple[Any, ...], list[tuple[Tensor, ...]]] = {}        # (in the order they were last given back)
LENGTH_STEP = 16       # source and output lengths are rounded up to 16s, rows to a power of two ...


ROWS_MIN = {"cpu": 1, "cuda": 64}   # ... at least this many: a GPU decodes 64 rows in the time of one


StaticStep = Callable[..., tuple[Tensor, Tensor, Tensor]]   # model.static_step's signature, bound to a model


# On a GPU the compiled step is captured in CUDA graphs, which copy every input whose address they have not seen into
# buffers of their own, each step: the caches are marked as fixed addresses instead, and buffers of a shape are reused
# from one cache to the next (released when their cache is gone), so that a graph is recorded once per shape.
POOLED = {"cuda"}


POOL_BYTES = 2 << 30        # the free buffers kept at most (the least recently given back are let go first)


def _release(key: tuple[Any, ...], buffers: tuple[Tensor, ...]) -> None:
    free = _FREE.pop(key, [])
    _FREE[key] = free + [buffers] if len(free) < 2 else free
    size = lambda sets: sum(b.numel() * b.element_size() for bs in sets for b in bs)  # noqa: E731
    total = sum(size(sets) for sets in _FREE.values())
    while total > POOL_BYTES and _FREE:
        total -= size(_FREE.pop(next(iter(_FREE))))


def _buffers(owner: object, like: Tensor, shape: tuple[int, ...]) -> tuple[Tensor, ...]:
    """A StaticCache's buffers for ``shape`` (L, R, H, S, T, K), dtype and device of ``like``, contents not set: k, v
    (L, R, H, T, K), mem_k, mem_v (L, R, H, S, K), src_mask (R, 1, 1, S), pos (R,). On a device in :data:`POOLED`,
    those of a cache of this shape that is gone, marked as fixed addresses, and given back when ``owner`` is."""
    L, R, H, S, T, K = shape
    key, pooled = (like.device, like.dtype, *shape), like.device.type in POOLED
    free = _FREE.get(key) if pooled else None
    if free:
        buffers = free.pop()
    else:
        buffers = (like.new_empty((L, R, H, T, K)), like.new_empty((L, R, H, T, K)), like.new_empty((L, R, H, S, K)),
                   like.new_empty((L, R, H, S, K)), like.new_empty((R, 1, 1, S)),
                   torch.empty(R, dtype=torch.long, device=like.device))
        if pooled:
            from torch._dynamo import mark_static_address

            for b in buffers:
                mark_static_address(b)
    if pooled:
        weakref.finalize(owner, _release, key, buffers)
    return buffers


def bucket(n: int, step: int = LENGTH_STEP) -> int:
    """A source or output length rounded up to a multiple of ``step`` (at least one)."""
    return -(-max(n, 1) // step) * step


def bucket_rows(n: int, device: torch.device | None = None) -> int:
    """A number of rows rounded up to a power of two, at least :data:`ROWS_MIN` of ``device``'s kind."""
    return max(ROWS_MIN.get(device.type if device is not None else "cpu", 1), 1 << (max(n, 1) - 1).bit_length())


class StaticCache:
    """The decoding state of :class:`DecoderCache`, kept in buffers whose shapes change only at bucket boundaries,
    so that a compiled step (model.static_step, ``decode.compile``) is compiled once per bucket, not per step.

    Buffers, R >= N rows (:func:`bucket_rows`), T >= every row's length limit and S >= every source (:func:`bucket`):
    ``k``, ``v`` (L, R, H, T, K) the self-attention keys/values, written by position; ``mem_k``, ``mem_v``
    (L, R, H, S, K) the encoder-decoder keys/values, one copy per row (beams included: a row's is its sentence's);
    ``src_mask`` (R, 1, 1, S) additive; ``pos`` (R,) each row's next position in its own sentence (rows of sentences
    that joined later are at earlier positions: no row needs a mask of positions written before it joined).

    The first N rows are the hypotheses, in the order a search keeps them; the rows after them are decoded too
    (their output unused): copies of the last sentence, or rows left by sentences that are done. The methods are
    those of :class:`DecoderCache` that the searches use, done in place where the shapes allow (each returns the
    cache to continue from; this one may not be used afterwards): rows leave by moving the last ones into theirs, and
    the buffers shrink to a smaller bucket once half the rows are unused (:meth:`keep_`).
    """

    def __init__(self, step_fn: StaticStep, like: Tensor, shape: tuple[int, ...], rows: int, step: int = 0) -> None:
        """Buffers of ``shape`` (L, R, H, S, T, K) like ``like``, their contents not set (:func:`_buffers`)."""
        self.k, self.v, self.mem_k, self.mem_v, self.src_mask, self.pos = _buffers(self, like, shape)
        self.step_fn, self.n, self.step = step_fn, rows, step

    def _shape(self, R: int | None = None, S: int | None = None, T: int | None = None) -> tuple[int, ...]:
        L, R0, H, S0, K = self.mem_k.shape
        return L, R or R0, H, S or S0, T or self.k.shape[3], K

    @classmethod
    def start(cls, step_fn: StaticStep, memory_kv: list[tuple[Tensor, Tensor]], src_mask: Tensor,
              max_len: int) -> StaticCache:
        """Nothing decoded yet, for B sources: memory_kv per layer (B, H, S, K), src_mask (B, 1, 1, S) additive
        (DecoderCache's), ``max_len`` the most tokens a row will decode. Rows past B copy the last source."""
        B, H, S, K = memory_kv[0][0].shape
        R, S2 = bucket_rows(B, src_mask.device), bucket(S)
        rows = torch.arange(R, device=src_mask.device).clamp(max=B - 1)
        me = cls(step_fn, memory_kv[0][0], (len(memory_kv), R, H, S2, bucket(max_len), K), B)
        for i, (k, v) in enumerate(memory_kv):                             # (B, H, S, K) -> (R, H, S2, K)
            for x, out in ((k, me.mem_k[i]), (v, me.mem_v[i])):
                torch.index_select(torch.nn.functional.pad(x, (0, 0, 0, S2 - S)), 0, rows, out=out)
        torch.index_select(torch.nn.functional.pad(src_mask, (0, S2 - S), value=float("-inf")), 0, rows,
                           out=me.src_mask)
        for b in (me.k, me.v, me.pos):
            b.zero_()
        return me

    def decode(self, tokens: Tensor) -> tuple[Tensor, StaticCache]:
        """One step: tokens (N,), each at its row's position -> log-probabilities (N, V) and this cache, advanced
        (each row's new key and value written at its position)."""
        R, N = self.pos.shape[0], self.n
        padded = torch.cat([tokens, tokens[-1:].expand(R - N)]) if N < R else tokens
        if N < R:
            self.pos[N:] = 0                                  # unused rows: any position in range will do
        logp, k, v = self.step_fn(padded, self.pos, self.k, self.v, self.mem_k, self.mem_v, self.src_mask)
        rows = torch.arange(R, device=self.pos.device)
        self.k[:, rows, :, self.pos] = k[:, :, :, 0].transpose(0, 1)      # (R, L, H, K) at (row, pos)
        self.v[:, rows, :, self.pos] = v[:, :, :, 0].transpose(0, 1)
        self.pos += 1
        self.step += 1
        return logp[:N], self

    def _rows(self, index: Tensor, rows: int) -> StaticCache:
        """A cache (other buffers, ``index.shape[0]`` rows) whose row i is row index[i] of this one, ``rows`` in use."""
        out = StaticCache(self.step_fn, self.k, self._shape(R=index.shape[0]), rows, self.step)
        for name, dim in (("k", 1), ("v", 1), ("mem_k", 1), ("mem_v", 1), ("src_mask", 0), ("pos", 0)):
            torch.index_select(getattr(self, name), dim, index, out=getattr(out, name))
        return out

    def expand(self, k: int) -> StaticCache:
        """Each hypothesis repeated k times in consecutive rows (the beams), in a bucket of N * k rows."""
        n = self.n * k
        index = torch.arange(bucket_rows(n, self.pos.device), device=self.pos.device).clamp(max=n - 1) // k
        return self._rows(index, n)

    def _move(self, index: Tensor, sources: bool) -> None:
        """In place: row i becomes row index[i] for index (M,) over these rows, copying only rows that move."""
        moved = KeyValueCache.moved_rows(index)
        if not moved.numel():
            return
        src = index[moved]
        for x in (self.k, self.v, self.mem_k, self.mem_v) if sources else (self.k, self.v):
            x[:, moved] = x[:, src]                                   # gathered first: sources may move too
        if sources:
            self.src_mask[moved] = self.src_mask[src]
            self.pos[moved] = self.pos[src]

    def select_self(self, index: Tensor) -> StaticCache:
        """Reorder the decoded prefixes in place (beam search: a sentence's beams share its source and position)."""
        self._move(index, sources=False)
        return self

    def keep_(self, index: Tensor) -> StaticCache:
        """Only the rows ``index`` (M,) stay, in that order, moved in place; once at most half the rows are in use,
        the buffers shrink to M's bucket (a copy, and a new shape for the compiled step)."""
        self._move(index, sources=True)
        self.n = M = index.shape[0]
        R = bucket_rows(M, self.pos.device)
        if M and R < self.pos.shape[0]:
            return self._rows(torch.arange(R, device=self.pos.device).clamp(max=M - 1), M)
        return self

    def compact(self) -> StaticCache:
        """Nothing to drop (every row's positions are its own); ``step`` restarts at the earliest join left."""
        if self.n:
            self.step -= int((self.step - self.pos[: self.n]).min())
        return self

    def join(self, other: StaticCache) -> StaticCache:
        """This cache and ``other``'s rows (step 0) after its own (step-level batching): written into unused rows
        where the buckets hold them, else into buffers of the buckets that do."""
        if other.step != 0:
            raise ValueError("join(): the joining cache must be at step 0")
        N, b = self.n, other.n
        R, S, T = self.pos.shape[0], self.mem_k.shape[3], self.k.shape[3]
        R2, S2, T2 = max(R, bucket_rows(N + b, self.pos.device)), max(S, other.mem_k.shape[3]), max(T, other.k.shape[3])
        out = self if (R2, S2, T2) == (R, S, T) else self._grown(R2, S2, T2)
        s = other.mem_k.shape[3]
        out.k[:, N : N + b], out.v[:, N : N + b] = 0, 0
        out.mem_k[:, N : N + b], out.mem_v[:, N : N + b] = 0, 0
        out.mem_k[:, N : N + b, :, :s], out.mem_v[:, N : N + b, :, :s] = other.mem_k[:, :b], other.mem_v[:, :b]
        out.src_mask[N : N + b] = float("-inf")
        out.src_mask[N : N + b, ..., :s] = other.src_mask[:b]
        out.pos[N : N + b] = 0
        out.n = N + b
        return out

    def _grown(self, R: int, S: int, T: int) -> StaticCache:
        """A copy in buffers of R rows, sources of S and outputs of T positions (the new ones zeros, masked)."""
        out = StaticCache(self.step_fn, self.k, self._shape(R, S, T), self.n, self.step)
        for b in (out.k, out.v, out.mem_k, out.mem_v, out.src_mask, out.pos):
            b.zero_()
        n, s, t = self.pos.shape[0], self.mem_k.shape[3], self.k.shape[3]
        out.k[:, :n, :, :t], out.v[:, :n, :, :t] = self.k, self.v
        out.mem_k[:, :n, :, :s], out.mem_v[:, :n, :, :s] = self.mem_k, self.mem_v
        out.src_mask[:n, ..., s:] = float("-inf")
        out.src_mask[:n, ..., :s] = self.src_mask
        out.pos[:n] = self.pos
        return out


_COMPILED: weakref.WeakKeyDictionary[Transformer, Callable[..., Any]] = weakref.WeakKeyDictionary()


Cache = DecoderCache | StaticCache


SHAPES = 64      # Dynamo's limit of compiled shapes of the step, in this process (every model's count together)


def compiled_step(model: Transformer) -> Callable[..., Any]:
    """model.static_step bound to ``model``, compiled by torch.compile (Inductor) once per model and shape (each
    decoding thread raises Dynamo's limit of shapes per function to :data:`SHAPES`; a shape past it runs uncompiled:
    :func:`_past_the_limit`): StaticCache rounds a batch's shapes up to buckets, so that few are compiled; Inductor
    keeps what it compiled on disk, so another process compiles again only shapes it has not seen. On a GPU the step
    is captured in CUDA graphs (``mode="reduce-overhead"``): a step is a dozen small kernels, whose launches cost more
    than their work at small batches."""
    step = _COMPILED.get(model)
    if step is None:
        cuda = next(model.parameters()).device.type == "cuda"
        eager = functools.partial(static_step, model)
        compiled = torch.compile(eager, dynamic=False, fullgraph=True, mode="reduce-overhead" if cuda else None)
        step = _COMPILED[model] = _past_the_limit(_replays(compiled) if cuda else compiled, eager)
    return step


def _past_the_limit(compiled: Callable[..., Any], eager: Callable[..., Any]) -> Callable[..., Any]:
    """The compiled step, with Dynamo's limit of shapes raised to :data:`SHAPES` in the thread that calls it (Dynamo's
    settings are each thread's own: the decoding threads of ``workers`` > 1 kept the default 8, and failed); for a
    shape past the limit, where a step compiled with ``fullgraph`` fails, the same step uncompiled (the same tokens
    in fp32: tests/model/test_search.py)."""
    import torch._dynamo
    import torch._dynamo.exc as exc

    config = torch._dynamo.config
    limit = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"   # (its name before 2.6)
    limit_hit = tuple(getattr(exc, name) for name in ("FailOnRecompileLimitHit", "RecompileLimitExceeded",
                                                      "CacheLimitExceeded") if hasattr(exc, name))

    def step(*args: Tensor) -> Any:
        if getattr(config, limit) < SHAPES:
            setattr(config, limit, SHAPES)
        try:
            return compiled(*args)
        except limit_hit:
            return eager(*args)
    return step


def _replays(graphs: Callable[..., Any]) -> Callable[..., Any]:
    """A step captured in CUDA graphs, each call a new replay: its outputs of the last call (read and written into
    the cache by then) may be overwritten."""
    def step(*args: Tensor) -> Any:
        torch.compiler.cudagraph_mark_step_begin()
        return graphs(*args)
    return step


def start(model: Transformer, src: Tensor, max_len: int, static: bool = False) -> Cache:
    """The decoding state of src (B, S) before its first step, for at most ``max_len`` tokens: a DecoderCache, or with
    ``static`` (``decode.compile``) a StaticCache decoded by :func:`compiled_step` (the same tokens:
    tests/model/test_search.py)."""
    cache = model.init_cache(model.encode(src), src, 1 if static else max_len)
    return StaticCache.start(compiled_step(model), cache.memory_kv, cache.src_mask, max_len) if static else cache


def decode_step(model: Transformer, tokens: Tensor, cache: Cache,
                project: Callable[[Tensor], Tensor] | None = None) -> tuple[Tensor, Cache]:
    """One step of either cache: tokens (N,) -> log-probabilities (N, V) or (N, K) and the next cache (a static
    cache decodes over the whole vocabulary: the searches use it only without a shortlist)."""
    if isinstance(cache, StaticCache):
        return cache.decode(tokens)
    traced = getattr(model, "traced", None)                     # (a stand-in for the model may have none)
    if traced is None or project is not None:
        return model.decode_step(tokens, cache, project)
    args, reserved = model.step_inputs(tokens, cache)           # (as model.decode_step, the step recorded)
    g, masked = tokens.shape[0] // cache.src_mask.shape[0], cache.joined is not None        # rows per source
    return traced.step(g, masked)(*args), cache.advance([kv for kv, _ in reserved])
