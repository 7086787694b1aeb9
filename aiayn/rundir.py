"""The run directory, the one place that knows its layout (written by ``aiayn train``, rank 0 only):

    config.json          the resolved model / train / decode configuration (resume starts from it)
    vocab.json, spm.model  the tokenizers (tokenizer.py's Vocab: joint, or spm.src.model / spm.tgt.model,
                         tokenizer*.json): a run directory is a self-contained model
    data.json            which data directory (and vocabulary) it was trained on
    metrics.jsonl        one JSON object per log interval and per validation
    tb/                  TensorBoard events (if tensorboard is installed)
    last/                the newest full training checkpoint (weights + optimizer + RNG + data position)
    best/                the weights with the best validation score
    checkpoints/step_N/  weights every ``save_every_steps`` (the newest ``keep_last``), for averaging
    averaged/            the mean of the newest step checkpoints (``average_last``, ``aiayn average``)
    hyps/NAME.hyp        translations written by ``aiayn evaluate`` and the demo
    valid/step_N.hyp     the validation translations scored at step N
    engines/ENGINE/      another engine's cached conversions (auto.py: CTranslate2, keyed by the weights' hash)
    demo.json            the demo's scores

A checkpoint directory's own contents (weights, optimizer state, ...) are checkpoint.py's.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path
from typing import Any

from . import checkpoint
from .config import Multilingual, Norms, RunConfig
from .data.tokenizer import Vocab

INFERENCE_PREFERENCE = ("averaged", "best", "last")   # what translate loads from a run dir, first found
_STEP = re.compile(r"step_(\d+)")


class RunDir:
    """Paths, checkpoint listing and ordering, the saved configuration, hypothesis files of one run."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.config_file = self.path / "config.json"
        self.data_file = self.path / "data.json"
        self.metrics = self.path / "metrics.jsonl"
        self.tensorboard = self.path / "tb"
        self.last, self.best, self.averaged = self.path / "last", self.path / "best", self.path / "averaged"
        self.checkpoints = self.path / "checkpoints"
        self.demo_file = self.path / "demo.json"

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    def __str__(self) -> str:
        return str(self.path)

    @classmethod
    def locate(cls, path: str | Path) -> tuple[RunDir, Path]:
        """(the run, the checkpoint to translate with) for a run dir (averaged/ > best/ > last/ > the newest
        step checkpoint) or for a checkpoint dir inside one."""
        p = Path(path)
        if not p.exists():
            raise FileNotFoundError(f"{p}: no such run directory or checkpoint")
        if checkpoint.is_checkpoint(p):
            run = next((cls(d) for d in (p.parent, p.parent.parent) if cls(d).config_file.is_file()), None)
            if run is None:
                raise FileNotFoundError(f"{p} is a checkpoint, but no config.json was found in its run directory")
            return run, p
        run = cls(p)
        if not run.config_file.is_file():
            raise FileNotFoundError(f"{p} is not a run directory (no config.json) or a checkpoint")
        for ckpt in (run.path / name for name in INFERENCE_PREFERENCE):
            if checkpoint.is_checkpoint(ckpt):
                return run, ckpt
        steps = run.step_checkpoints()
        if not steps:
            raise FileNotFoundError(f"{p} has no checkpoint yet (train first)")
        return run, steps[-1]

    # -- configuration -------------------------------------------------------------------------------------------

    def saved_config(self) -> RunConfig | None:
        """The configuration saved by an earlier session of this run (None for a new run)."""
        if not self.config_file.is_file():
            return None
        try:
            return RunConfig.load(self.config_file)
        except json.JSONDecodeError as e:
            raise ValueError(f"{self.config_file}: not valid JSON ({e}); restore it or use a new run directory") from None
        except (ValueError, TypeError, AttributeError) as e:
            raise ValueError(f"{self.config_file}: {e}; restore it or use a new run directory") from None

    def config(self) -> RunConfig:
        """The saved configuration of an existing run."""
        cfg = self.saved_config()
        if cfg is None:
            raise FileNotFoundError(f"{self.path} is not a run directory (no config.json)")
        return cfg

    def create(self, cfg: RunConfig, vocab: Vocab, data_info: dict[str, Any]) -> None:
        """Make (or refresh, on resume) the run directory: configuration, tokenizers, data provenance."""
        self.path.mkdir(parents=True, exist_ok=True)
        cfg.save(self.config_file)
        vocab.save(self.path)
        self.data_file.write_text(json.dumps(data_info, indent=2) + "\n")

    def vocab(self) -> Vocab:
        """The run's source and target tokenizers."""
        return Vocab.load(self.path)

    def has_vocab(self) -> bool:
        return Vocab.stored_in(self.path)

    # -- checkpoints ---------------------------------------------------------------------------------------------

    def step_dir(self, step: int) -> Path:
        return self.checkpoints / f"step_{step}"

    @staticmethod
    def step_of(path: Path) -> int:
        """The step of a ``checkpoints/step_N`` directory."""
        m = _STEP.fullmatch(path.name)
        if m is None:
            raise ValueError(f"{path} is not a step checkpoint (step_N)")
        return int(m.group(1))

    def step_checkpoints(self) -> list[Path]:
        """The complete step checkpoints, oldest first (by step number, so step_10 comes after step_9)."""
        found = [d for d in self.checkpoints.glob("step_*") if _STEP.fullmatch(d.name) and checkpoint.is_checkpoint(d)]
        return sorted(found, key=self.step_of)

    def prune_steps(self, keep: int) -> None:
        """Delete all but the newest ``keep`` step checkpoints (0: keep them all)."""
        for old in self.step_checkpoints()[:-keep] if keep > 0 else []:
            shutil.rmtree(old, ignore_errors=True)

    def average_last(self, n: int, out: str | Path | None = None, meta: dict[str, Any] | None = None,
                     minimum: int = 1) -> list[Path]:
        """Average the newest ``n`` step checkpoints into ``out`` (default: averaged/, which translate prefers);
        fewer than ``minimum`` is an error. Returns the checkpoints averaged (paper §6.1)."""
        steps = self.step_checkpoints()
        if len(steps) < max(1, minimum):
            raise ValueError(f"{self} has {len(steps)} step checkpoints; averaging needs at least {max(1, minimum)}")
        chosen = steps[-n:]
        checkpoint.average(chosen, out or self.averaged, {"step": self.step_of(chosen[-1]), **(meta or {})})
        return chosen

    def can_resume(self) -> bool:
        return checkpoint.is_checkpoint(self.last)

    def data_info(self) -> dict[str, Any]:
        """data.json: which data the run was trained on (and started from); {} when missing or unreadable."""
        try:
            return info if isinstance(info := json.loads(self.data_file.read_text()), dict) else {}
        except (OSError, ValueError):
            return {}

    def languages(self) -> tuple[str, str] | None:
        """(source, target) language codes of the data the run was trained on, when recorded."""
        info = self.data_info()
        return (str(info["src"]), str(info["tgt"])) if "src" in info and "tgt" in info else None

    def multilingual(self) -> Multilingual | None:
        """config.Multilingual of a run trained on many directions (None for one pair)."""
        return Multilingual.from_dict(m) if isinstance(m := self.data_info().get("multilingual"), dict) else None

    def norms(self) -> Norms:
        """What the run's training data shows of its sentences (data.Norms; :func:`norms`)."""
        return norms(self.data_info())

    def target_language(self) -> str | None:
        """The target language code of the run's data (what BLEU's tokenizer is chosen by), when recorded."""
        return langs[1] if (langs := self.languages()) else None

    # -- outputs ---------------------------------------------------------------------------------------------------

    def valid_hypotheses(self, step: int) -> Path:
        """The greedy translations of the validation lines scored at ``step``."""
        return self.path / "valid" / f"step_{step}.hyp"

    def hypotheses(self, name: str) -> Path:
        """Where the translations of the file ``name`` go: hyps/NAME.hyp."""
        return self.path / "hyps" / f"{name}.hyp"

    def engine_cache(self, engine: str) -> Path:
        """Where another engine's conversions of this run are cached (auto.py): engines/ENGINE/."""
        return self.path / "engines" / engine


def norms(info: dict[str, Any]) -> Norms:
    """From a run's data.json: its data's norms as recorded (runs from before they were: counted in its data dir, when
    that is still there; else none)."""
    from .data.datadir import DataDir

    recorded = Norms.from_dict(info["norms"]) if "norms" in info else None
    if recorded is not None and "starters" not in info["norms"] and "data_dir" in info:   # (recorded before them)
        try:
            counted = DataDir(info["data_dir"]).norms()
            return dataclasses.replace(recorded, short=counted.short, starters=counted.starters)
        except (OSError, ValueError):
            return recorded
    if recorded is not None:
        return recorded
    try:
        return DataDir(info["data_dir"]).norms() if "data_dir" in info else Norms()
    except (OSError, ValueError):
        return Norms()
