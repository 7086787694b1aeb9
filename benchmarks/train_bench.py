"""One training-throughput measurement, in its own process (so peak memory is its own):

    python benchmarks/train_bench.py --impl aiayn --size small --precision bf16 [--steps 20]

Prints one JSON object: target tokens/s over ``--steps`` full training steps (forward, label-smoothed loss,
backward, Adam) after 3 warm-up steps, achieved GFLOP/s, peak RSS, padding fraction.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
from peers import BUILDERS, SIZES, make_batches, padding_fraction, train_flops  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--impl", required=True, choices=list(BUILDERS))
    ap.add_argument("--size", default="small", choices=list(SIZES))
    ap.add_argument("--precision", default="bf16", choices=["fp32", "bf16"])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--max-tokens", type=int, default=4096)
    a = ap.parse_args()
    torch.manual_seed(0)
    d, n, h, f, v = SIZES[a.size]
    batches = make_batches(v, a.steps + 3, a.max_tokens)
    step, model = BUILDERS[a.impl](a.size, a.precision)
    for b in batches[:3]:
        step(b)
    timed = batches[3:]
    t0 = time.perf_counter()
    loss = 0.0
    for b in timed:
        loss = step(b)
    seconds = time.perf_counter() - t0
    tokens = sum(b.n_tgt for b in timed)
    flops = train_flops(timed, d, n, f, v)
    print(json.dumps({
        "impl": a.impl, "size": a.size, "precision": a.precision, "tgt_tokens_per_s": tokens / seconds,
        "gflops": flops / seconds / 1e9, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "padding": padding_fraction(timed), "steps": len(timed), "seconds": seconds, "last_loss": loss,
        "params": sum(p.numel() for p in model.parameters()), "threads": torch.get_num_threads(),
    }))


if __name__ == "__main__":
    main()
