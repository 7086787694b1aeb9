"""Recipe trials at a fixed number of updates, scored on the VALIDATION set only (never on a test set):

    python -m benchmarks recipe-sweep --data runs/demo/data --steps 1130 \\
        --trial short-warmup train.warmup=300 train.lr_factor=1.095 train.cooldown=0.5 train.average_last=4
    python -m benchmarks recipe-sweep --data runs/demo/data --baseline runs/demo/run-de-en

Each trial trains ``--config`` (default multi30k-de-en) with its ``--set`` overrides for exactly ``--steps``
updates (no time limit, so a slow or busy machine changes the minutes, not the result) into
``runs/sweep/<name>``, then decodes the validation split with the run's decoding settings from the averaged
checkpoints and from the last one. ``--baseline RUN`` scores an existing run the same way (e.g. the
``make demo`` run, whose step count is the one its 15 minutes bought). Every trial appends one JSON object to
``benchmarks/results/recipe-sweep/recipe-sweep-<date>.jsonl``: overrides, steps, epochs, minutes, median target tokens/s,
the greedy validation BLEU logged during training, and the final validation BLEU / lowercased BLEU / chrF.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))
import record  # noqa: E402
import torch  # noqa: E402

AIAYN = [sys.executable, "-m", "aiayn"]


def score(model: Path, data: Path, src: str, tgt: str, device: str) -> dict[str, float]:
    """Validation BLEU of ``model`` (a run dir or one of its checkpoint dirs) with the run's decoding settings (fp32)."""
    out = subprocess.run([*AIAYN, "evaluate", "--model", str(model), "--src", str(data / f"valid.{src}"),
                          "--ref", str(data / f"valid.{tgt}"), "--json", "--device", device, "--precision", "fp32"],
                         check=True, capture_output=True, text=True)
    s = json.loads(out.stdout)
    return {k: s[k] for k in ("bleu", "bleu_lc", "chrf")}


def windows(run: Path, data: Path, sizes: list[int], device: str) -> dict[int, dict[str, float]]:
    """Validation scores of the average of the last n step checkpoints, for each n (written to run/avg-n)."""
    sys.path.insert(0, str(ROOT))
    from aiayn.rundir import RunDir

    manifest = json.loads((data / "manifest.json").read_text())
    out = {}
    for n in sizes:
        chosen = RunDir(run).average_last(n, out=run / f"avg-{n}")
        out[n] = {"from_step": RunDir.step_of(chosen[0]), **score(run / f"avg-{n}", data, manifest["src"], manifest["tgt"],
                                                                     device)}
    return out


def describe(run: Path, data: Path, device: str) -> dict[str, object]:
    """What a finished run reached, from its metrics log, and its validation scores."""
    manifest = json.loads((data / "manifest.json").read_text())
    src, tgt = manifest["src"], manifest["tgt"]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    train = [r for r in rows if "loss" in r and "tgt_tokens_per_s" in r]
    valid = [r for r in rows if "valid_bleu" in r]
    state = json.loads((run / "last" / "trainer.json").read_text())
    per_epoch = train[-1]["step"] / train[-1]["epoch"]                  # batches per epoch, from the last log line
    return {
        "steps": state["step"], "epochs": round(state["step"] / per_epoch, 2), "minutes": round(state["seconds"] / 60, 1),
        "median_tgt_tokens_per_s": round(statistics.median(r["tgt_tokens_per_s"] for r in train)),
        "greedy_valid_bleu": {r["step"]: r["valid_bleu"] for r in valid},
        "valid_loss": {r["step"]: round(r["valid_loss"], 4) for r in valid},
        "averaged": score(run, data, src, tgt, device) if (run / "averaged").exists() else None,
        "last": score(run / "last", data, src, tgt, device),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, type=Path, help="a data dir written by `aiayn prepare`")
    ap.add_argument("--config", default="multi30k-de-en")
    ap.add_argument("--steps", type=int, default=1130, help="updates per trial (default %(default)s)")
    ap.add_argument("--trial", nargs="+", action="append", default=[], metavar=("NAME", "KEY=VALUE"),
                    help="a trial: its name, then --set overrides (repeatable)")
    ap.add_argument("--baseline", type=Path, help="score this finished run the same way instead of training")
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "sweep")
    ap.add_argument("--windows", type=int, nargs="*", default=[],
                    help="also score the average of the last n checkpoints for each n (checkpoints every "
                    "save_every_steps; the run keeps keep_last of them)")
    ap.add_argument("--device", default="auto",
                    help="train and decode here (fp32 throughout, so that a GPU's trials stand for a CPU's at the "
                    "same number of updates)")
    ap.add_argument("--record", type=Path, help="the JSON-lines file to append to (default: "
                    "benchmarks/results/recipe-sweep/recipe-sweep-<date>.jsonl)")
    a = ap.parse_args(argv)
    kept = a.record or record.RESULTS / "recipe-sweep" / f"recipe-sweep-{time.strftime('%Y%m%d')}.jsonl"
    todo: list[tuple[str, list[str], Path]] = [(a.baseline.name, [], a.baseline)] if a.baseline else []
    todo += [(t[0], t[1:], a.out / f"{t[0]}-{a.steps}") for t in a.trial]
    for name, sets, run in todo:
        if run != a.baseline:
            cmd = [*AIAYN, "train", "--data", str(a.data), "--out", str(run), "--config", a.config,
                   "--max-steps", str(a.steps), "--set", "max_minutes=0", f"train.device={a.device}",
                   "train.precision=fp32", *sets]
            print(" ".join(cmd), flush=True)
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)       # its errors still show
        result = {"name": name, "config": a.config, "sets": sets, "baseline": run == a.baseline, "device": a.device,
                  "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
                  **describe(run, a.data, a.device), "windows": windows(run, a.data, a.windows, a.device)}
        record.append("recipe-sweep", result, kept)
        avg = result["averaged"] or {}
        print(f"{name}: {result['steps']} steps, {result['epochs']:.2f} epochs, {result['minutes']} min; valid "
              f"averaged BLEU {avg.get('bleu')} (lc {avg.get('bleu_lc')}), last {result['last']['bleu']}; "
              f"greedy during training {result['greedy_valid_bleu']}; windows "
              + ", ".join(f"last {n} (from step {w['from_step']}): {w['bleu']}" for n, w in result["windows"].items()),
              flush=True)
    print(f"recorded in {kept}")


if __name__ == "__main__":
    main()
