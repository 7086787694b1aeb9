"""``make bench`` (``python -m benchmarks throughput``): training and translation throughput of aiayn against its
peers, one table.

Every row runs in its own process (so its peak memory is its own), on the same batches, in the same run.
Results: a table on stdout, the record in benchmarks/results/throughput/throughput-<date>.json (and latest.json), a
plot beside it when matplotlib is installed. bf16 rows run only where ``precision=auto`` picks bf16 (native
bf16 that a probe measures faster than fp32); every row runs on the CPU.

    python -m benchmarks throughput                 # everything (about 30 minutes on 2 cores)
    python -m benchmarks throughput --only train --sizes small
    python -m benchmarks throughput --only train --rounds 2   # each row measured twice, interleaved; the best kept
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, os.path.dirname(__file__))
import record  # noqa: E402

HERE = Path(__file__).parent
RESULTS = record.RESULTS
TRAIN_IMPLS = ["aiayn", "OpenNMT-py", "torch.nn.Transformer", "HF MarianMTModel", "Annotated Transformer (seeds)"]
TRANSLATE = [  # (engine, precisions); the no-cache row runs in the fastest precision this CPU has
    ("aiayn", ["fp32", "bf16", "int8"]),
    ("aiayn (no cache)", ["bf16", "fp32"]),
    ("HF generate", ["fp32", "bf16"]),
    ("CTranslate2", ["float32", "int8", "int8_float32"]),
]


def matmul_rate(m: int, k: int, n: int, dtype: torch.dtype, reps: int = 10) -> float:
    """Best GFLOP/s of an (m x k) @ (k x n) matmul in this process (3 untimed runs first)."""
    a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
    best = 0.0
    for _ in range(3):
        a @ b
    for _ in range(reps):
        t = time.perf_counter()
        a @ b
        best = max(best, 2 * m * k * n / (time.perf_counter() - t) / 1e9)
    return best


def matmul_peak(dtype: torch.dtype, n: int = 2048, reps: int = 10) -> float:
    """Best GFLOP/s of an (n x n) @ (n x n) matmul in this process."""
    return matmul_rate(n, n, n, dtype, reps)


@functools.cache
def precisions_here() -> list[str]:
    """Every row runs on the CPU: bf16 only where it multiplies in bf16 natively and faster than in fp32 (what
    ``precision=auto`` picks); elsewhere (e.g. AVX2 only) PyTorch emulates it ~100x slower than fp32, and a bf16 row
    would take hours and say nothing."""
    from aiayn.precision import resolve as resolve_precision

    return ["bf16", "fp32"] if resolve_precision("auto", torch.device("cpu")) == "bf16" else ["fp32"]


def run_row(script: str, args: list[str], timeout: int = 1800, env: dict[str, str] | None = None) -> dict:
    cmd = [sys.executable, str(HERE / script), *args]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=HERE,
                         env={**os.environ, **env} if env else None)
    lines = [line for line in res.stdout.splitlines() if line.startswith("{")]
    if res.returncode != 0 or not lines:
        return {"error": (res.stderr or res.stdout)[-400:].strip(), "args": args}
    return json.loads(lines[-1])


def best_of(rounds: list[list[dict]], speed: str) -> list[dict]:
    """Row i of the result is the fastest of row i over the rounds; ``all`` keeps every figure.

    A shared VM's speed drifts by 10-20% over minutes: measuring every row more than once, interleaved, and
    keeping each one's best compares the implementations at their best rather than at their luck."""
    best = []
    for same in zip(*rounds, strict=True):
        ok = [r for r in same if "error" not in r]
        row = dict(max(ok, key=lambda r: r[speed]) if ok else same[-1])
        if len(same) > 1:
            row["all"] = [round(r[speed], 1) for r in ok]
        best.append(row)
    return best


def train_rows(sizes: list[str], steps: dict[str, int], rounds: int = 1) -> list[dict]:
    measured: list[list[dict]] = []
    for _ in range(rounds):
        rows = []
        for size in sizes:
            for precision in precisions_here():
                for impl in TRAIN_IMPLS:
                    r = run_row("train_bench.py", ["--impl", impl, "--size", size, "--precision", precision,
                                                   "--steps", str(steps[size])])
                    r.update(impl=impl, size=size, precision=precision)
                    rows.append(r)
                    print(_train_line(r, {}), flush=True)
        measured.append(rows)
    return best_of(measured, "tgt_tokens_per_s")


def translate_rows(sizes: list[str], rounds: int = 1, workers: tuple[int, ...] = (1, 2),
                   engines: list[str] | None = None) -> list[dict]:
    measured: list[list[dict]] = []
    for _ in range(rounds):
        rows = []
        for size in sizes:
            for beam in (1, 4):
                for w in workers:
                    for engine, precisions in TRANSLATE:
                        if engines and engine not in engines:
                            continue
                        if engine == "aiayn (no cache)" and w > 1:
                            continue                       # the cache's effect is shown at one worker
                        for precision in _translate_precisions(engine, precisions):
                            r = run_row("translate_bench.py", ["--engine", engine, "--size", size, "--precision",
                                                               precision, "--beam", str(beam), "--workers", str(w)],
                                        env={"AIAYN_BENCH_PASSES": "1"} if engine == "aiayn (no cache)" else None)
                            r.update(engine=engine, size=size, precision=precision, beam=beam, workers=w)
                            rows.append(r)
                            print(_translate_line(r), flush=True)
        measured.append(rows)
    return best_of(measured, "sentences_per_s")


def _translate_precisions(engine: str, precisions: list[str]) -> list[str]:
    here = [p for p in precisions if p != "bf16" or "bf16" in precisions_here()]
    return here[:1] if engine == "aiayn (no cache)" else here


def _train_line(r: dict, peaks: dict[str, float]) -> str:
    if "error" in r:
        return f"| {r['size']} | {r['precision']} | {r['impl']} | failed: {r['error'][-120:]} |"
    pct = f"{100 * r['gflops'] / peaks[r['precision']]:.0f}%" if peaks.get(r["precision"]) else ""
    return (f"| {r['size']} | {r['precision']} | {r['impl']} | {r['tgt_tokens_per_s']:,.0f} | {r.get('ratio', '')} | "
            f"{r['gflops']:.0f} | {pct} | {r['peak_rss_mb']:,.0f} | {100 * r['padding']:.1f}% |")


def _translate_line(r: dict) -> str:
    if "error" in r:
        return (f"| {r['size']} | beam {r['beam']} | {r.get('workers', 1)} | {r['engine']} {r['precision']} | "
                f"failed: {r['error'][-120:]} |")
    return (f"| {r['size']} | {r['beam']} | {r.get('workers', 1)} | {r['engine']} | {r['precision']} | "
            f"{r['sentences_per_s']:,.0f} | {r['tgt_tokens_per_s']:,.0f} | {r.get('ratio', '')} |")


def add_ratios(train: list[dict], translate: list[dict]) -> None:
    """Training: aiayn / the fastest peer in the same size and precision. Translation: / the fastest other engine."""
    for r in train:
        peers = [p["tgt_tokens_per_s"] for p in train if "error" not in p and p["impl"] != "aiayn"
                 and p["size"] == r["size"] and p["precision"] == r["precision"]]
        if r["impl"] == "aiayn" and "error" not in r and peers:
            r["ratio"] = f"{r['tgt_tokens_per_s'] / max(peers):.2f}x best peer"
    for r in translate:
        if r["engine"] != "aiayn" or "error" in r:
            continue
        # against the other engines at their best, whatever their number of workers; HF and the uncached
        # search also at the same number of workers and precision
        same = [p for p in translate if "error" not in p and p["size"] == r["size"] and p["beam"] == r["beam"]]
        others = [p["sentences_per_s"] for p in same if not p["engine"].startswith("aiayn")]
        hf = [p["sentences_per_s"] for p in same if p["engine"] == "HF generate" and p["precision"] == r["precision"]
              and p.get("workers", 1) == r.get("workers", 1)]
        nocache = [p["sentences_per_s"] for p in same if p["engine"] == "aiayn (no cache)"
                   and p["precision"] == r["precision"] and p.get("workers", 1) == r.get("workers", 1)]
        ct2 = [p["sentences_per_s"] for p in same if p["engine"] == "CTranslate2" and p["precision"].startswith("int8")]
        parts = [f"{r['sentences_per_s'] / max(others):.2f}x best other"] if others else []
        parts += [f"{r['sentences_per_s'] / max(ct2):.2f}x CT2 best int8"] if ct2 and r["precision"] == "int8" else []
        parts += [f"{r['sentences_per_s'] / hf[0]:.2f}x HF {r['precision']}"] if hf else []
        parts += [f"{r['sentences_per_s'] / nocache[0]:.2f}x no cache"] if nocache else []
        r["ratio"] = ", ".join(parts)


def print_tables(result: dict) -> None:
    peaks = result["matmul_peak_gflops"]
    print("\nmatmul peak in this run: " + ", ".join(f"{k} {v:.0f} GFLOP/s" for k, v in peaks.items())
          + f"; {record.describe(result['machine'])}")
    if result["train"]:
        rounds = result.get("train_rounds", result.get("rounds", 1))
        print("\nTraining (full steps: forward, label-smoothed loss, backward, Adam; ~4,096-token batches)"
              + (f"; each row the best of {rounds} interleaved rounds" if rounds > 1 else "")
              + (f"; rows from the run of {result['train_from']}" if result.get("train_from") else ""))
        print("| size | precision | implementation | target tok/s | vs peers | GFLOP/s | % of peak | peak RSS MB "
              "| padding |")
        print("|---|---|---|---:|---|---:|---:|---:|---:|")
        for r in result["train"]:
            print(_train_line(r, result.get("train_matmul_peak_gflops", peaks)))
        print("GFLOP/s = 3 x forward matmul FLOPs on the padded batch (see peers.train_flops) / time.")
    if result["translate"]:
        rounds = result.get("translate_rounds", result.get("rounds", 1))
        print("\nTranslation (500 sentences of 13 +- 5 tokens, batches of 32, outputs forced to 20 tokens; "
              "workers: batches decoded at once, each on its own thread with its share of the cores; "
              "each figure the fastest of 2 passes over all batches, 1 for the uncached rows)"
              + (f"; each row the best of {rounds} interleaved rounds" if rounds > 1 else "")
              + (f"; rows from the run of {result['translate_from']}" if result.get("translate_from") else ""))
        print("| size | beam | workers | engine | precision | sentences/s | target tok/s | vs others |")
        print("|---|---:|---:|---|---|---:|---:|---|")
        for r in result["translate"]:
            print(_translate_line(r))


def plot(result: dict, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    rows = [r for r in result["train"] if "error" not in r]
    sizes = sorted({r["size"] for r in rows}, key=["small", "base"].index)
    fig, axes = plt.subplots(1, max(1, len(sizes)), figsize=(6 * max(1, len(sizes)), 4), squeeze=False)
    for ax, size in zip(axes[0], sizes, strict=False):
        impls = [i for i in TRAIN_IMPLS if any(r["impl"] == i and r["size"] == size for r in rows)]
        for k, precision in enumerate(p for p in ("bf16", "fp32") if any(r["precision"] == p for r in rows)):
            vals = [next((r["tgt_tokens_per_s"] for r in rows if r["impl"] == i and r["size"] == size
                          and r["precision"] == precision), 0) for i in impls]
            ax.barh([j + 0.4 * k for j in range(len(impls))], vals, height=0.4, label=precision)
        ax.set_yticks([j + 0.2 for j in range(len(impls))], [i.replace(" (seeds)", "\n(seeds)") for i in impls])
        ax.set_xlabel("target tokens / s (training)")
        ax.set_title(f"{size} model, {record.describe(result['machine'])}", fontsize=9)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=["train", "translate"])
    ap.add_argument("--sizes", nargs="*", default=["small", "base"])
    ap.add_argument("--steps-small", type=int, default=20)
    ap.add_argument("--steps-base", type=int, default=8)
    ap.add_argument("--engines", nargs="*", choices=[e for e, _ in TRANSLATE],
                    help="translation: only these engines (the run is then recorded, but latest.json kept)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="measure every row this many times, interleaved, and keep each row's fastest")
    a = ap.parse_args(argv)
    torch.set_num_threads(len(os.sched_getaffinity(0)))
    result = {
        "matmul_peak_gflops": {p: matmul_peak(torch.bfloat16 if p == "bf16" else torch.float32)
                               for p in precisions_here()},
        "rounds": a.rounds, "train": [], "translate": [],
    }
    if a.only in (None, "train"):
        result["train"] = train_rows(a.sizes, {"small": a.steps_small, "base": a.steps_base}, a.rounds)
    if a.only in (None, "translate"):
        result["translate"] = translate_rows(a.sizes, a.rounds, engines=a.engines)
    add_ratios(result["train"], result["translate"])
    latest = RESULTS / "throughput" / "latest.json"
    previous = json.loads(latest.read_text()) if latest.exists() else {}
    if a.only and previous.get("machine") == record.machine():
        # a partial run keeps the other half of the last table from the same machine, labelled
        other = "translate" if a.only == "train" else "train"
        result[other] = previous.get(other, [])
        result[f"{other}_from"] = previous.get(f"{other}_from", previous.get("date"))
        result[f"{other}_rounds"] = previous.get(f"{other}_rounds", previous.get("rounds", 1))
        if other == "train":
            result["train_matmul_peak_gflops"] = previous.get("train_matmul_peak_gflops",
                                                              previous["matmul_peak_gflops"])
    out = record.write("throughput", result)
    result = json.loads(out.read_text())
    if not a.engines:
        latest.write_text(out.read_text())
    print_tables(result)
    plot(result, out.with_suffix(".png"))
    print(f"\nrecorded in {out}")


if __name__ == "__main__":
    main()
