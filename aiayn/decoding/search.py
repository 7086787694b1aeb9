"""Decoding, apart from the model: greedy, beam search (paper §6.1) and sampling, on the incremental cache.

Every search takes its settings as one config.DecodeConfig (fields may also be given as keywords: ``beam_search(model,
src, beam=4, lenpen=0.6)``); :func:`decode_batch` picks the search they ask for. A new decoding setting is a field of
DecodeConfig and the code here that uses it (CONTRIBUTING.md).

Shape legend: B sentences, k beam size, N = B x k hypotheses, V vocabulary, t decoding step. With a shortlist
(``decode.shortlist``, shortlist.py) a batch decodes over its K candidate tokens instead of V: the log-probabilities
have K columns, and the columns chosen are mapped back to vocabulary ids at once (``Output.tokens``).

Length rules, defined once here:
- a sentence of n source tokens (EOS not counted) may produce at most ``max_len_a * n + max_len_b``
  tokens before EOS (paper: n + 50), never more than the model's positions allow;
- when a hypothesis reaches that limit, EOS is its only allowed next token; before ``min_len`` tokens
  EOS is not allowed (0 by default; benchmarks force a fixed output length with min = max);
- a finished beam hypothesis is ranked by log p(Y) / lp(Y), |Y| counting EOS, with lp(Y) = |Y| ** alpha
  (``length_norm="length"``, the default: fairseq, Marian, CTranslate2 and transformers, whose beam search this
  is, hypothesis for hypothesis) or the paper's GNMT penalty lp(Y) = ((5 + |Y|) / 6) ** alpha (``"gnmt"``,
  paper: alpha = 0.6).

All functions run under ``torch.inference_mode`` and return token ids without BOS/EOS.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from ..cache import DecoderCache
from ..config import DecodeConfig, LengthNorm
from ..model import Transformer
from .constraints import Constraints, Lexical, refuse_constraints
from .hypotheses import Hypothesis, Stop, Stopped, max_length
from .shortlist import Output, Shortlist, output_for
from .steps import Cache, StaticCache, decode_step, start
from .topk import beam_topk, block_argmax, stay_in_place


def _check(stop: Stop | None) -> None:
    if stop is not None and stop():
        raise Stopped


def length_penalty(length: Tensor | int, alpha: float, norm: LengthNorm = "length") -> Tensor | float:
    """lp(Y) for a hypothesis of ``length`` tokens, EOS included; 1 when alpha is 0. ``gnmt`` (Wu et al., 2016,
    the paper's §6.1): ((5 + |Y|) / 6) ** alpha; ``length``: |Y| ** alpha."""
    return ((5.0 + length) / 6.0) ** alpha if norm == "gnmt" else length ** alpha


def max_lengths(model: Transformer, src: Tensor, a: float, b: int) -> Tensor:
    """(B,) :func:`max_length` of each source sentence of ``src`` (B, S), which ends with EOS and is padded."""
    n = ((src != model.cfg.pad_id).sum(1) - 1).tolist()               # source tokens, EOS not counted
    return torch.tensor([max_length(k, a, b, model.cfg.max_positions) for k in n], device=src.device)


def _allowed(logp: Tensor, step: int | Tensor, limit: Tensor, out: Output, min_len: int = 0,
             first: Tensor | None = None) -> Tensor:
    """Forbid BOS and PAD everywhere and EOS before ``min_len`` (output tokens: a forced first token is not counted,
    and one token at least follows it);
    force EOS where ``step`` reached the limit, and a sentence's forced first token (``first``, :func:`_force_first`)
    where it has decoded nothing.
    logp (..., V) (or K: ``out`` says which column holds each of those tokens), limit (...,); ``step`` the tokens
    decoded so far, an int or a tensor broadcastable to limit (sentences that joined the search at different steps)."""
    eos_id = out.eos
    # at the limit EOS is forced with its own log-probability (never impossible, even if p(EOS) underflows), taken
    # before min_len forbids it: min_len past the limit gave every beam the same -1e4, and float32 ranked sums that
    # large by their rounding
    at_limit = step >= limit
    forced = logp[..., eos_id].clamp(min=-1e4) if at_limit.any() else None
    if out.pad is not None:
        logp[..., out.pad] = float("-inf")
    if out.bos is not None:
        logp[..., out.bos] = float("-inf")
    if first is not None:   # after a forced first token (not output) at least one token, as CTranslate2 decodes
        short = step < torch.where(first >= 0, max(min_len, 1) + 1, min_len)
        logp[..., eos_id] = logp[..., eos_id].masked_fill(short.expand(logp.shape[:-1]), float("-inf"))
    elif isinstance(step, Tensor):
        if min_len > 0:
            logp[..., eos_id] = logp[..., eos_id].masked_fill(step < min_len, float("-inf"))
    elif step < min_len:
        logp[..., eos_id] = float("-inf")
    if forced is not None:
        logp[at_limit] = float("-inf")
        logp[..., eos_id] = torch.where(at_limit, forced, logp[..., eos_id])
    _force_first(logp, step, first, out)
    return logp


def _force_first(logp: Tensor, step: int | Tensor, first: Tensor | None, out: Output) -> None:
    """A sentence with a forced first token (``first`` >= 0, broadcastable to ``logp``'s rows (...,)), while it has
    decoded nothing (``step`` 0), may only choose that token, at no cost (log-probability 0): a target-side language
    tag (multilingual.py), as CTranslate2's ``target_prefix`` of one token. logp (..., V): a shortlist's candidates
    do not hold the tag, so a shortlist is refused."""
    if first is None or (isinstance(step, int) and step != 0):
        return
    if out.ids is not None:
        raise ValueError("shortlist=true: a shortlist's candidates do not hold the language tag this model's output "
                         "starts with; decode without it")
    rows = (first >= 0) & (step == 0)
    cols = first.clamp(min=0)
    forced = torch.full_like(logp, float("-inf"))
    forced.scatter_(-1, cols.expand(logp.shape[:-1])[..., None], 0.0)
    logp[rows.expand(logp.shape[:-1])] = forced[rows.expand(logp.shape[:-1])]


def _drop_first(hyps: list[Hypothesis], forced: bool) -> list[Hypothesis]:
    """Hypotheses without their forced first token (the output starts after it)."""
    if not forced:
        return hyps
    return [dataclasses.replace(h, tokens=h.tokens[1:], runner_up=None if h.runner_up is None else
                                (h.runner_up[0], h.runner_up[1][1:])) for h in hyps]


def _no_repeat(logp: Tensor, histories: Callable[[], list[list[int]]], n: int, out: Output) -> None:
    """``no_repeat_ngram`` n (0: off): in each row of ``logp`` (..., V or K; rows in the order of ``histories()``, each
    row's tokens so far), forbid every token that would complete an n-gram the row has already produced."""
    if not n:
        return
    flat = logp.view(-1, logp.shape[-1])
    for r, hist in enumerate(histories()):
        if len(hist) < n:
            continue
        tail = hist[len(hist) - n + 1:] if n > 1 else []
        banned = {hist[i + n - 1] for i in range(len(hist) - n + 1) if hist[i:i + n - 1] == tail}
        if not banned:
            continue
        cols = torch.tensor(sorted(banned), dtype=torch.long, device=logp.device)
        if out.ids is not None:                                  # a shortlist: the columns of those it holds
            at = torch.searchsorted(out.ids, cols).clamp(max=out.ids.numel() - 1)
            cols = at[out.ids[at] == cols]
        flat[r, cols] = float("-inf")


def _histories(seqs: Tensor, decoded: Tensor) -> list[list[int]]:
    """Each beam's tokens so far: seqs (n, w, t) holds sentence i's in its last ``decoded[i]`` columns."""
    n, w, width = seqs.shape
    return [row[width - d:] if d else [] for row, d in
            zip(seqs.reshape(n * w, width).tolist(), decoded.repeat_interleave(w).tolist(), strict=True)]


def _leave(gone: Tensor) -> Tensor:
    """The rows that stay when the rows ``gone`` (n,) bool leave, as an index (row i <- row keep[i]): the last
    staying rows move into the rows of those gone, every other row stays where it is, so that
    cache.DecoderCache.keep_ copies only the rows that move."""
    live = (~gone).nonzero()[:, 0]
    keep = torch.arange(live.numel(), device=gone.device)
    keep[gone[: live.numel()].nonzero()[:, 0]] = live[live >= live.numel()]
    return keep


# --- greedy and sampling ------------------------------------------------------------------------------------------


class _OneBest:
    """What a one-best search (greedy, sampling) records of B sentences, the same for both of its loops: each
    sentence's tokens, log-probability and length, the length rule and the choice of each step's token."""

    def __init__(self, model: Transformer, src: Tensor, pick: Callable[[Tensor], Tensor], a: float, b: int,
                 min_len: int, no_repeat: int, o: Output, first: Tensor | None = None) -> None:
        B, device = src.shape[0], src.device
        self.first = first                                       # (B,) forced first tokens (-1: none), or None
        self.limit = max_lengths(model, src, a, b) + (0 if first is None else (first >= 0).long())
        self.steps = int(self.limit.max()) + 1                   # steps at most: the longest output, then EOS
        self.pick, self.min_len, self.no_repeat, self.o, self.eos = pick, min_len, no_repeat, o, model.cfg.eos_id
        self.out = torch.full((B, self.steps), model.cfg.pad_id, dtype=torch.long, device=device)
        self.logprob = torch.zeros(B, device=device)
        self.length = torch.zeros(B, dtype=torch.long, device=device)

    def take(self, logp: Tensor, t: int, rows: Tensor) -> tuple[Tensor, Tensor]:
        """Step t: the log-probabilities (n, V) of the sentences ``rows`` (n,) limited (length, min_len,
        no_repeat), a token picked for each and recorded. -> the tokens (n,) and which ended (n,)."""
        logp = _allowed(logp, t, self.limit[rows], self.o, self.min_len, None if self.first is None else self.first[rows])
        _no_repeat(logp, lambda: self.out[rows, :t].tolist(), self.no_repeat, self.o)
        cols = self.pick(logp)                                    # (n,)
        tokens = self.o.tokens(cols)
        self.out[rows, t] = tokens
        self.logprob[rows] += logp.gather(1, cols[:, None]).squeeze(1)
        done = tokens == self.eos
        self.length[rows[done]] = t
        return tokens, done

    def hypotheses(self) -> list[Hypothesis]:
        forced = [False] * len(self.out) if self.first is None else (self.first >= 0).tolist()
        return [_drop_first([Hypothesis(self.out[i, : self.length[i]].tolist(), float(self.logprob[i]),
                                        float(self.logprob[i]))], forced[i])[0] for i in range(len(self.out))]


def _one_best(
    model: Transformer, src: Tensor, pick: Callable[[Tensor], Tensor], a: float, b: int, min_len: int = 0,
    out_layer: Output | None = None, stop: Stop | None = None, no_repeat: int = 0, static: bool = False,
    first: Tensor | None = None,
) -> list[Hypothesis]:
    """Shared loop of greedy and sampling: one hypothesis per sentence; finished rows leave the batch. ``out_layer``:
    the vocabulary or a shortlist's candidates (default: the vocabulary); ``stop``: raise Stopped once it is true;
    ``static``: on the static-shape step (:func:`start`); ``first``: (B,) forced first tokens (-1: none)."""
    o = out_layer or Output.full(model.cfg)
    B = src.shape[0]
    best = _OneBest(model, src, pick, a, b, min_len, no_repeat, o, first)
    cache = start(model, src, best.steps, static)
    rows = torch.arange(B, device=src.device)                     # original sentence of each active row
    tokens = torch.full((B,), model.cfg.bos_id, dtype=torch.long, device=src.device)
    for t in range(best.steps):
        _check(stop)
        logp, cache = decode_step(model, tokens, cache, o.project)  # (n, V), or (n, K) with a shortlist
        tokens, done = best.take(logp, t, rows)
        if done.all():
            break
        if done.any():                                            # retire finished sentences
            keep = _leave(done)
            rows, tokens, cache = rows[keep], tokens[keep], cache.keep_(keep)
    return best.hypotheses()


# --- the static-shape step, compiled (decode.compile) ----------------------------------------------------------


def settings(decode: DecodeConfig | None = None, **fields: Any) -> DecodeConfig:
    """``decode`` (default: DecodeConfig()) with ``fields`` replaced, validated (None values ignored)."""
    if decode is not None and not fields:
        return decode
    return (decode or DecodeConfig()).replace(**fields)


@torch.inference_mode()
def greedy(model: Transformer, src: Tensor, decode: DecodeConfig | None = None, candidates: Shortlist | None = None,
           stop: Stop | None = None, first: Tensor | None = None, **fields: Any) -> list[Hypothesis]:
    """The most probable next token at every step. src (B, S) ids ending with EOS, right-padded. Settings used:
    the length rule (max_len_a, max_len_b, min_len), shortlist (over ``candidates``' tokens for this batch),
    no_repeat_ngram; ``first``: (B,) each sentence's forced first token (-1: none), left out of its output."""
    d = settings(decode, **fields)
    return _one_best(model, src, block_argmax, d.max_len_a, d.max_len_b, d.min_len,
                     output_for(model, src, candidates, d.shortlist), stop, d.no_repeat_ngram, d.static, first)


@torch.inference_mode()
def sample(model: Transformer, src: Tensor, decode: DecodeConfig | None = None,
           generator: torch.Generator | None = None, candidates: Shortlist | None = None,
           stop: Stop | None = None, first: Tensor | None = None, **fields: Any) -> list[Hypothesis]:
    """Ancestral sampling from softmax(logits / temperature), optionally restricted to the top-k tokens
    and/or the smallest set whose probability reaches top_p (nucleus sampling). Settings used: temperature, top_k,
    top_p and the length rule; ``first`` as :func:`greedy`'s."""
    d = settings(decode, **fields)
    temperature, top_k, top_p = d.temperature, d.top_k, d.top_p

    def pick(logp: Tensor) -> Tensor:
        scores = logp / temperature
        if top_k > 0:
            kth = scores.topk(min(top_k, scores.shape[-1]), dim=-1).values[:, -1:]
            scores = scores.masked_fill(scores < kth, float("-inf"))
        if top_p < 1.0:
            sorted_scores, order = scores.sort(dim=-1, descending=True)
            probs = sorted_scores.softmax(-1)
            outside = probs.cumsum(-1) - probs >= top_p               # tokens after the nucleus is full
            scores = scores.scatter(1, order, sorted_scores.masked_fill(outside, float("-inf")))
        return torch.multinomial(scores.softmax(-1), 1, generator=generator).squeeze(1)

    return _one_best(model, src, pick, d.max_len_a, d.max_len_b, d.min_len,
                     output_for(model, src, candidates, d.shortlist), stop, d.no_repeat_ngram, d.static, first)


def decode_batch(model: Transformer, src: Tensor, decode: DecodeConfig, generator: torch.Generator | None = None,
                 candidates: Shortlist | None = None, constraints: list[Constraints | None] | None = None,
                 stop: Stop | None = None, first: Tensor | None = None) -> list[list[Hypothesis]]:
    """The search ``decode`` asks for, on src (B, S): sampling, greedy (beam 1) or beam search; ``decode.nbest``
    hypotheses per sentence (one for sampling and greedy). ``candidates``: the model's shortlist, used when
    ``decode.shortlist`` is set; ``constraints``: each sentence's, or None (constraints.py; beam search only);
    ``stop``: checked before each step, Stopped raised once it is true; ``first``: (B,) each sentence's forced first
    token (-1: none; a target-side language tag), left out of its output."""
    if constraints is not None and any(c is not None for c in constraints):
        refuse_constraints(decode)
        return beam_search(model, src, decode, candidates, constraints=constraints, stop=stop, first=first)
    if decode.sampling:
        return [[h] for h in sample(model, src, decode, generator, candidates, stop, first)]
    if decode.beam == 1:
        return [[h] for h in greedy(model, src, decode, candidates, stop, first)]
    return beam_search(model, src, decode, candidates, stop=stop, first=first)


# --- beam search ---------------------------------------------------------------------------------------------------


def _ended(new: Tensor, prefix: Tensor, decoded: Tensor, top: Tensor, lenpen: float,
           norm: LengthNorm) -> list[tuple[int, Hypothesis]]:
    """The candidates ``new`` (n, 2k) that end in EOS as finished hypotheses, with their sentence: tokens from
    ``prefix`` (n, 2k, t') (the last ``decoded`` of them), score ``top`` (n, 2k) over the length penalty."""
    r, c = new.nonzero(as_tuple=True)
    lengths = decoded[r]
    penalty = torch.as_tensor(length_penalty(lengths.double() + 1, lenpen, norm)).float()   # as in Python
    score = top[r, c] / penalty
    return [(i, Hypothesis(seq[prefix.shape[2] - n:], s, lp))
            for i, seq, n, s, lp in zip(r.tolist(), prefix[r, c].tolist(), lengths.tolist(), score.tolist(),
                                        top[r, c].tolist(), strict=True)]


def _ranked(finished: list[Hypothesis], k: int) -> list[Hypothesis]:
    """A sentence's k best finished hypotheses, best first, the best told its runner-up (Hypothesis.runner_up)."""
    best = sorted(finished, key=lambda h: -h.score)[:k]
    if len(best) > 1:
        best[0] = dataclasses.replace(best[0], runner_up=(best[1].score, best[1].tokens))
    return best


def _join(cache: Cache, other: Cache) -> Cache:
    """``cache.join(other)``: the two are of one kind (a search's sentences share decode.static, in their batch_key)."""
    if isinstance(cache, StaticCache) and isinstance(other, StaticCache):
        return cache.join(other)
    assert isinstance(cache, DecoderCache) and isinstance(other, DecoderCache)
    return cache.join(other)


def _same_batch(d: DecodeConfig, running: DecodeConfig) -> None:
    """Refuse sentences whose settings differ from a running search's in what a batch must share (batch_key)."""
    if d.batch_key() != running.batch_key():
        differ = [k for k, v in dataclasses.asdict(d).items() if v != getattr(running, k)]
        raise ValueError(f"BeamSearch.admit: these sentences' settings differ from the running search's in "
                         f"{', '.join(differ)}, which sentences decoded together must share")


class BeamSearch:
    """Beam search (§6.1) over a stream of sentences, batched over sentences x beams on the incremental cache.

    :meth:`admit` adds sentences between decoding steps (step-level batching, as ``aiayn serve`` uses it);
    :meth:`step` decodes one token for every sentence and returns those now done. At each step the 2k best
    continuations of a sentence's k beams are ranked; those ending in EOS within the top k are finished (scored
    with the length penalty), the k best others continue. A sentence is done once k have finished (it keeps the k
    best), or at its length limit. What it gets does not depend on when it joined or on its neighbours, but for
    rounding in int8 (one activation scale per call) and a shortlist's candidates (the union of the batch's).

    State, n sentences: ``keys`` the caller's key of each; ``start`` (n,) the step it joined; ``limit`` (n,) its longest
    output; ``first`` (n,) its forced first token or -1; ``scores`` (n, w) its w live beams' scores (w = 1 before the
    first step of a batch that started together, else k: one live, k - 1 at -inf for a sentence joining later);
    ``seqs`` (n, w, t) their tokens, in the last ``step - start`` columns; ``finished`` its finished hypotheses,
    ``count`` (n,) how many; ``out`` the output layer; ``lexical`` its constraints (constraints.py)."""

    def __init__(self, model: Transformer, decode: DecodeConfig | None = None, candidates: Shortlist | None = None,
                 **fields: Any) -> None:
        self.model, self.decode = model, (d := settings(decode, **fields))
        self.k, self.lenpen, self.min_len, self.norm = d.beam, d.lenpen, d.min_len, d.length_norm
        self.candidates, self.out = candidates, Output.full(model.cfg)   # the batch's output layer (admit)
        self.cache: Cache | None = None
        self.keys, self.finished, self.dropped = [], [], set()   # type: list[Any], list[list[Hypothesis]], set[Any]
        self.lexical = Lexical()

    @property
    def active(self) -> int:
        """Sentences being decoded."""
        return len(self.keys) - self.keys.count(None)

    @torch.inference_mode()
    def admit(self, src: Tensor, keys: list[Any], decode: DecodeConfig | None = None,
              constraints: list[Constraints | None] | None = None, first: Tensor | None = None,
              **fields: Any) -> None:
        """Add sentences: src (B, S) ids ending with EOS, right-padded; ``keys`` (B) name them in :meth:`step`'s
        results; ``constraints`` (B) their constraints, ``first`` (B) their forced first tokens (-1: none), or None.
        ``decode`` (default: the search's) may differ from it only per sentence (DecodeConfig.batch_key)."""
        d = settings(decode or self.decode, **fields)
        _same_batch(d, self.decode)
        model, cfg, k, dev, B = self.model, self.model.cfg, self.k, src.device, src.shape[0]
        # with a shortlist, the batch decodes over its sentences' candidates: those of sentences joining add theirs
        self.out = output_for(model, src, self.candidates, d.shortlist, self.out if self.cache is not None else None)
        forcing = first is not None and bool((first >= 0).any())     # (else no step looks for forced tokens)
        first = torch.full((B,), -1, dtype=torch.long, device=dev) if first is None else first.to(dev)
        limit = max_lengths(model, src, d.max_len_a, d.max_len_b) + (first >= 0).long()
        cache = start(model, src, int(limit.max()) + 1, d.static)
        tokens = torch.full((B,), cfg.bos_id, dtype=torch.long, device=dev)
        if self.cache is None:                              # a new batch: one live beam each until the first step
            self.cache, self.tokens, self.limit, self.first, self.forcing = cache, tokens, limit, first, forcing
            self.start, self.count = (torch.zeros(B, dtype=torch.long, device=dev) for _ in range(2))
            self.scores = torch.zeros(B, 1, device=dev)
            self.seqs = torch.empty(B, 1, 0, dtype=torch.long, device=dev)
        else:                                               # joining a running batch: k rows each, one alive
            self._expand()
            self.start = torch.cat([self.start, self.start.new_full((B,), self.cache.step)])
            self.cache = _join(self.cache, cache.expand(k))
            self.tokens = torch.cat([self.tokens, tokens.repeat_interleave(k)])
            self.limit, self.count = torch.cat([self.limit, limit]), torch.cat([self.count, self.count.new_zeros(B)])
            self.first, self.forcing = torch.cat([self.first, first]), self.forcing or forcing
            fresh = torch.full((B, k - 1), float("-inf"), device=dev)
            self.scores = torch.cat([self.scores, torch.cat([torch.zeros(B, 1, device=dev), fresh], 1)])
            self.seqs = torch.cat([self.seqs, self.seqs.new_full((B, k, self.seqs.shape[2]), cfg.pad_id)])
        self.keys, self.finished = self.keys + keys, self.finished + [[] for _ in keys]
        self.lexical.admit(constraints or [None] * B, self.scores.shape[1], d)
        if d.static:    # k rows each from the first step (one live), so that a static cache keeps one shape
            self._expand()

    def _expand(self) -> None:
        """Before a batch's first step its sentences have one beam each: make it k, as for sentences joining later."""
        assert self.cache is not None
        n, w = self.scores.shape
        if w == self.k:
            return
        self.cache = self.cache.expand(self.k)
        self.lexical.expand(self.k)
        self.tokens = self.tokens.repeat_interleave(self.k)
        self.scores = torch.cat([self.scores, self.scores.new_full((n, self.k - 1), float("-inf"))], dim=1)
        self.seqs = self.seqs.expand(n, self.k, self.seqs.shape[2]).contiguous()

    def drop(self, keys: set[Any]) -> None:
        """Stop decoding these sentences (their request is gone); they leave at the next step, without results."""
        self.dropped |= keys

    @torch.inference_mode()
    def step(self) -> list[tuple[Any, list[Hypothesis]]]:
        """One decoding step for every sentence; (key, finished hypotheses, best first) of those now done."""
        assert self.cache is not None, "step() with no sentences: admit() some first"
        (n, w), cfg, k, dev = self.scores.shape, self.model.cfg, self.k, self.tokens.device
        decoded = self.cache.step - self.start                              # (n,) tokens each has so far
        logp, cache = decode_step(self.model, self.tokens, self.cache, self.out.project)   # (n*w, V) or (n*w, K)
        logp = _allowed(logp.view(n, w, -1), decoded[:, None], self.limit[:, None].expand(n, w), self.out, self.min_len,
                        self.first[:, None] if self.forcing else None)
        _no_repeat(logp, lambda: _histories(self.seqs, decoded), self.decode.no_repeat_ngram, self.out)
        self.lexical.forbid_eos(logp, self.scores, decoded >= self.limit, self.out.eos)
        top, beam_of, col = beam_topk(logp, self.scores, 2 * k)            # (n, 2k) each, best first
        self.lexical.allocate(logp, self.scores, top, beam_of, col, self.out.eos)   # constrained sentences' 2k
        tok = self.out.tokens(col)                                          # vocabulary ids
        rank = torch.arange(2 * k, device=dev)
        prefix = self.seqs.gather(1, beam_of[:, :, None].expand(n, 2 * k, self.seqs.shape[2]))   # (n, 2k, t')
        is_eos = (tok == cfg.eos_id) & (top > float("-inf"))
        new = is_eos & (rank < k)
        if new.any():
            self.count = (self.count + new.long().sum(1)).clamp(max=self.k)   # a sentence keeps its k best (_retire)
            for i, h in _ended(new, prefix, decoded, top, self.lenpen, self.norm):
                self.finished[i].append(h)
        # the k best candidates that do not end here continue (at most k of the 2k end in EOS)
        cont = (is_eos.long() * 2 * k + rank).argsort(dim=1)[:, :k]       # (n, k)
        if w < k:       # the first step: every candidate extends the single beam, its cache row repeated k times
            cache = cache.expand(k)
        else:
            cont = cont.gather(1, stay_in_place(beam_of.gather(1, cont)))
            cache = cache.select_self((torch.arange(n, device=dev)[:, None] * k + beam_of.gather(1, cont)).view(-1))
        self.scores, tok = top.gather(1, cont), tok.gather(1, cont)
        self.lexical.chosen(cont)
        self.seqs = torch.cat([prefix.gather(1, cont[:, :, None].expand(n, k, prefix.shape[2])), tok[:, :, None]], 2)
        self.tokens, self.cache = tok.view(-1), cache
        return self._retire(decoded >= self.limit)             # at its limit every live beam had to end

    def _retire(self, at_limit: Tensor) -> list[tuple[Any, list[Hypothesis]]]:
        """Sentences with k finished or at their limit are done (with their k best); those dropped are gone. Both
        leave the batch now, the last sentences taking their rows (only those rows are copied)."""
        dropped = torch.tensor([key in self.dropped for key in self.keys], dtype=torch.bool, device=at_limit.device)
        done = ((self.count >= self.k) | at_limit) & ~dropped
        gone = done | dropped
        if not gone.any():
            return []
        out = [(self.keys[i], _drop_first(_ranked(self.finished[i], self.k), self.forcing and int(self.first[i]) >= 0))
               for i in done.nonzero()[:, 0].tolist()]
        for i in gone.nonzero()[:, 0].tolist():
            self.dropped.discard(self.keys[i])
            self.keys[i], self.finished[i] = None, []
        if bool(gone.all()):
            self.cache, self.keys, self.finished, self.lexical = None, [], [], Lexical()
        else:
            self._keep(_leave(gone))
        return out

    def _keep(self, keep: Tensor) -> None:
        """Only the sentences ``keep`` (m,) stay in the batch, in that order (the cache's rows moved in place)."""
        assert self.cache is not None
        self.cache = self.cache.keep_((keep[:, None] * self.k + torch.arange(self.k, device=keep.device)).view(-1))
        self.tokens = self.tokens.view(-1, self.k)[keep].view(-1)
        self.scores, self.seqs, self.limit = self.scores[keep], self.seqs[keep], self.limit[keep]
        self.start, self.count, self.first = self.start[keep], self.count[keep], self.first[keep]
        self.keys, self.finished = [self.keys[i] for i in keep.tolist()], [self.finished[i] for i in keep.tolist()]
        self.lexical.keep(keep.tolist())
        m = int(self.start.min())       # the decoded columns no sentence needs any more: the buffers stay as long
        if m > 0:                       # as the longest-running sentence's output, however long the server runs
            self.cache = self.cache.compact()
            self.start, self.seqs = self.start - m, self.seqs[:, :, m:]


@torch.inference_mode()
def beam_search(model: Transformer, src: Tensor, decode: DecodeConfig | None = None,
                candidates: Shortlist | None = None, constraints: list[Constraints | None] | None = None,
                stop: Stop | None = None, first: Tensor | None = None, **fields: Any) -> list[list[Hypothesis]]:
    """Beam search of a batch of sentences (:class:`BeamSearch`, all admitted at once). src (B, S) ids ending
    with EOS, right-padded. Returns the ``nbest`` best finished hypotheses per sentence. Settings used: beam,
    lenpen, length_norm, min_len, the length rule, nbest, shortlist (over ``candidates``' tokens); ``constraints``:
    each sentence's lexical constraints or None (constraints.py); ``first`` as :func:`greedy`'s."""
    search = BeamSearch(model, decode, candidates, **fields)
    search.admit(src, list(range(src.shape[0])), constraints=constraints, first=first)
    out: list[list[Hypothesis]] = [[] for _ in range(src.shape[0])]
    while search.active:
        _check(stop)
        for i, hyps in search.step():
            out[i] = hyps[: search.decode.nbest]
    return out
