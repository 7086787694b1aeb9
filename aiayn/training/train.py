"""Training (paper §5): one explicit loop, resumable, observable and safe to interrupt.

The parts, each on a screen: :class:`TrainStep` (one optimizer update), :func:`validate` (loss,
perplexity and greedy BLEU on the validation split), the metrics log (metrics.py), the distributed
helpers (distributed.py), and :class:`Trainer`, whose :meth:`Trainer.train` loop ties them together.
The run directory it writes is described in rundir.py.

Re-running the same command on an existing run dir resumes exactly where ``last/`` left off:
same batches, same dropout masks, same optimizer state.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .. import checkpoint, precision
from ..config import RunConfig, TrainConfig
from ..data.batches import Batch, Joiner, TokenBatchSampler, collate
from ..data.datadir import DataDir
from ..decoding.lexicon import guided_targets
from ..engines.base import detokenize
from ..engines.torch import translate_ids
from ..loss import SequenceLoss
from ..model import Transformer
from ..optim import cooldown_factor, make_optimizer, noam_lr
from ..precision import autocast
from ..rundir import RunDir
from ..runtime import eval_mode, resolve_device
from .distributed import Distributed
from .evaluate import score
from .metrics import MetricsLog
from .resume import (
    TrainingError,
    TrainState,
    check_bad_updates,
    judge,
    meta,
    parent,
    reconcile,
    resume_or_start,
    save_checkpoints,
    write_run_dir,
)

log = logging.getLogger(__name__)


# --- one update ---------------------------------------------------------------------------------------------------


@dataclass
class StepStats:
    loss: float          # summed label-smoothed loss of the update's batches, over every process
    nll: float
    tgt_tokens: int      # over every process
    src_tokens: int
    all_tgt_tokens: int  # what the gradient is normalized by (= tgt_tokens)
    grad_norm: float
    skipped: str | None = None   # why the update was not made (a non-finite loss or gradient)


class _StepFailed(Exception):
    def __init__(self, what: str, advice: str) -> None:
        super().__init__(what)
        self.what, self.advice = what, advice


class TrainStep:
    """One optimizer update (§5.3) over a group of batches (gradient accumulation, ``update_freq``): the
    gradient is that of the summed loss over every target token of the group, on every process, divided by
    their number; then Adam at the given rate. Non-finite losses or gradients stop before the update."""

    def __init__(self, loss_fn: torch.nn.Module, model: Transformer, optimizer: torch.optim.Optimizer,
                 cfg: TrainConfig, device: torch.device, precision: str, dist: Distributed) -> None:
        self.loss_fn, self.model, self.optimizer, self.cfg = loss_fn, model, optimizer, cfg
        self.device, self.precision, self.dist = device, precision, dist
        self.scaler = torch.amp.GradScaler("cuda", enabled=precision == "fp16")

    @classmethod
    def build(cls, model: Transformer, optimizer: torch.optim.Optimizer, cfg: TrainConfig, device: torch.device,
              precision: str, dist: Distributed) -> TrainStep:
        """The step with its loss (:class:`SequenceLoss`, compiled if ``cfg.compile``, wrapped for data parallelism)."""
        loss_fn: torch.nn.Module = SequenceLoss(model, cfg.label_smoothing, cfg.loss_chunk_tokens,
                                                 cfg.guided_alignment)
        if cfg.compile:
            loss_fn = torch.compile(loss_fn, dynamic=True)  # type: ignore[assignment]
        return cls(dist.wrap(loss_fn, device), model, optimizer, cfg, device, precision, dist)

    def __call__(self, batches: list[Batch], lr: float) -> StepStats:
        try:
            return self._update(batches, lr)
        except (torch.cuda.OutOfMemoryError, RuntimeError) as e:
            if not (isinstance(e, torch.cuda.OutOfMemoryError) or "out of memory" in str(e)
                    or "can't allocate" in str(e)):
                raise
            mt, uf = self.cfg.max_tokens, self.cfg.update_freq
            raise _StepFailed(f"out of memory on a batch of {sum(len(b.indices) for b in batches)} sentences "
                              f"({sum(b.n_tgt_tokens for b in batches)} target tokens)",
                              f"Lower max_tokens (now {mt}), e.g. --set max_tokens={mt // 2} update_freq={uf * 2} "
                              "keeps the same tokens per update") from None

    def _update(self, batches: list[Batch], lr: float) -> StepStats:
        tokens = self.dist.sum(sum(b.n_tgt_tokens for b in batches), self.device)
        self.optimizer.zero_grad(set_to_none=True)
        loss_sum = nll_sum = 0.0
        for i, batch in enumerate(batches):
            b = batch.to(self.device)
            with self.dist.no_sync(self.loss_fn, sync=i == len(batches) - 1):
                with autocast(self.device, self.precision):
                    loss, nll = self.loss_fn(b.src, b.tgt_in, b.tgt_out, b.align)
                self.scaler.scale(loss * (self.dist.world / tokens)).backward()
            loss_sum += float(loss.detach())
            nll_sum += float(nll)
        # what is logged and checked is over every process (so all of them agree on skipping an update)
        loss_sum, nll_sum, n_tgt, n_src = self.dist.sum_floats(
            [loss_sum, nll_sum, sum(b.n_tgt_tokens for b in batches), sum(b.n_src_tokens for b in batches)], self.device)
        counts = (int(n_tgt), int(n_src), tokens)
        # A non-finite loss or gradient: no update (the weights and Adam's moments stay as they were). Every process
        # agrees, because the gradients were summed over all of them before this point.
        if not math.isfinite(loss_sum) and self.precision != "fp16":
            self.optimizer.zero_grad(set_to_none=True)
            return StepStats(loss_sum, nll_sum, *counts, float("nan"), skipped=f"the loss became {loss_sum}")
        self.scaler.unscale_(self.optimizer)
        limit = self.cfg.clip_norm if self.cfg.clip_norm > 0 else float("inf")
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), limit))
        if not math.isfinite(grad_norm) and self.precision != "fp16":   # fp16: the scaler skips the step itself
            self.optimizer.zero_grad(set_to_none=True)
            return StepStats(loss_sum, nll_sum, *counts, grad_norm, skipped=f"the gradient norm became {grad_norm}")
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.scaler.step(self.optimizer)
        self.scaler.update()
        return StepStats(loss_sum, nll_sum, *counts, grad_norm)


# --- validation -----------------------------------------------------------------------------------------------------


def _joiner(data: DataDir, cfg: RunConfig) -> Joiner:
    """The :class:`batches.Joiner` of ``train.concat``, its stops read from the run's vocabulary."""
    vocab = data.vocab()
    return Joiner(cfg.train.concat, cfg.train.seed, Joiner.stop_ids(vocab.src.piece, vocab.src.vocab_size),
                  Joiner.stop_ids(vocab.tgt.piece, vocab.tgt.vocab_size), cfg.model.max_positions - 2)


def validate(model: Transformer, data: DataDir, cfg: RunConfig, device: torch.device, precision: str,
             hypotheses: Path | None = None) -> dict[str, float]:
    """Teacher-forced loss and perplexity on the validation split, and greedy-decoding BLEU (``valid_bleu``),
    with ``model`` in eval mode, autocast to ``precision`` (fp32, bf16 or fp16). BLEU is over at most ``valid_max_sentences``
    lines: a subset drawn with the run's seed, the same at every validation (the loss is always over all of
    them); its translations are written to ``hypotheses`` (one per line, in the order of the validation file)."""
    t0 = time.perf_counter()
    src, tgt = data.split("valid")
    limit = cfg.model.max_positions - 1
    fits = np.nonzero((src.lengths < limit) & (tgt.lengths < limit))[0]
    sampler = TokenBatchSampler(src.lengths[fits] + 1, tgt.lengths[fits] + 1, cfg.train.max_tokens, shuffle=False)
    loss = nll = 0.0
    tokens = 0
    with eval_mode(model), torch.no_grad(), autocast(device, precision):
        loss_fn = SequenceLoss(model, cfg.train.label_smoothing, cfg.train.loss_chunk_tokens)
        for idx in sampler.epoch_batches(0):
            b = collate(src, tgt, fits[idx]).to(device)
            a, n = loss_fn(b.src, b.tgt_in, b.tgt_out)
            loss, nll, tokens = loss + float(a), nll + float(n), tokens + b.n_tgt_tokens
    out: dict[str, float] = {"valid_loss": loss / max(1, tokens), "valid_nll": nll / max(1, tokens)}
    out["valid_ppl"] = math.exp(min(out["valid_nll"], 50.0))
    if cfg.train.valid_bleu:
        chosen = bleu_subset(len(src), cfg.train.valid_max_sentences, cfg.train.seed)
        greedy = dataclasses.replace(cfg.decode, beam=1, nbest=1, sampling=False)
        multi = data.multilingual
        first = None if multi is None else multi.first_tokens(chosen.tolist(), data.vocab().tgt.piece_id)
        hyps = translate_ids(model, [src[int(i)].tolist() for i in chosen], greedy, device, precision, first=first)
        text = detokenize(data.vocab(), [h[0].tokens for h in hyps])
        all_refs = data.raw_lines("valid", "tgt")
        if multi is not None:
            out.update(_by_direction(multi.ranges.get("valid", {}), chosen, text, all_refs, cfg))
        else:
            s = score(text, [all_refs[int(i)] for i in chosen], lang=data.tgt, tokenize=cfg.train.bleu_tokenize or None)
            out.update({"valid_bleu": s["bleu"], "valid_bleu_lc": s["bleu_lc"], "valid_chrf": s["chrf"]})
        out["valid_bleu_sentences"] = len(chosen)
        if hypotheses is not None:
            hypotheses.parent.mkdir(parents=True, exist_ok=True)
            hypotheses.write_text("".join(t + "\n" for t in text), encoding="utf-8")
    out["valid_seconds"] = time.perf_counter() - t0
    return out


def _by_direction(ranges: dict[str, tuple[int, int]], chosen: np.ndarray, text: list[str], refs: list[str],
                  cfg: RunConfig) -> dict[str, float]:
    """A multilingual validation's scores (multilingual.py): each direction's BLEU over its own lines
    (``valid_bleu_de-en`` ...; each scored as its target language needs) and, as ``valid_bleu`` (what the best
    checkpoint and early stopping follow), ``valid_bleu_lc`` and ``valid_chrf``, their mean over the directions."""
    out: dict[str, float] = {}
    at = {int(i): k for k, i in enumerate(chosen)}
    means: dict[str, list[float]] = {"valid_bleu": [], "valid_bleu_lc": [], "valid_chrf": []}
    for name, (first, end) in ranges.items():
        rows = [i for i in range(first, end) if i in at]
        if not rows:
            continue
        s = score([text[at[i]] for i in rows], [refs[i] for i in rows], lang=name.split("-", 1)[1],
                  tokenize=cfg.train.bleu_tokenize or None)
        out[f"valid_bleu_{name}"] = s["bleu"]
        for key, value in (("valid_bleu", s["bleu"]), ("valid_bleu_lc", s["bleu_lc"]), ("valid_chrf", s["chrf"])):
            means[key].append(value)
    out.update({k: round(float(np.mean(v)), 2) for k, v in means.items() if v})
    return out


def attention_sample(model: Transformer, data: DataDir, max_positions: int,
                     device: torch.device) -> dict[str, list[torch.Tensor]] | None:
    """Every attention map of one fixed validation sentence (the first with at most 30 tokens a side),
    teacher-forced on its reference, in fp32: kind -> per layer (1, H, rows, cols). None if none is short."""
    src, tgt = data.split("valid")
    limit = min(30, max_positions - 1)
    short = np.nonzero((src.lengths <= limit) & (tgt.lengths <= limit))[0]
    if not len(short):
        return None
    b = collate(src, tgt, short[:1]).to(device)
    with eval_mode(model), torch.no_grad():
        m = model.attention_maps(b.src, b.tgt_in)
    return {"encoder_self": m.encoder, "decoder_self": m.decoder_self, "cross": m.cross}


def bleu_subset(n: int, cap: int, seed: int) -> np.ndarray:
    """Which of ``n`` validation lines validation BLEU uses: all (``cap`` 0 or >= n), or ``cap`` of them drawn
    with ``seed`` (the same every time), in file order."""
    if cap <= 0 or cap >= n:
        return np.arange(n)
    return np.sort(np.random.default_rng([seed, 0xB1E0]).choice(n, size=cap, replace=False))


# --- the trainer ------------------------------------------------------------------------------------------------------


class Trainer:
    """Trains a :class:`Transformer` on a prepared data dir into a run dir. ``Trainer(...).train()``.

    Process-wide settings (threads, memory) are not changed here: see runtime.configure.
    """

    def __init__(self, data_dir: str | Path, run_dir: str | Path, cfg: RunConfig,
                 init_from: str | Path | None = None) -> None:
        self.data, self.run, self.dist = DataDir(data_dir), RunDir(run_dir), Distributed.from_env()
        self.cfg = reconcile(cfg, self.data, self.run)
        self.init_from = parent(init_from, self.cfg, self.data) if init_from and not self.run.can_resume() else None
        t = self.cfg.train
        self.device = self.dist.setup(resolve_device(t.device))
        self.precision = precision.resolve(t.precision, self.device)
        torch.manual_seed(t.seed + self.dist.rank)
        self.model = Transformer(self.cfg.model).to(self.device)
        self.optimizer = make_optimizer(self.model.parameters(), t, self.device)
        self.train_step = TrainStep.build(self.model, self.optimizer, t, self.device, self.precision, self.dist)
        self.train_src, self.train_tgt = self.data.split("train")
        self.guide = guided_targets(self.data) if t.guided_alignment else None   # lexicon.GuidedTargets
        self.joiner = _joiner(self.data, self.cfg) if t.concat else None
        self.sampler = TokenBatchSampler(self.train_src.lengths + 1, self.train_tgt.lengths + 1, t.max_tokens,
                                         seed=t.seed, rank=self.dist.rank, world=self.dist.world)
        self.metrics = MetricsLog(self.run, enabled=self.dist.main, tensorboard=t.tensorboard, every=t.log_every_steps)
        self.state = TrainState(world=self.dist.world)
        self.stop_reason: str | None = None
        self._signal: str | None = None
        self._last_tick = 0.0
        self._bad_updates = 0          # skipped updates in a row

    def train(self) -> TrainState:
        """Train until a limit (steps, epochs, minutes), early stopping or a signal; always leaves last/ saved."""
        t = self.cfg.train
        if self.dist.main:
            write_run_dir(self.run, self.data, self.cfg, self.init_from)
        self.state = resume_or_start(self.run, self.model, self.optimizer, self.dist, self.init_from) or self.state
        if self.dist.main:
            log.info("model: %s parameters (%s); %s on %s; %d train pairs in %d batches per epoch",
                     f"{sum(p.numel() for p in self.model.parameters()):,}", _describe(self.cfg), self.precision,
                     self.device, len(self.train_src), len(self.sampler))
        restore = _on_stop_signals(self._stop) if self.dist.main else (lambda: None)
        self.metrics.start(t.max_steps or (len(self.sampler) // t.update_freq * t.max_epochs or None), self.state.step)
        self.model.train()
        self._last_tick = time.perf_counter()
        try:
            while (reason := limit_reached(t, self.state) or self._signal or self.stop_reason) is None:
                batches = self.sampler.epoch_batches(self.state.epoch)
                if self.state.position >= len(batches):
                    self._end_epoch()
                    continue
                group = batches[self.state.position : self.state.position + t.update_freq]
                self._step([self._batch(idx, self.state.position + k) for k, idx in enumerate(group)], len(batches))
                with self.metrics.paused():
                    if self.state.step % t.valid_every_steps == 0:
                        self._validate()
                    if self.state.step % t.save_every_steps == 0:
                        self.save()
            self.stop_reason = reason
        finally:
            self.metrics.end_bar()
            restore()
        self._finish()
        return self.state

    def _batch(self, indices: np.ndarray, position: int) -> Batch:
        """The batch of these example numbers, at ``position`` in the epoch (joined: ``train.concat``)."""
        joined = self.joiner and self.joiner.rows(self.train_src, self.train_tgt, indices, self.state.epoch, position)
        if joined:
            return collate(self.train_src, self.train_tgt, joined[0], rows=joined[1])
        return collate(self.train_src, self.train_tgt, indices, self.guide)

    def _step(self, batches: list[Batch], per_epoch: int) -> None:
        """One update through :class:`TrainStep`, then the state, the clock and the metrics log."""
        lr = rate(self.cfg, self.state, per_epoch)
        try:
            stats = self.train_step(batches, lr)
        except _StepFailed as e:
            raise TrainingError(f"{e.what} at step {self.state.step + 1}; stopping. {e.advice}. The last good "
                                f"checkpoint is intact in {self.run.last}") from None
        self.state.position += len(batches)           # skipped batches are passed over, not retried
        self._bad_updates = self._bad_updates + 1 if stats.skipped else 0
        if stats.skipped:
            check_bad_updates(stats.skipped, self._bad_updates, self.cfg.train.max_bad_updates, self.state.step + 1,
                               self.run.last)
            return
        self.state.step, self.state.tgt_tokens = self.state.step + 1, self.state.tgt_tokens + stats.all_tgt_tokens
        now = time.perf_counter()
        self.state.seconds, self._last_tick = self.state.seconds + now - self._last_tick, now
        if self.cfg.train.max_minutes:   # one clock for all processes: they must stop (and cool down) together
            self.state.seconds = self.dist.from_main(self.state.seconds, self.device)
        self.metrics.update(step=self.state.step, epoch=self.state.epoch + self.state.position / max(1, per_epoch),
                            loss=stats.loss, nll=stats.nll, tgt_tokens=stats.tgt_tokens, src_tokens=stats.src_tokens,
                            grad_norm=stats.grad_norm, lr=lr, elapsed=self.state.seconds)

    def _stop(self, reason: str) -> None:
        self._signal = reason

    def _end_epoch(self) -> None:
        self.state.epoch, self.state.position = self.state.epoch + 1, 0
        t = self.cfg.train
        if t.valid_each_epoch and self.state.step % t.valid_every_steps != 0:   # not just validated at this step
            with self.metrics.paused():
                self._validate()

    def _validate(self) -> None:
        """Validate on rank 0, keep best/, decide on early stopping; every process learns whether to stop."""
        if self.dist.main:
            metrics = validate(self.model, self.data, self.cfg, self.device, self.precision,
                               self.run.valid_hypotheses(self.state.step))
            self.metrics.validation(self.state.step, self.state.epoch, metrics)
            if self.metrics.images and (maps := attention_sample(self.model, self.data, self.cfg.model.max_positions,
                                                                 self.device)):
                self.metrics.attention_images(self.state.step, maps)
            improved, stop = judge(self.state, metrics, self.cfg.train)
            if improved:
                checkpoint.save(self.run.best, self.model, meta(self.state, metrics))
            self.stop_reason = self.stop_reason or stop
        if self.dist.from_main(1.0 if self.stop_reason else 0.0, self.device) and not self.stop_reason:
            self.stop_reason = "early stop (rank 0)"

    def save(self) -> None:
        """Write last/ (resumable) and a step checkpoint, keeping the newest ``keep_last`` (:func:`save_checkpoints`;
        every process calls it, rank 0 writes)."""
        save_checkpoints(self.run, self.model, self.optimizer, self.state, self.dist, self.cfg.train.keep_last)

    def _finish(self) -> None:
        self.save()
        if self.dist.main:
            log.info("%s at step %d (epoch %d, %.1f min)", self.stop_reason, self.state.step, self.state.epoch,
                     self.state.seconds / 60)
            if self.cfg.train.average_last > 1:
                chosen = self.run.average_last(self.cfg.train.average_last,
                                               meta=meta(self.state, {"stop": self.stop_reason}))
                log.info("averaged the last %d checkpoints into %s", len(chosen), self.run.averaged)
        self.metrics.close()
        self.dist.close()


# --- the run directory: its description, resuming, checkpoints -------------------------------------------------------


def rate(cfg: RunConfig, state: TrainState, per_epoch: int) -> float:
    """The rate of the next update (step ``state.step + 1``): §5.3 times the cooldown multiplier (1 without one)."""
    t = cfg.train
    return (noam_lr(state.step + 1, cfg.model.d_model, t.warmup, t.lr_factor)
            * cooldown_factor(progress(t, state, per_epoch), t.cooldown))


def progress(t: TrainConfig, state: TrainState, per_epoch: int) -> float:
    """How far a run is toward the limit that ends it first (max_steps, max_epochs or max_minutes), in [0, 1]."""
    done = 0.0
    if t.max_steps:
        done = state.step / t.max_steps
    if t.max_epochs:
        done = max(done, (state.epoch + state.position / max(1, per_epoch)) / t.max_epochs)
    if t.max_minutes:
        done = max(done, state.seconds / (t.max_minutes * 60))
    return min(1.0, done)


def limit_reached(t: TrainConfig, state: TrainState) -> str | None:
    """Why the run ends now (max_steps, max_epochs or max_minutes reached), or None."""
    if t.max_steps and state.step >= t.max_steps:
        return f"reached max_steps={t.max_steps}"
    if t.max_epochs and state.epoch >= t.max_epochs:
        return f"reached max_epochs={t.max_epochs}"
    if t.max_minutes and state.seconds >= t.max_minutes * 60:
        return f"reached max_minutes={t.max_minutes:g}"
    return None


def _on_stop_signals(stop: Callable[[str], None]) -> Callable[[], None]:
    """Route SIGINT/SIGTERM to ``stop`` (the loop then ends after the current update, which saves); a second Ctrl-C
    stops at once. Returns the function that restores the previous handlers."""
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

    def handler(signum: int, frame: Any) -> None:
        stop(f"stopped by {signal.Signals(signum).name}")
        signal.signal(signal.SIGINT, signal.default_int_handler)

    for s in previous:
        signal.signal(s, handler)

    def restore() -> None:
        for s, h in previous.items():
            signal.signal(s, h)

    return restore


def _describe(cfg: RunConfig) -> str:
    m = cfg.model
    return (f"d_model {m.d_model}, {m.encoder_layers}+{m.decoder_layers} layers, {m.n_heads} heads, d_ff {m.d_ff}, "
            f"V {m.tgt_vocab_size}")
