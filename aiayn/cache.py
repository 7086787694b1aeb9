"""The incremental-decoding cache: what a search carries from one decoding step to the next.

Causal self-attention (§3.2.3) never lets a position see later ones, so the keys and values computed
for earlier positions stay valid: they are kept instead of recomputed, and each step runs the decoder
on the newest token only (``Transformer.decode_step``). The encoder-decoder keys and values depend only
on the source: they are projected once per sentence and shared by its beams.

Shape legend: N hypotheses (rows), B sources, g = N / B hypotheses per source, H heads, S source
length, K d_k, t positions decoded so far.

State is returned, not stored: the model takes a cache and returns the next one. The buffers are
reused between them (appending writes in place, sentences that join are written into spare rows): what the caches
of one buffer share, and the rules that keep each of them valid, are written once, in :class:`_Buffer` (the decoded
positions) and :class:`_Sources` (the sources of a batch that sentences join); a cache whose buffer changed under it
refuses to be read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from .attention import additive_mask


@dataclass
class _Buffer:
    """The storage shared by the caches of one layer made from one another (each a view of it), and what they know
    of it together. Written once here, kept by :class:`KeyValueCache`'s methods:

    - ``k`` and ``v`` are contiguous (capacity, rows, H, K); a cache's own keys/values are their first ``claimed`` rows (the
      newest cache's), the rows after them are spare, for sentences that join;
    - positions before ``written`` hold what the newest cache appended; an older cache may append only by copying
      first (its positions past its length are no longer its own), so appending never changes what it sees;
    - an in-place reorder changes what every cache of the buffer sees: it bumps ``reorders``, and a cache made
      before it refuses to be used.
    """

    k: Tensor
    v: Tensor
    written: int                # positions written
    claimed: int                # rows of the newest cache
    reorders: int = 0           # in-place reorders so far


class KeyValueCache:
    """One decoder layer's self-attention keys and values for the t positions decoded so far.

    The buffers are time-major, (capacity, N, H, K), and the capacity doubles when full: appending a
    position writes one contiguous slice (no copy of the prefix). Beam search's reordering is done in
    place by :meth:`reorder_`, moving only the rows whose hypothesis changed. Caches made from one another share
    a :class:`_Buffer`, whose rules say when that is safe.
    """

    def __init__(self, k: Tensor, v: Tensor, length: int, buffer: _Buffer | None = None) -> None:
        self.k, self.v, self.length = k, v, length
        self._buf = buffer if buffer is not None else _Buffer(k, v, written=length, claimed=k.shape[1])
        self._version = self._buf.reorders

    @classmethod
    def empty(cls, n: int, heads: int, d_k: int, like: Tensor, capacity: int = 16) -> KeyValueCache:
        """No positions yet, for n rows; dtype and device of ``like``."""
        buf = like.new_empty((capacity, n, heads, d_k))
        return cls(buf, torch.empty_like(buf), 0)

    def _check(self) -> None:
        if self._version != self._buf.reorders:
            raise RuntimeError("this decoding cache's buffer was reordered in place (DecoderCache.select_self) "
                               "after it was made; continue from the reordered cache, or copy with select() first")

    def _view(self, rows: int) -> KeyValueCache:
        """A cache of this buffer's first ``rows`` rows, ``length`` positions."""
        return KeyValueCache(self._buf.k[:, :rows], self._buf.v[:, :rows], self.length, self._buf)

    def append(self, k: Tensor, v: Tensor) -> tuple[KeyValueCache, Tensor, Tensor]:
        """k, v (N, H, T, K) of T new positions -> the extended cache, and all keys and values (N, H, t+T, K)
        (strided views of the buffers)."""
        cache, new = self.reserve(k.shape[2])
        _, keys, values = new.append(k, v)
        return cache, keys, values

    def reserve(self, T: int = 1) -> tuple[KeyValueCache, NewPositions]:
        """The cache extended by T positions not yet written, and where they go (:class:`NewPositions`, whose
        ``append`` writes them)."""
        self._check()
        t = self.length
        kb, vb, buf = self.k, self.v, self._buf
        if buf.written != t or t + T > kb.shape[0]:      # written past us by another cache, or full: copy
            kb = kb.new_empty((max(2 * kb.shape[0], t + T),) + kb.shape[1:])
            vb = torch.empty_like(kb)
            kb[:t], vb[:t] = self.k[:t], self.v[:t]
            buf = _Buffer(kb, vb, written=t, claimed=kb.shape[1])
        buf.written = t + T
        return KeyValueCache(kb, vb, t + T, buf), NewPositions(kb[t : t + T], vb[t : t + T],
                                                               kb[: t + T].permute(1, 2, 0, 3),
                                                               vb[: t + T].permute(1, 2, 0, 3))

    def select(self, index: Tensor) -> KeyValueCache:
        """Row i of the result is row index[i] of this cache: a copy of the filled positions."""
        self._check()
        t = self.length
        kb = self.k.new_empty((self.k.shape[0], index.shape[0]) + self.k.shape[2:])
        vb = torch.empty_like(kb)
        torch.index_select(self._buf.k[:t], 1, index, out=kb[:t])      # (the buffer: see reorder_)
        torch.index_select(self._buf.v[:t], 1, index, out=vb[:t])
        return KeyValueCache(kb, vb, t)

    def join(self, n: int) -> KeyValueCache:
        """This cache with ``n`` more rows after its own, whose t positions are zeros (step-level batching: the
        rows of sentences that join a running search; the decoder's self-attention mask hides those positions).
        The buffers it makes have as many spare rows again, so that later joins write only the new rows in
        place (while no other cache of the buffer has claimed them) instead of copying every row."""
        self._check()
        t, N, buf = self.length, self.k.shape[1], self._buf
        if buf.claimed != N or N + n > buf.k.shape[1] or t >= buf.k.shape[0]:      # no room in place: copy
            kb = self.k.new_empty((max(self.k.shape[0], t + 1), 2 * (N + n)) + self.k.shape[2:])
            vb = torch.empty_like(kb)
            kb[:t, :N], vb[:t, :N] = self.k[:t], self.v[:t]
            buf = _Buffer(kb, vb, written=t, claimed=N)
        buf.k[:t, N : N + n], buf.v[:t, N : N + n] = 0, 0   # finite, so that masked positions weigh exactly nothing
        buf.claimed = N + n
        return KeyValueCache(buf.k[:, : N + n], buf.v[:, : N + n], t, buf)

    def drop_front(self, m: int) -> KeyValueCache:
        """The cache without its first ``m`` positions (those no live row can see any more): a copy, with the
        spare rows of this cache's buffers."""
        self._check()
        t, N = self.length, self.k.shape[1]
        kb = self.k.new_empty((max(self.k.shape[0] - m, t - m, 1), self._buf.k.shape[1]) + self.k.shape[2:])
        vb = torch.empty_like(kb)
        kb[: t - m, :N], vb[: t - m, :N] = self.k[m:t], self.v[m:t]
        return KeyValueCache(kb[:, :N], vb[:, :N], t - m, _Buffer(kb, vb, written=t - m, claimed=N))

    @staticmethod
    def moved_rows(index: Tensor) -> Tensor:
        """The rows i with index[i] != i: those a reorder by ``index`` has to copy."""
        return (index != torch.arange(index.shape[0], device=index.device)).nonzero().squeeze(1)

    def reorder_(self, index: Tensor, moved: Tensor | None = None) -> KeyValueCache:
        """In place, for index (M,) over these N >= M rows: row i becomes row index[i], rows past M are let go.
        Only the rows with index[i] != i are copied (beam search keeps most hypotheses in their row; sentences
        leaving are replaced by the last ones, see search.py); ``moved`` is :meth:`moved_rows` of ``index``
        where the caller already has it."""
        self._check()
        t, M = self.length, index.shape[0]
        if moved is None:
            moved = self.moved_rows(index)
        if moved.numel():
            src = index[moved]
            # from the whole buffer, whose first rows are this cache's: index_select copies a strided input whole
            # into a contiguous one first (this cache, a view of fewer rows than its buffer), 3x the time
            for buf in (self._buf.k, self._buf.v):
                buf[:t].index_copy_(1, moved, buf[:t].index_select(1, src))   # gathered first: sources may move too
        self._buf.reorders += 1
        if M == self.k.shape[1]:
            return KeyValueCache(self.k, self.v, t, self._buf)
        self._buf.claimed = M
        return self._view(M)


class NewPositions:
    """Where a step's keys and values go in a layer's buffers (:meth:`KeyValueCache.reserve`): the T positions
    ``k_slot`` and ``v_slot`` (T, N, H, K), and all keys and values with them, ``keys`` and ``values`` (N, H, t+T, K).
    It stands for the cache in ``MultiHeadAttention.forward`` (the same ``append``) with tensors alone, so that a
    decoder layer's step can be traced (model.DecoderStep)."""

    def __init__(self, k_slot: Tensor, v_slot: Tensor, keys: Tensor, values: Tensor) -> None:
        self.k_slot, self.v_slot, self.keys, self.values = k_slot, v_slot, keys, values

    def append(self, k: Tensor, v: Tensor) -> tuple[NewPositions, Tensor, Tensor]:
        """k, v (N, H, T, K) written into the slots -> (self, all keys, all values)."""
        self.k_slot.copy_(k.permute(2, 0, 1, 3))
        self.v_slot.copy_(v.permute(2, 0, 1, 3))
        return self, self.keys, self.values


@dataclass
class _Sources:
    """The encoder-decoder keys/values and the source mask of a batch that sentences join (step-level batching),
    with spare rows, shared by the caches made from one another after a join. Written once here, kept by
    :class:`DecoderCache`'s methods: ``kv`` per layer (rows, H, S, K) and ``mask`` (rows, 1, 1, S) additive; a
    cache's sources are their first ``claimed`` rows (the newest cache's); the rows after them are free for the next
    join, which writes there only while it extends the newest cache and S does not grow (else it copies)."""

    kv: list[tuple[Tensor, Tensor]]
    mask: Tensor
    claimed: int

    def rows(self, n: int) -> tuple[list[tuple[Tensor, Tensor]], Tensor]:
        """The first ``n`` rows: a cache's memory_kv and src_mask."""
        return [(k[:n], v[:n]) for k, v in self.kv], self.mask[:n]


@dataclass
class DecoderCache:
    """Incremental-decoding state for a batch of N hypotheses: B sources, each with g = N / B hypotheses
    (its beams) in consecutive rows.

    memory_kv: per layer, the encoder-decoder keys/values (B, H, S, K), computed once per source and
               shared by its g hypotheses (not copied per beam).
    self_kv:   per layer, the self-attention keys/values of the t tokens decoded so far, N rows.
    src_mask:  (B, 1, 1, S) additive (0 at real source tokens, -inf at padding; made once per source).
    step:      t, the position of the next token in the buffers.
    joined:    None when every row started at step 0 (a batch decoded together); else (N,) the step at which
               each row's sentence joined (step-level batching, :meth:`join`): its first ``joined`` positions
               are hidden from it and its next token is at position ``step - joined`` of its own sentence.
    """

    memory_kv: list[tuple[Tensor, Tensor]]
    self_kv: list[KeyValueCache]
    src_mask: Tensor
    step: int = 0
    joined: Tensor | None = None
    sources: _Sources | None = None     # after a join: the buffers whose first B rows memory_kv and src_mask are

    @classmethod
    def start(cls, memory_kv: list[tuple[Tensor, Tensor]], src_mask: Tensor, max_len: int) -> DecoderCache:
        """Nothing decoded yet. memory_kv: per layer (B, H, S, K) keys and values of the source; src_mask
        (B, 1, 1, S) bool; ``max_len``: the most tokens the search will decode, the self-attention buffers'
        first capacity (they grow past it if needed).

        The source keys/values are stored contiguous: each step's attention matmuls would otherwise copy
        the strided views of the fused projection (benchmarks/NOTEBOOK.md).
        """
        memory_kv = [(k.contiguous(), v.contiguous()) for k, v in memory_kv]
        N, H, _, K = memory_kv[0][0].shape
        return cls(memory_kv=memory_kv,
                   self_kv=[KeyValueCache.empty(N, H, K, like=memory_kv[0][0], capacity=max_len) for _ in memory_kv],
                   src_mask=additive_mask(src_mask, memory_kv[0][0].dtype))

    def advance(self, self_kv: list[KeyValueCache]) -> DecoderCache:
        """The cache after one step, with each layer's extended self-attention keys/values."""
        return DecoderCache(self.memory_kv, self_kv, self.src_mask, self.step + 1, self.joined, self.sources)

    def positions(self) -> int | Tensor:
        """The position of each row's next token in its own sentence: ``step``, or (N,) with :attr:`joined`."""
        return self.step if self.joined is None else self.step - self.joined

    def self_mask(self) -> Tensor | None:
        """None, or the additive mask (N, 1, 1, step + 1) of the next token's self-attention over the buffers
        (after it is appended): -inf at the positions written before the row's sentence joined."""
        if self.joined is None:
            return None
        keys = torch.arange(self.step + 1, device=self.joined.device)
        return additive_mask((keys >= self.joined[:, None])[:, None, None, :], self.src_mask.dtype)

    def join(self, other: DecoderCache) -> DecoderCache:
        """This cache and ``other``'s rows after its own (step-level batching). ``other`` has decoded nothing
        (step 0) and has as many hypotheses per source; its sources are padded or this cache's are, to the
        longer source length, the padding masked."""
        if other.step != 0 or (self.rows and other.group != self.group):
            raise ValueError("join(): the joining cache must be at step 0 with the same hypotheses per source")
        start = self.joined if self.joined is not None else self.src_mask.new_zeros(self.rows, dtype=torch.long)
        sources = _join_sources(self, other)
        memory_kv, src_mask = sources.rows(sources.claimed)
        return DecoderCache(memory_kv, [kv.join(other.rows) for kv in self.self_kv], src_mask, self.step,
                            torch.cat([start, start.new_full((other.rows,), self.step)]), sources)

    def compact(self) -> DecoderCache:
        """Drop the buffer positions that no row can see (those before every row joined); a cache whose rows
        all start at the first remaining position needs no mask any more."""
        m = 0 if self.joined is None or not self.rows else int(self.joined.min())
        if self.joined is None or m == 0:
            return self
        start = self.joined - m
        return DecoderCache(self.memory_kv, [kv.drop_front(m) for kv in self.self_kv], self.src_mask, self.step - m,
                            None if not bool(start.any()) else start, self.sources)

    @property
    def rows(self) -> int:
        """N, the hypotheses."""
        return self.self_kv[0].k.shape[1] if self.self_kv else self.src_mask.shape[0]

    @property
    def group(self) -> int:
        """g, the hypotheses per source."""
        return self.rows // self.src_mask.shape[0]

    def expand(self, k: int) -> DecoderCache:
        """Each hypothesis repeated k times in consecutive rows (the beams), sharing its source."""
        index = torch.arange(self.rows, device=self.src_mask.device).repeat_interleave(k)
        return DecoderCache(self.memory_kv, [kv.select(index) for kv in self.self_kv], self.src_mask, self.step,
                            None if self.joined is None else self.joined[index])

    def _sources(self, index: Tensor) -> Tensor:
        """The sources of the rows ``index``, which keeps each source's g rows together and in order."""
        g = self.group
        if g == 1:
            return index
        rows = index.view(-1, g)
        src_index = rows[:, 0] // g
        if not torch.equal(rows, src_index[:, None] * g + torch.arange(g, device=index.device)):
            raise ValueError(f"select(): the {g} hypotheses of a source must be kept together and in order")
        return src_index

    def select(self, index: Tensor) -> DecoderCache:
        """Keep / reorder hypotheses: row i of the result is row index[i] of this cache.

        With g > 1 hypotheses per source, ``index`` keeps each source's g rows together and in order
        (index[i*g + j] = s*g + j), as retiring finished sentences does; anything else is a ValueError.
        """
        src_index = self._sources(index)
        pick: Callable[[Tensor], Tensor] = lambda t: t.index_select(0, src_index)  # noqa: E731
        return DecoderCache(
            memory_kv=[(pick(k), pick(v)) for k, v in self.memory_kv],
            self_kv=[kv.select(index) for kv in self.self_kv],
            src_mask=pick(self.src_mask),
            step=self.step,
            joined=None if self.joined is None else self.joined[index],
        )

    def keep_(self, index: Tensor) -> DecoderCache:
        """:meth:`select` in place, ``index`` (M,) over these N >= M rows: only the rows and sources that move are
        copied (sentences leave as the last ones move into their rows). This cache may not be used afterwards."""
        src_index = self._sources(index)
        sources = self.sources or _Sources(list(self.memory_kv), self.src_mask, self.src_mask.shape[0])
        M = src_index.shape[0]
        moved = KeyValueCache.moved_rows(src_index)
        if moved.numel():
            for x in [sources.mask] + [t for kv in sources.kv for t in kv]:
                x[moved] = x[src_index[moved]]                   # gathered first: sources may move too
        sources.claimed = M
        memory_kv, src_mask = sources.rows(M)
        return DecoderCache(memory_kv, [kv.reorder_(index) for kv in self.self_kv], src_mask, self.step,
                            None if self.joined is None else self.joined[index], self.sources)

    def select_self(self, index: Tensor) -> DecoderCache:
        """Reorder only the decoded prefixes, in place (beam search: the beams of a sentence share its
        source keys/values); index (N,) over the same N rows. This cache may not be used afterwards."""
        moved = KeyValueCache.moved_rows(index)                    # the same rows move in every layer
        return DecoderCache(self.memory_kv, [kv.reorder_(index, moved) for kv in self.self_kv], self.src_mask,
                            self.step, None if self.joined is None else self.joined[index], self.sources)


def _join_sources(cache: DecoderCache, other: DecoderCache) -> _Sources:
    """The sources of ``cache`` (keys/values of every layer, mask) with ``other``'s after them: written into
    ``cache``'s spare rows where it may (:class:`_Sources`), else copied into buffers with as many spare rows again.
    Sources are padded to the longer source length, the padding masked."""
    B, b = cache.src_mask.shape[0], other.src_mask.shape[0]
    S = max(cache.src_mask.shape[-1], other.src_mask.shape[-1])

    def pad(x: Tensor) -> Tensor:                                     # (B, H, s, K) -> (B, H, S, K), zeros
        return torch.nn.functional.pad(x, (0, 0, 0, S - x.shape[2]))

    def pad_mask(x: Tensor) -> Tensor:                                # (B, 1, 1, s) -> (B, 1, 1, S), masked
        return torch.nn.functional.pad(x, (0, S - x.shape[-1]), value=float("-inf"))

    sources = cache.sources
    if sources is None or sources.claimed != B or B + b > sources.mask.shape[0] or S != cache.src_mask.shape[-1]:
        sources = _Sources([(k.new_empty((2 * (B + b), k.shape[1], S, k.shape[3])),
                             v.new_empty((2 * (B + b), v.shape[1], S, v.shape[3]))) for k, v in cache.memory_kv],
                           cache.src_mask.new_empty((2 * (B + b), 1, 1, S)), B)
        for (kb, vb), (k, v) in zip(sources.kv, cache.memory_kv, strict=True):
            kb[:B], vb[:B] = pad(k), pad(v)
        sources.mask[:B] = pad_mask(cache.src_mask)
    for (kb, vb), (k, v) in zip(sources.kv, other.memory_kv, strict=True):
        kb[B : B + b], vb[B : B + b] = pad(k), pad(v)
    sources.mask[B : B + b] = pad_mask(other.src_mask)
    sources.claimed = B + b
    return sources
