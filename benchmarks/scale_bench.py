"""Corpora larger than memory: `aiayn prepare` and the first minutes of training on a synthetic corpus of
Multi30k pairs recombined (two random pairs joined: new sentence pairs, twice as long), at several sizes.

    python -m benchmarks scale                      # 290,000 and 5,000,000 pairs
    python -m benchmarks scale --pairs 290000 --train-minutes 1

For each size: prepare's time, peak RSS and disk size (one process each, shards of 1M pairs), then training's
peak RSS over its first minutes (small model, max_tokens 4096). Prints a Markdown table; records it as
results/scale/scale-<date>.json (the record before this format: results/scale/scale.json).
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).parent
BUNDLED = HERE.parent / "aiayn" / "bundled" / "multi30k"


def build(out: Path, pairs: int, seed: int = 1) -> None:
    de = gzip.open(BUNDLED / "train.de.gz", "rt", encoding="utf-8").read().splitlines()
    en = gzip.open(BUNDLED / "train.en.gz", "rt", encoding="utf-8").read().splitlines()
    rng = random.Random(seed)
    n = len(de)
    with open(out / "train.de", "w", encoding="utf-8") as fs, open(out / "train.en", "w", encoding="utf-8") as ft:
        for _ in range(pairs):
            a, b = rng.randrange(n), rng.randrange(n)
            fs.write(f"{de[a]} {de[b]}\n")
            ft.write(f"{en[a]} {en[b]}\n")


def _prepare_child(prefix: str, out: str) -> None:
    from aiayn.data.datadir import find_source
    from aiayn.data.prepare import PrepareOptions, prepare

    t0 = time.perf_counter()
    sources = {"train": find_source(prefix, "de", "en"), "valid": find_source(BUNDLED / "val", "de", "en")}
    prepare(sources, out, PrepareOptions(src="de", tgt="en", vocab_size=8000, shard_size=1_000_000), force=True)
    print(json.dumps({"seconds": time.perf_counter() - t0,
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def _du(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20


def measure(pairs: int, minutes: float, work: Path) -> dict:
    corpus = work / f"corpus-{pairs}"
    corpus.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    build(corpus, pairs)
    built = time.perf_counter() - t0
    data = work / f"data-{pairs}"
    res = subprocess.run([sys.executable, __file__, "--child", str(corpus / "train"), str(data)], capture_output=True,
                         text=True, check=True)
    prep = json.loads(res.stdout.strip().splitlines()[-1])
    run = work / f"run-{pairs}"
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "aiayn", "train", "--data", str(data), "--out", str(run), "--preset", "small",
                    "--set", f"max_minutes={minutes}", "max_tokens=4096", "valid_every_steps=1000000",
                    "valid_each_epoch=false", "save_every_steps=1000000", "log_every_steps=10", "tensorboard=false",
                    "train.precision=fp32"], capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t0
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "peak_rss_mb" in r]
    return {"pairs": pairs, "corpus_mb": round(_du(corpus), 1), "build_s": round(built, 1),
            "prepare_s": round(prep["seconds"], 1), "prepare_peak_rss_mb": round(prep["peak_rss_mb"]),
            "data_dir_mb": round(_du(data), 1), "train_minutes": minutes, "train_wall_s": round(wall, 1),
            "train_steps": steps[-1]["step"] if steps else 0,
            "train_peak_rss_mb": round(max(r["peak_rss_mb"] for r in steps)) if steps else None}


def main(argv: list[str] | None = None) -> None:
    import record

    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 3 and argv[0] == "--child":
        _prepare_child(argv[1], argv[2])
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, nargs="+", default=[290_000, 5_000_000])
    ap.add_argument("--train-minutes", type=float, default=2.0)
    ap.add_argument("--work", type=Path, help="where corpora and data dirs go (default: a temporary directory)")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        work = a.work or Path(tmp)
        rows = [measure(n, a.train_minutes, work) for n in a.pairs]
    print("| pairs | corpus MB | prepare s | prepare peak RSS MB | data dir MB | training peak RSS MB "
          f"(first {a.train_minutes:g} min) | steps |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['pairs']:,} | {r['corpus_mb']} | {r['prepare_s']} | {r['prepare_peak_rss_mb']} | "
              f"{r['data_dir_mb']} | {r['train_peak_rss_mb']} | {r['train_steps']} |")
    out = record.write("scale", {"train_minutes": a.train_minutes, "rows": rows})
    print(f"recorded in {out}")


if __name__ == "__main__":
    main()
