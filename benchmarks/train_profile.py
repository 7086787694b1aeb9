"""Where a training step's time goes, and how close it runs to this CPU's matrix-multiply rate, in one process:

    python benchmarks/train_profile.py --size small --precision fp32 [--steps 8]

The same steps as ``train_bench.py --impl aiayn`` (peers.build_aiayn: SequenceLoss + the fused Adam step on
identical token-bucketed batches). Prints: target tokens/s and GFLOP/s over ``--steps`` timed steps; this
process's fp32 (or bf16) matmul rate, best of 5, at 2048^3 and at the step's own largest shapes (tokens x
d_model x d_ff, tokens x d_model x vocab); the step's rate as a share of each; and ``torch.profiler``'s self CPU
time per kind of op (matrix products, softmax, LayerNorm, dropout, elementwise, loss, optimizer, copies, other)
over separate profiled steps. Writes the same to ``benchmarks/results/train-profile-<size>-<precision>-<date>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict

import torch

sys.path.insert(0, os.path.dirname(__file__))
from peers import SIZES, build_aiayn, make_batches, train_flops  # noqa: E402
from run import machine, matmul_rate  # noqa: E402

KINDS = [  # (kind, substrings of aten op names), first match wins
    ("matrix products", ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear",
                         "_scaled_dot_product", "aten::_flash_attention")),
    ("softmax", ("softmax",)),
    ("LayerNorm", ("layer_norm",)),
    ("dropout (random bits, masks)", ("random_", "aten::ge", "bernoulli", "dropout")),
    ("loss (exp, log, reductions)", ("aten::exp", "aten::log", "logsumexp", "aten::amax", "aten::sum", "aten::clamp",
                                     "aten::gather", "aten::scatter")),
    ("optimizer", ("_fused_adam", "adam", "aten::_foreach")),
    ("copies and layout", ("aten::copy_", "aten::clone", "aten::contiguous", "aten::cat", "aten::index",
                           "aten::_to_copy", "aten::transpose", "aten::permute", "aten::view", "aten::reshape",
                           "aten::unbind", "aten::select", "aten::slice", "aten::expand", "aten::embedding")),
    ("elementwise", ("aten::add", "aten::mul", "aten::addcmul", "aten::where", "aten::relu", "aten::threshold",
                     "aten::sub", "aten::div", "aten::masked_fill", "aten::fill_", "aten::zero_", "aten::neg")),
]


def kind_of(name: str) -> str:
    return next((k for k, keys in KINDS if any(s in name for s in keys)), "other")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="small", choices=list(SIZES))
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=4096)
    a = ap.parse_args()
    torch.manual_seed(0)
    d, n, h, f, v = SIZES[a.size]
    batches = make_batches(v, 3 + 2 * a.steps, a.max_tokens)
    step, _ = build_aiayn(a.size, a.precision)
    for b in batches[:3]:
        step(b)
    timed, profiled = batches[3:3 + a.steps], batches[3 + a.steps:]
    t0 = time.perf_counter()
    for b in timed:
        step(b)
    seconds = time.perf_counter() - t0
    gflops = train_flops(timed, d, n, f, v) / seconds / 1e9
    tokens = sum(b.n_tgt for b in timed) / seconds
    dtype = torch.bfloat16 if a.precision == "bf16" else torch.float32
    rows = max(b.tgt_in.numel() for b in timed)
    peaks = {"2048^3": matmul_rate(2048, 2048, 2048, dtype), f"{rows}x{d}x{f}": matmul_rate(rows, d, f, dtype),
             f"{rows}x{d}x{v}": matmul_rate(rows, d, v, dtype)}
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for b in profiled:
            step(b)
    by_kind: dict[str, float] = defaultdict(float)
    by_op: dict[str, float] = defaultdict(float)
    for e in prof.key_averages():
        by_kind[kind_of(e.key)] += e.self_cpu_time_total
        by_op[e.key] += e.self_cpu_time_total
    total = sum(by_kind.values())
    shares = {k: round(100 * t / total, 1) for k, t in sorted(by_kind.items(), key=lambda x: -x[1])}
    top = {k: round(100 * t / total, 1) for k, t in sorted(by_op.items(), key=lambda x: -x[1])[:20]}
    print(f"aiayn {a.size} {a.precision}: {tokens:,.0f} target tokens/s, {gflops:.1f} GFLOP/s "
          f"({torch.get_num_threads()} threads)")
    for name, rate in peaks.items():
        print(f"  matmul {name}: {rate:.1f} GFLOP/s -> the step runs at {100 * gflops / rate:.0f}% of it")
    print("\n| kind of op | share of self CPU time |\n|---|---:|")
    for k, s in shares.items():
        print(f"| {k} | {s}% |")
    print("\ntop ops:", ", ".join(f"{k} {s}%" for k, s in top.items()))
    out = os.path.join(os.path.dirname(__file__), "results",
                       f"train-profile-{a.size}-{a.precision}-{time.strftime('%Y%m%d-%H%M')}.json")
    with open(out, "w") as fh:
        json.dump({"size": a.size, "precision": a.precision, "tgt_tokens_per_s": tokens, "gflops": gflops,
                   "matmul_gflops": peaks, "share_of_peak": {k: gflops / r for k, r in peaks.items()},
                   "kinds": shares, "top_ops": top, "threads": torch.get_num_threads(), "machine": machine()}, fh,
                  indent=2)
    print(out)


if __name__ == "__main__":
    main()
