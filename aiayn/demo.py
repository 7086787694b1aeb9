"""``aiayn demo``: the main job on the bundled corpus, end to end and time-bounded.

prepare Multi30k de->en -> train the small model (configs/multi30k-de-en.yaml) for ``minutes`` ->
average the last checkpoints -> evaluate on test_2016_flickr with beam search -> translate a few
sentences. Re-running continues the same run (a finished run is only evaluated again).
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from .config import resolve
from .corpora import fetch
from .data import DataDir, PrepareOptions, prepare
from .evaluate import evaluate
from .rundir import RunDir
from .runtime import configure
from .train import Trainer
from .translate import Translator

log = logging.getLogger(__name__)

SAMPLES = [
    "Ein Mann fährt mit dem Fahrrad über eine Brücke.",
    "Zwei Kinder spielen im Sand am Strand.",
    "Eine Frau mit einem roten Hut liest ein Buch im Park.",
]


def run_demo(out: Path, minutes: float, src: str = "de", tgt: str = "en", sets: list[str] | None = None) -> dict:
    """The whole job. It is a program of its own: it tunes the process (runtime.configure) with the recipe's
    ``threads``."""
    t0 = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    log.info("[1/4] preparing the bundled Multi30k (%s -> %s) in %s", src, tgt, out / "data")
    data = DataDir(prepare(fetch("multi30k", src, tgt, out / "cache"), out / "data",
                           PrepareOptions(src=src, tgt=tgt, vocab_size=8000)))
    run = RunDir(out / f"run-{src}-{tgt}")
    cfg = resolve(yaml_path=f"multi30k-{src}-{tgt}", sets=[f"max_minutes={minutes}", *(sets or [])])
    configure(cfg.train.threads)
    log.info("[2/4] training the small model for up to %g minutes into %s (Ctrl-C stops and saves)", minutes, run)
    trainer = Trainer(data.path, run.path, cfg)
    trainer.train()
    log.info("[3/4] translating test_2016_flickr (%d sentences, beam %d) and scoring with sacreBLEU",
             data.manifest["splits"]["test"]["pairs"], cfg.decode.beam)
    translator = Translator.load(run.path)
    src_lines, refs = data.raw_lines("test", "src"), data.raw_lines("test", "tgt")
    s = evaluate(translator, src_lines, refs, run.hypotheses("test_2016_flickr"), lang=tgt)
    result = {"bleu": s["bleu"], "bleu_lc": s["bleu_lc"], "chrf": s["chrf"], "signature": s["signature"],
              "sentences": s["sentences"], "decode_seconds": round(s["seconds"], 1), "train_minutes":
              round(trainer.state.seconds / 60, 1), "steps": trainer.state.step, "run_dir": str(run)}
    run.demo_file.write_text(json.dumps(result, indent=2) + "\n")
    log.info("[4/4] a few translations:")
    samples = SAMPLES if src == "de" else src_lines[:3]
    for line, hyp in zip(samples, translator.translate(samples), strict=True):
        log.info("  %s\n    -> %s", line, hyp)
    log.info("\ntest_2016_flickr: BLEU %.2f (lowercased %.2f), chrF %.2f, %d sentences in %.1f s\n  %s",
             s["bleu"], s["bleu_lc"], s["chrf"], s["sentences"], s["seconds"], s["signature"])
    log.info("run dir: %s\n  metrics: %s\n  hypotheses: %s\n  translate more: aiayn translate --model %s",
             run, run.metrics, s["hypotheses"], run)
    log.info("demo finished in %.1f minutes", (time.perf_counter() - t0) / 60)
    return result
