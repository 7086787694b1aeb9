"""Where the server's decoding time goes, without HTTP: one thread replays a stream of requests in one process.

    python benchmarks/serve_replay.py --model runs/demo/run-de-en --src runs/demo/data/test.de [--requests 200]

The requests of ``serve_bench.py`` (1-5 consecutive lines, seeded) decoded several ways on one thread, the
same beam and length penalty, each the fastest of --rounds interleaved rounds:

- ``translate``: :meth:`Translator.translate` over all lines (sorted by length, token-budget batches: the CLI);
- ``static N``: batches of N lines in arrival order, each decoded to its end before the next (per-request
  batching with N lines in flight: what any scheme that does not reorder the stream can reach at best);
- ``stream N``: ``search.BeamSearch`` as ``aiayn serve`` runs it, requests joining between steps while fewer
  than N lines are in flight.

Prints sentences/s and the share of ``translate``; records them with the machine in
``benchmarks/results/serve-replay-YYYYMMDD-HHMM.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--src", required=True)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--in-flight", type=int, nargs="+", default=[48, 96])
    ap.add_argument("--beam", type=int, default=4)
    ap.add_argument("--lenpen", type=float, default=0.6)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    import torch

    from aiayn import Translator
    from aiayn.search import BeamSearch, beam_search
    from aiayn.translate import source_batch, source_ids

    sys.path.insert(0, str(HERE))
    from run import machine
    from serve_bench import draw_requests

    torch.set_num_threads(1)
    t = Translator.load(a.model, device="cpu", precision="fp32", workers=1)
    m = t.model
    requests = draw_requests(Path(a.src), a.requests)
    lines = [line for r in requests for line in r]

    def batch(texts: list[str]) -> torch.Tensor:
        return source_batch(m, [source_ids(m, ids) for ids in t.vocab.src.encode(texts)], t.device)

    def static(size: int) -> None:
        with torch.inference_mode():
            for j in range(0, len(lines), size):
                beam_search(m, batch(lines[j : j + size]), beam=a.beam, lenpen=a.lenpen)

    def stream(size: int) -> None:
        search, queue, in_flight = BeamSearch(m, beam=a.beam, lenpen=a.lenpen), list(requests), 0
        with torch.inference_mode():
            while queue or search.active:
                texts: list[str] = []
                keys: list[tuple[int, int]] = []
                while queue and in_flight + len(queue[0]) <= size:
                    r = queue.pop(0)
                    keys += [(id(r), j) for j in range(len(r))]
                    texts += r
                    in_flight += len(r)
                if texts:
                    search.admit(batch(texts), keys)
                in_flight -= len(search.step())

    ways = {"translate": lambda: t.translate(lines, beam=a.beam, lenpen=a.lenpen)}
    for n in a.in_flight:
        ways[f"static {n}"] = lambda n=n: static(n)
        ways[f"stream {n}"] = lambda n=n: stream(n)
    best: dict[str, float] = {}
    for _ in range(a.rounds):
        for name, fn in ways.items():
            t0 = time.perf_counter()
            fn()
            best[name] = max(best.get(name, 0.0), len(lines) / (time.perf_counter() - t0))
    rows = [{"way": k, "sentences_per_s": round(v, 1), "share_of_translate": round(v / best["translate"], 3)}
            for k, v in best.items()]
    print(f"{len(lines)} lines in {len(requests)} requests, beam {a.beam}, lenpen {a.lenpen}, one thread")
    print("| way | sentences/s | share of translate |\n|---|---:|---:|")
    for r in rows:
        print(f"| {r['way']} | {r['sentences_per_s']:.1f} | {100 * r['share_of_translate']:.0f}% |")
    out = HERE / "results" / time.strftime("serve-replay-%Y%m%d-%H%M.json")
    out.write_text(json.dumps({"machine": machine(), "model": a.model, "src": a.src, "lines": len(lines),
                               "requests": len(requests), "beam": a.beam, "lenpen": a.lenpen, "rows": rows},
                              indent=2) + "\n")
    print(f"recorded in {out}")


if __name__ == "__main__":
    main()
