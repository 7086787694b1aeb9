"""The network (paper §3): sizes, invariants, parity with a naive reference, cached decoding."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from aiayn import ModelConfig, Transformer, make_model
from aiayn.attention import additive_mask, attention, fast_attention, padding_mask
from aiayn.cache import KeyValueCache
from aiayn.dropout import add_dropout, dropout
from aiayn.model import sinusoids

from .reference import reference_log_probs

PAD, BOS, EOS = 0, 1, 2


def tiny(**overrides) -> Transformer:  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    cfg = ModelConfig.preset("tiny", src_vocab_size=23, tgt_vocab_size=23, **overrides)
    return Transformer(cfg).eval()


def rand_batch(B: int = 3, S: int = 7, T: int = 6, V: int = 23, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, V, (B, S), generator=g)
    tgt = torch.randint(4, V, (B, T), generator=g)
    tgt[:, 0] = BOS
    # ragged lengths: sentence b keeps S - b source and T - b target tokens
    for b in range(B):
        src[b, S - b :] = PAD
        tgt[b, T - b :] = PAD
    return src, tgt


# --- sizes ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("preset, paper_millions, exact", [("base", 65, 63_082_496), ("big", 213, 214_245_376)])
def test_parameter_count_matches_table3(preset: str, paper_millions: int, exact: int) -> None:
    """Within 5% of Table 3, and exactly the count the README gives (built on the meta device: shapes only)."""
    with torch.device("meta"):
        model = Transformer(ModelConfig.preset(preset, vocab_size=37000))
    n = sum(p.numel() for p in model.parameters())
    assert abs(n / 1e6 - paper_millions) / paper_millions < 0.05, n
    assert n == exact


def test_tying_all_shares_one_matrix() -> None:
    m = tiny()
    assert m.src_embed.lut.weight is m.tgt_embed.lut.weight is m.out_proj.weight
    m2 = tiny(tie="none")
    assert m2.out_proj.weight is not m2.tgt_embed.lut.weight
    assert m2.src_embed.lut.weight is not m2.tgt_embed.lut.weight


def test_config_rejects_bad_values() -> None:
    with pytest.raises(ValueError, match="n_heads"):
        ModelConfig(d_model=30, n_heads=4)
    with pytest.raises(ValueError, match="norm"):
        ModelConfig(norm="sandwich")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="p_drop"):
        ModelConfig(p_drop=1.5)
    with pytest.raises(ValueError, match="d_model"):
        ModelConfig(d_model="512")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="tie"):
        ModelConfig(src_vocab_size=100, tgt_vocab_size=200, tie="all")
    with pytest.raises(ValueError, match="unknown preset"):
        ModelConfig.preset("huge")
    with pytest.raises(ValueError, match="distinct"):
        ModelConfig(pad_id=1, bos_id=1)
    with pytest.raises(ValueError, match="activation"):
        ModelConfig(activation="tanh")  # type: ignore[arg-type]


@pytest.mark.parametrize("activation, f", [("relu", lambda h: h.clamp_min(0)), ("swish", lambda h: h * h.sigmoid()),
                                           ("gelu", lambda h: 0.5 * h * (1 + torch.erf(h / 2 ** 0.5)))])
def test_the_ffn_uses_the_configured_activation(activation: str, f) -> None:  # type: ignore[no-untyped-def]
    """Eq. (2) with max(0, .) (the paper's), or the nonlinearity a pretrained model was trained with."""
    torch.manual_seed(0)
    model = Transformer(ModelConfig(src_vocab_size=50, tgt_vocab_size=50, d_model=16, d_ff=32, n_heads=2, n_layers=1,
                                    activation=activation))           # type: ignore[arg-type]
    ffn, x = model.encoder[0].ffn, torch.randn(2, 3, 16)
    torch.testing.assert_close(ffn(x), ffn.w2(f(ffn.w1(x))))
    assert ModelConfig(**model.cfg.to_dict()).activation == activation


@pytest.mark.parametrize("tie", ["all", "none"])
def test_the_output_bias_is_added_to_the_logits_and_starts_at_zero(tie: str) -> None:
    """ModelConfig.output_bias (Marian's): logits = h W^T + b, b a parameter of its own (also when W is tied)."""
    torch.manual_seed(0)
    model = Transformer(ModelConfig(src_vocab_size=50, tgt_vocab_size=50, d_model=16, d_ff=32, n_heads=2, n_layers=1,
                                    tie=tie, output_bias=True))       # type: ignore[arg-type]
    b = model.out_proj.bias
    assert b is not None and b.shape == (50,) and not b.any()
    with torch.no_grad():
        b.normal_()
    h = torch.randn(3, 16)
    torch.testing.assert_close(model.logits(h), h @ model.out_proj.weight.T + b)
    assert "out_proj.bias" in model.state_dict()
    assert Transformer(ModelConfig(src_vocab_size=50, tgt_vocab_size=50)).out_proj.bias is None   # §3.4: none


def test_config_json_round_trip() -> None:
    cfg = ModelConfig.preset("small", norm="pre", positions="learned", tie="decoder")
    assert ModelConfig(**cfg.to_dict()) == cfg
    assert dataclasses.replace(cfg, d_model=512).d_k == 128


def test_the_encoder_and_the_decoder_may_have_their_own_depths() -> None:
    """n_layers is the shorthand for both stacks; n_enc_layers / n_dec_layers set one apart (a deep encoder and a
    shallow decoder: Kasai et al. 2021). A config written before they existed reads as n_layers for both."""
    old = {k: v for k, v in ModelConfig.preset("tiny").to_dict().items() if k not in ("n_enc_layers", "n_dec_layers")}
    assert (ModelConfig(**old).encoder_layers, ModelConfig(**old).decoder_layers) == (2, 2)
    cfg = ModelConfig.preset("tiny", n_enc_layers=3, n_dec_layers=1, vocab_size=23)
    m = Transformer(cfg)
    assert (len(m.encoder), len(m.decoder)) == (3, 1) and (cfg.encoder_layers, cfg.decoder_layers) == (3, 1)
    assert dataclasses.replace(cfg, n_dec_layers=0).decoder_layers == cfg.n_layers == 2
    with pytest.raises(ValueError, match="n_dec_layers=-1"):
        ModelConfig(n_dec_layers=-1)
    src, tgt = rand_batch()
    full = m(src, tgt)
    with torch.no_grad():                                        # the cache has the decoder's depth, not the encoder's
        cache = m.init_cache(m.encode(src), src)
        assert len(cache.self_kv) == len(cache.memory_kv) == 1
        for t in range(tgt.shape[1]):
            logp, cache = m.decode_step(tgt[:, t], cache)
            real = tgt[:, t] != PAD
            torch.testing.assert_close(logp[real], full[real, t], atol=1e-5, rtol=0)


def test_make_model_for_annotated_transformer_readers() -> None:
    m = make_model(11, 11, N=2, d_model=32, d_ff=64, h=4, dropout=0.0)
    assert m.cfg.n_layers == 2 and m.cfg.tie == "all"


# --- invariants ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_decoder_is_causal(norm: str) -> None:
    m = tiny(norm=norm)
    src, tgt = rand_batch()
    out = m(src, tgt)
    for t in range(tgt.shape[1] - 1):
        changed = tgt.clone()
        changed[:, t + 1 :] = torch.randint(4, 23, changed[:, t + 1 :].shape)
        out2 = m(src, changed)
        torch.testing.assert_close(out2[:, : t + 1], out[:, : t + 1], atol=1e-5, rtol=0)


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_padding_invariance(norm: str) -> None:
    """Extra padding on either side leaves every real position's output unchanged."""
    m = tiny(norm=norm)
    src, tgt = rand_batch()
    out = m(src, tgt)
    padded = m(torch.nn.functional.pad(src, (0, 5), value=PAD), torch.nn.functional.pad(tgt, (0, 4), value=PAD))
    real = tgt != PAD
    torch.testing.assert_close(padded[:, : tgt.shape[1]][real], out[real], atol=1e-5, rtol=0)


def test_sentence_output_independent_of_batch() -> None:
    m = tiny()
    src, tgt = rand_batch(B=4)
    out = m(src, tgt)
    for b in range(4):
        S, T = int((src[b] != PAD).sum()), int((tgt[b] != PAD).sum())
        alone = m(src[b : b + 1, :S], tgt[b : b + 1, :T])
        torch.testing.assert_close(alone[0], out[b, :T], atol=1e-5, rtol=0)


@pytest.mark.parametrize("norm, positions, tie", [("post", "sinusoidal", "all"), ("pre", "learned", "none")])
def test_cached_decoding_equals_full_forward(norm: str, positions: str, tie: str) -> None:
    m = tiny(norm=norm, positions=positions, tie=tie)
    src, tgt = rand_batch()
    full = m(src, tgt)
    with torch.no_grad():
        cache = m.init_cache(m.encode(src), src)
        for t in range(tgt.shape[1]):
            logp, cache = m.decode_step(tgt[:, t], cache)
            real = tgt[:, t] != PAD
            torch.testing.assert_close(logp[real], full[real, t], atol=1e-5, rtol=0)
    assert cache.step == tgt.shape[1]


def test_cache_select_reorders_hypotheses() -> None:
    m = tiny()
    src, tgt = rand_batch()
    with torch.no_grad():
        cache = m.init_cache(m.encode(src), src)
        _, cache = m.decode_step(tgt[:, 0], cache)
        idx = torch.tensor([2, 2, 0])
        logp_sel, _ = m.decode_step(tgt[idx, 1], cache.select(idx))
        logp, _ = m.decode_step(tgt[:, 1], cache)
    torch.testing.assert_close(logp_sel, logp[idx])


def test_cached_decoding_past_the_initial_capacity() -> None:
    m = tiny()
    src, tgt = rand_batch(T=40)                    # the cache starts with room for 16 positions and doubles
    full = m(src, tgt)
    with torch.no_grad():
        cache = m.init_cache(m.encode(src), src)
        for t in range(40):
            logp, cache = m.decode_step(tgt[:, t], cache)
            real = tgt[:, t] != PAD
            torch.testing.assert_close(logp[real], full[real, t], atol=1e-5, rtol=0)
    assert cache.self_kv[0].k.shape[0] >= 40


def test_key_value_cache_append_select_reorder() -> None:
    g = torch.Generator().manual_seed(3)
    N, H, K = 4, 2, 3
    steps = [(torch.randn(N, H, 1, K, generator=g), torch.randn(N, H, 1, K, generator=g)) for _ in range(20)]
    cache = KeyValueCache.empty(N, H, K, like=steps[0][0], capacity=2)
    for t, (k, v) in enumerate(steps):
        cache, ks, vs = cache.append(k, v)
        assert ks.shape == (N, H, t + 1, K)
        torch.testing.assert_close(ks, torch.cat([s[0] for s in steps[: t + 1]], dim=2), rtol=0, atol=0)
        torch.testing.assert_close(vs, torch.cat([s[1] for s in steps[: t + 1]], dim=2), rtol=0, atol=0)
    every_k = torch.cat([s[0] for s in steps], dim=2)
    # appending to an older cache a second time copies: the newer cache keeps what it saw
    older = cache
    newer, _, _ = older.append(*steps[0])
    _, ks, _ = older.append(*steps[1])
    torch.testing.assert_close(ks[:, :, -1:], steps[1][0], rtol=0, atol=0)
    torch.testing.assert_close(newer.k[20], steps[0][0][:, :, 0], rtol=0, atol=0)
    # select copies rows; reorder_ moves them in place, to the same result
    index = torch.tensor([1, 1, 3, 0])
    picked = older.select(index)
    reordered = older.reorder_(index)
    for c in (picked, reordered):
        torch.testing.assert_close(c.k[:20].permute(1, 2, 0, 3), every_k[index], rtol=0, atol=0)
    with pytest.raises(RuntimeError, match="reordered in place"):
        older.append(*steps[0])                    # its buffer changed under it: refuses, never reads stale rows
    reordered.append(*steps[0])                    # the reordered cache goes on


def test_a_cache_of_fewer_rows_than_its_buffer_reorders_without_copying_every_row() -> None:
    """After sentences leave (or join), a cache is a view of its buffer's first rows. Reordering it moves the rows
    that change, read from the buffer, never a contiguous copy of the whole cache (index_select makes one of a
    strided input: it cost 8% of a beam-4 run)."""
    from torch.profiler import ProfilerActivity, profile

    g = torch.Generator().manual_seed(5)
    N, H, K, T = 8, 2, 3, 5
    cache = KeyValueCache.empty(N, H, K, like=torch.zeros(1), capacity=8)
    for _ in range(T):
        cache, _, _ = cache.append(torch.randn(N, H, 1, K, generator=g), torch.randn(N, H, 1, K, generator=g))
    keep = torch.tensor([0, 7, 2, 3, 4])                      # sentence 1 leaves, the last takes its rows
    view = cache.reorder_(keep)
    assert view.k.shape[1] == 5 and not view.k.is_contiguous()
    want_k, want_v = view.k[:T].clone(), view.v[:T].clone()
    index = torch.tensor([0, 0, 2, 4, 4])                     # two beams continue another's hypothesis
    picked = view.select(index)
    with profile(activities=[ProfilerActivity.CPU]) as p:
        moved = view.reorder_(index)
    assert not {e.name for e in p.events()} & {"aten::contiguous", "aten::clone"}
    for c in (picked, moved):
        torch.testing.assert_close(c.k[:T], want_k[:, index], rtol=0, atol=0)
        torch.testing.assert_close(c.v[:T], want_v[:, index], rtol=0, atol=0)


@pytest.mark.parametrize("T", [1, 4])
def test_attention_with_an_additive_mask_equals_a_boolean_one(T: int) -> None:
    g = torch.Generator().manual_seed(4)
    q = torch.randn(4, 2, T, 8, generator=g)
    k, v = (torch.randn(4, 2, 5, 8, generator=g) for _ in range(2))
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0], [0, 0, 0, 0, 0]], dtype=torch.bool)
    mask = mask[:, None, None]
    bias = additive_mask(mask, torch.float32)
    assert bias.dtype == torch.float32 and bias[1, 0, 0].tolist() == [0, 0, 0, float("-inf"), float("-inf")]
    slow, probs = attention(q, k, v, mask)
    assert probs[1, :, :, 3:].abs().max() == 0 and slow[3].abs().max() == 0    # no key at all: output 0
    for m in (mask, bias):
        torch.testing.assert_close(fast_attention(q, k, v, m, False, 0.0, False), slow, atol=1e-6, rtol=0)
        torch.testing.assert_close(attention(q, k, v, m)[0], slow, atol=1e-6, rtol=0)


def test_beams_share_their_source_in_encoder_decoder_attention() -> None:
    """The beams of a sentence attend to one copy of its memory: the same as a copy per beam."""
    m = tiny()
    src, tgt = rand_batch()
    k = 3
    with torch.no_grad():
        shared = m.init_cache(m.encode(src), src).expand(k)
        copied = m.init_cache(m.encode(src).repeat_interleave(k, 0), src.repeat_interleave(k, 0))
        assert shared.group == k and copied.group == 1
        assert shared.memory_kv[0][0].shape[0] == src.shape[0]
        tokens = tgt.repeat_interleave(k, 0)
        for t in range(3):
            a, shared = m.decode_step(tokens[:, t], shared)
            b, copied = m.decode_step(tokens[:, t], copied)
            torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
        keep = torch.tensor([0, 2])                                        # sentences 0 and 2, all their beams
        rows = (keep[:, None] * k + torch.arange(k)).view(-1)
        a, _ = m.decode_step(tokens[rows, 3], shared.select(rows))
        b, _ = m.decode_step(tokens[rows, 3], copied.select(rows))
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
        with pytest.raises(ValueError, match="kept together and in order"):
            shared.select(torch.tensor([1, 0, 2]))                          # splits sentence 0's beams


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("mask_kind", ["none", "bool", "additive"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("T", "S"), [(12, 12), (3, 12), (12, 7), (1, 12)])
def test_fast_attention_equals_explicit(dtype: torch.dtype, mask_kind: str, causal: bool, T: int, S: int) -> None:
    """Every kernel choice fast_attention makes (the fused one for T > 8 on CPU, the written-out one for a few
    queries and for bf16), with every mask: the same numbers as Eq. (1) written out. Causal queries are the last T
    of S positions (T < S: a cached prefix; T > S: the first T - S queries see nothing and give zeros)."""
    g = torch.Generator().manual_seed(1)
    q = torch.randn(3, 2, T, 8, generator=g).to(dtype)
    k, v = (torch.randn(3, 2, S, 8, generator=g).to(dtype) for _ in range(2))
    keep = torch.ones(3, S, dtype=torch.bool)
    keep[1, S - 2 :] = False                                      # a padded sentence
    keep[2, : S // 2] = False                                     # padding first: a causal row may see no key
    mask = {"none": None, "bool": keep[:, None, None], "additive": additive_mask(keep[:, None, None], dtype)}[mask_kind]
    tol = dict(atol=1e-5, rtol=0) if dtype == torch.float32 else dict(atol=2e-2, rtol=0)
    fast = fast_attention(q, k, v, mask, causal, 0.0, False)
    slow, _ = attention(q, k, v, mask, causal)
    torch.testing.assert_close(fast, slow, **tol)
    if causal:               # the oracle's own causality, against a triangle built here: query t sees keys <= t + S - T
        future = torch.arange(S)[None, :] > torch.arange(T)[:, None] + (S - T)
        _, probs = attention(q.float(), k.float(), v.float(), None, True)
        assert (probs[..., future] == 0).all() and (probs[..., ~future] > 0).all()


def test_attention_probabilities_sum_to_one_over_keys() -> None:
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(2, 3, 4, 8, generator=g) for _ in range(3))
    _, probs = attention(q, k, v, causal=True)
    torch.testing.assert_close(probs.sum(-1), torch.ones(2, 3, 4))
    assert torch.all(probs.triu(1) == 0)


@pytest.mark.parametrize("depths", [{}, {"n_enc_layers": 3, "n_dec_layers": 1}], ids=["2+2", "3+1"])
def test_parity_with_naive_reference(depths: dict[str, int]) -> None:
    """Same weights, same log-probabilities as a loop-per-head, sentence-at-a-time float64 transcription."""
    m = tiny(tie="none", **depths)
    src, tgt = rand_batch()
    out = m.double()(src, tgt)
    for b in range(src.shape[0]):
        s = [int(t) for t in src[b] if t != PAD]
        y = [int(t) for t in tgt[b] if t != PAD]
        ref = reference_log_probs(m, s, y)
        # float64 on both sides; the model's position table is stored in float32 (error ~1e-8)
        torch.testing.assert_close(out[b, : len(y)], ref, atol=1e-6, rtol=0)


def test_eval_is_deterministic_and_train_is_not() -> None:
    m = tiny(p_drop=0.3, p_attn=0.2, p_ffn=0.2)
    src, tgt = rand_batch()
    torch.testing.assert_close(m(src, tgt), m(src, tgt), atol=0, rtol=0)
    m.train()
    assert not torch.allclose(m(src, tgt), m(src, tgt))


def test_attention_maps_have_documented_shapes() -> None:
    m = tiny()
    src, tgt = rand_batch(B=2, S=7, T=5)
    maps = m.attention_maps(src, tgt)
    assert len(maps.encoder) == len(maps.cross) == m.cfg.n_layers
    assert maps.encoder[0].shape == (2, 4, 7, 7)
    assert maps.decoder_self[0].shape == (2, 4, 5, 5)
    assert maps.cross[0].shape == (2, 4, 5, 7)
    # no probability mass on source padding
    assert torch.all(maps.cross[0][1, :, :, 6] == 0)


def test_sinusoids_match_formula() -> None:
    pe = sinusoids(50, 16)
    for pos in (0, 1, 17, 49):
        for i in range(8):
            angle = pos / 10000 ** (2 * i / 16)
            assert abs(pe[pos, 2 * i].item() - torch.tensor(angle).sin().item()) < 1e-6
            assert abs(pe[pos, 2 * i + 1].item() - torch.tensor(angle).cos().item()) < 1e-6


def test_too_long_input_is_a_clear_error() -> None:
    m = tiny(max_positions=8)
    with pytest.raises(ValueError, match="max_positions=8"):
        m.encode(torch.full((1, 9), 5))


def test_padding_mask_shape_and_convention() -> None:
    mask = padding_mask(torch.tensor([[5, 6, 0]]), pad_id=0)
    assert mask.shape == (1, 1, 1, 3) and mask.dtype == torch.bool
    assert mask.tolist() == [[[[True, True, False]]]]


def test_bf16_autocast_close_to_fp32() -> None:
    m = tiny()
    src, tgt = rand_batch()
    ref = m(src, tgt)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = m(src, tgt)
    assert low.dtype == torch.float32
    real = tgt != PAD
    assert (low[real].exp() - ref[real].exp()).abs().max() < 0.05


def test_add_dropout_is_the_residual_sum_with_the_same_mask_and_gradient() -> None:
    """The one-pass residual sum x + dropout(y) (addcmul with the keep mask) draws the same decisions as
    ``dropout`` and gives the same values and gradients; outside training it is the plain sum."""
    x, y = torch.randn(64, 32, requires_grad=True), torch.randn(64, 32, requires_grad=True)
    torch.manual_seed(3)
    fused = add_dropout(x, y, 0.3, True)
    gx1, gy1 = torch.autograd.grad(fused.square().sum(), (x, y))
    torch.manual_seed(3)
    plain = x + dropout(y, 0.3, True)
    gx2, gy2 = torch.autograd.grad(plain.square().sum(), (x, y))
    torch.testing.assert_close(fused, plain)
    torch.testing.assert_close((gx1, gy1), (gx2, gy2))
    dropped = (fused == x).float().mean().item()
    assert 0.25 < dropped < 0.35, dropped
    assert torch.equal(add_dropout(x, y, 0.3, False), x + y)
    assert torch.equal(add_dropout(x, y, 1.0, True), x)
