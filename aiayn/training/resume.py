"""A run directory for training: written on a first start, resumed on a second (the model, the optimizer, the data
position, the schedule, the RNG), its checkpoints saved and judged (best, early stopping), its configuration
reconciled with a changed command line or a parent run (fine-tuning).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .. import checkpoint
from ..atomic import remove_debris
from ..config import ModelConfig, RunConfig, TrainConfig
from ..data.datadir import DataDir
from ..model import Transformer
from ..rundir import RunDir
from .distributed import Distributed

log = logging.getLogger(__name__)

# cooldown the limits move where the rate starts to fall: extending a cooled-down run raises the rate again).
RESUMABLE_CHANGES = {"max_steps", "max_epochs", "max_minutes", "patience", "save_every_steps", "keep_last",
                     "valid_every_steps", "valid_each_epoch", "valid_bleu", "valid_max_sentences", "bleu_tokenize",
                     "average_last", "log_every_steps", "max_bad_updates",
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
    world: int = 1             # data-parallel processes (a run resumes with the same number)



def write_run_dir(run: RunDir, data: DataDir, cfg: RunConfig, init_from: Path | None) -> None:
    """Clean up what a crash in the middle of a save left, and write (or refresh) the run's description."""
    if run.path.is_dir():
        remove_debris(run.path)
    multi = data.multilingual
    langs = {"multilingual": multi.to_dict()} if multi is not None else {"src": data.src, "tgt": data.tgt}
    info = {"data_dir": str(data.path.resolve()), **langs, "data_hash": data.hash,
            # what the training data shows of its sentences (data.Norms: spans.py and pipeline.py use it)
            "norms": data.norms().to_dict(),
            # and what a fine-tuning run started from (kept on resume)
            "init_from": str(init_from) if init_from else run.data_info().get("init_from")}
    run.create(cfg, data.vocab(), {k: v for k, v in info.items() if v is not None})


def resume_or_start(run: RunDir, model: Transformer, optimizer: torch.optim.Optimizer, dist: Distributed,
                     init_from: Path | None) -> TrainState | None:
    """The state of the run resumed from last/ (weights, optimizer, this process's generators), or None for a new
    run (whose weights come from ``init_from`` when it is fine-tuning)."""
    if not run.can_resume():
        if init_from:
            checkpoint.load_weights(model, init_from)
            log.info("initialized from %s (fresh optimizer and schedule)", init_from)
        return None
    checkpoint.load_weights(model, run.last)
    saved = checkpoint.load_training_state(run.last, optimizer, dist.rank)
    state = TrainState(**{k: saved[k] for k in dataclasses.asdict(TrainState()) if k in saved})
    if state.world != dist.world:
        raise ValueError(f"{run} was trained with {state.world} process(es) and is resumed with {dist.world}: the data "
                         f"position depends on the number of processes. Resume it with {state.world} (torchrun "
                         f"--nproc_per_node {state.world}), or start a new run from its weights with --init-from")
    log.info("resuming %s from step %d (epoch %d, batch %d)", run, state.step, state.epoch, state.position)
    return state


def save_checkpoints(run: RunDir, model: Transformer, optimizer: torch.optim.Optimizer, state: TrainState,
                     dist: Distributed, keep_last: int) -> None:
    """Write last/ (resumable: weights, Adam, every process's generators, the data position) and a step checkpoint
    (weights); keep the newest ``keep_last`` of those. Called by every process (they hand rank 0 their generator
    states); rank 0 writes. A write that fails (a full disk, ...) stops the run with the previous checkpoint intact."""
    states = checkpoint.rng_state()
    rngs = [{k: g for k, g in zip(states, gathered, strict=True)}
            for gathered in zip(*(dist.gather(v) for v in states.values()), strict=True)]
    if not dist.main:
        return
    try:
        checkpoint.save(run.last, model, meta(state), optimizer, dataclasses.asdict(state), rngs)
        checkpoint.save(run.step_dir(state.step), model, meta(state))
    except OSError as e:
        raise TrainingError(f"cannot write the checkpoint of step {state.step} ({e}); stopping. The previous "
                            f"checkpoint in {run.last} is intact: free the space (or fix the permissions) and "
                            "re-run the same command to resume from it") from None
    run.prune_steps(keep_last)


def judge(state: TrainState, metrics: dict[str, float], t: TrainConfig) -> tuple[bool, str | None]:
    """After a validation: whether it is the best so far (``state.best`` updated), and why to stop early (or None).
    ``early_stop_metric`` decides (valid_loss when BLEU is off); ``patience`` validations without improvement stop."""
    key = t.early_stop_metric if t.early_stop_metric in metrics else "valid_loss"
    value, best = metrics[key], state.best
    if best is None or (value > best if key == "valid_bleu" else value < best):
        state.best, state.bad_validations = value, 0
        return True, None
    state.bad_validations += 1
    if t.patience and state.bad_validations >= t.patience:
        return False, f"early stop: {key} did not improve for {t.patience} validations"
    return False, None


def meta(state: TrainState, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"step": state.step, "epoch": state.epoch, "time": time.strftime("%Y-%m-%dT%H:%M:%S"), **(extra or {})}


def check_bad_updates(why: str, in_a_row: int, limit: int, step: int, last: Path) -> None:
    """Warn about a skipped update; stop the run when ``limit`` were skipped in a row."""
    log.warning("update %d skipped: %s (%d in a row; the run stops at %d)", step, why, in_a_row, limit)
    if in_a_row >= limit:
        raise TrainingError(f"{why} in {limit} updates in a row at step {step}; stopping. Try a smaller lr_factor, a "
                            f"longer warmup, clip_norm=1, or train.precision=fp32. The last good checkpoint is intact "
                            f"in {last}")


def reconcile(cfg: RunConfig, data: DataDir, run: RunDir) -> RunConfig:
    """``cfg`` with the vocabulary sizes and special ids of ``data``; when ``run`` is being resumed, a check that
    it matches the data (same tokenizer) and the configuration (same model; other training settings warn)."""
    (vs, vt), ids, vocab = data.vocab_sizes, data.special_ids, data.vocab()
    if not vocab.shared_ids and cfg.model.tie == "all":
        raise ValueError(f"{data.path} has separate source and target vocabularies, but tie='all' shares one "
                         "embedding matrix between them; train with --set tie=decoder (target embedding = output "
                         "projection) or tie=none")
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(
        cfg.model, src_vocab_size=vs, tgt_vocab_size=vt, pad_id=ids["pad_id"], bos_id=ids["bos_id"],
        eos_id=ids["eos_id"], unk_id=ids["unk_id"],
        # the model records that a head is trained to align (align.py reads that head): one, unless told more
        alignment_heads=cfg.model.alignment_heads or int(cfg.train.guided_alignment > 0)))
    old = run.saved_config()
    if old is None:
        return cfg
    if run.has_vocab() and run.vocab().digest() != vocab.digest():
        raise ValueError(f"{data.path} has a different vocabulary from the run being resumed in "
                         f"{run}; use the data dir it was trained on, or a new --out")
    diff = model_diff(old.model, cfg.model, "in the run")
    if diff:
        raise ValueError(f"the model config differs from the run being resumed in {run} ({diff}); "
                         "use the same settings or a new --out")
    for k, new in dataclasses.asdict(cfg.train).items():
        if getattr(old.train, k) != new and k not in RESUMABLE_CHANGES:
            log.warning("resuming with %s=%r (the run used %r): training will not follow the same path",
                        k, new, getattr(old.train, k))
    return cfg


# Model settings that may differ from the parent run when fine-tuning (they do not change the weights' shapes).
FINE_TUNABLE = frozenset({"p_drop", "p_attn", "p_ffn", "alignment_heads", "alignment_layer"})


def parent(init_from: str | Path, cfg: RunConfig, data: DataDir) -> Path:
    """The checkpoint a fine-tuning run starts from, after checking that its model and tokenizers fit."""
    parent, ckpt = RunDir.locate(init_from)
    if parent.vocab().digest() != data.vocab().digest():
        raise ValueError(f"{data.path} was prepared with other tokenizers than {parent}; prepare the new data with "
                         f"`aiayn prepare ... --vocab-from {parent}` to fine-tune it")
    diff = model_diff(parent.config().model, cfg.model, f"in {parent}", ignore=FINE_TUNABLE)
    if diff:
        raise ValueError(f"--init-from {init_from}: the model must keep the parent's shape ({diff})")
    return ckpt


def model_diff(old: ModelConfig, new: ModelConfig, where: str, ignore: frozenset[str] = frozenset()) -> str:
    """The model fields that differ, listed for an error message ("" when none)."""
    return ", ".join(f"{k}: {getattr(old, k)!r} {where}, {getattr(new, k)!r} now" for k in old.to_dict()
                     if k not in ignore and getattr(old, k) != getattr(new, k))


# Settings that may change when a run is resumed (they do not alter the training trajectory, except that with a
