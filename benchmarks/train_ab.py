"""Training speed of the working tree against an earlier revision, through the real ``aiayn train``:

    python -m benchmarks train-ab --base f06e6aa [--preset small --steps 40 --rounds 3]

Each revision's package is extracted (as in decode_ab.py) and its ``aiayn train`` runs in a process of its
own on the same prepared Multi30k data dir, the two alternating, ``--rounds`` times each (validation and
checkpoints pushed past the end, so only training steps are timed). Prints target tokens/s for both (the
median of each run's logged intervals after the first, the best run of each revision), their ratio, and
whether the two ended with bit-identical weights (same seed, same batches: they should); records it as
``results/train-ab/train-ab-<date>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(__file__))
import record  # noqa: E402
from decode_ab import import_revision  # noqa: E402

RUNNER = "import sys; sys.path.insert(0, {path!r}); from {pkg}.cli import main; sys.exit(main(sys.argv[1:]))"


def train_once(pkg: str, path: str, data: Path, out: Path, a: argparse.Namespace) -> float:
    cmd = [sys.executable, "-c", RUNNER.format(path=path, pkg=pkg), "train", "--data", str(data), "--out", str(out),
           "--preset", a.preset, "--max-steps", str(a.steps), "--set", "valid_every_steps=1000000",
           "save_every_steps=1000000", "valid_each_epoch=false", "log_every_steps=5", "tensorboard=false",
           f"max_tokens={a.max_tokens}", f"train.precision={a.precision}", "average_last=0"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return statistics.median([r["tgt_tokens_per_s"] for r in records if "loss" in r][1:])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="git revision to compare against")
    ap.add_argument("--preset", default="small", choices=["tiny", "small", "base"])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=4096)
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--data", type=Path, help="a prepared data dir (default: Multi30k de-en, prepared here)")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        pkgs = {"base": (import_revision(a.base, tmp), tmp), "working tree": ("aiayn", os.getcwd())}
        data = a.data or Path(tmp) / "data"
        if a.data is None:
            subprocess.run([sys.executable, "-m", "aiayn", "prepare", "--corpus", "multi30k", "--out", str(data)],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        rates: dict[str, list[float]] = {label: [] for label in pkgs}
        for r in range(a.rounds):
            for label in (list(pkgs) if r % 2 == 0 else list(reversed(pkgs))):
                pkg, path = pkgs[label]
                out = Path(tmp) / f"run-{label.replace(' ', '-')}-{r}"
                rates[label].append(train_once(pkg, path, data, out, a))
                print(f"round {r + 1} {label}: {rates[label][-1]:.0f} tgt tok/s", flush=True)
        from safetensors.torch import load_file

        runs = [load_file(str(Path(tmp) / f"run-{label.replace(' ', '-')}-0" / "last" / "model.safetensors"))
                for label in pkgs]
        same = runs[0].keys() == runs[1].keys() and all(bool((runs[0][k] == runs[1][k]).all()) for k in runs[0])
    best = {label: max(v) for label, v in rates.items()}
    print(f"{a.preset}, {a.precision}, {a.steps} steps of {a.max_tokens} tokens, best of {a.rounds}: base ({a.base}) "
          f"{best['base']:.0f} tgt tok/s, working tree {best['working tree']:.0f} tgt tok/s, ratio "
          f"{best['working tree'] / best['base']:.3f}; identical final weights: {'yes' if same else 'no'}")
    out = record.write("train-ab", {"base": a.base, "preset": a.preset, "precision": a.precision, "steps": a.steps,
                                     "max_tokens": a.max_tokens, "rounds": a.rounds, "tgt_tokens_per_s": rates,
                                     "best": best, "ratio": best["working tree"] / best["base"],
                                     "identical_weights": same})
    print(f"recorded in {out}")


if __name__ == "__main__":
    main()
