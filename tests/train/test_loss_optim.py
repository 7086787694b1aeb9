"""Label-smoothed loss (§5.4), the chunked variant, and the §5.3 rate."""

from __future__ import annotations

import pytest
import torch

from aiayn.loss import chunked_label_smoothed_loss, label_smoothed_loss, smoothed_targets
from aiayn.optim import cooldown_factor, noam_lr


def _data(N: int = 37, D: int = 16, V: int = 50, seed: int = 0):  # type: ignore[no-untyped-def]
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(N, D, generator=g, requires_grad=True)
    w = torch.randn(V, D, generator=g, requires_grad=True)
    y = torch.randint(0, V, (N,), generator=g)
    return h, w, y


def test_loss_equals_cross_entropy_with_smoothed_targets() -> None:
    h, w, y = _data()
    logp = torch.log_softmax(h @ w.T, -1)
    loss, nll = label_smoothed_loss(logp, y, 0.1, pad_id=0)
    q = smoothed_targets(y, 50, 0.1, 0)
    torch.testing.assert_close(loss, -(q * logp).sum())
    torch.testing.assert_close(nll, torch.nn.functional.nll_loss(logp, y, ignore_index=0, reduction="sum"))


def test_no_smoothing_is_plain_nll() -> None:
    h, w, y = _data()
    loss, nll = label_smoothed_loss(torch.log_softmax(h @ w.T, -1), y, 0.0, pad_id=0)
    torch.testing.assert_close(loss, nll)


@pytest.mark.parametrize("chunk", [1, 5, 16, 37, 1000, 0])
def test_chunked_loss_equals_plain_loss_and_gradients(chunk: int) -> None:
    h, w, y = _data()
    loss, nll = label_smoothed_loss(torch.log_softmax(h @ w.T, -1), y, 0.1, 0)
    loss.backward()
    gh, gw = h.grad.clone(), w.grad.clone()  # type: ignore[union-attr]
    h.grad = w.grad = None
    closs, cnll = chunked_label_smoothed_loss(h, w, y, 0.1, 0, chunk=chunk)
    closs.backward()
    torch.testing.assert_close(closs, loss)
    torch.testing.assert_close(cnll, nll)
    torch.testing.assert_close(h.grad, gh)
    torch.testing.assert_close(w.grad, gw)


@pytest.mark.parametrize("chunk", [3, 0])
def test_chunked_loss_with_an_output_bias_equals_plain_loss_and_gradients(chunk: int) -> None:
    """Marian models add a bias to the logits (ModelConfig.output_bias): values and all three gradients."""
    h, w, y = _data()
    b = torch.randn(w.shape[0], requires_grad=True)
    loss, nll = label_smoothed_loss(torch.log_softmax(h @ w.T + b, -1), y, 0.1, 0)
    loss.backward()
    grads = [t.grad.clone() for t in (h, w, b)]  # type: ignore[union-attr]
    h.grad = w.grad = b.grad = None
    closs, cnll = chunked_label_smoothed_loss(h, w, y, 0.1, 0, chunk=chunk, bias=b)
    closs.backward()
    torch.testing.assert_close((closs, cnll), (loss, nll))
    for t, g in zip((h, w, b), grads, strict=True):
        torch.testing.assert_close(t.grad, g)
    assert b.grad is not None and b.grad.abs().sum() > 0
    with torch.no_grad():                                     # the evaluation path adds it too
        torch.testing.assert_close(chunked_label_smoothed_loss(h, w, y, 0.1, 0, chunk=chunk, bias=b), (loss, nll))


def test_chunked_loss_under_bf16_autocast_is_close() -> None:
    h, w, y = _data()
    loss, _ = label_smoothed_loss(torch.log_softmax(h @ w.T, -1), y, 0.1, 0)
    loss.backward()
    gh = h.grad.clone()  # type: ignore[union-attr]
    h.grad = None
    with torch.autocast("cpu", dtype=torch.bfloat16):
        closs, _ = chunked_label_smoothed_loss(h, w, y, 0.1, 0, chunk=8)
    closs.backward()
    assert abs(closs.item() - loss.item()) / loss.item() < 0.02
    assert torch.nn.functional.cosine_similarity(h.grad.flatten(), gh.flatten(), dim=0) > 0.99  # type: ignore[union-attr]


def test_chunked_loss_tied_weight_receives_both_gradients() -> None:
    """With weight tying the same matrix is the embedding and the projection: gradients must add up."""
    torch.manual_seed(0)
    emb = torch.nn.Embedding(20, 8)
    tokens = torch.tensor([3, 4, 5, 6])
    h = emb(tokens) * 2
    loss, _ = chunked_label_smoothed_loss(h, emb.weight, torch.tensor([4, 5, 6, 7]), 0.1, 0, chunk=2)
    loss.backward()
    g_chunked = emb.weight.grad.clone()  # type: ignore[union-attr]
    emb.weight.grad = None
    h = emb(tokens) * 2
    ref, _ = label_smoothed_loss(torch.log_softmax(h @ emb.weight.T, -1), torch.tensor([4, 5, 6, 7]), 0.1, 0)
    ref.backward()
    torch.testing.assert_close(g_chunked, emb.weight.grad)


def test_noam_schedule_shape() -> None:
    rates = [noam_lr(s, 512, 4000) for s in range(0, 20001, 100)]
    peak = max(rates)
    assert rates[0] == 0.0
    assert rates.index(peak) == 40  # step 4000
    assert all(a <= b for a, b in zip(rates[:40], rates[1:41], strict=True))
    assert all(a >= b for a, b in zip(rates[40:-1], rates[41:], strict=True))
    assert noam_lr(4000, 512, 4000, factor=2.0) == pytest.approx(2 * peak)


def test_cooldown_is_linear_to_zero_over_the_last_fraction() -> None:
    assert [cooldown_factor(p, 0.25) for p in (0.0, 0.5, 0.75, 0.875, 1.0)] == [1.0, 1.0, 1.0, 0.5, 0.0]
    assert cooldown_factor(1.2, 0.25) == 0.0                  # past the end (a late clock tick): never negative
    assert cooldown_factor(0.99, 0.0) == 1.0                  # off
