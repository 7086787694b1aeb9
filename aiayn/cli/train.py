"""``aiayn train``, ``average``, ``demo``, ``distill``, ``shortlist`` and ``plot``: making and looking at models.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from .common import add_setting_flags, command, given

log = logging.getLogger("aiayn")


def cmd_train(a: argparse.Namespace) -> int:
    """Train a Transformer. Settings: preset -> --config YAML -> --set key=value. Re-running the same command on an
    existing run dir resumes it exactly."""
    from ..rundir import RunDir
    from ..runtime import configure
    from ..training.recipes import resolve
    from ..training.resume import TrainingError
    from ..training.train import Trainer

    sets = list(a.set or [])
    for flag, key in ((a.max_steps, "max_steps"), (a.max_epochs, "max_epochs"), (a.max_minutes, "max_minutes")):
        if flag is not None:
            sets.append(f"{key}={flag}")
    base = RunDir(a.out).saved_config()                 # resuming: the run's settings first
    if base is None and a.init_from:
        base = RunDir.locate(a.init_from)[0].config()   # fine-tuning: the parent's settings first
    cfg = resolve(a.preset, a.config, sets, base=base)
    configure(cfg.train.threads)
    trainer = Trainer(a.data, a.out, cfg, init_from=a.init_from)
    try:
        trainer.train()
    except TrainingError as e:
        print(f"aiayn train: {e}", file=sys.stderr)
        return 1
    log.info("run dir: %s  (translate with: aiayn translate --model %s)", a.out, a.out)
    return 130 if (trainer.stop_reason or "").startswith("stopped by") else 0


def add_train(sub: argparse._SubParsersAction) -> None:
    from ..config import PRESETS

    p = command(sub, cmd_train)
    p.add_argument("--data", required=True, type=Path, help="a data dir written by `aiayn prepare`")
    p.add_argument("--out", required=True, type=Path, help="the run dir (created, or resumed if it exists)")
    p.add_argument("--config", type=Path, help="a YAML recipe (see configs/)")
    p.add_argument("--preset", choices=list(PRESETS), help="model size preset (paper Table 3)")
    p.add_argument("--init-from", type=Path, metavar="RUN",
                   help="start from another run's weights (its best checkpoint, or a checkpoint dir) and settings, "
                   "with a fresh optimizer and schedule: fine-tuning. The data must use its tokenizers "
                   "(prepare --vocab-from RUN)")
    p.add_argument("--max-steps", type=int, help="stop after this many optimizer updates")
    p.add_argument("--max-epochs", type=int, help="stop after this many epochs")
    p.add_argument("--max-minutes", type=float, help="stop after this much training time")
    p.add_argument("--set", nargs="+", action="extend", metavar="KEY=VALUE",
                   help="override any config field, e.g. max_tokens=8192 (repeatable; later ones win)")


def cmd_average(a: argparse.Namespace) -> int:
    from ..rundir import RunDir

    run = RunDir(a.model)
    chosen = run.average_last(a.last, out=a.out, minimum=2)
    log.info("averaged %s into %s", ", ".join(d.name for d in chosen), a.out or run.averaged)
    return 0


def add_average(sub: argparse._SubParsersAction) -> None:
    p = command(sub, cmd_average)
    p.add_argument("--model", required=True, type=Path, help="the run dir")
    p.add_argument("--last", type=int, default=5, help="how many of the newest step checkpoints (default 5)")
    p.add_argument("--out", type=Path, help="where to write (default RUN_DIR/averaged, which translate prefers)")


def cmd_demo(a: argparse.Namespace) -> int:
    from ..demo import run_demo

    if a.updates < 0 or a.minutes < 0:
        raise ValueError("--updates and --minutes cannot be negative")

    run_demo(a.out, a.minutes or (0.0 if a.updates else 15.0), a.src, a.tgt, a.set, a.updates)
    return 0


def add_demo(sub: argparse._SubParsersAction) -> None:
    from ..data.corpora import CORPORA

    langs = CORPORA["multi30k"].langs
    from ..demo import UPDATES

    p = command(sub, cmd_demo)
    p.add_argument("--updates", type=int, default=UPDATES,
                   help="train this many updates, in fp32, whatever the machine's speed (default %(default)s: about "
                        "15 minutes on a 2-core AVX2 CPU); 0: train for --minutes")
    p.add_argument("--minutes", type=float, default=0.0,
                   help="a cap on the training time (with --updates 0: the training time, 15 if not given)")
    p.add_argument("--out", type=Path, default=Path("runs/demo"), help="where data and run go (default %(default)s)")
    p.add_argument("--src", default=langs[0], choices=langs)
    p.add_argument("--tgt", default=langs[1], choices=langs)
    p.add_argument("--set", nargs="+", action="extend", metavar="KEY=VALUE", help="override recipe settings (repeatable)")


def cmd_distill(a: argparse.Namespace) -> int:
    """Sequence-level knowledge distillation: translate every training source line of --data with the --teacher run
    (its beam; int8 where the CPU has no fast bf16) and write a data dir whose training targets are the teacher's
    outputs, whose tokenizer is the teacher's, and whose validation and test splits keep their references; train a
    student on it with `aiayn train`. Re-running resumes after a kill; under torchrun each process translates its own
    shards."""
    from ..data.datadir import DataDir, summary
    from ..training.distill import DistillOptions, distill
    from ..training.distributed import Distributed

    out = distill(a.teacher, a.data, a.out, DistillOptions(**given(a, "distill")), force=a.force,
                  **given(a, "decode"))
    if Distributed.from_env().main:
        for line in summary(DataDir(out)):
            log.info("%s", line)
    return 0


def add_distill(sub: argparse._SubParsersAction) -> None:
    from ..config import DecodeConfig
    from ..training.distill import DistillOptions

    p = command(sub, cmd_distill)
    p.add_argument("--teacher", required=True, type=Path, help="the teacher's run dir (or a checkpoint dir in one)")
    p.add_argument("--data", required=True, type=Path, help="the data dir whose training sources are translated")
    p.add_argument("--out", required=True, type=Path, help="the distilled data dir to write")
    p.add_argument("--force", action="store_true", help="start again, discarding the shards of an earlier run")
    add_setting_flags(p, DistillOptions, "distill")
    add_setting_flags(p, DecodeConfig, "decode", exclude=("nbest", "sampling", "temperature", "top_k", "top_p"),
                       default=lambda f: "int8 on a CPU without fast bf16, else auto" if f.name == "precision" else
                       f"the teacher's decode.{f.name}")


def cmd_shortlist(a: argparse.Namespace) -> int:
    """Build a run's lexical shortlist from a data dir's training pairs (made with the run's tokenizer): for each
    source token the --k target tokens most often aligned to it (eflomal) or co-occurring with it (cooc), plus the
    --frequent most frequent target tokens. It is saved in the run dir; `translate --shortlist` (and a server request's
    "shortlist": true) decodes over a batch's candidates, and `export --format ctranslate2` writes it as the vocabulary
    map (use_vmap)."""
    from ..data.datadir import DataDir, DataError
    from ..decoding.lexicon import build
    from ..rundir import RunDir

    run = RunDir.locate(a.model)[0]
    d = DataDir(a.data)
    if d.vocab().describe() != run.vocab().describe():
        raise DataError(f"{a.data} was not made with {run}'s tokenizer; prepare it with --vocab-from {run}")
    sl = build(d.path, run.config().model, a.k, a.frequent, a.method, a.max_pairs)
    path = sl.save(run.path)
    c = sl.meta["valid"]
    print(f"shortlist of {run}: {a.method}, k {a.k}, {a.frequent} frequent, from {sl.meta['pairs']} pairs in "
          f"{sl.meta['seconds']} s -> {path}" + (f"; validation references: {100 * c['tokens']:.1f}% of tokens, "
          f"{100 * c['sentences']:.1f}% of sentences covered, {c['candidates_per_sentence']:g} candidates per "
          f"sentence (of {run.config().model.tgt_vocab_size})" if c else ""))
    return 0


def add_shortlist(sub: argparse._SubParsersAction) -> None:
    p = command(sub, cmd_shortlist)
    p.add_argument("--model", required=True, type=Path, help="the run dir to build it for (it is saved there)")
    p.add_argument("--data", required=True, type=Path, help="a data dir made with the run's tokenizer (its training "
                   "pairs are aligned)")
    p.add_argument("--k", type=int, default=50, help="candidates per source token (default %(default)s)")
    p.add_argument("--frequent", type=int, default=100, help="the most frequent target tokens, always candidates "
                   "(default %(default)s)")
    p.add_argument("--method", choices=("cooc", "eflomal"), default="cooc",
                   help="cooc: co-occurrence in sentence pairs, Dice's coefficient; eflomal: word alignments by the "
                   "eflomal aligner (pip install 'aiayn[align]') (default %(default)s: as good on Multi30k, about eight "
                   "times faster to build, docs/results.md)")
    p.add_argument("--max-pairs", type=int, default=0, help="use the first N training pairs only (0: all)")


def cmd_plot(a: argparse.Namespace) -> int:
    from ..training.plots import all_plots

    for path in all_plots(a.model, a.out, a.sentence):
        log.info("wrote %s", path)
    return 0


def add_plot(sub: argparse._SubParsersAction) -> None:
    p = command(sub, cmd_plot)
    p.add_argument("--model", type=Path, help="a run dir (for training curves and attention maps)")
    p.add_argument("--out", type=Path, default=Path("plots"), help="output directory (default %(default)s)")
    p.add_argument("--sentence", default="Ein Mann fährt mit dem Fahrrad über eine Brücke.",
                   help="source sentence for the attention maps")
