# ---
# jupyter:
#   jupytext:
#     formats: py:percent,ipynb
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Attention Is All You Need, walked through with aiayn's own code
#
# This is the paper (Vaswani et al., 2017) read section by section, in its order except that §3.1's stacks come
# after their parts (§3.2–§3.5), each step running the modules that
# `aiayn train` and `aiayn translate` run — nothing here is a copy of the model. Every step prints the tensor
# shapes, draws its figure where a picture helps, and checks one fact of the paper with an `assert` you can
# read. `make test` executes this file (and its Chinese edition, `walkthrough.zh.py`) on every CI run in a fast
# mode, so it cannot drift from the code; `make walkthrough` renders it to a notebook and HTML.
#
# The documents this project grew from got some steps wrong. The masking mistake is run here next to the right
# version, and the step-0 learning rate is named where the rate is; all of them are listed in `docs/seed-bugs.md`,
# each guarded by a test in `tests/model/test_seed_bugs.py`.
#
# Shapes: B batch, S source length, T target length, D d_model, H heads, K = D / H, V vocabulary.

# %%
import dataclasses
import gzip
import math
import os
from pathlib import Path

import matplotlib

if "inline" not in matplotlib.get_backend():      # run as a script (the tests): draw into files
    matplotlib.use("Agg")
import matplotlib.patches
import matplotlib.pyplot as plt
import numpy as np
import torch

import aiayn
from aiayn import Translator
from aiayn.attention import attention, causal_mask, padding_mask
from aiayn.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID, ModelConfig, TrainConfig
from aiayn.data.batches import Batch, collate
from aiayn.decoding.search import beam_search, greedy
from aiayn.loss import smoothed_targets
from aiayn.model import Embedding, FeedForward, MultiHeadAttention, Transformer, sinusoids
from aiayn.optim import make_optimizer, noam_lr
from aiayn.training.distributed import Distributed
from aiayn.training.evaluate import score
from aiayn.training.train import TrainStep

FAST = os.environ.get("AIAYN_WALKTHROUGH_FAST") == "1"     # the tests' mode: the same cells, fewer steps
FIGURES = Path(os.environ.get("AIAYN_WALKTHROUGH_FIGURES", "walkthrough-figures"))
FIGURES.mkdir(parents=True, exist_ok=True)
torch.manual_seed(0)


def show(fig, name: str) -> None:
    """Save the figure (and display it in a notebook)."""
    fig.savefig(FIGURES / f"{name}.png", dpi=80, bbox_inches="tight")
    if "inline" in matplotlib.get_backend():
        plt.show()
    else:
        plt.close(fig)


# %% [markdown]
# ## §3.2.1 Scaled dot-product attention, Eq. (1)
#
# $\mathrm{Attention}(Q, K, V) = \mathrm{softmax}(QK^\top / \sqrt{d_k})\,V$. Each query scores every key,
# the scores are divided by $\sqrt{d_k}$, a softmax over the *keys* turns them into weights, and the output is the
# weighted sum of the values. Why the division: if the components of $q$ and $k$ are independent with mean 0 and
# variance 1, their dot product has variance $d_k$ (footnote 4), and for large $d_k$ such scores push the softmax
# into regions where one weight is nearly 1 and the gradients are extremely small; dividing by $\sqrt{d_k}$ brings
# the variance back to 1. `aiayn.attention.attention`
# is Eq. (1) written out; it takes tensors shaped (B, H, T, K) and a mask where `True` means "may attend".

# %%
B, H, T, S, K = 2, 4, 5, 6, 16
q, k, v = torch.randn(B, H, T, K), torch.randn(B, H, S, K), torch.randn(B, H, S, K)
out, probs = attention(q, k, v)
print("q", tuple(q.shape), "k", tuple(k.shape), "-> out", tuple(out.shape), "probs", tuple(probs.shape))

by_hand = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(K), dim=-1) @ v
assert torch.allclose(out, by_hand, atol=1e-6), "Eq. (1) by hand and aiayn differ"
assert torch.allclose(probs.sum(-1), torch.ones(B, H, T)), "each query's weights sum to 1 over the keys"

# %% [markdown]
# **Why divide by $\sqrt{d_k}$, measured.** Draw $q$ and $k$ with independent unit-variance components: the variance
# of $q \cdot k$ grows as $d_k$, and at $d_k = 512$ an unscaled softmax over 10 keys puts nearly all the weight on one
# key, where its gradient $p(1 - p)$ is almost 0. Divided by $\sqrt{d_k}$, the scores have variance 1 whatever $d_k$ is.

# %%
g = torch.Generator().manual_seed(1)          # random numbers of its own: the cells after it draw as before
print("d_k   var(q.k)   largest of 10 softmax weights, unscaled / scaled (mean of 1000 queries)")
for d_k in (4, 64, 512):
    q1, k1 = torch.randn(1000, 1, d_k, generator=g), torch.randn(1000, 10, d_k, generator=g)
    dots = (q1 * k1).sum(-1)                                          # (1000, 10) scores q.k
    top_raw = torch.softmax(dots, -1).amax(-1).mean()
    top_scaled = torch.softmax(dots / math.sqrt(d_k), -1).amax(-1).mean()
    print(f"{d_k:4d} {dots.var():9.1f}   {top_raw:.2f} / {top_scaled:.2f}")
    assert abs(dots.var() / d_k - 1) < 0.1, "the variance of q.k is d_k (footnote 4)"
assert top_raw > 0.9 and top_scaled < 0.5, "unscaled, the softmax saturates at d_k = 512; scaled, it does not"

# %% [markdown]
# **Masks.** Two kinds: padding (a short sentence in a batch must not attend to the padding that fills its row)
# and causality (decoder position $t$ must not see positions after $t$). §3.2.3: "We need to prevent leftward
# information flow in the decoder to preserve the auto-regressive property." Leftward, because the sequence is
# written left to right: information from a later position (to the right) must not flow to an earlier one (to its
# left), since at generation time the later tokens do not exist yet. A masked key gets the score $-\infty$, so after
# the softmax its weight is exactly 0.

# %%
tokens = torch.tensor([[5, 6, 7, 8, EOS_ID, PAD_ID], [5, 6, EOS_ID, PAD_ID, PAD_ID, PAD_ID]])
pad = padding_mask(tokens, PAD_ID)                                   # (B, 1, 1, S)
print("padding mask", tuple(pad.shape), pad[1, 0, 0].tolist())
_, pad_probs = attention(q, k, v, mask=pad)
assert (pad_probs[1, :, :, 3:] == 0).all(), "padding keys get probability exactly 0"

causal = causal_mask(T, T, torch.device("cpu"))
_, probs = attention(q[..., :T, :], k[..., :T, :], v[..., :T, :], causal=True)
# key j comes after query i: built here, not with causal_mask, so that it checks it
later = torch.arange(T)[None, :] > torch.arange(T)[:, None]
assert (probs[..., later] == 0).all(), "no position attends to a later one"
assert (probs[..., ~later] > 0).all(), "every position attends to itself and to every earlier one"

fig, axes = plt.subplots(1, 2, figsize=(7, 3))
axes[0].imshow(pad[:, 0, 0].float(), cmap="Greys_r", vmin=0, vmax=1)
axes[0].set_title("padding mask (B, S)")
axes[0].set_xlabel("key position")
axes[0].set_ylabel("sentence")
axes[1].imshow(causal.float(), cmap="Greys_r", vmin=0, vmax=1)
axes[1].set_title("causal mask (T, T): white = may attend")
axes[1].set_xlabel("key position")
axes[1].set_ylabel("query position")
show(fig, "masks")

# %% [markdown]
# The first seed document filled masked scores with `1e-9` — a tiny *positive* score, not $-\infty$ — so each
# masked key gets the weight of an ordinary key scoring 0, a full share beside the real keys. Here is what that does,
# next to aiayn's result:

# %%
scores = (q @ k.transpose(-2, -1) / math.sqrt(K))[1]                  # sentence 1: keys 3.. are padding
wrong = torch.softmax(scores.masked_fill(~pad[1, 0], 1e-9), dim=-1)
print(f"weight on padding: seed's masked_fill(1e-9) {wrong[..., 3:].sum(-1).mean():.2f}, "
      f"aiayn {pad_probs[1, ..., 3:].sum(-1).mean():.2f}")
assert wrong[..., 3:].sum(-1).mean() > 0.1

# %% [markdown]
# ## §3.2.2 Multi-head attention
#
# $\mathrm{MultiHead}(Q,K,V) = \mathrm{Concat}(\mathrm{head}_1, \dots, \mathrm{head}_h)W^O$ with
# $\mathrm{head}_i = \mathrm{Attention}(QW_i^Q, KW_i^K, VW_i^V)$. aiayn fuses the $h$ projections into one
# (D → 3D) matrix, splits the result into H heads of K = D / H features, and concatenates the heads' outputs
# before $W^O$. The output has the input's shape, so layers can be stacked.

# %%
D = 64
mha = MultiHeadAttention(D, n_heads=4, p_attn=0.0, cross=False)
x = torch.randn(2, 7, D)
y, maps, _ = mha(x, need_weights=True)
print("x", tuple(x.shape), "-> y", tuple(y.shape), "one map per head:", tuple(maps.shape))
assert y.shape == x.shape and maps.shape == (2, 4, 7, 7)

# %% [markdown]
# ## §3.3 Position-wise feed-forward network, Eq. (2)
#
# $\mathrm{FFN}(x) = \max(0, xW_1 + b_1)W_2 + b_2$, the same two matrices at every position. "Position-wise"
# means what the assertion checks: running it over the whole sequence or one position at a time gives the
# same numbers.

# %%
ffn = FeedForward(D, d_ff=256, p_ffn=0.0)
whole = ffn(x)
one_by_one = torch.cat([ffn(x[:, t : t + 1]) for t in range(x.shape[1])], dim=1)
assert torch.allclose(whole, one_by_one, atol=1e-6), "the FFN treats each position on its own"
print("FFN", tuple(x.shape), "->", tuple(whole.shape), "with d_ff = 256 inside")

# %% [markdown]
# ## §3.4 Embeddings and softmax
#
# Learned embeddings, **multiplied by $\sqrt{d_{model}}$**, and one matrix shared by the source embedding, the
# target embedding and the pre-softmax projection (a shared source–target vocabulary makes that possible). One
# seed document claimed the paper has no $\sqrt{d_{model}}$ factor; §3.4 does.

# %%
emb = Embedding(vocab_size=20, d_model=D, pad_id=PAD_ID)
ids = torch.tensor([[5, 9, EOS_ID]])
assert torch.allclose(emb(ids), emb.lut(ids) * math.sqrt(D)), "embeddings are scaled by sqrt(d_model)"
assert (emb.lut.weight[PAD_ID] == 0).all(), "the padding row is zero"

cfg = ModelConfig(src_vocab_size=20, tgt_vocab_size=20, d_model=D, d_ff=256, n_heads=4, n_layers=2, p_drop=0.0,
                  norm="pre", max_positions=64)
model = Transformer(cfg)
assert model.out_proj.weight is model.src_embed.lut.weight is model.tgt_embed.lut.weight, "three-way tying"
print(f"the model: {sum(p.numel() for p in model.parameters()):,} parameters, one {tuple(emb.lut.weight.shape)} "
      "matrix shared three ways")

# %% [markdown]
# **Why multiply by $\sqrt{d_{model}}$.** aiayn initialises the shared matrix $\mathcal{N}(0, d_{model}^{-1/2})$
# (as the output projection it must start with small logits), so a word vector's norm is about 1, while a positional
# encoding's is $\sqrt{d_{model}/2}$: added as they are, the positions would drown the words. Scaled by
# $\sqrt{d_{model}}$, both have the same size.

# %%
words = model.src_embed.lut.weight.detach()[UNK_ID + 1 :]            # the word rows (0-3: PAD, BOS, EOS, UNK)
word = words.norm(dim=-1).mean()
where = sinusoids(64, D).norm(dim=-1).mean()
print(f"a word vector's norm {word:.2f}, x sqrt(d_model) = {word * math.sqrt(D):.2f}; "
      f"a positional encoding's norm {where:.2f} (sqrt(d_model / 2) = {math.sqrt(D / 2):.2f})")
assert word < 0.25 * where and 0.5 < word * math.sqrt(D) / where < 2, "scaled, words and positions have one size"

# %% [markdown]
# ## §3.5 Positional encoding
#
# $PE_{(pos, 2i)} = \sin(pos / 10000^{2i/d})$, $PE_{(pos, 2i+1)} = \cos(pos / 10000^{2i/d})$: each pair of
# dimensions is a clock turning at its own speed. The paper chose it because "for any fixed offset $k$,
# $PE_{pos+k}$ can be represented as a linear function of $PE_{pos}$": for each pair, a rotation by the angle
# $k\omega_i$. The assertion builds that rotation and applies it.

# %%
pe = sinusoids(100, D).double()                         # (positions, D), computed in float64, kept as float32
fig, ax = plt.subplots(figsize=(7, 3))
for dim in (0, 1, 10, 30):                                  # fast and slow clocks: sin and cos of pair 0, two slower
    ax.plot(pe[:, dim], label=f"dim {dim} ({'sin' if dim % 2 == 0 else 'cos'}, pair {dim // 2})")
ax.set_xlabel("position")
ax.set_ylabel("PE")
ax.legend(loc="lower left", fontsize=8)
show(fig, "positional-encoding")

shift = 7
omega = 10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)      # (D/2,) one speed per pair
c, s_ = torch.cos(shift * omega), torch.sin(shift * omega)
sin, cos = pe[:, 0::2], pe[:, 1::2]
rotated_sin, rotated_cos = sin * c + cos * s_, cos * c - sin * s_           # sin(a+b), cos(a+b)
assert torch.allclose(rotated_sin[:-shift], sin[shift:], atol=1e-6)
assert torch.allclose(rotated_cos[:-shift], cos[shift:], atol=1e-6), "PE(pos+k) is a rotation of PE(pos)"
print(f"PE(pos + {shift}) = R_{shift} PE(pos) at every position (to float32 rounding, 1e-6)")

# %% [markdown]
# ## §3.1 The encoder and decoder stacks
#
# N layers each. An encoder layer: self-attention, then the FFN; a decoder layer: masked self-attention,
# attention over the encoder's output (queries from the decoder, keys and values from the encoder: §3.2.3),
# then the FFN. Each sub-layer sits in a residual connection with layer normalization (the paper puts the norm
# after the sum, "post-norm"; this small model uses "pre-norm", which trains more stably at high rates, and
# `aiayn` offers both). §5.4's residual dropout ($P_{drop} = 0.1$ for the base model) is applied to each sub-layer's
# output before it is added, and to the sums of the embeddings and positional encodings; in training only. The
# decoder must be causal: changing a later target token must not change an earlier output; and at evaluation
# dropout is off, which a model built with it checks below.

# %%
model.eval()
src = torch.tensor([[5, 6, 7, 8, EOS_ID]])
tgt = torch.tensor([[BOS_ID, 5, 6, 7]])
memory = model.encode(src)
hidden = model.decode(tgt, memory, src)
print("src", tuple(src.shape), "-> memory", tuple(memory.shape), "; tgt", tuple(tgt.shape), "-> hidden",
      tuple(hidden.shape), "-> log-probabilities", tuple(model.generator(hidden).shape))
changed = tgt.clone()
changed[0, 3] = 9
assert torch.allclose(model.decode(changed, memory, src)[:, :3], hidden[:, :3], atol=1e-6), "the decoder is causal"
with_dropout = Transformer(dataclasses.replace(cfg, p_drop=0.1))          # §5.4's residual dropout
with_dropout.train()
assert not torch.equal(with_dropout(src, tgt), with_dropout(src, tgt)), "in training, dropout draws anew each pass"
with_dropout.eval()
assert torch.equal(with_dropout(src, tgt), with_dropout(src, tgt)), "no dropout at evaluation: the same output"

# %% [markdown]
# ## §3 The whole model: Figure 1 and Table 3
#
# Figure 1, in aiayn's names: the input and output embeddings with their positional encodings at the bottom
# (`src_embed` + `src_pos`, `tgt_embed` + `tgt_pos`), the left stack of N encoder layers (`encoder`: self-attention
# and FFN), the right stack of N decoder layers (`decoder`: masked self-attention, encoder-decoder attention, FFN),
# and the linear layer and softmax on top (`out_proj`, the embedding matrix again, then `log_softmax`). Built with
# Table 3's presets and a shared vocabulary of 37,000 tokens (§5.1), the base model has 63.1M parameters where
# Table 3 says 65M, and the big one 214.2M where it says 213M. The paper does not say how it counted; the gap is not
# the vocabulary (a larger one would raise big as much as base, and big is already above its figure), and the
# layers' matrices, biases and norms are all counted here. The embedding is counted once: the source, the target
# and the output layer share it (§3.4).

# %%
print("preset  encoder      decoder      embedding (shared 3 ways)   total         Table 3")
for name, paper in (("base", 65e6), ("big", 213e6)):
    with torch.device("meta"):                                     # shapes only: nothing is allocated
        full = Transformer(ModelConfig.preset(name, vocab_size=37000))
    count = lambda module: sum(p.numel() for p in module.parameters())  # noqa: E731
    total = count(full)
    print(f"{name:6s} {count(full.encoder):11,d}  {count(full.decoder):11,d}  {count(full.src_embed):11,d}"
          f"               {total:12,d}  {paper / 1e6:.0f}M ({total / paper - 1:+.1%})")
    assert abs(total / paper - 1) < 0.05, "within 5% of Table 3"
    assert full.out_proj.weight is full.tgt_embed.lut.weight is full.src_embed.lut.weight

# %% [markdown]
# ## §4 Why self-attention: Table 1
#
# Per layer, for $n$ positions of $d$ dimensions: self-attention costs $O(n^2 \cdot d)$ operations and links any two
# positions in one step; a recurrent layer costs $O(n \cdot d^2)$ and needs $n$ sequential steps (a path of length
# $O(n)$); a convolution of width $k$ costs $O(k \cdot n \cdot d^2)$, with a path of $O(\log_k n)$ when dilated.
# Self-attention is the cheaper while $n < d$, which holds for sentences: Multi30k's are about 13 tokens long, against
# $d_{model} = 512$. The operation counts, for $d = 512$ and $k = 3$:

# %%
d_model, width = 512, 3
print("    n  self-attention    recurrent  convolution   longest path: self / recurrent / convolution")
for n in (13, 50, 512, 2048):
    ops = {"self": n * n * d_model, "recurrent": n * d_model**2, "convolution": width * n * d_model**2}
    print(f"{n:5d} {ops['self']:15,d} {ops['recurrent']:12,d} {ops['convolution']:12,d}   "
          f"1 / {n} / {math.ceil(math.log(n, width))}")
    assert (ops["self"] < ops["recurrent"]) == (n < d_model), "self-attention is the cheaper exactly while n < d"

# %% [markdown]
# ## §5.1 Batches: padding, masks and the target shift
#
# Sentence pairs are grouped by length into batches of about 25,000 source and 25,000 target tokens (aiayn:
# `max_tokens` per batch, `update_freq` batches per update), each sentence padded to the longest of its batch. The
# decoder is trained with *teacher forcing*: its input is the reference shifted right by one, BOS $y_1 \dots y_m$, and
# it must predict $y_1 \dots y_m$ EOS, so every position of the reference is learned in one pass, while the causal
# mask keeps each position from seeing its own answer. `aiayn.data.batches.collate` makes these tensors for training; here it
# runs on three pairs held in memory. Then the masks each attention gets: the source's padding for the encoder and
# the encoder-decoder attention, padding and causality for the decoder's self-attention.

# %%
class InMemory:                          # what collate reads of a token file (data.TokenArray): lengths and ids
    def __init__(self, seqs: list[list[int]]) -> None:
        self.seqs, self.lengths = seqs, np.array([len(s) for s in seqs])

    def __getitem__(self, i: int) -> list[int]:
        return self.seqs[i]


batch = collate(InMemory([[11, 12, 13, 14, 15], [11, 12], [16, 17, 18]]),
                InMemory([[21, 22, 23], [24, 25, 26, 27, 28], [29]]), np.arange(3))
print("src (B, S)\n", batch.src, "\ntgt_in (B, T): BOS y ..\n", batch.tgt_in, "\ntgt_out (B, T): y .. EOS\n",
      batch.tgt_out)
shifted = batch.tgt_in[:, 1:] != PAD_ID
assert torch.equal(batch.tgt_in[:, 1:][shifted], batch.tgt_out[:, :-1][shifted]), "the input is the answer, shifted"
assert (batch.tgt_in[:, 0] == BOS_ID).all() and batch.n_tgt_tokens == (batch.tgt_out != PAD_ID).sum()
keys = padding_mask(batch.src, PAD_ID)                                  # (B, 1, 1, S) encoder and cross attention
Tb = batch.tgt_in.shape[1]
self_mask = padding_mask(batch.tgt_in, PAD_ID) & causal_mask(Tb, Tb, batch.src.device)   # (B, 1, T, T) decoder
assert keys[1, 0, 0].tolist() == [True, True, True, False, False, False]
assert self_mask[2, 0, :2].sum() == 3 and not self_mask[2, 0, :, 2:].any(), "sentence 3: BOS sees itself, y_1 both"

fig, axes = plt.subplots(1, 3, figsize=(10, 3))
for ax, m, title in zip(axes, (keys[:, 0, 0], self_mask[0, 0], self_mask[2, 0]),
                        ("source keys (B, S)", "decoder, sentence 1 (T, T)", "decoder, sentence 3 (T, T)"), strict=True):
    ax.imshow(m.float(), cmap="Greys_r", vmin=0, vmax=1)
    ax.set_title(title)
    ax.set_xlabel("key position")
axes[0].set_ylabel("sentence")
axes[1].set_ylabel("query position")
fig.legend(handles=[matplotlib.patches.Patch(color="white", ec="black", label="may attend"),
                    matplotlib.patches.Patch(color="black", label="masked")], loc="upper center",
           bbox_to_anchor=(0.5, 0.0), ncol=2)
show(fig, "batch-masks")

# %% [markdown]
# ## §5.3 The optimizer and its learning rate
#
# Adam with $\beta_1 = 0.9$, $\beta_2 = 0.98$, $\epsilon = 10^{-9}$ and
# $lrate = d_{model}^{-0.5} \cdot \min(step^{-0.5}, step \cdot warmup^{-1.5})$: a linear warm-up, then
# decay with the inverse square root of the step. The two terms meet at `warmup`, so the rate peaks there.
# (Counted from 1, the first update's rate is finite; the seed documents count that way too, one incrementing the
# step before it computes the rate, the other using step + 1. The formula itself is undefined at step 0, where
# `0 ** -0.5` divides by zero, so aiayn defines the rate there as 0: before the first update.)

# %%
steps = torch.arange(1, 20001)
fig, ax = plt.subplots(figsize=(7, 3))
for d_model, warmup in ((512, 4000), (512, 8000), (256, 4000)):
    ax.plot(steps, [noam_lr(int(s), d_model, warmup) for s in steps], label=f"d={d_model}, warmup={warmup}")
ax.set_xlabel("step")
ax.set_ylabel("learning rate")
ax.legend()
show(fig, "learning-rate")
rates = [noam_lr(s, 512, 4000) for s in range(1, 10001)]
assert rates.index(max(rates)) + 1 == 4000, "the rate peaks at warmup"
assert noam_lr(0, 512, 4000) == 0.0
print(f"peak {max(rates):.2e} at step 4000 (d_model 512)")

# %% [markdown]
# ## §5.4 Label smoothing
#
# With $\epsilon_{ls} = 0.1$ the target distribution keeps $1 - \epsilon$ on the right token and spreads
# $\epsilon$ over the other real tokens — none on padding. "This hurts perplexity, as the model learns to be
# more unsure, but improves accuracy and BLEU score."

# %%
target = torch.tensor([5, 7, PAD_ID])
dist = smoothed_targets(target, vocab_size=10, eps=0.1, pad_id=PAD_ID)
fig, ax = plt.subplots(figsize=(7, 2.4))
ax.imshow(dist, cmap="viridis")
for row in range(dist.shape[0]):
    for col in range(dist.shape[1]):
        value = float(dist[row, col])
        ax.text(col, row, f"{value:.4g}", ha="center", va="center", fontsize=7,
                color="black" if value > 0.5 else "white")
ax.set_xlabel("token id (0: padding)")
ax.set_yticks([0, 1, 2], ["target 5", "target 7", "padding"])
ax.set_title("smoothed targets (3 tokens x V=10), eps = 0.1")
show(fig, "label-smoothing")
print(dist)
assert torch.allclose(dist[:2].sum(-1), torch.ones(2)), "each real target is a distribution"
assert dist[0, 5] == 0.9 and (dist[:, PAD_ID] == 0).all() and (dist[2] == 0).all(), "nothing on padding"

# %% [markdown]
# ## Training: the copy task
#
# The seeds' first experiment: learn to copy a string of random symbols. It runs the attention, the stacks, the
# embeddings, the positions, the optimizer and the rate — if one were wrong the model would not learn it — and trains
# in well under a minute on 2 CPU cores. Each update is `aiayn train`'s own (`TrainStep`): the label-smoothed loss
# over the batch's target tokens (`SequenceLoss`, $\epsilon_{ls} = 0.1$, without building the (tokens × V) matrix),
# residual dropout $P_{drop} = 0.1$ (§5.4), Adam with §5.3's rate, and at the end the average of the last
# checkpoints, as §6.1 averages the last 5 (here 3, 50 updates apart). §5.2 trained the base model for 100,000
# updates of about 25,000 tokens; this runs 600 of 640 tokens, with a short warm-up (200 updates), half the rate
# (`lr_factor=0.5`) and the gradient's norm clipped at 1, which keep that short, steep schedule stable. Every
# string has length 10, so there is no padding here: §5.1's batches above show it.

# %%
def copy_batch(n: int, length: int = 10) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """n random strings over symbols 4..19: src = x EOS, tgt_in = BOS x, tgt_out = x EOS."""
    x = torch.randint(4, 20, (n, length))
    eos, bos = torch.full((n, 1), EOS_ID), torch.full((n, 1), BOS_ID)
    return torch.cat([x, eos], 1), torch.cat([bos, x], 1), torch.cat([x, eos], 1)


torch.manual_seed(1)
model = Transformer(dataclasses.replace(cfg, p_drop=0.1))                       # §5.4: residual dropout 0.1
train_cfg = TrainConfig(warmup=200, lr_factor=0.5, label_smoothing=0.1, clip_norm=1.0)   # §5.4: eps_ls = 0.1
optimizer = make_optimizer(model.parameters(), train_cfg, torch.device("cpu"))     # §5.3: Adam(0.9, 0.98, 1e-9)
update = TrainStep.build(model, optimizer, train_cfg, torch.device("cpu"), "fp32", Distributed())   # aiayn train's
n_steps = 200 if FAST else 600
losses, snapshots = [], []
model.train()
for step in range(1, n_steps + 1):
    src, tgt_in, tgt_out = copy_batch(64)
    batch = Batch(src, tgt_in, tgt_out, np.arange(64), int((src != PAD_ID).sum()), int((tgt_out != PAD_ID).sum()))
    stats = update([batch], noam_lr(step, cfg.d_model, train_cfg.warmup, train_cfg.lr_factor))
    losses.append(stats.nll / stats.tgt_tokens)                        # cross-entropy per token (the loss is smoothed)
    if step % 50 == 0 and step > n_steps - 150:                         # the last 3 checkpoints, 50 updates apart
        snapshots.append({k: v.detach().clone() for k, v in model.state_dict().items()})
model.load_state_dict({k: sum(s[k] for s in snapshots) / len(snapshots) for k in snapshots[0]})   # §6.1: averaged
print(f"{n_steps} updates: cross-entropy per token {losses[0]:.3f} -> {losses[-1]:.3f}; "
      f"the model is the average of the last {len(snapshots)} checkpoints")
assert losses[-1] < 0.8 * losses[0], "the loss falls"

fig, ax = plt.subplots(figsize=(6, 3))
ax.plot(losses)
ax.set_xlabel("update")
ax.set_ylabel("cross-entropy per token")
show(fig, "copy-loss")

# %% [markdown]
# ## Decoding: greedy and beam search
#
# At test time the decoder runs one position at a time, feeding back what it produced. Greedy decoding takes
# the most probable token each step; beam search (§6.1: beam 4, length penalty α) keeps the k best prefixes.
# Both use aiayn's cache, so each step computes one new position instead of the whole prefix. The paper's length
# penalty is GNMT's, $lp(Y) = ((5 + |Y|) / 6)^\alpha$ with α = 0.6; `length_norm="gnmt"` asks for it, as this cell
# does. aiayn's default is $|Y|^\alpha$ (`length_norm="length"`, what fairseq, Marian and CTranslate2 use).

# %%
model.eval()
torch.manual_seed(2)
src, _, tgt_out = copy_batch(100)
best = greedy(model, src)
beams = beam_search(model, src, beam=4, lenpen=0.6, length_norm="gnmt")
exact_greedy = sum(h.tokens == t[:-1].tolist() for h, t in zip(best, tgt_out, strict=True))
exact_beam = sum(b[0].tokens == t[:-1].tolist() for b, t in zip(beams, tgt_out, strict=True))
print("source   ", src[0, :-1].tolist())
print("greedy   ", best[0].tokens)
print("beam 4   ", beams[0][0].tokens, f"(score {beams[0][0].score:.3f})")
print(f"copied exactly: greedy {exact_greedy}/100, beam 4 {exact_beam}/100")
if not FAST:
    assert exact_greedy >= 90, "the trained model copies"

# %% [markdown]
# ## What the model attends to
#
# `Transformer.attention_maps` returns every attention probability: encoder self-attention (S × S), decoder
# self-attention (T × T, lower-triangular: causality) and encoder–decoder attention (T × S) per layer and head.
# For the copy task, output position $t$ should look at source position $t$ — a diagonal. For a real
# translation model, `aiayn plot --model RUN --sentence "..."` draws the same maps, and the web page of
# `aiayn serve` shows them for any sentence. The mean hides how the heads differ, so the second figure shows each
# head of the last layer's encoder-decoder attention on its own, with how often it points at the position being
# copied and how spread its weights are (their entropy: 0 for one key, log S for all S keys alike).

# %%
src1, tgt1, _ = copy_batch(1)
with torch.no_grad():
    maps = model.attention_maps(src1, tgt1)
fig, axes = plt.subplots(1, 3, figsize=(10, 3.3))
for ax, (name, m) in zip(axes, (("encoder self", maps.encoder[-1]), ("decoder self", maps.decoder_self[-1]),
                                 ("encoder-decoder", maps.cross[-1])), strict=True):
    ax.imshow(m[0].mean(0), cmap="viridis")
    ax.set_title(f"{name}, last layer (mean of heads)", fontsize=9)
    ax.set_xlabel("key position")
axes[0].set_ylabel("query position")
show(fig, "attention")
assert (maps.decoder_self[-1][0].triu(1) == 0).all(), "decoder self-attention is lower-triangular"
diagonal = (maps.cross[-1][0].mean(0).argmax(-1) == torch.arange(tgt1.shape[1])).float().mean().item()
print(f"encoder-decoder attention: the most attended source position is the one being copied "
      f"for {diagonal:.0%} of the outputs")

cross = maps.cross[-1][0]                                                  # (H, T, S) the last layer's heads
on_diagonal = (cross.argmax(-1) == torch.arange(tgt1.shape[1])).float().mean(-1)     # (H,)
entropy = -(cross * cross.clamp_min(1e-9).log()).sum(-1).mean(-1)                      # (H,) nats per query
fig, axes = plt.subplots(1, cross.shape[0], figsize=(10, 2.8))
for h, ax in enumerate(axes):
    ax.imshow(cross[h], cmap="viridis", vmin=0, vmax=1)
    ax.set_title(f"head {h}: {on_diagonal[h]:.0%} diagonal", fontsize=9)
    ax.set_xlabel("source position")
axes[0].set_ylabel("output position")
show(fig, "heads")
for h in range(cross.shape[0]):
    print(f"head {h}: the copied position is the most attended for {on_diagonal[h]:.0%} of the outputs; "
          f"entropy {entropy[h]:.2f} nats (uniform over {cross.shape[-1]} keys: {math.log(cross.shape[-1]):.2f})")
assert torch.allclose(cross.sum(-1), torch.ones(cross.shape[:2])), "each head's rows are distributions"

# %% [markdown]
# ## A real translation model
#
# Everything above ran at toy sizes. `make demo` trains the small model (3+3 layers, $d_{model}$ 256) on
# German→English Multi30k in about 15 minutes on 2 CPU cores. In full mode (`make walkthrough`), when its run
# directory is here (`runs/demo/run-de-en`, or the path in `AIAYN_WALKTHROUGH_MODEL`), this section translates
# sentences of test_2016_flickr with it, scores the first 200 with sacreBLEU, and draws the encoder-decoder attention
# of one sentence for every layer and head, with its pieces on the axes: the rows are the output pieces, each
# predicted from the row's attention over the source pieces.

# %%
RUN = Path(os.environ.get("AIAYN_WALKTHROUGH_MODEL", "") or Path(aiayn.__file__).parent.parent / "runs/demo/run-de-en")
if FAST or not (RUN / "config.json").is_file():
    print("the real model's section runs in full mode (make walkthrough) with a trained run: " +
          (f"{RUN} is not one; `make demo` trains it in about 15 minutes" if not (RUN / "config.json").is_file()
           else "this is the fast mode"))
else:
    multi30k = Path(aiayn.__file__).parent / "bundled" / "multi30k"
    test = {lang: gzip.open(multi30k / f"test_2016_flickr.{lang}.gz", "rt", encoding="utf-8").read().splitlines()[:200]
            for lang in ("de", "en")}
    translator = Translator.load(RUN, device="cpu")
    outputs = translator.translate(test["de"], beam=4)
    for de, out, ref in list(zip(test["de"], outputs, test["en"], strict=True))[:3]:
        print(f"{de}\n  aiayn:     {out}\n  reference: {ref}")
    bleu = score(outputs, test["en"], lang="en")
    print(f"BLEU on the first 200 lines of test_2016_flickr, beam 4: {bleu['bleu']:.2f} ({bleu['signature']})")
    assert bleu["bleu"] > 15, "a trained model translates"

    seen = translator.attention(test["de"][4], beam=4)                 # every layer's and head's attention
    layers, heads = len(seen["cross"]), len(seen["cross"][0])
    fig, axes = plt.subplots(layers, heads, figsize=(3.2 * heads, 3.4 * layers), squeeze=False)
    for layer in range(layers):
        for head in range(heads):
            ax = axes[layer][head]
            ax.imshow(seen["cross"][layer][head], cmap="viridis", vmin=0, vmax=1)      # (T, S): output x source
            ax.set_xticks(range(len(seen["source"])), seen["source"], rotation=90, fontsize=6)
            ax.set_yticks(range(len(seen["target_out"])), seen["target_out"], fontsize=6)
            ax.set_title(f"layer {layer}, head {head}", fontsize=8)
    fig.suptitle(f"encoder-decoder attention: {seen['translation']}", fontsize=9)
    fig.tight_layout()
    show(fig, "real-attention")

# %% [markdown]
# ## Where to go next
#
# - The same model on real data: `make demo` (German→English Multi30k, 15 minutes on a CPU).
# - Every section of the paper mapped to the line of aiayn that implements it: `docs/paper-to-code.md`.
# - The seeds' mistakes and the tests that keep them out: `docs/seed-bugs.md`.
