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
# # 《Attention Is All You Need》逐节精读：用 aiayn 自己的代码
#
# 本文一节一节地读论文（Vaswani 等，2017），大体按章节顺序，只把 §3.1 的整体结构放到各个组件（§3.2–§3.5）之后；每一步运行的，都是 `aiayn train` 和 `aiayn translate` 真正使用的模块——这里没有任何一份模型代码的副本。每一步都会打印张量形状，需要时画图，并用一条看得见的 `assert` 验证论文里的一个结论。`make test` 在每次 CI 中以快速模式执行本文件（以及英文版 `walkthrough.py`），所以它不可能和代码脱节；`make walkthrough` 会把它渲染成 notebook 和 HTML，`make docs` 构建的文档站点也收录了它。图中的坐标轴和标题有意保持英文：两个版本运行的是完全相同的代码。
#
# 本项目所参考的几篇教程里有写错的地方。掩码的错误写法在本文中与正确写法并排运行，第 0 步学习率的问题在学习率一节说明；完整清单见 `docs/seed-bugs.md`，每一条都有 `tests/model/test_seed_bugs.py` 里的测试把关。
#
# 形状记号：B 批大小，S 源序列长度，T 目标序列长度，D 即 d_model，H 头数，K = D / H，V 词表大小。

# %%
import dataclasses
import gzip
import math
import os
from pathlib import Path

import matplotlib

if "inline" not in matplotlib.get_backend():      # 作为脚本运行（测试）时：把图画进文件
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

FAST = os.environ.get("AIAYN_WALKTHROUGH_FAST") == "1"     # 测试用的快速模式：同样的单元格，更少的训练步数
FIGURES = Path(os.environ.get("AIAYN_WALKTHROUGH_FIGURES", "walkthrough-figures"))
FIGURES.mkdir(parents=True, exist_ok=True)
torch.manual_seed(0)


def show(fig, name: str) -> None:
    """保存图片（在 notebook 里同时显示）。"""
    fig.savefig(FIGURES / f"{name}.png", dpi=80, bbox_inches="tight")
    if "inline" in matplotlib.get_backend():
        plt.show()
    else:
        plt.close(fig)


# %% [markdown]
# ## §3.2.1 缩放点积注意力，公式 (1)
#
# $\mathrm{Attention}(Q, K, V) = \mathrm{softmax}(QK^\top / \sqrt{d_k})\,V$。每个查询（query）给所有键（key）打分，分数除以 $\sqrt{d_k}$，再沿着**键**的方向做 softmax 得到权重，输出就是值（value）的加权和。为什么要除：如果 $q$ 和 $k$ 的各分量相互独立、均值为 0、方差为 1，它们的点积方差就是 $d_k$（论文脚注 4）；$d_k$ 很大时，这样的分数会把 softmax 推进饱和区——一个权重接近 1，梯度极小；除以 $\sqrt{d_k}$ 让方差回到 1。`aiayn.attention.attention` 就是把公式 (1) 原样写出来；输入形状为 (B, H, T, K)，掩码中 `True` 表示“可以关注”。

# %%
B, H, T, S, K = 2, 4, 5, 6, 16
q, k, v = torch.randn(B, H, T, K), torch.randn(B, H, S, K), torch.randn(B, H, S, K)
out, probs = attention(q, k, v)
print("q", tuple(q.shape), "k", tuple(k.shape), "-> out", tuple(out.shape), "probs", tuple(probs.shape))

by_hand = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(K), dim=-1) @ v
assert torch.allclose(out, by_hand, atol=1e-6), "手算的公式 (1) 与 aiayn 不一致"
assert torch.allclose(probs.sum(-1), torch.ones(B, H, T)), "每个查询对所有键的权重之和为 1"

# %% [markdown]
# **为什么要除以 $\sqrt{d_k}$：算给你看。** 让 $q$ 和 $k$ 的各分量相互独立、方差为 1：$q \cdot k$ 的方差随 $d_k$ 线性增长；$d_k = 512$ 时，不缩放的 softmax 在 10 个键上几乎把全部权重给了一个键，这时它的梯度 $p(1 - p)$ 几乎为 0。除以 $\sqrt{d_k}$ 之后，无论 $d_k$ 多大，分数的方差都是 1。

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
# **掩码。** 有两种：填充掩码（一批句子长短不一，短句后面补的填充符不能被关注）和因果掩码（解码器第 $t$ 个位置不能看到 $t$ 之后的位置）。§3.2.3 的原话是：“我们需要阻止解码器中向左的信息流，以保持自回归性质。”之所以说“向左”，是因为序列从左往右书写：后面（右边）位置的信息不能流向前面（左边）的位置，因为生成时后面的词还不存在。被屏蔽的键得分为 $-\infty$，softmax 之后权重恰好为 0。

# %%
tokens = torch.tensor([[5, 6, 7, 8, EOS_ID, PAD_ID], [5, 6, EOS_ID, PAD_ID, PAD_ID, PAD_ID]])
pad = padding_mask(tokens, PAD_ID)                                   # (B, 1, 1, S)
print("padding mask", tuple(pad.shape), pad[1, 0, 0].tolist())
_, pad_probs = attention(q, k, v, mask=pad)
assert (pad_probs[1, :, :, 3:] == 0).all(), "填充位置的概率恰好为 0"

causal = causal_mask(T, T, torch.device("cpu"))
_, probs = attention(q[..., :T, :], k[..., :T, :], v[..., :T, :], causal=True)
# 键 j 在查询 i 之后：在这里直接构造，而不用 causal_mask，这样才能检验它
later = torch.arange(T)[None, :] > torch.arange(T)[:, None]
assert (probs[..., later] == 0).all(), "没有任何位置关注它之后的位置"
assert (probs[..., ~later] > 0).all(), "每个位置都关注它自己和它之前的每个位置"

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
# 第一篇参考文档用 `1e-9` 填充被屏蔽的分数——这是一个很小的**正数**，而不是 $-\infty$——于是每个被屏蔽的键得到的权重，和一个得分为 0 的普通键一样，与真实的键平分权重。下面把它和 aiayn 的结果放在一起对比：

# %%
scores = (q @ k.transpose(-2, -1) / math.sqrt(K))[1]                  # sentence 1: keys 3.. are padding
wrong = torch.softmax(scores.masked_fill(~pad[1, 0], 1e-9), dim=-1)
print(f"落在填充位置上的权重：参考文档的 masked_fill(1e-9) {wrong[..., 3:].sum(-1).mean():.2f}, "
      f"aiayn {pad_probs[1, ..., 3:].sum(-1).mean():.2f}")
assert wrong[..., 3:].sum(-1).mean() > 0.1

# %% [markdown]
# ## §3.2.2 多头注意力
#
# $\mathrm{MultiHead}(Q,K,V) = \mathrm{Concat}(\mathrm{head}_1, \dots, \mathrm{head}_h)W^O$，其中 $\mathrm{head}_i = \mathrm{Attention}(QW_i^Q, KW_i^K, VW_i^V)$。aiayn 把 $h$ 组投影合并成一个 (D → 3D) 的矩阵，再把结果切成 H 个头、每头 K = D / H 维，各头的输出拼接后乘以 $W^O$。输出形状与输入相同，所以层可以一层层叠起来。

# %%
D = 64
mha = MultiHeadAttention(D, n_heads=4, p_attn=0.0, cross=False)
x = torch.randn(2, 7, D)
y, maps, _ = mha(x, need_weights=True)
print("x", tuple(x.shape), "-> y", tuple(y.shape), "每个头一张注意力图：", tuple(maps.shape))
assert y.shape == x.shape and maps.shape == (2, 4, 7, 7)

# %% [markdown]
# ## §3.3 逐位置前馈网络，公式 (2)
#
# $\mathrm{FFN}(x) = \max(0, xW_1 + b_1)W_2 + b_2$，每个位置用的是同样的两个矩阵。“逐位置”的含义正是下面断言所检查的：对整个序列一次算完，和一个位置一个位置地算，结果完全相同。

# %%
ffn = FeedForward(D, d_ff=256, p_ffn=0.0)
whole = ffn(x)
one_by_one = torch.cat([ffn(x[:, t : t + 1]) for t in range(x.shape[1])], dim=1)
assert torch.allclose(whole, one_by_one, atol=1e-6), "FFN 对每个位置独立计算"
print("FFN", tuple(x.shape), "->", tuple(whole.shape), "，中间层 d_ff = 256")

# %% [markdown]
# ## §3.4 词嵌入与 softmax
#
# 可学习的词嵌入，**乘以 $\sqrt{d_{model}}$**；源语言嵌入、目标语言嵌入和 softmax 之前的线性变换共用同一个矩阵（源语言和目标语言共享词表才能这样做）。有一篇参考文档说论文里没有 $\sqrt{d_{model}}$ 这个因子—— §3.4 明明写着要乘。

# %%
emb = Embedding(vocab_size=20, d_model=D, pad_id=PAD_ID)
ids = torch.tensor([[5, 9, EOS_ID]])
assert torch.allclose(emb(ids), emb.lut(ids) * math.sqrt(D)), "词嵌入乘以了 sqrt(d_model)"
assert (emb.lut.weight[PAD_ID] == 0).all(), "填充符那一行为零"

cfg = ModelConfig(src_vocab_size=20, tgt_vocab_size=20, d_model=D, d_ff=256, n_heads=4, n_layers=2, p_drop=0.0,
                  norm="pre", max_positions=64)
model = Transformer(cfg)
assert model.out_proj.weight is model.src_embed.lut.weight is model.tgt_embed.lut.weight, "三处共享同一个矩阵"
print(f"模型：{sum(p.numel() for p in model.parameters()):,} 个参数，一个 {tuple(emb.lut.weight.shape)} "
      "矩阵三处共享")

# %% [markdown]
# **为什么要乘以 $\sqrt{d_{model}}$。** aiayn 把共享矩阵初始化为 $\mathcal{N}(0, d_{model}^{-1/2})$（它同时是输出投影，起步时 logits 必须小），所以一个词向量的范数约为 1，而一个位置编码的范数是 $\sqrt{d_{model}/2}$：直接相加，位置信息会淹没词的信息。乘以 $\sqrt{d_{model}}$ 之后，两者大小相当。

# %%
words = model.src_embed.lut.weight.detach()[UNK_ID + 1 :]            # the word rows (0-3: PAD, BOS, EOS, UNK)
word = words.norm(dim=-1).mean()
where = sinusoids(64, D).norm(dim=-1).mean()
print(f"a word vector's norm {word:.2f}, x sqrt(d_model) = {word * math.sqrt(D):.2f}; "
      f"a positional encoding's norm {where:.2f} (sqrt(d_model / 2) = {math.sqrt(D / 2):.2f})")
assert word < 0.25 * where and 0.5 < word * math.sqrt(D) / where < 2, "scaled, words and positions have one size"

# %% [markdown]
# ## §3.5 位置编码
#
# $PE_{(pos, 2i)} = \sin(pos / 10000^{2i/d})$，$PE_{(pos, 2i+1)} = \cos(pos / 10000^{2i/d})$：每一对维度都像一个以自己的速度转动的时钟。论文选它的理由是“对任意固定的偏移 $k$，$PE_{pos+k}$ 都可以表示为 $PE_{pos}$ 的线性函数”：对每一对维度，这个线性函数就是旋转 $k\omega_i$ 角。下面的断言把这个旋转构造出来并作用上去。

# %%
pe = sinusoids(100, D).double()                         # (位置数, D)，用 float64 计算，以 float32 保存
fig, ax = plt.subplots(figsize=(7, 3))
for dim in (0, 1, 10, 30):                                  # fast and slow clocks: sin and cos of pair 0, two slower
    ax.plot(pe[:, dim], label=f"dim {dim} ({'sin' if dim % 2 == 0 else 'cos'}, pair {dim // 2})")
ax.set_xlabel("position")
ax.set_ylabel("PE")
ax.legend(loc="lower left", fontsize=8)
show(fig, "positional-encoding")

shift = 7
omega = 10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)      # (D/2,)，每对维度一个转速
c, s_ = torch.cos(shift * omega), torch.sin(shift * omega)
sin, cos = pe[:, 0::2], pe[:, 1::2]
rotated_sin, rotated_cos = sin * c + cos * s_, cos * c - sin * s_           # sin(a+b), cos(a+b)
assert torch.allclose(rotated_sin[:-shift], sin[shift:], atol=1e-6)
assert torch.allclose(rotated_cos[:-shift], cos[shift:], atol=1e-6), "PE(pos+k) 是 PE(pos) 的旋转"
print(f"在每个位置上都有 PE(pos + {shift}) = R_{shift} PE(pos)（float32 舍入误差以内，1e-6）")

# %% [markdown]
# ## §3.1 编码器与解码器堆栈
#
# 各有 N 层。编码器的一层：自注意力，然后是 FFN；解码器的一层：带掩码的自注意力，对编码器输出的注意力（查询来自解码器，键和值来自编码器：§3.2.3），然后是 FFN。每个子层都包在残差连接和层归一化里（论文把归一化放在相加之后，即 post-norm；这个小模型用 pre-norm，在高学习率下训练更稳定；`aiayn` 两种都支持）。§5.4 的残差 dropout（基础模型 $P_{drop} = 0.1$）作用在每个子层的输出上（在相加之前），也作用在词嵌入与位置编码之和上，只在训练时生效。解码器必须是因果的：改动后面的目标词，不应改变前面位置的输出；评估时 dropout 关闭，下面用一个带 dropout 的模型来验证。

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
assert torch.allclose(model.decode(changed, memory, src)[:, :3], hidden[:, :3], atol=1e-6), "解码器是因果的"
with_dropout = Transformer(dataclasses.replace(cfg, p_drop=0.1))          # §5.4 的残差 dropout
with_dropout.train()
assert not torch.equal(with_dropout(src, tgt), with_dropout(src, tgt)), "训练时 dropout 每次重新抽样"
with_dropout.eval()
assert torch.equal(with_dropout(src, tgt), with_dropout(src, tgt)), "评估时不做 dropout：同样的输入，同样的输出"

# %% [markdown]
# ## §3 完整模型：图 1 与表 3
#
# 图 1 在 aiayn 中的名字：底部是输入、输出词嵌入及其位置编码（`src_embed` + `src_pos`，`tgt_embed` + `tgt_pos`），左边是 N 层编码器（`encoder`：自注意力和前馈网络），右边是 N 层解码器（`decoder`：带掩码的自注意力、编码器-解码器注意力、前馈网络），顶部是线性层和 softmax（`out_proj`，即同一个词嵌入矩阵，再接 `log_softmax`）。按表 3 的预设、37,000 个词元的共享词表（§5.1）构建，基础模型有 6310 万个参数，表 3 写的是 6500 万；大模型有 2.142 亿个，表 3 写的是 2.13 亿。论文没有说明它怎么计数；差距不来自词表（更大的词表会让大模型和基础模型同样变大，而大模型已经高于论文的数字），各层的矩阵、偏置和层归一化这里都计入了。词嵌入只计一次：源语言、目标语言和输出层共享它（§3.4）。

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
# ## §4 为什么用自注意力：表 1
#
# 对 $n$ 个位置、$d$ 维的序列，每层的代价：自注意力为 $O(n^2 \cdot d)$ 次运算，任意两个位置一步相连；循环层为 $O(n \cdot d^2)$，需要 $n$ 个顺序步骤（路径长度 $O(n)$）；宽度为 $k$ 的卷积为 $O(k \cdot n \cdot d^2)$，用空洞卷积时路径长度为 $O(\log_k n)$。只要 $n < d$，自注意力就更便宜；句子正是如此：Multi30k 的句子平均约 13 个词元，而 $d_{model} = 512$。下面是 $d = 512$、$k = 3$ 时的运算次数：

# %%
d_model, width = 512, 3
print("    n  self-attention    recurrent  convolution   longest path: self / recurrent / convolution")
for n in (13, 50, 512, 2048):
    ops = {"self": n * n * d_model, "recurrent": n * d_model**2, "convolution": width * n * d_model**2}
    print(f"{n:5d} {ops['self']:15,d} {ops['recurrent']:12,d} {ops['convolution']:12,d}   "
          f"1 / {n} / {math.ceil(math.log(n, width))}")
    assert (ops["self"] < ops["recurrent"]) == (n < d_model), "self-attention is the cheaper exactly while n < d"

# %% [markdown]
# ## §5.1 批次：填充、掩码与目标序列的移位
#
# 句对按长度分组，每批约含 25,000 个源语言词元和 25,000 个目标语言词元（aiayn 中是每批的 `max_tokens`，以及每次更新累积的批数 `update_freq`），每个句子填充到本批最长句子的长度。解码器用*教师强制*（teacher forcing）训练：输入是右移一位的参考译文 BOS $y_1 \dots y_m$，要预测的是 $y_1 \dots y_m$ EOS。这样参考译文的每个位置在一次前向计算中同时学习，而因果掩码保证每个位置看不到自己的答案。训练时由 `aiayn.data.batches.collate` 生成这些张量；这里用内存中的三个句对来运行它。然后是每种注意力用到的掩码：编码器和编码器-解码器注意力用源句的填充掩码，解码器自注意力同时用填充掩码和因果掩码。

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
# ## §5.3 优化器与学习率
#
# Adam，$\beta_1 = 0.9$，$\beta_2 = 0.98$，$\epsilon = 10^{-9}$，学习率 $lrate = d_{model}^{-0.5} \cdot \min(step^{-0.5}, step \cdot warmup^{-1.5})$：先线性预热，再按步数的平方根倒数衰减。两项在 `warmup` 处相等，所以学习率在那里达到峰值。（从 1 开始计步，第一次更新的学习率是有限值；参考文档也是这样计步的：一篇先把步数加一再算学习率，另一篇用 step + 1。公式本身在第 0 步没有定义，`0 ** -0.5` 会除以零，所以 aiayn 把那里的学习率定义为 0，即第一次更新之前。）

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
assert rates.index(max(rates)) + 1 == 4000, "学习率在 warmup 处达到峰值"
assert noam_lr(0, 512, 4000) == 0.0
print(f"峰值 {max(rates):.2e}，在第 4000 步（d_model 512）")

# %% [markdown]
# ## §5.4 标签平滑
#
# 取 $\epsilon_{ls} = 0.1$：目标分布在正确的词上保留 $1 - \epsilon$，把 $\epsilon$ 平均分给其他真实的词——填充符一点也不分。论文说：“这会损害困惑度，因为模型学得更不确定，但能提高准确率和 BLEU。”

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
assert torch.allclose(dist[:2].sum(-1), torch.ones(2)), "每个真实目标都是一个概率分布"
assert dist[0, 5] == 0.9 and (dist[:, PAD_ID] == 0).all() and (dist[2] == 0).all(), "填充符上没有概率"

# %% [markdown]
# ## 训练：复制任务
#
# 参考文档里的第一个实验：学会复制一串随机符号。它用到了注意力、编码器与解码器堆栈、词嵌入、位置编码、优化器和学习率——其中任何一处写错，模型都学不会——而且在 2 个 CPU 核上不到一分钟就能训练完。每一次更新都是 `aiayn train` 自己的更新（`TrainStep`）：在本批目标词元上计算带标签平滑的损失（`SequenceLoss`，$\epsilon_{ls} = 0.1$，不构造 (词元数 × V) 的大矩阵），残差 dropout $P_{drop} = 0.1$（§5.4），Adam 配合 §5.3 的学习率，最后对最近几个检查点取平均，就像 §6.1 平均最后 5 个检查点一样（这里是 3 个，相隔 50 次更新）。§5.2 中基础模型训练了 100,000 次更新、每次约 25,000 个词元；这里是 600 次、每次 640 个词元，预热更短（200 次更新）、学习率减半（`lr_factor=0.5`），并把梯度范数裁剪到 1，让这个又短又陡的学习率计划保持稳定。每个字符串长度都是 10，所以这里没有填充；有填充的情形见上面 §5.1 的批次。

# %%
def copy_batch(n: int, length: int = 10) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """n 个由符号 4..19 组成的随机串：src = x EOS，tgt_in = BOS x，tgt_out = x EOS。"""
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
print(f"{n_steps} 次更新：每个词元的交叉熵 {losses[0]:.3f} -> {losses[-1]:.3f}；"
      f"模型是最后 {len(snapshots)} 个检查点的平均")
assert losses[-1] < 0.8 * losses[0], "损失在下降"

fig, ax = plt.subplots(figsize=(6, 3))
ax.plot(losses)
ax.set_xlabel("update")
ax.set_ylabel("cross-entropy per token")
show(fig, "copy-loss")

# %% [markdown]
# ## 解码：贪心解码与束搜索
#
# 推理时解码器一次生成一个位置，把自己刚生成的词再喂回去。贪心解码每一步取概率最大的词；束搜索（§6.1：束宽 4，长度惩罚 α）保留 k 个最好的前缀。两者都使用 aiayn 的缓存，每一步只计算一个新位置，而不是重算整个前缀。论文的长度惩罚是 GNMT 的形式，$lp(Y) = ((5 + |Y|) / 6)^\alpha$，α = 0.6；`length_norm="gnmt"` 即指定它，本节代码就是这样做的。aiayn 的默认值是 $|Y|^\alpha$（`length_norm="length"`，fairseq、Marian 和 CTranslate2 用的都是它）。

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
print(f"完全复制正确：贪心 {exact_greedy}/100，束宽 4 {exact_beam}/100")
if not FAST:
    assert exact_greedy >= 90, "训练好的模型能复制"

# %% [markdown]
# ## 模型在关注什么
#
# `Transformer.attention_maps` 返回所有注意力概率：编码器自注意力（S × S）、解码器自注意力（T × T，下三角：因果性）和编码器-解码器注意力（T × S），每层每头都有。对复制任务来说，输出的第 $t$ 个位置应当关注源序列的第 $t$ 个位置——一条对角线。对真正的翻译模型，`aiayn plot --model RUN --sentence "..."` 会画出同样的图，`aiayn serve` 的网页也能对任意句子显示它们。平均值会掩盖各个头之间的差别，所以第二张图把最后一层编码器-解码器注意力的每个头单独画出来，并给出它指向要复制的位置的比例，以及权重的分散程度（熵：只关注一个键时为 0，均匀关注全部 S 个键时为 log S）。

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
assert (maps.decoder_self[-1][0].triu(1) == 0).all(), "解码器自注意力是下三角的"
diagonal = (maps.cross[-1][0].mean(0).argmax(-1) == torch.arange(tgt1.shape[1])).float().mean().item()
print(f"编码器-解码器注意力：{diagonal:.0%} 的输出位置最关注的源位置，正是它要复制的那个")

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
    print(f"第 {h} 个头：{on_diagonal[h]:.0%} 的输出位置最关注要复制的源位置；"
          f"熵 {entropy[h]:.2f} 奈特（{cross.shape[-1]} 个键上的均匀分布：{math.log(cross.shape[-1]):.2f}）")
assert torch.allclose(cross.sum(-1), torch.ones(cross.shape[:2])), "每个头的每一行都是概率分布"

# %% [markdown]
# ## 一个真正的翻译模型
#
# 上面的一切都在玩具规模上运行。`make demo` 在 2 个 CPU 核上用大约 15 分钟，在 Multi30k 德译英数据上训练小模型（3+3 层，$d_{model}$ 256）。在完整模式下（`make walkthrough`），如果这里有它的运行目录（`runs/demo/run-de-en`，或 `AIAYN_WALKTHROUGH_MODEL` 给出的路径），本节就用它翻译 test_2016_flickr 的句子，用 sacreBLEU 给前 200 句打分，并画出一个句子在每一层、每个头上的编码器-解码器注意力，坐标轴上标出它的子词：每一行是一个输出子词，由这一行对源语言子词的注意力预测出来。

# %%
RUN = Path(os.environ.get("AIAYN_WALKTHROUGH_MODEL", "") or Path(aiayn.__file__).parent.parent / "runs/demo/run-de-en")
if FAST or not (RUN / "config.json").is_file():
    print("真正模型这一节在完整模式下（make walkthrough）用训练好的运行目录执行：" +
          (f"{RUN} 不是运行目录；`make demo` 大约 15 分钟就能训练出一个" if not (RUN / "config.json").is_file()
           else "现在是快速模式"))
else:
    multi30k = Path(aiayn.__file__).parent / "bundled" / "multi30k"
    test = {lang: gzip.open(multi30k / f"test_2016_flickr.{lang}.gz", "rt", encoding="utf-8").read().splitlines()[:200]
            for lang in ("de", "en")}
    translator = Translator.load(RUN, device="cpu")
    outputs = translator.translate(test["de"], beam=4)
    for de, out, ref in list(zip(test["de"], outputs, test["en"], strict=True))[:3]:
        print(f"{de}\n  aiayn：  {out}\n  参考译文：{ref}")
    bleu = score(outputs, test["en"], lang="en")
    print(f"test_2016_flickr 前 200 句的 BLEU（束宽 4）：{bleu['bleu']:.2f}（{bleu['signature']}）")
    assert bleu["bleu"] > 15, "训练好的模型能翻译"

    seen = translator.attention(test["de"][4], beam=4)                 # 每一层、每个头的注意力
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
# ## 接下来
#
# - 同一个模型用在真实数据上：`make demo`（Multi30k 德译英，CPU 上 15 分钟）。
# - 论文每一节对应 aiayn 的哪一行代码：`docs/paper-to-code.md`。
# - 参考文档里的错误，以及防止它们回到 aiayn 的测试：`docs/seed-bugs.md`。

