"""Where training reports go: ``metrics.jsonl`` (one JSON object per log interval and per validation),
TensorBoard events (when tensorboard is installed) and the console (a tqdm bar, or log lines where the
bar is off). Only rank 0 writes; the others keep quiet.

Training records: step, epoch, loss, nll, ppl, lr, grad_norm, tgt_tokens_per_s, src_tokens_per_s,
peak_rss_mb, elapsed_s. Validation records: step, epoch, valid_loss, valid_nll, valid_ppl, valid_bleu, ...
Throughput counts training time only: validation and checkpoint writing are left out (:meth:`paused`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from tqdm import tqdm

from ..rundir import RunDir
from ..runtime import peak_rss_mb

log = logging.getLogger(__name__)


ETA_AFTER = 50   # updates of a session after which the time its remaining updates will take is said (once)


@dataclass
class Interval:
    """Sums over the current log interval."""

    loss: float = 0.0
    nll: float = 0.0
    tgt_tokens: int = 0
    src_tokens: int = 0
    steps: int = 0
    grad_norm: float = 0.0
    start: float = field(default_factory=time.perf_counter)


class MetricsLog:
    def __init__(self, run: RunDir, *, enabled: bool, tensorboard: bool, every: int) -> None:
        self.run, self.enabled, self.tensorboard, self.every = run, enabled, tensorboard, every
        self.interval = Interval()
        self.bar: Any = None
        self.total: int | None = None
        self.initial, self.t0 = 0, 0.0
        self._tb: Any = None

    def start(self, total: int | None, initial: int) -> None:
        """Training starts (the run directory exists): the progress bar, TensorBoard, a fresh interval."""
        self.bar = tqdm(total=total, initial=initial, unit="step", dynamic_ncols=True,
                        disable=not self.enabled or None, desc="train")
        self.total, self.initial, self.t0 = total, initial, time.perf_counter()
        if self.enabled and self.tensorboard and self._tb is None:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(str(self.run.tensorboard))
            except ImportError:
                log.debug("tensorboard not installed: no TensorBoard events")
        self.interval = Interval()

    def update(self, *, step: int, epoch: float, loss: float, nll: float, tgt_tokens: int, src_tokens: int,
               grad_norm: float, lr: float, elapsed: float) -> None:
        """One optimizer update done; every ``every`` steps, a training record."""
        iv = self.interval
        iv.loss, iv.nll, iv.steps, iv.grad_norm = iv.loss + loss, iv.nll + nll, iv.steps + 1, grad_norm
        iv.tgt_tokens, iv.src_tokens = iv.tgt_tokens + tgt_tokens, iv.src_tokens + src_tokens
        if self.bar is not None:
            self.bar.update(1)
        if self.enabled and self.total and step - self.initial == ETA_AFTER and step < self.total:
            took, left = time.perf_counter() - self.t0, self.total - step
            tqdm.write(f"the first {ETA_AFTER} updates took {took:.0f} s: about {took / ETA_AFTER * left / 60:.1f} "
                       f"minutes for the {left:,} to go", file=sys.stderr)
        if step % self.every:
            return
        seconds = max(1e-9, time.perf_counter() - iv.start)
        n = max(1, iv.tgt_tokens)
        rec = {"step": step, "epoch": round(epoch, 3), "loss": iv.loss / n, "nll": iv.nll / n,
               "ppl": math.exp(min(iv.nll / n, 50.0)), "lr": lr, "grad_norm": iv.grad_norm,
               "tgt_tokens_per_s": iv.tgt_tokens / seconds,         # tokens of every process: the job's speed
               "src_tokens_per_s": iv.src_tokens / seconds, "peak_rss_mb": round(peak_rss_mb(), 1),
               "elapsed_s": round(elapsed, 1)}
        self.write(rec)
        if self.bar is not None:
            self.bar.set_postfix(loss=f"{rec['loss']:.3f}", lr=f"{lr:.2e}", tok_s=f"{rec['tgt_tokens_per_s']:.0f}")
            if self.enabled and self.bar.disable:
                log.info("step %d  loss %.3f  lr %.2e  %.0f tgt tok/s", step, rec["loss"], lr, rec["tgt_tokens_per_s"])
        self.interval = Interval()

    def validation(self, step: int, epoch: int, metrics: dict[str, float]) -> None:
        self.write({"step": step, "epoch": epoch, **metrics})
        if self.enabled:
            tqdm.write(f"step {step}: " + "  ".join(f"{k} {v:.3f}" for k, v in metrics.items()))

    @property
    def images(self) -> bool:
        """Whether TensorBoard is writing (attention images are then worth computing)."""
        return self._tb is not None

    def attention_images(self, step: int, maps: dict[str, list[torch.Tensor]]) -> None:
        """TensorBoard images of one sentence's attention at a validation, as seed 002's system logs them: one
        image per kind and layer (``attention/<kind>/layer_<n>``), its heads side by side, white = probability 1.
        ``maps``: kind -> per layer (1, H, rows, cols) probabilities."""
        if self._tb is None:
            return
        for kind, layers in maps.items():
            for n, probs in enumerate(layers, 1):
                self._tb.add_image(f"attention/{kind}/layer_{n}", head_grid(probs[0].float().cpu()), step,
                                   dataformats="HW")

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Time spent inside does not count toward throughput."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.interval.start += time.perf_counter() - t0

    def write(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        with open(self.run.metrics, "a") as f:
            f.write(json.dumps(record) + "\n")
        if self._tb is not None:
            for k, v in record.items():
                if k not in ("step", "epoch") and isinstance(v, (int, float)):
                    self._tb.add_scalar(k, v, record["step"])

    def end_bar(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def close(self) -> None:
        self.end_bar()
        if self._tb is not None:
            self._tb.close()
            self._tb = None


def head_grid(probs: torch.Tensor, size: int = 96) -> torch.Tensor:
    """(H, rows, cols) attention probabilities -> one (rows*z, H*(cols*z + 1) - 1) image in [0, 1]: each head
    enlarged z times (about ``size`` pixels a side) and the heads separated by a grey column."""
    H, rows, cols = probs.shape
    z = max(1, size // max(rows, cols))
    big = probs.clamp(0, 1).repeat_interleave(z, 1).repeat_interleave(z, 2)              # (H, rows*z, cols*z)
    sep = torch.full((rows * z, 1), 0.5)
    parts: list[torch.Tensor] = []
    for h in range(H):
        parts += [sep, big[h]] if h else [big[h]]
    return torch.cat(parts, dim=1)
