"""One regression test per bug found in the write-ups in ../shared/seeds/ (listed in docs/seed-bugs.md).

Each test names the seed file and the mistake, and checks that our code does the right thing.
"""

from __future__ import annotations

import math

import pytest
import torch

from aiayn import ModelConfig, Transformer
from aiayn.loss import chunked_label_smoothed_loss, label_smoothed_loss, smoothed_targets
from aiayn.model import Embedding, PositionalEncoding, Residual, attention, sinusoids
from aiayn.optim import noam_lr

PAD = 0


def tiny(**kw) -> Transformer:  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    return Transformer(ModelConfig.preset("tiny", src_vocab_size=19, tgt_vocab_size=19, **kw)).eval()


def test_seed000_masked_fill_with_tiny_positive_instead_of_minus_infinity() -> None:
    """000: ``scores.masked_fill(mask == 0, 1e-9)`` leaves masked keys attended. Masked keys must get 0."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, 3, 4, generator=g) for _ in range(3))
    mask = torch.tensor([True, True, False])[None, None, None]
    out, probs = attention(q, k, v, mask)
    assert torch.all(probs[..., 2] == 0)
    v2 = v.clone()
    v2[..., 2, :] = 1e6  # the masked value vector cannot leak into the output
    torch.testing.assert_close(attention(q, k, v2, mask)[0], out)


def test_seed000_generator_softmax_over_sequence_axis() -> None:
    """000: ``F.softmax(self.linear(x), dim=1)`` on (B, T, V) normalizes over positions. Ours: over the vocabulary."""
    m = tiny()
    logp = m(torch.tensor([[5, 6, 7, 2]]), torch.tensor([[1, 5, 6]]))
    torch.testing.assert_close(logp.exp().sum(-1), torch.ones(1, 3))
    assert not torch.allclose(logp.exp().sum(1), torch.ones(1, logp.shape[-1]))


def test_seed001_functional_dropout_left_on_at_eval() -> None:
    """001: ``F.dropout(p_attn, p=dropout)`` defaults to training=True, so eval outputs are random."""
    m = tiny(p_attn=0.5, p_drop=0.5, p_ffn=0.5)
    src, tgt = torch.tensor([[5, 6, 7, 2]]), torch.tensor([[1, 5, 6]])
    torch.testing.assert_close(m(src, tgt), m(src, tgt), atol=0, rtol=0)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, 3, 4, generator=g) for _ in range(3))
    a, _ = attention(q, k, v, p_drop=0.5, training=False)
    b, _ = attention(q, k, v, p_drop=0.5, training=False)
    assert torch.equal(a, b)


def test_seed000_positional_unsqueeze_result_discarded() -> None:
    """000: ``pe.unsqueeze(0)`` without assignment (and ``.detach`` never called): adding PE breaks for B > 1.

    Ours adds the same (T, D) table to every sentence of a batch.
    """
    pos = PositionalEncoding(32, 1024, 0.0, learned=False)
    x = torch.zeros(3, 5, 32)
    out = pos(x)
    assert out.shape == (3, 5, 32)
    for b in range(3):
        torch.testing.assert_close(out[b], sinusoids(5, 32))


def test_seed000_mask_squeeze_instead_of_unsqueeze() -> None:
    """000: ``mask.squeeze(1)`` where ``unsqueeze(1)`` is meant: the mask no longer broadcasts over heads,
    so sentences of a batch see each other's padding. Ours: per-sentence results equal batched ones."""
    m = tiny()
    src = torch.tensor([[5, 6, 7, 8, 2], [9, 2, 0, 0, 0]])
    tgt = torch.tensor([[1, 5, 6], [1, 9, 0]])
    out = m(src, tgt)
    alone = m(src[1:, :2], tgt[1:, :2])
    torch.testing.assert_close(alone[0], out[1, :2], atol=1e-5, rtol=0)


def test_seed000_hard_coded_padding_idx() -> None:
    """000: ``nn.Embedding(vocab, d_model, padding_idx=1)`` whatever the vocabulary's pad id is.
    Ours takes pad_id from the config: token 1 (BOS here) is a normal, trainable token."""
    emb = Embedding(10, 8, pad_id=PAD)
    assert emb.lut.padding_idx == PAD
    emb(torch.tensor([[1, 0]])).sum().backward()
    assert emb.lut.weight.grad is not None
    assert emb.lut.weight.grad[1].abs().sum() > 0 and emb.lut.weight.grad[0].abs().sum() == 0
    m = tiny(pad_id=3, unk_id=0)
    assert m.src_embed.lut.padding_idx == 3


def test_seed000_rate_divides_by_zero_at_step_zero() -> None:
    """000/001: NoamOpt.rate(0) computes 0 ** -0.5 (ZeroDivisionError). Ours: 0 before the first update."""
    assert noam_lr(0, 512, 4000) == 0.0
    assert noam_lr(1, 512, 4000) == pytest.approx(512 ** -0.5 * 4000 ** -1.5)
    assert noam_lr(4000, 512, 4000) == pytest.approx(512 ** -0.5 * 4000 ** -0.5)  # the peak
    assert noam_lr(16000, 512, 4000) == pytest.approx(noam_lr(4000, 512, 4000) / 2)  # inverse sqrt decay
    assert math.isfinite(noam_lr(5, 512, 0))


def test_seed004_minus_infinity_fill_gives_nan_on_fully_masked_rows() -> None:
    """004: ``masked_fill_(mask, -np.inf)`` then softmax: a row with every key masked becomes NaN
    (and NaN gradients). Ours: zeros, in the explicit and fast paths, forward and backward."""
    q, k, v = (torch.randn(2, 1, 3, 4, requires_grad=True) for _ in range(3))
    mask = torch.tensor([[True, True, True], [False, False, False]])[:, None, None]
    out, probs = attention(q, k, v, mask)
    assert not out.isnan().any() and torch.all(out[1] == 0) and torch.all(probs[1] == 0)
    out.sum().backward()
    assert q.grad is not None and not q.grad.isnan().any()
    m = tiny()
    logp = m(torch.tensor([[0, 0, 0]]), torch.tensor([[1, 5]]))   # an all-padding source
    assert not logp.isnan().any()


def test_seed003_loss_counts_padding() -> None:
    """003: ``nn.CrossEntropyLoss()`` without ignore_index averages over padding too, then divides by
    n_tokens again. Ours: a sum over non-pad tokens, unchanged by extra padding."""
    g = torch.Generator().manual_seed(0)
    logp = torch.log_softmax(torch.randn(4, 9, generator=g), -1)
    target = torch.tensor([3, 4, 5, 6])
    loss, nll = label_smoothed_loss(logp, target, 0.1, PAD)
    padded_lp = torch.cat([logp, torch.log_softmax(torch.randn(3, 9, generator=g), -1)])
    loss2, nll2 = label_smoothed_loss(padded_lp, torch.cat([target, torch.zeros(3, dtype=torch.long)]), 0.1, PAD)
    torch.testing.assert_close(loss2, loss)
    torch.testing.assert_close(nll2, nll)


def test_seed001_loss_backprop_scales_and_masks_wrongly() -> None:
    """001: ``loss_backprop`` multiplies a summed (scalar) criterion by a per-sentence mask, masks with an
    off-by-one ``i < valid_token_counts`` and backpropagates through detached copies.
    Ours: the chunked loss has exactly the values and gradients of the plain loss."""
    g = torch.Generator().manual_seed(0)
    h = torch.randn(13, 8, generator=g, requires_grad=True)
    w = torch.randn(11, 8, generator=g, requires_grad=True)
    y = torch.tensor([3, 4, 5, 0, 0, 7, 8, 9, 10, 1, 2, 0, 4])
    loss, nll = label_smoothed_loss(torch.log_softmax(h @ w.T, -1), y, 0.1, PAD)
    (loss * 0.5).backward()
    gh, gw = h.grad.clone(), w.grad.clone()  # type: ignore[union-attr]
    h.grad = w.grad = None
    closs, cnll = chunked_label_smoothed_loss(h, w, y, 0.1, PAD, chunk=4)
    (closs * 0.5).backward()
    torch.testing.assert_close(closs, loss)
    torch.testing.assert_close(cnll, nll)
    torch.testing.assert_close(h.grad, gh)
    torch.testing.assert_close(w.grad, gw)


def test_seed001_layer_norm_uses_unbiased_std_plus_eps() -> None:
    """001/004: LayerNorm as ``(x - mean) / (x.std() + eps)`` (unbiased std, eps outside the root) differs
    from Ba et al. Ours: (x - mean) / sqrt(var + eps) with the biased variance."""
    res = Residual(6, 0.0, pre_norm=False)
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0, 10.0, -3.0]])
    out = res.after(x, torch.zeros_like(x))
    mean, var = x.mean(), x.var(unbiased=False)
    torch.testing.assert_close(out, (x - mean) / torch.sqrt(var + 1e-5))
    assert not torch.allclose(out, (x - mean) / (x.std() + 1e-6), atol=1e-3)


def test_seed003_attention_scaled_by_sqrt_d_model_instead_of_d_k() -> None:
    """003: ``energy / embed_size ** 0.5`` scales by sqrt(d_model), not sqrt(d_k) of each head."""
    q = torch.ones(1, 1, 1, 16)
    k = torch.stack([torch.ones(16), torch.zeros(16)])[None, None]
    _, probs = attention(q, k, torch.zeros(1, 1, 2, 16))
    expected = torch.softmax(torch.tensor([16 / 16 ** 0.5, 0.0]), -1)
    torch.testing.assert_close(probs[0, 0, 0], expected)


def test_seed003_dropout_after_layernorm_instead_of_on_the_sublayer() -> None:
    """003: ``dropout(norm(attention + query))`` drops the normalized sum; §5.4 drops the sub-layer output
    before it is added. With every unit dropped the paper's layer reduces to LayerNorm(x)."""
    res = Residual(8, 1.0, pre_norm=False).train()
    x = torch.randn(2, 3, 8)
    torch.manual_seed(0)
    out = res.after(x, torch.randn(2, 3, 8))
    torch.testing.assert_close(out, torch.nn.functional.layer_norm(x, (8,)), atol=1e-5, rtol=0)


def test_seed003_embeddings_not_scaled_by_sqrt_d_model() -> None:
    """003 omits the sqrt(d_model) factor and 002 says the paper has none; §3.4 multiplies by sqrt(d_model)."""
    emb = Embedding(10, 16, pad_id=PAD)
    tokens = torch.tensor([[3, 4]])
    torch.testing.assert_close(emb(tokens), emb.lut(tokens) * 4.0)


def test_seed003_cross_attention_queries_come_from_the_decoder() -> None:
    """003's prose: encoder-decoder attention takes query and key from the encoder and value from the decoder.
    §3.2.3: queries from the decoder, keys and values from the encoder output — so the output has the
    target's length and changes with the source."""
    m = tiny()
    tgt = torch.tensor([[1, 5, 6]])
    a = m(torch.tensor([[5, 6, 7, 8, 9, 2]]), tgt)
    b = m(torch.tensor([[9, 8, 2]]), tgt)
    assert a.shape[1] == b.shape[1] == 3
    assert not torch.allclose(a, b)


def test_seed003_softmax_normalizes_over_keys_not_queries() -> None:
    """003's prose argues the softmax should run along the query axis (dim=1). Each query's weights sum
    to 1 over the keys."""
    g = torch.Generator().manual_seed(3)
    q, k, v = torch.randn(1, 1, 2, 4, generator=g), torch.randn(1, 1, 5, 4, generator=g), torch.randn(1, 1, 5, 4)
    _, probs = attention(q, k, v)
    torch.testing.assert_close(probs.sum(-1), torch.ones(1, 1, 2))


def test_seed001_label_smoothing_distribution() -> None:
    """001's LabelSmoothing is unnormalized (KLDiv sum) and 002 puts smoothing mass on <pad>.
    Ours: q sums to 1 on real tokens, 0 on padding rows and on the padding class."""
    q = smoothed_targets(torch.tensor([3, 0, 5]), vocab_size=7, eps=0.1, pad_id=PAD)
    torch.testing.assert_close(q.sum(-1), torch.tensor([1.0, 0.0, 1.0]))
    assert torch.all(q[:, PAD] == 0)
    assert q[0, 3] == pytest.approx(0.9) and q[0, 4] == pytest.approx(0.1 / 5)


def test_seed000_base_dropout_is_point_one() -> None:
    """000's text gives P_drop = 1 for the positional dropout; the paper's base model uses 0.1."""
    assert ModelConfig.preset("base").p_drop == 0.1
    assert ModelConfig.preset("big").p_drop == 0.3
