"""Pictures of the concepts and of a run (needs matplotlib: ``pip install aiayn[plots]``).

- :func:`positional_encoding`  — §3.5's sinusoids, as a heat map and a few dimensions over positions
- :func:`learning_rate`        — §5.3's schedule for a few (d_model, warmup) settings
- :func:`label_smoothing`      — §5.4's smoothed target distribution
- :func:`masks`                — the padding and causal masks of a batch, and what each attention combines
- :func:`training_curves`      — loss, validation perplexity and BLEU, tokens/s from a run's metrics.jsonl
- :func:`attention`            — every layer's and head's attention for one sentence pair of a trained model

``aiayn plot --model RUN_DIR --out DIR [--sentence "..."]`` writes all of them as PNG files.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from ..attention import causal_mask, padding_mask
from ..config import EOS_ID, PAD_ID
from ..loss import smoothed_targets
from ..model import sinusoids
from ..optim import noam_lr
from ..rundir import RunDir


def _plt() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ValueError("plots need matplotlib: pip install 'aiayn[plots]'") from None
    return plt


def positional_encoding(path: Path, d_model: int = 64, positions: int = 100) -> Path:
    plt = _plt()
    pe = sinusoids(positions, d_model).numpy()
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4))
    a.imshow(pe.T, aspect="auto", cmap="RdBu")
    a.set(xlabel="position", ylabel="dimension", title=f"PE (d_model={d_model})")
    for dim in (4, 5, 6, 7):
        b.plot(pe[:, dim], label=f"dim {dim}")
    b.set(xlabel="position", title="a few dimensions")
    b.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def learning_rate(path: Path, steps: int = 20000) -> Path:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4))
    for d, w in ((512, 4000), (512, 8000), (256, 4000)):
        ax.plot([noam_lr(s, d, w) for s in range(steps)], label=f"d_model {d}, warmup {w}")
    ax.set(xlabel="step", ylabel="learning rate", title="§5.3: d^-0.5 min(step^-0.5, step warmup^-1.5)")
    ax.legend()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def label_smoothing(path: Path) -> Path:
    plt = _plt()
    q = smoothed_targets(torch.tensor([2, 1, 0, 3]), vocab_size=6, eps=0.4, pad_id=0).numpy()
    fig, ax = plt.subplots(figsize=(5, 4))
    ax.imshow(q, cmap="viridis")
    ax.set(xlabel="vocabulary", ylabel="target position", title="smoothed targets (eps 0.4, pad 0)")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def masks(path: Path) -> Path:
    """The masks of a batch of three sentences of different lengths (white = may attend): the padding mask
    (B, S); what the second sentence's encoder self-attention and encoder-decoder attention allow (its padding
    hidden); the decoder's causal mask (target padding sits after the words, so causality hides it too)."""
    plt = _plt()
    src = torch.tensor([[5, 6, 7, 8, 9, 10, EOS_ID], [5, 6, 7, EOS_ID, PAD_ID, PAD_ID, PAD_ID],
                        [5, 6, 7, 8, 9, EOS_ID, PAD_ID]])
    T = 5
    pad = padding_mask(src, PAD_ID)[:, 0, 0]                                         # (B, S)
    causal = causal_mask(T, T, torch.device("cpu"))                                  # (T, T)
    S = src.shape[1]
    panels = (("padding mask (B, S)", pad, "sentence"),
              ("sentence 2: encoder self (S, S)", pad[1].expand(S, S), "query"),
              ("decoder self = causal (T, T)", causal, "query"),
              ("sentence 2: encoder-decoder (T, S)", pad[1].expand(T, S), "query"))
    fig, axes = plt.subplots(1, len(panels), figsize=(3.2 * len(panels), 3.2))
    for ax, (title, m, rows) in zip(axes, panels, strict=True):
        ax.imshow(m.float().numpy(), cmap="Greys_r", vmin=0, vmax=1)
        ax.set(title=title, xlabel="key", ylabel=rows)
        ax.title.set_fontsize(8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def training_curves(metrics: Path, path: Path) -> Path:
    """Loss, validation BLEU and throughput over steps, from a run's metrics.jsonl."""
    plt = _plt()
    records = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    train = [r for r in records if "loss" in r]
    valid = [r for r in records if "valid_loss" in r]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    axes[0].plot([r["step"] for r in train], [r["loss"] for r in train], label="train loss (smoothed)")
    axes[0].plot([r["step"] for r in train], [r["nll"] for r in train], label="train NLL")
    axes[0].plot([r["step"] for r in valid], [r["valid_nll"] for r in valid], "o-", label="valid NLL")
    axes[0].set(xlabel="step", title="loss per target token")
    axes[0].legend()
    directions = sorted({k for r in valid for k in r if k.startswith("valid_bleu_") and k != "valid_bleu_lc"
                         and k != "valid_bleu_sentences"})
    for key in directions:                 # a multilingual run: each direction's (multilingual.py), thin
        axes[1].plot([r["step"] for r in valid if key in r], [r[key] for r in valid if key in r], lw=0.8,
                     label=key.removeprefix("valid_bleu_").replace("-", "→"))
    if any("valid_bleu" in r for r in valid):
        axes[1].plot([r["step"] for r in valid if "valid_bleu" in r], [r["valid_bleu"] for r in valid
                                                                       if "valid_bleu" in r], "o-", color="black",
                     label="mean" if directions else None)
    if directions:
        axes[1].legend(fontsize=6, ncol=2)
    axes[1].set(xlabel="step", title="validation BLEU (greedy)")
    axes[2].plot([r["step"] for r in train], [r["tgt_tokens_per_s"] for r in train])
    axes[2].set(xlabel="step", title="target tokens / s")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def attention(run_dir: Path, sentence: str, out_dir: Path) -> list[Path]:
    """One PNG per attention kind (encoder self, decoder self, cross), a grid of layers x heads each."""
    from ..engines.torch import TorchEngine

    plt = _plt()
    a = TorchEngine.load(run_dir).attention(sentence, beam=1)
    out, src_tok, tgt_in, tgt_out = a["translation"], a["source"], a["target_in"], a["target_out"]
    paths = []
    for name, layers, rows, cols in (("encoder", a["encoder"], src_tok, src_tok),
                                     ("decoder_self", a["decoder_self"], tgt_out, tgt_in),
                                     ("cross", a["cross"], tgt_out, src_tok)):
        L, H = len(layers), len(layers[0])
        fig, axes = plt.subplots(L, H, figsize=(3 * H, 3 * L), squeeze=False)
        for i, layer in enumerate(layers):
            for h in range(H):
                ax = axes[i][h]
                ax.imshow(layer[h], cmap="viridis", vmin=0, vmax=1)
                ax.set_xticks(range(len(cols)), cols, rotation=90, fontsize=6)
                ax.set_yticks(range(len(rows)), rows, fontsize=6)
                ax.set_title(f"layer {i + 1} head {h + 1}", fontsize=8)
        fig.suptitle(f"{name} attention: {sentence!r} -> {out!r}", fontsize=9)
        fig.tight_layout()
        p = out_dir / f"attention_{name}.png"
        fig.savefig(p, dpi=90)
        plt.close(fig)
        paths.append(p)
    return paths


def all_plots(run_dir: Path | None, out_dir: Path, sentence: str) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [positional_encoding(out_dir / "positional_encoding.png"), learning_rate(out_dir / "learning_rate.png"),
             label_smoothing(out_dir / "label_smoothing.png"), masks(out_dir / "masks.png")]
    if run_dir is not None:
        run = RunDir(run_dir)
        if run.metrics.is_file():
            paths.append(training_curves(run.metrics, out_dir / "training_curves.png"))
        paths += attention(run_dir, sentence, out_dir)
    return paths
