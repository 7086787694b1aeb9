"""One model for many directions of Multi30k's four languages (de, en, fr, cs), held against one bilingual model
per direction (benchmarks/bilingual.py): the same recipe (``multi30k-de-en-short``, so the same model size), a joint
8,000-piece vocabulary (now with the four language tags), fp32, and as many updates as the bilingual models of its
directions together (1,200 each: 14,400 for all twelve). Then test_2016_flickr of every direction (the zero-shot ones
too) translated with the averaged weights and scored with sacreBLEU, and with ``--pivot en`` each direction without
English also translated through English by the same model.

    python -m benchmarks multilingual [--directions all|en] [--updates-per-direction 1200] [--out runs/multilingual]
    python -m benchmarks multilingual --tag-position target --updates-per-direction 300
    python -m benchmarks multilingual --directions en --pivot en --off-target

``--tag-position target`` trains the same model with the tag first in the target (the decoder's first token) and
records its validation BLEU per direction (greedy, 100 lines a direction) beside the source-tag run's at the same
update (read from that run's metrics.jsonl: the same lines, the same seed, the same rate schedule), since only
validation decodes such a run yet.

``--off-target`` scores a measured run's zero-shot translations against the pivot language's reference as well
as their own (what a model writes when it ignores the tag), in seconds, from the translations it wrote.

Training resumes where it stopped (run it again: the data is reused, the run goes on from its last checkpoint), so
a budget longer than one sitting is spent over several. Recorded in
benchmarks/results/multilingual/multilingual-<directions>-<date>.json: each direction's BLEU, its lowercased form,
chrF, whether it was trained or is zero-shot, and the training's updates and minutes.
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


def train(data: Path, out: Path, directions: str, per_direction: int,
          position: str = "source") -> tuple[Path, dict[str, object]]:
    from aiayn.data.datadir import DataDir
    from aiayn.data.multilingual import parse_directions, prepare_multilingual
    from aiayn.data.prepare import PrepareOptions
    from aiayn.runtime import configure
    from aiayn.training.recipes import resolve
    from aiayn.training.train import Trainer

    chosen = parse_directions(directions, LANGS)
    splits = {"train": data / "train", "valid": data / "val", "test": data / "test_2016_flickr"}
    name = directions if position == "source" else f"{directions}-{position}"
    prepared = DataDir(prepare_multilingual(splits, LANGS, chosen, out / f"data-{name}",
                                            PrepareOptions(src="src", tgt="tgt", vocab_size=8000), position=position))
    updates = per_direction * len(chosen)
    cfg = resolve(yaml_path="multi30k-de-en-short", sets=[
        f"max_steps={updates}", "train.precision=fp32", "max_minutes=100000",
        # one validation of 1,200 lines (100 a direction) every 1,200 updates: the twelve directions' 12,168
        # validation lines at every 500 would take longer than the training between them
        "valid_every_steps=1200", "valid_max_sentences=1200"])
    configure(cfg.train.threads)
    run = out / f"run-{name}"
    trainer = Trainer(prepared.path, run, cfg)
    trainer.train()
    return run, {"steps": trainer.state.step, "train_minutes": round(trainer.state.seconds / 60, 1),
                 "directions_trained": [f"{a}-{b}" for a, b in chosen], "updates_per_direction": per_direction}


def test(run: Path, data: Path, pivot: str | None) -> dict[str, dict[str, object]]:
    """Each direction's test_2016_flickr scores (and, with ``pivot``, through it for the directions without it)."""
    from aiayn.data.datadir import read_lines
    from aiayn.data.multilingual import for_direction
    from aiayn.engines.auto import load
    from aiayn.rundir import RunDir
    from aiayn.training.evaluate import evaluate
    from aiayn.translation.route import Route
    from aiayn.translator import Translator

    engine = load(run, "torch")
    multi = engine.multilingual
    out: dict[str, dict[str, object]] = {}
    try:
        for a in LANGS:
            for b in LANGS:
                if a == b:
                    continue
                src = list(read_lines(data / f"test_2016_flickr.{a}.gz"))
                ref = list(read_lines(data / f"test_2016_flickr.{b}.gz"))
                ways = {"direct": for_direction(engine, a, b)}
                if pivot and pivot not in (a, b):
                    ways["pivot"] = Translator(Route((for_direction(engine, a, pivot), for_direction(engine, pivot, b))))
                for way, translator in ways.items():
                    s = evaluate(translator, src, ref, RunDir(run).hypotheses(f"test_2016_flickr.{a}-{b}.{way}"),
                                 lang=b)
                    out.setdefault(f"{a}-{b}", {"trained": multi.trained(a, b)})[way] = {
                        k: s[k] for k in ("bleu", "bleu_lc", "chrf")}
                    print(f"{a}-{b} {way}: BLEU {s['bleu']}", flush=True)
    finally:
        engine.close()
    return out


def off_target(run: Path, data: Path, pivot: str) -> dict[str, dict[str, object]]:
    """Each zero-shot direction's test translations (written by :func:`test`) scored against the ``pivot``
    language's reference as well as its own: a model that ignores the tag of a pair it never saw writes the language
    it was trained to write from that source (Zhang et al., 2020: off-target translation)."""
    import sacrebleu

    from aiayn.config import Multilingual
    from aiayn.data.datadir import read_lines
    from aiayn.rundir import RunDir

    multi = RunDir(run).multilingual()
    assert isinstance(multi, Multilingual)
    out: dict[str, dict[str, object]] = {}
    for a in LANGS:
        for b in LANGS:
            if a == b or pivot in (a, b) or multi.trained(a, b):
                continue
            hyps = RunDir(run).hypotheses(f"test_2016_flickr.{a}-{b}.direct").read_text(encoding="utf-8").splitlines()
            refs = {lang: list(read_lines(data / f"test_2016_flickr.{lang}.gz")) for lang in (b, pivot)}
            out[f"{a}-{b}"] = {f"bleu_against_{lang}": round(sacrebleu.corpus_bleu(hyps, [r]).score, 2)
                               for lang, r in refs.items()}
            print(f"{a}-{b}: {out[f'{a}-{b}']}", flush=True)
    return out


def validation_at(run: Path, step: int) -> dict[str, float]:
    """A run's validation BLEU per direction (and their mean) at update ``step``, from its metrics.jsonl."""
    for line in (run / "metrics.jsonl").read_text().splitlines():
        m = json.loads(line)
        if m.get("step") == step and "valid_bleu" in m:
            return {k[len("valid_bleu_"):] if k != "valid_bleu" else "mean": v for k, v in m.items()
                    if k.startswith("valid_bleu") and k not in ("valid_bleu_lc", "valid_bleu_sentences")}
    raise SystemExit(f"{run} has no validation at update {step}: train it that far first")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--directions", default="all", help="all (twelve) or en (to and from English: six)")
    p.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "multi30k")
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "multilingual")
    p.add_argument("--updates-per-direction", type=int, default=1200)
    p.add_argument("--pivot", help="also translate each direction without this language through it")
    p.add_argument("--tag-position", choices=("source", "target"), default="source")
    p.add_argument("--off-target", action="store_true", help="only score the zero-shot directions' test translations "
                   "of a run already measured against the --pivot language's reference as well as their own")
    a = p.parse_args(argv)
    if a.off_target:
        if not a.pivot:
            raise SystemExit("--off-target needs --pivot (the language the zero-shot translations may be written in)")
        record.COMMAND[:] = ["python", "-m", "benchmarks", "multilingual", "--directions", a.directions, "--pivot",
                             a.pivot, "--off-target"]
        result = {"run_dir": str(a.out / f"run-{a.directions}"), "pivot": a.pivot,
                  "test_2016_flickr": off_target(a.out / f"run-{a.directions}", a.data, a.pivot)}
        print(f"recorded in {record.write('multilingual', result, name=f'off-target-{a.directions}')}", flush=True)
        return
    record.COMMAND[:] = ["python", "-m", "benchmarks", "multilingual", "--directions", a.directions,
                         "--updates-per-direction", str(a.updates_per_direction),
                         *(["--pivot", a.pivot] if a.pivot else []), "--tag-position", a.tag_position]
    t0 = time.perf_counter()
    run, trained = train(a.data, a.out, a.directions, a.updates_per_direction, a.tag_position)
    budget = a.updates_per_direction * len(trained["directions_trained"])  # type: ignore[arg-type]
    if int(trained["steps"]) < budget:                                      # type: ignore[call-overload]
        print(f"training stopped at update {trained['steps']} of {budget}: run the same command again to go on "
              "(nothing recorded)", flush=True)
        return
    if a.tag_position == "target":
        step = int(trained["steps"])                                        # type: ignore[call-overload]
        result = {"recipe": "multi30k-de-en-short", "vocab_size": 8000, **trained, "valid_greedy_bleu": {
            "target": validation_at(run, step), "source": validation_at(a.out / f"run-{a.directions}", step)},
            "minutes": round((time.perf_counter() - t0) / 60, 1), "run_dir": str(run)}
        name = f"tag-position-{a.directions}"
    else:
        result = {"recipe": "multi30k-de-en-short", "vocab_size": 8000, "tag": "source", **trained,
                  "test_2016_flickr": test(run, a.data, a.pivot), "minutes": round((time.perf_counter() - t0) / 60, 1),
                  "run_dir": str(run)}
        name = f"multilingual-{a.directions}"
    print(json.dumps(result, indent=2), flush=True)
    print(f"recorded in {record.write('multilingual', result, name=name)}", flush=True)


if __name__ == "__main__":
    main()
