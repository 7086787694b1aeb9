"""Training (paper §5): one explicit loop, resumable, observable and safe to interrupt.

A run directory (written only by rank 0):

    config.json     the resolved model / train / decode config
    spm.model       the tokenizer (a run dir is a self-contained model)
    data.json       which data dir (and vocabulary) it was trained on
    metrics.jsonl   one JSON object per log interval and per validation
    last/           the newest full training checkpoint (weights + optimizer + RNG + data position)
    best/           the weights with the best validation score
    checkpoints/step_N/   weights every ``save_every_steps`` (the last ``keep_last``), for averaging
    averaged/       the mean of the last ``average_last`` step checkpoints (if asked)
    tb/             TensorBoard events (if tensorboard is installed)

Re-running the same command on an existing run dir resumes exactly where ``last/`` left off:
same batches, same dropout masks, same optimizer state.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import math
import os
import shutil
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from tqdm import tqdm

from . import checkpoint
from .config import RunConfig
from .data import Batch, DataDir, TokenArray, TokenBatchSampler, collate
from .evaluate import score
from .loss import SequenceLoss
from .model import Transformer
from .optim import cooldown_factor, make_optimizer, noam_lr
from .runtime import (
    autocast,
    eval_mode,
    keep_freed_memory,
    peak_rss_mb,
    resolve_device,
    resolve_precision,
    set_threads,
)
from .translate import translate_ids

log = logging.getLogger(__name__)

# Settings that may change when a run is resumed (they do not alter the training trajectory, except that with a
# cooldown the limits move where the rate starts to fall: extending a cooled-down run raises the rate again).
RESUMABLE_CHANGES = {"max_steps", "max_epochs", "max_minutes", "patience", "save_every_steps", "keep_last",
                     "valid_every_steps", "valid_each_epoch", "valid_bleu", "valid_max_sentences", "average_last",
                     "log_every_steps",
                     "threads", "device", "tensorboard", "compile"}


class TrainingError(RuntimeError):
    """Training cannot go on (NaN loss, out of memory, ...); the message says why and what to do."""


@dataclass
class TrainState:
    step: int = 0              # optimizer updates done
    epoch: int = 0
    position: int = 0          # index of the next batch in this epoch
    best: float | None = None  # best validation score so far (early_stop_metric)
    bad_validations: int = 0
    seconds: float = 0.0       # training wall time over all sessions of this run
    tgt_tokens: int = 0


@dataclass
class _Interval:
    """Sums over the current log interval."""

    loss: float = 0.0
    nll: float = 0.0
    tgt_tokens: int = 0
    src_tokens: int = 0
    steps: int = 0
    grad_norm: float = 0.0
    start: float = dataclasses.field(default_factory=time.perf_counter)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class Trainer:
    """Trains a :class:`Transformer` on a prepared data dir into a run dir. ``Trainer(...).train()``."""

    def __init__(self, data_dir: str | Path, run_dir: str | Path, cfg: RunConfig) -> None:
        self.data = DataDir(data_dir)
        self.run_dir = Path(run_dir)
        self.rank = int(os.environ.get("RANK", 0))
        self.world = int(os.environ.get("WORLD_SIZE", 1))
        self.cfg = self._reconcile(cfg)
        t = self.cfg.train
        set_threads(t.threads)
        keep_freed_memory()
        self.device = resolve_device(t.device)
        if self.world > 1:
            self._init_distributed()
        self.precision = resolve_precision(t.precision, self.device)
        torch.manual_seed(t.seed + self.rank)
        self.model = Transformer(self.cfg.model).to(self.device)
        self.optimizer = make_optimizer(self.model.parameters(), t, self.device)
        self.loss_fn: torch.nn.Module = SequenceLoss(self.model, t.label_smoothing, t.loss_chunk_tokens)
        if t.compile:
            self.loss_fn = torch.compile(self.loss_fn, dynamic=True)  # type: ignore[assignment]
        if self.world > 1:
            from torch.nn.parallel import DistributedDataParallel

            ids = [self.device.index] if self.device.type == "cuda" else None
            self.loss_fn = DistributedDataParallel(self.loss_fn, device_ids=ids)
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.precision == "fp16")
        self.train_src, self.train_tgt = self.data.split("train")
        self.sampler = TokenBatchSampler(self.train_src.lengths + 1, self.train_tgt.lengths + 1, t.max_tokens,
                                         seed=t.seed, rank=self.rank, world=self.world)
        self.state = TrainState()
        self.stop_reason: str | None = None
        self._signal: str | None = None
        self._tb: Any = None

    # -- setup ---------------------------------------------------------------------------------------------------

    def _reconcile(self, cfg: RunConfig) -> RunConfig:
        """Fix vocabulary sizes from the data; on resume, check the run matches the data and the config."""
        v = self.data.vocab_size
        cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, src_vocab_size=v, tgt_vocab_size=v))
        saved = self.run_dir / "config.json"
        if not saved.is_file():
            return cfg
        old = RunConfig.load(saved)
        if (self.run_dir / "spm.model").is_file() and _sha256(self.run_dir / "spm.model") != _sha256(self.data.spm_path):
            raise ValueError(f"{self.data.path} has a different vocabulary (spm.model) from the run being resumed in "
                             f"{self.run_dir}; use the data dir it was trained on, or a new --out")
        diff = {k: (getattr(old.model, k), getattr(cfg.model, k)) for k in cfg.model.to_dict()
                if getattr(old.model, k) != getattr(cfg.model, k)}
        if diff:
            listing = ", ".join(f"{k}: {a!r} in the run, {b!r} now" for k, (a, b) in diff.items())
            raise ValueError(f"the model config differs from the run being resumed in {self.run_dir} ({listing}); "
                             "use the same settings or a new --out")
        for k, new in dataclasses.asdict(cfg.train).items():
            if getattr(old.train, k) != new and k not in RESUMABLE_CHANGES:
                log.warning("resuming with %s=%r (the run used %r): training will not follow the same path",
                            k, new, getattr(old.train, k))
        return cfg

    def _init_distributed(self) -> None:
        local = int(os.environ.get("LOCAL_RANK", 0))
        if self.device.type == "cuda":
            self.device = torch.device("cuda", local)
            torch.cuda.set_device(self.device)
        if not dist.is_initialized():
            dist.init_process_group("nccl" if self.device.type == "cuda" else "gloo")

    def _prepare_run_dir(self) -> None:
        if self.rank != 0:
            return
        self.run_dir.mkdir(parents=True, exist_ok=True)
        for stale in self.run_dir.glob("**/.*.tmp-*"):       # debris of a crash in the middle of a save
            shutil.rmtree(stale, ignore_errors=True)
        self.cfg.save(self.run_dir / "config.json")
        shutil.copyfile(self.data.spm_path, self.run_dir / "spm.model")
        (self.run_dir / "data.json").write_text(json.dumps(
            {"data_dir": str(self.data.path.resolve()), "src": self.data.src, "tgt": self.data.tgt,
             "data_hash": self.data.manifest["hash"]}, indent=2) + "\n")
        if self.cfg.train.tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(str(self.run_dir / "tb"))
            except ImportError:
                log.debug("tensorboard not installed: no TensorBoard events")

    def _resume(self) -> None:
        last = self.run_dir / "last"
        if not checkpoint.is_checkpoint(last):
            return
        checkpoint.load_weights(self.model, last)
        saved = checkpoint.load_training_state(last, self.optimizer)
        self.state = TrainState(**{k: saved[k] for k in dataclasses.asdict(TrainState()) if k in saved})
        log.info("resuming %s from step %d (epoch %d, batch %d)", self.run_dir, self.state.step, self.state.epoch,
                 self.state.position)

    # -- one update -------------------------------------------------------------------------------------------------

    def _update(self, batches: list[Batch], interval: _Interval) -> None:
        """One optimizer step over ``batches`` (gradient accumulation), normalized per target token."""
        tokens = sum(b.n_tgt_tokens for b in batches)
        if self.world > 1:
            t = torch.tensor([tokens], dtype=torch.long, device=self.device)
            dist.all_reduce(t)
            tokens = int(t)
        self.optimizer.zero_grad(set_to_none=True)
        loss_sum = nll_sum = 0.0
        for i, batch in enumerate(batches):
            b = batch.to(self.device)
            sync = i == len(batches) - 1 or self.world == 1
            ctx = self.loss_fn.no_sync() if not sync else contextlib.nullcontext()  # type: ignore[operator]
            with ctx:
                with autocast(self.device, self.precision):
                    loss, nll = self.loss_fn(b.src, b.tgt_in, b.tgt_out)
                self.scaler.scale(loss * (self.world / tokens)).backward()
            loss_sum += float(loss.detach())
            nll_sum += float(nll)
        if not math.isfinite(loss_sum):
            raise TrainingError(
                f"the loss became {loss_sum} at step {self.state.step + 1}; stopping. The last good checkpoint is "
                f"intact in {self.run_dir / 'last'}. Try a smaller lr_factor, a longer warmup, clip_norm=1, "
                "or precision=fp32")
        self.scaler.unscale_(self.optimizer)
        limit = self.cfg.train.clip_norm if self.cfg.train.clip_norm > 0 else float("inf")
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), limit))
        if not math.isfinite(grad_norm) and self.precision != "fp16":   # fp16: the scaler skips the step
            raise TrainingError(
                f"the gradient norm became {grad_norm} at step {self.state.step + 1}; stopping before the update. "
                f"The last good checkpoint is intact in {self.run_dir / 'last'}. Try clip_norm=1 or a smaller "
                "lr_factor")
        lr = self.lr(self.state.step + 1)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.state.step += 1
        self.state.tgt_tokens += tokens
        interval.loss += loss_sum
        interval.nll += nll_sum
        interval.tgt_tokens += sum(b.n_tgt_tokens for b in batches)
        interval.src_tokens += sum(b.n_src_tokens for b in batches)
        interval.steps += 1
        interval.grad_norm = grad_norm

    def _update_guarded(self, batches: list[Batch], interval: _Interval) -> None:
        try:
            self._update(batches, interval)
        except (torch.cuda.OutOfMemoryError, RuntimeError) as e:
            text = str(e)
            if isinstance(e, torch.cuda.OutOfMemoryError) or "out of memory" in text or "can't allocate" in text:
                mt = self.cfg.train.max_tokens
                raise TrainingError(
                    f"out of memory on a batch of {sum(len(b.indices) for b in batches)} sentences "
                    f"({sum(b.n_tgt_tokens for b in batches)} target tokens) at step {self.state.step + 1}. Lower "
                    f"max_tokens (now {mt}), e.g. --set max_tokens={mt // 2} update_freq="
                    f"{self.cfg.train.update_freq * 2} keeps the same tokens per update. The last checkpoint is "
                    f"intact in {self.run_dir / 'last'}") from None
            raise

    # -- validation ----------------------------------------------------------------------------------------------------

    def validate(self) -> dict[str, float]:
        """Teacher-forced loss and perplexity on the validation split, and greedy-decoding BLEU."""
        t0 = time.perf_counter()
        src, tgt = self.data.split("valid")
        model = self.model
        loss = nll = 0.0
        tokens = 0
        limit = self.cfg.model.max_positions - 1
        fits = np.nonzero((src.lengths < limit) & (tgt.lengths < limit))[0]
        sampler = TokenBatchSampler(src.lengths[fits] + 1, tgt.lengths[fits] + 1, self.cfg.train.max_tokens,
                                    shuffle=False)
        with eval_mode(model), torch.no_grad(), autocast(self.device, self.precision):
            loss_fn = SequenceLoss(model, self.cfg.train.label_smoothing, self.cfg.train.loss_chunk_tokens)
            for idx in sampler.epoch_batches(0):
                b = collate(src, tgt, fits[idx]).to(self.device)
                a, n = loss_fn(b.src, b.tgt_in, b.tgt_out)
                loss, nll, tokens = loss + float(a), nll + float(n), tokens + b.n_tgt_tokens
        out: dict[str, float] = {"valid_loss": loss / max(1, tokens), "valid_nll": nll / max(1, tokens)}
        out["valid_ppl"] = math.exp(min(out["valid_nll"], 50.0))
        if self.cfg.train.valid_bleu:
            out.update(self._valid_bleu(src))
        out["valid_seconds"] = time.perf_counter() - t0
        return out

    def _valid_bleu(self, src: TokenArray) -> dict[str, float]:
        n = len(src) if self.cfg.train.valid_max_sentences <= 0 else min(len(src), self.cfg.train.valid_max_sentences)
        greedy = dataclasses.replace(self.cfg.decode, beam=1, nbest=1, sampling=False)
        hyps = translate_ids(self.model, [src[i].tolist() for i in range(n)], greedy, self.device, self.precision)
        text = self.data.tokenizer().decode([h[0].tokens for h in hyps])
        refs = self.data.raw("valid", "tgt").read_text(encoding="utf-8").split("\n")[:n]
        s = score(text, refs)
        return {"valid_bleu": s["bleu"], "valid_bleu_lc": s["bleu_lc"], "valid_chrf": s["chrf"]}

    def _after_validation(self, metrics: dict[str, float]) -> None:
        key = self.cfg.train.early_stop_metric
        if key not in metrics:
            key = "valid_loss"
        value = metrics[key]
        better = self.state.best is None or (value > self.state.best if key == "valid_bleu" else value < self.state.best)
        if better:
            self.state.best, self.state.bad_validations = value, 0
            checkpoint.save(self.run_dir / "best", self.model, self._meta(metrics))
        else:
            self.state.bad_validations += 1
            if self.cfg.train.patience and self.state.bad_validations >= self.cfg.train.patience:
                self.stop_reason = f"early stop: {key} did not improve for {self.cfg.train.patience} validations"

    # -- checkpoints, logs ------------------------------------------------------------------------------------------------

    def _meta(self, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        return {"step": self.state.step, "epoch": self.state.epoch, "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
                **(extra or {})}

    def save(self) -> None:
        """Write last/ (resumable) and a step checkpoint (weights); keep the newest ``keep_last`` of those."""
        if self.rank != 0:
            return
        checkpoint.save(self.run_dir / "last", self.model, self._meta(), self.optimizer, dataclasses.asdict(self.state))
        step_dir = self.run_dir / "checkpoints" / f"step_{self.state.step}"
        checkpoint.save(step_dir, self.model, self._meta())
        for old in self.step_checkpoints()[: -self.cfg.train.keep_last]:
            shutil.rmtree(old, ignore_errors=True)

    def step_checkpoints(self) -> list[Path]:
        found = [d for d in (self.run_dir / "checkpoints").glob("step_*") if checkpoint.is_checkpoint(d)]
        return sorted(found, key=lambda d: int(d.name.split("_")[1]))

    def _log(self, record: dict[str, Any]) -> None:
        if self.rank != 0:
            return
        with open(self.run_dir / "metrics.jsonl", "a") as f:
            f.write(json.dumps(record) + "\n")
        if self._tb is not None:
            for k, v in record.items():
                if k not in ("step", "epoch") and isinstance(v, (int, float)):
                    self._tb.add_scalar(k, v, record["step"])

    def _train_record(self, iv: _Interval, n_batches: int) -> dict[str, Any]:
        seconds = max(1e-9, time.perf_counter() - iv.start)
        return {
            "step": self.state.step, "epoch": round(self.state.epoch + self.state.position / max(1, n_batches), 3),
            "loss": iv.loss / max(1, iv.tgt_tokens), "nll": iv.nll / max(1, iv.tgt_tokens),
            "ppl": math.exp(min(iv.nll / max(1, iv.tgt_tokens), 50.0)),
            "lr": self.optimizer.param_groups[0]["lr"],
            "grad_norm": iv.grad_norm, "tgt_tokens_per_s": iv.tgt_tokens * self.world / seconds,
            "src_tokens_per_s": iv.src_tokens * self.world / seconds, "peak_rss_mb": round(peak_rss_mb(), 1),
            "elapsed_s": round(self.state.seconds, 1),
        }

    # -- the loop -------------------------------------------------------------------------------------------------

    def progress(self) -> float:
        """How far the run is toward the limit that ends it first (max_steps, max_epochs or max_minutes), in [0, 1]."""
        t, done = self.cfg.train, 0.0
        if t.max_steps:
            done = self.state.step / t.max_steps
        if t.max_epochs:
            per_epoch = len(self.sampler.epoch_batches(self.state.epoch))   # cached for the current epoch
            done = max(done, (self.state.epoch + self.state.position / max(1, per_epoch)) / t.max_epochs)
        if t.max_minutes:
            done = max(done, self.state.seconds / (t.max_minutes * 60))
        return min(1.0, done)

    def lr(self, step: int) -> float:
        """The rate for update ``step``: §5.3 times the cooldown multiplier (1 without a cooldown)."""
        t = self.cfg.train
        return noam_lr(step, self.cfg.model.d_model, t.warmup, t.lr_factor) * cooldown_factor(self.progress(), t.cooldown)

    def _limits_reached(self) -> str | None:
        t = self.cfg.train
        if t.max_steps and self.state.step >= t.max_steps:
            return f"reached max_steps={t.max_steps}"
        if t.max_epochs and self.state.epoch >= t.max_epochs:
            return f"reached max_epochs={t.max_epochs}"
        if t.max_minutes and self.state.seconds >= t.max_minutes * 60:
            return f"reached max_minutes={t.max_minutes:g}"
        return self._signal or self.stop_reason

    def _validate_and_log(self) -> None:
        if self.rank == 0:
            with eval_mode(self.model):
                metrics = self.validate()
            self._log({"step": self.state.step, "epoch": self.state.epoch, **metrics})
            self._after_validation(metrics)
            tqdm.write(f"step {self.state.step}: " + "  ".join(f"{k} {v:.3f}" for k, v in metrics.items()))
        if self.world > 1:
            stop = torch.tensor([1 if self.stop_reason else 0], device=self.device)
            dist.broadcast(stop, 0)
            if int(stop) and not self.stop_reason:
                self.stop_reason = "early stop (rank 0)"

    def _handle_signals(self) -> Callable[[], None]:
        previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

        def handler(signum: int, frame: Any) -> None:
            self._signal = f"stopped by {signal.Signals(signum).name}"
            signal.signal(signal.SIGINT, signal.default_int_handler)   # a second Ctrl-C stops at once

        for s in previous:
            signal.signal(s, handler)
        def restore() -> None:
            for s, h in previous.items():
                signal.signal(s, h)

        return restore

    def train(self) -> TrainState:
        """Train until a limit (steps, epochs, minutes), early stopping or a signal; always leaves last/ saved."""
        t = self.cfg.train
        self._prepare_run_dir()
        self._resume()
        if self.rank == 0:
            n = sum(p.numel() for p in self.model.parameters())
            log.info("model: %s parameters (%s); %s on %s; %d train pairs in %d batches per epoch",
                     f"{n:,}", _describe(self.cfg), self.precision, self.device, len(self.train_src), len(self.sampler))
        restore = self._handle_signals() if self.rank == 0 else (lambda: None)
        total = t.max_steps or (len(self.sampler) // t.update_freq * t.max_epochs if t.max_epochs else None)
        bar = tqdm(total=total, initial=self.state.step, unit="step", dynamic_ncols=True, disable=self.rank != 0 or None,
                   desc="train")
        self.model.train()
        interval, last_tick = _Interval(), time.perf_counter()
        try:
            while (reason := self._limits_reached()) is None:
                batches = self.sampler.epoch_batches(self.state.epoch)
                if self.state.position >= len(batches):
                    self._end_epoch()
                    continue
                group = batches[self.state.position : self.state.position + t.update_freq]
                self._update_guarded([collate(self.train_src, self.train_tgt, idx) for idx in group], interval)
                self.state.position += len(group)
                now = time.perf_counter()
                self.state.seconds += now - last_tick
                last_tick = now
                if self.world > 1 and t.max_minutes:   # one clock for all ranks: they must stop (and cool) together
                    clock = torch.tensor([self.state.seconds], dtype=torch.float64, device=self.device)
                    dist.broadcast(clock, 0)
                    self.state.seconds = float(clock)
                bar.update(1)
                if self.state.step % t.log_every_steps == 0:
                    rec = self._train_record(interval, len(batches))
                    self._log(rec)
                    bar.set_postfix(loss=f"{rec['loss']:.3f}", lr=f"{rec['lr']:.2e}",
                                    tok_s=f"{rec['tgt_tokens_per_s']:.0f}")
                    if bar.disable:
                        log.info("step %d  loss %.3f  lr %.2e  %.0f tgt tok/s", rec["step"], rec["loss"], rec["lr"],
                                 rec["tgt_tokens_per_s"])
                    interval = _Interval()
                pause = time.perf_counter()
                if self.state.step % t.valid_every_steps == 0:
                    self._validate_and_log()
                if self.state.step % t.save_every_steps == 0:
                    self.save()
                interval.start += time.perf_counter() - pause   # throughput counts training time only
            self.stop_reason = reason
        finally:
            bar.close()
            restore()
        self._finish()
        return self.state

    def _end_epoch(self) -> None:
        self.state.epoch += 1
        self.state.position = 0
        t = self.cfg.train
        if t.valid_each_epoch and self.state.step % t.valid_every_steps != 0:   # not just validated at this step
            self._validate_and_log()

    def _finish(self) -> None:
        t = self.cfg.train
        if self.rank == 0:
            self.save()
            log.info("%s at step %d (epoch %d, %.1f min)", self.stop_reason, self.state.step, self.state.epoch,
                     self.state.seconds / 60)
            if t.average_last > 1:
                ckpts = self.step_checkpoints()[-t.average_last :]
                checkpoint.average(ckpts, self.run_dir / "averaged", self._meta({"stop": self.stop_reason}))
                log.info("averaged the last %d checkpoints into %s", len(ckpts), self.run_dir / "averaged")
            if self._tb is not None:
                self._tb.close()
        if self.world > 1:
            dist.barrier()


def _describe(cfg: RunConfig) -> str:
    m = cfg.model
    return f"d_model {m.d_model}, {m.n_layers}+{m.n_layers} layers, {m.n_heads} heads, d_ff {m.d_ff}, V {m.tgt_vocab_size}"

