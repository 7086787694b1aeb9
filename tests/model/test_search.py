"""Decoding (paper §6.1): beam search against a scripted fake decoder, and invariants on a real model."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

import pytest
import torch

from aiayn import ModelConfig, Transformer
from aiayn.decoding.search import BeamSearch, Hypothesis, beam_search, greedy, length_penalty, sample
from aiayn.decoding.topk import beam_topk, block_argmax, stay_in_place

PAD, BOS, EOS, A, B = 0, 1, 2, 4, 5


@dataclass
class FakeCache:
    prefix: torch.Tensor   # (N, t) tokens decoded so far
    src_mask: torch.Tensor
    step: int = 0

    def select(self, index: torch.Tensor) -> FakeCache:
        return FakeCache(self.prefix[index], self.src_mask[index], self.step)

    select_self = keep_ = select

    def expand(self, k: int) -> FakeCache:
        return self.select(torch.arange(self.prefix.shape[0]).repeat_interleave(k))


class ScriptedDecoder:
    """A "model" whose next-token distribution is a table keyed by the decoded prefix (default: EOS)."""

    def __init__(self, table: dict[tuple[int, ...], dict[int, float]], vocab: int = 8) -> None:
        self.table, self.V = table, vocab
        self.cfg = ModelConfig.preset("tiny", src_vocab_size=vocab, tgt_vocab_size=vocab, max_positions=64)

    def encode(self, src: torch.Tensor) -> torch.Tensor:
        return src

    def init_cache(self, memory: torch.Tensor, src: torch.Tensor, max_len: int = 16) -> FakeCache:
        return FakeCache(torch.empty(src.shape[0], 0, dtype=torch.long), src != PAD)

    def decode_step(self, tokens: torch.Tensor, cache: FakeCache, project: object = None
                    ) -> tuple[torch.Tensor, FakeCache]:                   # (project: a shortlist's, never here)
        prefix = cache.prefix if cache.step == 0 else torch.cat([cache.prefix, tokens[:, None]], 1)
        logp = torch.full((tokens.shape[0], self.V), float("-inf"))
        for row, p in enumerate(prefix.tolist()):
            for tok, prob in self.table.get(tuple(p), {EOS: 1.0}).items():
                logp[row, tok] = math.log(prob)
        return logp, FakeCache(prefix, cache.src_mask, cache.step + 1)


# After "a" the model hesitates; after "b" it is sure to stop:
#   P(a) = .6, P(b) = .4;  P(. | a) = {EOS .3, a .36, b .34};  P(. | b) = {EOS .9, a .05, b .05}; then EOS.
SCRIPT = {(): {A: 0.6, B: 0.4}, (A,): {EOS: 0.3, A: 0.36, B: 0.34}, (B,): {EOS: 0.9, A: 0.05, B: 0.05}}
SRC = torch.tensor([[7, 7, 7, EOS]])


def test_beam_search_by_hand() -> None:
    """Beam 2, no length penalty.

    t=0: beams a (.6), b (.4).
    t=1: the 2k = 4 best continuations: b EOS .36, a a .216, a b .204, a EOS .18.
         "b" EOS is within the top k = 2: finished with log .36. The two best others continue: "a a", "a b".
    t=2: both can only end: "a a" EOS (.216) and "a b" EOS (.204): the second finished slot takes "a a".
    Two finished: done. Best: "b" (log .36 = -1.0217), then "a a" (log .216 = -1.5325).
    Greedy takes "a" (.6), then "a" (.36), then EOS: log .216 — worse than the beam's "b".
    """
    fake = ScriptedDecoder(SCRIPT)
    nbest = beam_search(fake, SRC, beam=2, lenpen=0.0, nbest=2)[0]  # type: ignore[arg-type]
    assert [h.tokens for h in nbest] == [[B], [A, A]]
    assert nbest[0].logprob == pytest.approx(math.log(0.36))
    assert nbest[1].logprob == pytest.approx(math.log(0.216))
    assert nbest[0].score == pytest.approx(math.log(0.36))       # alpha = 0: score = log-probability
    g = greedy(fake, SRC)[0]  # type: ignore[arg-type]
    assert g.tokens == [A, A] and g.logprob == pytest.approx(math.log(0.216))


def test_length_penalty_reranks() -> None:
    """Scores divided by |Y| ** alpha (length_norm="length", the default), |Y| counting EOS; alpha = 0.5:
    "b" EOS: log .36 / 2 ** .5 = -0.7224;  "a a" EOS: log .216 / 3 ** .5 = -0.8850. The paper's GNMT form,
    alpha = 1, divides by (5 + |Y|) / 6: log .36 / (7/6) = -0.8757, log .216 / (8/6) = -1.1494."""
    nbest = beam_search(ScriptedDecoder(SCRIPT), SRC, beam=2, lenpen=0.5, nbest=2)[0]  # type: ignore[arg-type]
    assert nbest[0].score == pytest.approx(math.log(0.36) / 2 ** 0.5)
    assert nbest[1].score == pytest.approx(math.log(0.216) / 3 ** 0.5)
    gnmt = beam_search(ScriptedDecoder(SCRIPT), SRC, beam=2, lenpen=1.0, nbest=2, length_norm="gnmt")[0]  # type: ignore[arg-type]
    assert gnmt[0].score == pytest.approx(math.log(0.36) / (7 / 6))
    assert gnmt[1].score == pytest.approx(math.log(0.216) / (8 / 6))
    assert length_penalty(2, 0.6, "gnmt") == pytest.approx((7 / 6) ** 0.6)
    assert length_penalty(2, 0.6) == pytest.approx(2 ** 0.6)


def test_a_sentence_keeps_its_k_best_finished_hypotheses_not_the_first_k() -> None:
    """Beam 2, alpha 1 (scores divided by |Y|). t=1: "a a" .3, "b" EOS .2, "a b" .18: "b" EOS ends (score
    log .2 / 2 = -0.805); "a a" and "a b" go on. t=2: both end (log .3 / 3 = -0.401, log .18 / 3 = -0.572), two
    more than the one slot left: the sentence keeps its 2 best, "a a" and "a b", and drops "b" (which ended
    first), as transformers' and CTranslate2's beam search do."""
    script = {(): {A: 0.6, B: 0.4}, (A,): {A: 0.5, B: 0.3, EOS: 0.2}, (B,): {EOS: 0.5, A: 0.35, B: 0.15}}
    nbest = beam_search(ScriptedDecoder(script), SRC, beam=2, lenpen=1.0, nbest=2)[0]  # type: ignore[arg-type]
    assert [h.tokens for h in nbest] == [[A, A], [A, B]]
    assert [h.score for h in nbest] == pytest.approx([math.log(0.3) / 3, math.log(0.18) / 3])


def test_long_hypothesis_wins_with_length_penalty() -> None:
    """P(a)=.5 then "a" continues with certainty for 3 tokens; P(EOS)=.5 at t=0.
    Without penalty: "" (log .5 / 1) ties "a a a" (log .5); with alpha=2 the longer one wins:
    log .5 / 1^2 = -0.693 vs log .5 / 4^2 = -0.043."""
    script = {(): {EOS: 0.5, A: 0.5}, (A,): {A: 1.0}, (A, A): {A: 1.0}, (A, A, A): {EOS: 1.0}}
    best = beam_search(ScriptedDecoder(script), SRC, beam=2, lenpen=2.0)[0][0]  # type: ignore[arg-type]
    assert best.tokens == [A, A, A]


def test_max_length_forces_eos() -> None:
    never_stops = {(): {A: 1.0}} | {(A,) * n: {A: 1.0} for n in range(1, 20)}
    fake = ScriptedDecoder(never_stops)
    limit = dict(max_len_a=0.0, max_len_b=4)
    for hyps in (beam_search(fake, SRC, beam=3, **limit)[0], greedy(fake, SRC, **limit)):  # type: ignore[arg-type]
        assert hyps[0].tokens == [A] * 4
    # source length 3 (EOS not counted), a=1, b=2: at most 5 tokens
    assert greedy(fake, SRC, max_len_b=2)[0].tokens == [A] * 5  # type: ignore[arg-type]


def test_sentences_finish_independently_in_a_batch() -> None:
    src = torch.tensor([[7, 7, 7, EOS], [7, EOS, PAD, PAD]])
    out = beam_search(ScriptedDecoder(SCRIPT), src, beam=2, lenpen=0.0)  # type: ignore[arg-type]
    assert [h[0].tokens for h in out] == [[B], [B]]


@pytest.mark.parametrize("n, k, V, block", [(3, 2, 8, 64), (5, 4, 1000, 64), (2, 5, 300, 16), (4, 1, 130, 16)])
def test_blockwise_topk_equals_topk_over_every_candidate(n: int, k: int, V: int, block: int) -> None:
    """beam_topk searches only the blocks whose maximum ranks high; it must return what a topk over the
    whole (n, k*V) sum returns: the same values, each at a (beam, token) that holds it. V not a multiple
    of the block, ties (rounded scores) and dead beams (-inf, as at the first step) included."""
    g = torch.Generator().manual_seed(V)
    for trial in range(3):
        logp = torch.randn(n, k, V, generator=g).log_softmax(-1)
        scores = torch.randn(n, k, generator=g)
        if trial == 1:
            logp = (logp * 4).round() / 4
        if trial == 2:
            scores[:, 1:] = float("-inf")
        m = min(2 * k, V)
        want = (scores[:, :, None] + logp).view(n, k * V).topk(m, dim=1).values
        top, beam_of, tok = beam_topk(logp, scores, m, block=block)
        assert torch.equal(top, want)
        rows = torch.arange(n)[:, None]
        assert torch.equal(scores.gather(1, beam_of) + logp[rows, beam_of, tok], top)
        assert not (tok >= V).any()


# --- a real (random) model -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model() -> Transformer:
    torch.manual_seed(3)
    m = Transformer(ModelConfig.preset("tiny", src_vocab_size=40, tgt_vocab_size=40, d_model=48, n_heads=4))
    with torch.no_grad():   # sharpen the random model so that it stops at varied lengths
        m.out_proj.weight.mul_(6.0)
    return m.eval()


def _src(seed: int = 0, B: int = 6) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    src = torch.full((B, 9), PAD)
    for b in range(B):
        n = int(torch.randint(2, 9, (1,), generator=g))
        src[b, :n] = torch.randint(4, 40, (n,), generator=g)
        src[b, n] = EOS
    return src


def test_beam_one_equals_greedy(model: Transformer) -> None:
    src = _src()
    g = greedy(model, src, max_len_b=10)
    b = beam_search(model, src, beam=1, lenpen=0.0, max_len_b=10)
    assert [h.tokens for h in g] == [h[0].tokens for h in b]
    for x, y in zip(g, b, strict=True):
        assert x.logprob == pytest.approx(y[0].logprob, abs=1e-4)


def test_cached_greedy_equals_recomputing_the_prefix(model: Transformer) -> None:
    src = _src(1)
    cached = greedy(model, src, max_len_b=10)
    for b in range(src.shape[0]):
        s = src[b : b + 1, : int((src[b] != PAD).sum())]
        prefix = [BOS]
        with torch.no_grad():
            for _ in range(int((s != PAD).sum()) - 1 + 10):   # the length limit: n + 10 tokens, then EOS
                logp = model(s, torch.tensor([prefix]))[0, -1]
                logp[[PAD, BOS]] = float("-inf")
                nxt = int(logp.argmax())
                if nxt == EOS:
                    break
                prefix.append(nxt)
        assert cached[b].tokens == prefix[1:]


@pytest.fixture
def eager_static(monkeypatch: pytest.MonkeyPatch) -> None:
    """decode.compile's searches on the static-shape step uncompiled (torch.compile takes seconds per shape: the
    compiled step has its own, CI-only test below)."""
    import functools

    from aiayn.decoding import steps
    from aiayn.decoding.steps import static_step

    monkeypatch.setattr(steps, "compiled_step", lambda m: functools.partial(static_step, m))


@pytest.mark.parametrize("seed,rows", [(0, 6), (1, 3), (2, 1), (3, 13)])
def test_the_static_shape_step_decodes_the_same_tokens(model: Transformer, seed: int, rows: int,
                                                       eager_static: None) -> None:
    """decode.compile's greedy search (steps.StaticCache: the batch padded to a power of two of rows and lengths in
    16s, finished rows moved out as in today's search, the buffers shrunk into a smaller bucket once half the rows are
    unused) on the static-shape step: the same tokens and log-probabilities as today's greedy search, with min_len
    and no_repeat_ngram too."""
    src = _src(seed, rows)
    for settings in ({}, {"min_len": 3}, {"no_repeat_ngram": 2}):
        want = greedy(model, src, max_len_b=12, **settings)
        got = greedy(model, src, max_len_b=12, compile=True, **settings)
        assert [h.tokens for h in got] == [h.tokens for h in want], settings
        assert [h.logprob for h in got] == pytest.approx([h.logprob for h in want], abs=1e-4)


@pytest.mark.parametrize("settings", [
    {"beam": 4}, {"beam": 4, "nbest": 4, "lenpen": 1.0}, {"beam": 3, "length_norm": "gnmt", "lenpen": 0.6},
    {"beam": 4, "min_len": 4}, {"beam": 2, "max_len_a": 0.5, "max_len_b": 3}, {"beam": 4, "no_repeat_ngram": 2},
    {"beam": 1}])
def test_beam_search_on_the_static_step_finds_the_same_hypotheses(model: Transformer, settings: dict[str, Any],
                                                                  eager_static: None) -> None:
    """Beam search with decode.compile (every sentence's k rows from the first step, one beam live, then reordered
    in place) gives today's n-best lists: the same tokens and scores, under each length rule and setting."""
    src = torch.cat([_src(seed, 6) for seed in (0, 1, 7)])                # 18 sentences: 72 rows, a 128 bucket
    fields = {"max_len_b": 12, **settings}
    want = beam_search(model, src, **fields)
    got = beam_search(model, src, compile=True, **fields)
    assert [[h.tokens for h in hs] for hs in got] == [[h.tokens for h in hs] for hs in want]
    for a, b in zip(got, want, strict=True):
        assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-4)


def test_constrained_search_on_the_static_step_finds_the_same_hypotheses(model: Transformer,
                                                                        eager_static: None) -> None:
    from aiayn.decoding.constraints import Constraints

    src = _src(4, 5)
    cons = [Constraints([[7, 8]]), None, Constraints([[9], [11]]), None, Constraints([[12]])]
    want = beam_search(model, src, beam=4, max_len_b=12, constraints=cons)
    got = beam_search(model, src, beam=4, max_len_b=12, constraints=cons, compile=True)
    assert [[h.tokens for h in hs] for hs in got] == [[h.tokens for h in hs] for hs in want]


def test_sampling_on_the_static_step_draws_the_same_tokens(model: Transformer, eager_static: None) -> None:
    src = _src(6, 7)
    want = sample(model, src, generator=torch.Generator().manual_seed(5), top_k=10, max_len_b=12)
    got = sample(model, src, generator=torch.Generator().manual_seed(5), top_k=10, max_len_b=12, compile=True)
    assert [h.tokens for h in got] == [h.tokens for h in want]


@pytest.mark.parametrize("pooled", [False, True])
def test_sentences_joining_a_static_search_get_what_a_batch_gives_them(model: Transformer, eager_static: None,
                                                                       pooled: bool,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """aiayn serve with decode.compile: sentences join a running search on the static step (their rows written into
    unused rows, or the buckets grown: more rows, a longer source, a longer limit) and get what one batch gives; also
    with buffers reused from caches that are gone (steps.POOLED: a GPU's, here on the CPU), which must start clean."""
    from aiayn.decoding import steps
    from aiayn.decoding.steps import StaticCache

    monkeypatch.setattr(steps, "POOLED", {"cpu"} if pooled else set())
    monkeypatch.setattr(steps, "_FREE", {})

    long = torch.randint(4, 40, (3, 21), generator=torch.Generator().manual_seed(9))  # 20 tokens: a 32 bucket
    long[:, -1] = EOS
    short = torch.nn.functional.pad(torch.cat([_src(seed, B=6) for seed in range(4)]), (0, 12), value=PAD)
    src = torch.cat([short[:10], long[:1], short[10:20], long[1:], short[20:]])   # 27 sentences, the long ones later
    batch = beam_search(model, src, beam=3, lenpen=0.6, max_len_b=8, nbest=3)
    search, got, shapes = BeamSearch(model, beam=3, lenpen=0.6, compile=True), {}, set()
    waiting, rng = list(range(len(src))), random.Random(1)
    while waiting or search.active:
        if waiting and (rng.random() < 0.4 or not search.active):
            take = [waiting.pop(0) for _ in range(min(len(waiting), rng.randint(1, 5)))]
            width = int(max((src[i] != PAD).sum() for i in take))
            search.admit(src[take][:, :width], take, max_len_b=8)
        got.update(search.step())
        if search.cache is not None:
            assert isinstance(search.cache, StaticCache)
            shapes.add((*search.cache.k.shape, search.cache.mem_k.shape[3]))
    for i, hyps in enumerate(batch):
        assert [h.tokens for h in got[i]] == [h.tokens for h in hyps], i
        assert [h.score for h in got[i]] == pytest.approx([h.score for h in hyps], abs=1e-4)
    assert bool(steps._FREE) == pooled                                         # buffers were given back
    if pooled:                                  # at most POOL_BYTES kept: here, less than one cache's buffers
        monkeypatch.setattr(steps, "POOL_BYTES", 1)
        beam_search(model, src[:3], beam=3, max_len_b=8, compile=True)
        assert not steps._FREE
    assert {s[3] for s in shapes} == {16, 32}                                # outputs of 17 and 29 tokens at most
    assert {s[5] for s in shapes} == {16, 32}                                # sources of 16 and 32
    assert all(s[1] & (s[1] - 1) == 0 for s in shapes)                       # rows: powers of two


@pytest.mark.ci
def test_the_compiled_step_decodes_the_same_tokens(model: Transformer) -> None:
    """The same through torch.compile (Inductor: seconds per shape, so CI's): greedy and beam search with
    compile=True equal today's."""
    src = _src(4, 5)
    assert [h.tokens for h in greedy(model, src, max_len_b=12, compile=True)] == \
        [h.tokens for h in greedy(model, src, max_len_b=12)]
    assert [[h.tokens for h in hs] for hs in beam_search(model, src, beam=4, max_len_b=12, compile=True)] == \
        [[h.tokens for h in hs] for hs in beam_search(model, src, beam=4, max_len_b=12)]


@pytest.mark.ci
def test_shapes_past_dynamos_limit_run_uncompiled(model: Transformer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past Dynamo's limit of compiled shapes (steps.SHAPES; here 1), a step compiled with fullgraph fails the
    translation (torch._dynamo.exc.FailOnRecompileLimitHit): the step runs uncompiled instead, with the same tokens.
    And a decoding thread other than the one that compiled the step raises the limit for itself."""
    import copy
    import threading

    import torch._dynamo

    from aiayn.decoding import steps

    m, src = copy.deepcopy(model), torch.cat([_src(4, 5), _src(9, 20)])   # batches of two row buckets: two shapes
    want = [h.tokens for h in greedy(m, src, max_len_b=12)]
    limit = "recompile_limit" if hasattr(torch._dynamo.config, "recompile_limit") else "cache_size_limit"
    monkeypatch.setattr(steps, "SHAPES", 1)
    with torch._dynamo.config.patch(**{limit: 1}):
        assert [h.tokens for h in greedy(m, src[:5], max_len_b=12, compile=True)] == want[:5]
        assert [h.tokens for h in greedy(m, src[5:], max_len_b=12, compile=True)] == want[5:]
    monkeypatch.undo()

    # Dynamo's settings are each thread's own: a decoding thread (workers > 1) raises the limit for itself
    limits: list[int] = []

    def decode() -> None:
        assert [h.tokens for h in greedy(m, src[:5], max_len_b=12, compile=True)] == want[:5]
        limits.append(getattr(torch._dynamo.config, limit))

    thread = threading.Thread(target=decode)
    thread.start()
    thread.join()
    assert limits == [steps.SHAPES]


def test_translation_does_not_depend_on_the_batch(model: Transformer) -> None:
    src = _src(2)
    together = beam_search(model, src, beam=4, max_len_b=10)
    for b in range(src.shape[0]):
        alone = beam_search(model, src[b : b + 1, : int((src[b] != PAD).sum())], beam=4, max_len_b=10)
        assert alone[0][0].tokens == together[b][0].tokens
        assert alone[0][0].score == pytest.approx(together[b][0].score, abs=1e-4)


def test_scores_equal_a_forward_rescoring(model: Transformer) -> None:
    src = _src(3)
    hyps = beam_search(model, src, beam=4, lenpen=0.6, nbest=3, max_len_b=10)
    for b, nbest in enumerate(hyps):
        assert [h.score for h in nbest] == sorted((h.score for h in nbest), reverse=True)
        for h in nbest:
            tgt_in = torch.tensor([[BOS] + h.tokens])
            tgt_out = torch.tensor(h.tokens + [EOS])
            with torch.no_grad():
                logp = model(src[b : b + 1], tgt_in)[0]
            total = float(logp.gather(1, tgt_out[:, None]).sum())
            assert h.logprob == pytest.approx(total, abs=1e-3)
            assert h.score == pytest.approx(total / length_penalty(len(h.tokens) + 1, 0.6), abs=1e-3)


def test_sampling_is_seeded_and_restricted(model: Transformer) -> None:
    src = _src(4)
    a = sample(model, src, top_k=3, generator=torch.Generator().manual_seed(0), max_len_b=8)
    b = sample(model, src, top_k=3, generator=torch.Generator().manual_seed(0), max_len_b=8)
    assert [h.tokens for h in a] == [h.tokens for h in b]
    nucleus = sample(model, src, top_p=1e-6, generator=torch.Generator().manual_seed(1), max_len_b=8)
    assert [h.tokens for h in nucleus] == [h.tokens for h in greedy(model, src, max_len_b=8)]  # tiny nucleus = argmax


def test_min_len_forbids_an_early_eos() -> None:
    """With min_len 2, SCRIPT's best ("b" then EOS at t=1) is forbidden: at t=1 the candidates are
    "a a" .216, "a b" .204, "b a" .02, "b b" .02; the first two continue and end at t=2: "a a" wins."""
    best = beam_search(ScriptedDecoder(SCRIPT), SRC, beam=2, lenpen=0.0, min_len=2)[0][0]  # type: ignore[arg-type]
    assert best.tokens == [A, A] and best.logprob == pytest.approx(math.log(0.216))
    assert greedy(ScriptedDecoder(SCRIPT), SRC, min_len=2)[0].tokens == [A, A]  # type: ignore[arg-type]


def test_stay_in_place_keeps_each_parents_best_child_in_its_row() -> None:
    parent = torch.tensor([[0, 1, 2, 3], [2, 2, 0, 2], [3, 3, 3, 3], [1, 0, 1, 3]])   # candidates, best first
    order = stay_in_place(parent)                      # order[r] = the candidate that takes row r
    assert sorted(order[0].tolist()) == [0, 1, 2, 3]
    assert order.tolist() == [[0, 1, 2, 3], [2, 1, 0, 3], [1, 2, 3, 0], [1, 0, 2, 3]]
    rows = parent.gather(1, order)                     # the parent of the hypothesis in each row
    stays = (rows == torch.arange(4)).sum(1)
    assert stays.tolist() == [len(set(p)) for p in parent.tolist()]   # every distinct parent keeps its row


@pytest.mark.parametrize("V, block", [(8000, 64), (1000, 64), (70, 64), (5, 64), (130, 7)])
def test_block_argmax_equals_argmax_with_ties(V: int, block: int) -> None:
    g = torch.Generator().manual_seed(V)
    x = torch.randint(-3, 3, (50, V), generator=g).float()        # many ties: the first maximum must win
    x[0] = float("-inf")
    x[1, -1] = 10.0                                               # the maximum in the last, shorter block
    x[2, 0] = 10.0
    assert torch.equal(block_argmax(x, block), x.argmax(-1))
    y = torch.randn(50, V, generator=g)
    assert torch.equal(block_argmax(y, block), y.argmax(-1))


def _reference_beam_search(model: Transformer, src: torch.Tensor, k: int, lenpen: float, limit: int
                           ) -> list[tuple[list[int], float]]:
    """§6.1 written plainly for one sentence: every hypothesis re-decoded from BOS with ``model(src, prefix)``,
    candidates in Python lists. The 2k best continuations; those ending in EOS within the top k finish,
    the k best others continue; done with k finished."""
    beams: list[tuple[list[int], float]] = [([], 0.0)]
    finished: list[tuple[list[int], float]] = []
    for t in range(limit + 1):
        cands = []
        for toks, score in beams:
            with torch.no_grad():
                logp = model(src, torch.tensor([[BOS] + toks]))[0, -1]
            logp[[PAD, BOS]] = float("-inf")
            if t >= limit:
                logp[torch.arange(logp.shape[0]) != EOS] = float("-inf")
            cands += [(score + float(lp), toks, v) for v, lp in enumerate(logp.tolist()) if lp > float("-inf")]
        cands = sorted(cands, key=lambda c: -c[0])[: 2 * k]
        finished += [(toks, s / length_penalty(t + 1, lenpen)) for r, (s, toks, v) in enumerate(cands)
                     if v == EOS and r < k][: k - len(finished)]
        beams = [(toks + [v], s) for s, toks, v in cands if v != EOS][:k]
        if len(finished) >= k:
            break
    return sorted(finished, key=lambda h: -h[1])


@pytest.mark.parametrize("k", [2, 4])
def test_beam_search_equals_a_plain_reference(model: Transformer, k: int) -> None:
    """The batched search (first step on one row per sentence, then k beams sharing the source, cache
    reordered in place, sentences retired) finds the same n-best as the plain search above."""
    src = _src(5, B=4)
    out = beam_search(model, src, beam=k, lenpen=0.6, nbest=k, max_len_a=1.0, max_len_b=4)
    for b in range(src.shape[0]):
        s = src[b : b + 1, : int((src[b] != PAD).sum())]
        want = _reference_beam_search(model, s, k, 0.6, s.shape[1] - 1 + 4)
        assert [h.tokens for h in out[b]] == [toks for toks, _ in want]
        assert [h.score for h in out[b]] == pytest.approx([score for _, score in want], abs=1e-4)


def test_beam_wider_than_the_vocabulary_allows_at_the_first_step() -> None:
    """At the first step there is one beam: with k = 5 and a vocabulary of 8 (5 usable tokens), fewer than
    2k candidates exist; beam_topk pads with impossible ones and the search still finds the best."""
    top, beam_of, tok = beam_topk(torch.tensor([[[0.0, -1.0, -2.0]]]), torch.zeros(1, 1), 5)
    assert top[0, :3].tolist() == [0.0, -1.0, -2.0] and top[0, 3:].tolist() == [float("-inf")] * 2
    assert tok[0, :3].tolist() == [0, 1, 2]
    nbest = beam_search(ScriptedDecoder(SCRIPT), SRC, beam=5, lenpen=0.0, nbest=2)[0]  # type: ignore[arg-type]
    assert [h.tokens for h in nbest] == [[B], [A, A]]


# --- step-level batching: sentences join a running search ---------------------------------------------------------


def test_sentences_joining_a_running_search_get_what_a_batch_gives_them(model: Transformer) -> None:
    """BeamSearch.admit between steps (as aiayn serve does): each sentence's hypotheses are those of decoding it in
    one batch with the others, whenever it joined, whatever ran beside it; the buffers stay bounded."""
    src = torch.cat([_src(seed, B=6) for seed in range(4)])                # 24 sentences
    batch = beam_search(model, src, beam=3, lenpen=0.6, max_len_b=8, nbest=3)
    search, got, widths = BeamSearch(model, beam=3, lenpen=0.6), {}, []
    waiting, rng = list(range(len(src))), random.Random(0)
    while waiting or search.active:
        if waiting and (rng.random() < 0.4 or not search.active):          # 1-3 sentences join, own padding
            take = [waiting.pop(0) for _ in range(min(len(waiting), rng.randint(1, 3)))]
            width = int(max((src[i] != PAD).sum() for i in take))
            search.admit(src[take][:, :width], take, max_len_b=8)
        got.update(search.step())
        widths.append(search.cache.self_kv[0].length if search.cache is not None else 0)
    for i, hyps in enumerate(batch):
        assert [h.tokens for h in got[i]] == [h.tokens for h in hyps], i
        assert [h.score for h in got[i]] == pytest.approx([h.score for h in hyps], abs=1e-4)
    assert max(widths) <= 9 + 8 + 1            # never longer than the longest sentence's output: compacted


@pytest.mark.parametrize("int8", [False, True])
def test_traced_steps_decode_exactly_as_the_plain_step_does(model: Transformer, int8: bool) -> None:
    """TracedSteps (a CPU Translator's decoding: its decoding step recorded by torch.jit.trace): greedy search,
    beam search with n-best lists and a length rule, constraints, and sentences joining a running search (the
    self-attention mask) give the same tokens, scores and log-probabilities, bit for bit, in fp32 and int8; and
    every step ran traced, one trace for each number of rows per source and mask."""
    import copy

    from aiayn.decoding.constraints import Constraints
    from aiayn.decoding.steps import TracedSteps
    from aiayn.quantize import int8 as quantize

    m = quantize(model) if int8 else copy.deepcopy(model)
    src = torch.cat([_src(seed, 6) for seed in (0, 1, 7)])
    cons = [Constraints([[7, 8]]) if i % 3 == 0 else None for i in range(len(src))]

    def joined() -> dict[int, list[Any]]:
        search, got, waiting, rng = BeamSearch(m, beam=3, lenpen=0.6), {}, list(range(12)), random.Random(0)
        while waiting or search.active:
            if waiting and (rng.random() < 0.4 or not search.active):
                take = [waiting.pop(0) for _ in range(min(len(waiting), rng.randint(1, 3)))]
                search.admit(src[take][:, :int(max((src[i] != PAD).sum() for i in take))], take, max_len_b=8)
            got.update(search.step())
        return got

    def runs() -> list[Any]:
        return [greedy(m, src, max_len_b=12), beam_search(m, src, beam=4, nbest=4, lenpen=1.0, max_len_b=12),
                beam_search(m, src, beam=3, max_len_b=12, constraints=cons), joined()]

    want = runs()
    m.traced = TracedSteps(m, after=10**9)                                   # not yet: the plain steps
    assert runs() == want and not any(step.traced for step in m.traced.steps.values())
    m.traced = TracedSteps(m, after=0)
    assert runs() == want
    assert m.traced is not None and set(m.traced.steps) == {(1, False), (3, False), (4, False), (3, True)}
    assert all(isinstance(step.step, torch.jit.ScriptModule) for step in m.traced.steps.values())


@pytest.mark.parametrize("trouble", ["a number fixed", "no tracing"])
def test_a_step_that_cannot_be_traced_safely_runs_untraced(model: Transformer, monkeypatch: pytest.MonkeyPatch,
                                                          trouble: str) -> None:
    """A trace that warns of a number it would fix in the record (not one of the branches the key fixes), or a PyTorch
    whose tracing fails, leaves the step as it is: the same hypotheses, untraced."""
    import copy
    import warnings

    from aiayn.decoding.steps import TracedSteps

    real = torch.jit.trace

    def trace(*args: Any, **kwargs: Any) -> Any:
        if trouble == "no tracing":
            raise RuntimeError("torch.jit.trace is gone")
        warnings.warn("Converting a tensor to a Python integer might cause the trace to be incorrect.",
                      torch.jit.TracerWarning, stacklevel=2)
        return real(*args, **kwargs)

    m, src = copy.deepcopy(model), _src(2)
    want = beam_search(m, src, beam=3, max_len_b=10)
    monkeypatch.setattr(torch.jit, "trace", trace)
    m.traced = TracedSteps(m, after=0)
    assert beam_search(m, src, beam=3, max_len_b=10) == want
    assert m.traced and m.traced.steps and all(step.traced and not isinstance(step.step, torch.jit.ScriptModule)
                                               for step in m.traced.steps.values())


def test_a_dropped_sentence_leaves_and_the_others_are_unchanged(model: Transformer) -> None:
    src = _src(5)
    search = BeamSearch(model, beam=4, lenpen=0.6)
    search.admit(src, list(range(len(src))), max_len_b=10)
    search.step()
    search.drop({0, 3})
    got = dict(search.step())
    while search.active:
        got.update(search.step())
    assert 0 not in got and 3 not in got and search.active == 0
    batch = beam_search(model, src, beam=4, lenpen=0.6, max_len_b=10)
    assert all([h.tokens for h in got[i][:1]] == [h.tokens for h in batch[i]] for i in (1, 2, 4, 5))


def test_each_admission_has_its_own_length_limit(model: Transformer) -> None:
    """Requests that differ only in max_len_a/max_len_b share one running search (aiayn serve groups them)."""
    a, b = _src(1), _src(2)
    search = BeamSearch(model, beam=4, lenpen=0.6)
    search.admit(a, [("a", i) for i in range(len(a))], max_len_a=0.0, max_len_b=3)
    search.step()
    search.admit(b, [("b", i) for i in range(len(b))], max_len_a=1.0, max_len_b=12)
    got: dict[Any, list[Hypothesis]] = {}
    while search.active:
        got.update(search.step())
    for name, src, lo, hi in (("a", a, 0.0, 3), ("b", b, 1.0, 12)):
        alone = beam_search(model, src, beam=4, lenpen=0.6, max_len_a=lo, max_len_b=hi)
        assert [got[(name, i)][0].tokens for i in range(len(src))] == [h[0].tokens for h in alone]
    assert max(len(got[("a", i)][0].tokens) for i in range(len(a))) <= 3


def test_a_forced_first_token_is_chosen_at_no_cost_and_left_out_of_the_output() -> None:
    """A target-side language tag (multilingual.py): the output must start with ``first``, as CTranslate2's
    target_prefix of one token. Forced to "b" (p .4), the script after "b" would stop (EOS .6), but at least one
    token follows a forced one (as CTranslate2 decodes; an empty translation would take a finished slot of the
    beam): "a" (.3), then EOS, so log .3 (the forced token costs nothing); unforced, greedy takes "a a"."""
    fake = ScriptedDecoder({**SCRIPT, (B,): {EOS: 0.6, A: 0.3, B: 0.1}})
    src = torch.cat([SRC, SRC])
    first = torch.tensor([B, -1])
    g = greedy(fake, src, first=first)  # type: ignore[arg-type]
    assert [h.tokens for h in g] == [[A], [A, A]]
    assert g[0].logprob == pytest.approx(math.log(0.3)) and g[1].logprob == pytest.approx(math.log(0.216))
    b = beam_search(fake, src, beam=2, lenpen=0.0, nbest=2, first=first)  # type: ignore[arg-type]
    assert [h.tokens for h in b[0]] == [[A], [B]] and [h.tokens for h in b[1]] == [[B], [A, A]]
    assert b[0][0].logprob == pytest.approx(math.log(0.3)) and b[0][1].logprob == pytest.approx(math.log(0.1))
    assert b[0][0].runner_up is not None and b[0][0].runner_up[1] == [B]
    s = sample(fake, src, first=first, generator=torch.Generator().manual_seed(0))  # type: ignore[arg-type]
    assert s[0].tokens in ([A], [B])


def test_sentences_with_and_without_a_forced_first_token_share_a_search(model: Transformer) -> None:
    """What a sentence gets with a forced first token does not depend on its neighbours: each sentence admitted
    alone equals the batch; the forced token leads what is decoded, and the rest follows it as the model's own
    continuation would (the unforced search's best after that token, by recomputing the prefix)."""
    src = _src(4)
    first = torch.tensor([7, -1, 9, 7, -1, 11])
    batch = beam_search(model, src, beam=3, lenpen=0.0, max_len_b=8, first=first)
    for i in range(src.shape[0]):
        alone = beam_search(model, src[i : i + 1], beam=3, lenpen=0.0, max_len_b=8, first=first[i : i + 1])
        assert [h.tokens for h in alone[0]] == [h.tokens for h in batch[i]]
    g = greedy(model, src, max_len_b=8, first=first)
    for i, h in enumerate(g):
        if first[i] < 0:
            continue
        s = src[i : i + 1, : int((src[i] != PAD).sum())]
        prefix = [BOS, int(first[i])]
        with torch.no_grad():
            for _ in range(len(h.tokens) + 1):
                logp = model(s, torch.tensor([prefix]))[0, -1]
                logp[[PAD, BOS]] = float("-inf")
                prefix.append(int(logp.argmax()))
        assert prefix[2 : 2 + len(h.tokens)] == h.tokens


def test_a_forced_sentence_moving_into_a_finished_ones_rows_keeps_its_forced_token() -> None:
    """Sentences leave the batch as the last ones move into their rows: a sentence's forced first token moves with
    it. The unforced short one (1 source token, limit 1) is done a step before the two forced to "b", and the last
    of them moves into its row; each still gets what it gets alone."""
    fake = ScriptedDecoder(SCRIPT)
    src = torch.tensor([[7, EOS, PAD, PAD], [7, 7, 7, EOS], [7, 7, 7, EOS]])
    first = torch.tensor([-1, B, B])
    kw: dict[str, Any] = {"beam": 2, "lenpen": 0.0, "nbest": 2, "max_len_a": 1.0, "max_len_b": 0}
    batch = beam_search(fake, src, first=first, **kw)  # type: ignore[arg-type]
    for i in range(3):
        alone = beam_search(fake, src[i : i + 1], first=first[i : i + 1], **kw)  # type: ignore[arg-type]
        assert [h.tokens for h in alone[0]] == [h.tokens for h in batch[i]], i
    assert sorted(h.tokens for h in batch[2]) == [[A], [B]]      # (never empty: a token follows the forced one)
