"""One training-throughput measurement, in its own process (so peak memory is its own), or a profile of aiayn's:

    python -m benchmarks train --impl aiayn --size small --precision bf16 [--steps 20]
    python -m benchmarks train --profile --size small --precision fp32 [--steps 8]

Prints one JSON object (a row of ``python -m benchmarks throughput``): target tokens/s over ``--steps`` full training
steps (forward, label-smoothed loss, backward, Adam) after 3 warm-up steps, achieved GFLOP/s, peak RSS, padding
fraction.

``--profile``: where aiayn's step (peers.build_aiayn: SequenceLoss + the fused Adam step, on the same batches) spends
its time: its GFLOP/s against this process's fp32 (or bf16) matmul rate, best of 5, at 2048^3 and at the step's own
largest shapes (tokens x d_model x d_ff, tokens x d_model x vocab), and ``torch.profiler``'s self CPU time per kind of
op (matrix products, softmax, LayerNorm, dropout, elementwise, loss, optimizer, copies, other) over as many separate
profiled steps. Prints a table; records it as ``results/train-profile/train-profile-<date>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from collections import defaultdict
from typing import Any

import torch

sys.path.insert(0, os.path.dirname(__file__))
import record  # noqa: E402
from peers import BUILDERS, SIZES, make_batches, padding_fraction, train_flops  # noqa: E402

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



def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--impl", default="aiayn", choices=list(BUILDERS))
    ap.add_argument("--size", default="small", choices=list(SIZES))
    ap.add_argument("--precision", default="bf16", choices=["fp32", "bf16"])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--max-tokens", type=int, default=4096)
    ap.add_argument("--profile", action="store_true", help="profile aiayn's step (--impl aiayn) and record it")
    a = ap.parse_args(argv)
    torch.manual_seed(0)
    d, n, h, f, v = SIZES[a.size]
    batches = make_batches(v, 3 + a.steps * (2 if a.profile else 1), a.max_tokens)
    step, model = BUILDERS[a.impl](a.size, a.precision)
    for b in batches[:3]:
        step(b)
    timed = batches[3 : 3 + a.steps]
    t0 = time.perf_counter()
    loss = 0.0
    for b in timed:
        loss = step(b)
    seconds = time.perf_counter() - t0
    row = {"impl": a.impl, "size": a.size, "precision": a.precision, "tgt_tokens_per_s": sum(b.n_tgt for b in timed) /
           seconds, "gflops": train_flops(timed, d, n, f, v) / seconds / 1e9,
           "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "padding": padding_fraction(timed),
           "steps": len(timed), "seconds": seconds, "last_loss": loss, "params": sum(p.numel() for p in model.parameters()),
           "threads": torch.get_num_threads()}
    if not a.profile:
        print(json.dumps(row))
        return
    profile(step, timed, batches[3 + a.steps :], row, a)


def profile(step: Any, timed: list[Any], profiled: list[Any], row: dict[str, Any], a: argparse.Namespace) -> None:
    """The step's rate against this process's matmul rates, and its self CPU time by kind of op; recorded."""
    from run import matmul_rate

    d, n, h, f, v = SIZES[a.size]
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
    gflops = row["gflops"]
    print(f"aiayn {a.size} {a.precision}: {row['tgt_tokens_per_s']:,.0f} target tokens/s, {gflops:.1f} GFLOP/s "
          f"({row['threads']} threads)")
    for name, rate in peaks.items():
        print(f"  matmul {name}: {rate:.1f} GFLOP/s -> the step runs at {100 * gflops / rate:.0f}% of it")
    print("\n| kind of op | share of self CPU time |\n|---|---:|")
    for k, s in shares.items():
        print(f"| {k} | {s}% |")
    print("\ntop ops:", ", ".join(f"{k} {s}%" for k, s in top.items()))
    out = record.write("train-profile", {"size": a.size, "precision": a.precision,
                                          "tgt_tokens_per_s": row["tgt_tokens_per_s"], "gflops": gflops,
                                          "matmul_gflops": peaks, "share_of_peak": {k: gflops / r for k, r in peaks.items()},
                                          "kinds": shares, "top_ops": top, "threads": row["threads"]})
    print(f"recorded in {out}")


if __name__ == "__main__":
    main()
