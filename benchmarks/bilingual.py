"""One bilingual model per direction of Multi30k's four languages (de, en, fr, cs: the same 29,000 captions in each),
each trained as ``make demo`` trains its de->en model: the bundled recipe ``multi30k-de-en-short`` (its settings are
the same for every direction), a joint 8,000-piece SentencePiece vocabulary of the pair, 1,200 updates in fp32; then
test_2016_flickr translated with the run's averaged weights and scored with sacreBLEU. These are what a model of
many languages is held against, direction by direction (the same size, as many updates in all).

    python -m benchmarks bilingual --directions fr-en,en-fr [--data ../shared/data/multi30k] [--out runs/bilingual]

Each direction is recorded as it finishes: benchmarks/results/bilingual/bilingual-SRC-TGT-<date>.json (BLEU, its
lowercased form, chrF, the signature, updates, minutes); its data and run stay in --out.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))
import record  # noqa: E402

LANGS = ("de", "en", "fr", "cs")
UPDATES = 1200


def splits(data: Path, src: str, tgt: str) -> dict[str, object]:
    from aiayn.data.datadir import find_source

    return {split: find_source(data / name, src, tgt)
            for split, name in (("train", "train"), ("valid", "val"), ("test", "test_2016_flickr"))}


def direction(data: Path, out: Path, src: str, tgt: str, updates: int) -> dict[str, object]:
    from aiayn.data.datadir import DataDir
    from aiayn.data.prepare import PrepareOptions, prepare
    from aiayn.rundir import RunDir
    from aiayn.runtime import configure
    from aiayn.training.evaluate import evaluate
    from aiayn.training.recipes import resolve
    from aiayn.training.train import Trainer
    from aiayn.translator import Translator

    t0 = time.perf_counter()
    prepared = DataDir(prepare(splits(data, src, tgt), out / f"data-{src}-{tgt}",  # type: ignore[arg-type]
                               PrepareOptions(src=src, tgt=tgt, vocab_size=8000)))
    run = RunDir(out / f"run-{src}-{tgt}")
    cfg = resolve(yaml_path="multi30k-de-en-short", sets=[f"max_steps={updates}", "train.precision=fp32",
                                                          "max_minutes=600"])
    configure(cfg.train.threads)
    trainer = Trainer(prepared.path, run.path, cfg)
    trainer.train()
    translator = Translator.load(run.path, "torch")
    s = evaluate(translator, prepared.raw_lines("test", "src"), prepared.raw_lines("test", "tgt"),
                 run.hypotheses("test_2016_flickr"), lang=tgt)
    return {"direction": f"{src}-{tgt}", "recipe": "multi30k-de-en-short", "vocab_size": 8000, "steps":
            trainer.state.step, "bleu": s["bleu"], "bleu_lc": s["bleu_lc"], "chrf": s["chrf"], "signature":
            s["signature"], "sentences": s["sentences"], "train_minutes": round(trainer.state.seconds / 60, 1),
            "minutes": round((time.perf_counter() - t0) / 60, 1), "run_dir": str(run.path)}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--directions", default=",".join(f"{a}-{b}" for a in LANGS for b in LANGS if a != b),
                   help="SRC-TGT,... (default: all twelve)")
    p.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "multi30k")
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "bilingual")
    p.add_argument("--updates", type=int, default=UPDATES)
    a = p.parse_args(argv)
    for pair in a.directions.split(","):
        src, _, tgt = pair.partition("-")
        record.COMMAND[:] = ["python", "-m", "benchmarks", "bilingual", "--directions", pair, "--data", str(a.data),
                             "--updates", str(a.updates)]
        result = direction(a.data, a.out, src, tgt, a.updates)
        print(json.dumps(result, indent=2), flush=True)
        print(f"recorded in {record.write('bilingual', result, name=f'bilingual-{pair}')}", flush=True)


if __name__ == "__main__":
    main()
