"""Decoding speed of a trained model on real sentences, with and without the incremental cache:

    python benchmarks/decode_bench.py --model runs/m30k-de-en --src data/m30k/test.de [--ref data/m30k/test.en]

For fp32 and bf16, greedy and beam 4: sentences/s on the whole file through :class:`aiayn.translate.Translator`
(batching by tokens, sorted by length), and the same decoding where every step recomputes the decoder over the
whole prefix (``Uncached``). Both must produce identical translations; the ratio is the cache's speed-up.
Prints a table and one JSON object per row.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from translate_bench import Uncached  # noqa: E402


def main() -> None:
    from aiayn.translate import Translator

    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--src", required=True)
    ap.add_argument("--ref", help="also report sacreBLEU of each setting")
    ap.add_argument("--precisions", nargs="*", default=["fp32", "bf16"])
    ap.add_argument("--beams", nargs="*", type=int, default=[1, 4])
    ap.add_argument("--lenpen", type=float, default=0.6)
    ap.add_argument("--no-uncached", action="store_true", help="skip the (slow) recomputing runs")
    a = ap.parse_args()
    lines = open(a.src, encoding="utf-8").read().splitlines()
    refs = open(a.ref, encoding="utf-8").read().splitlines() if a.ref else None
    rows = []
    for precision in a.precisions:
        translator = Translator.load(a.model, device="cpu", precision=precision)
        cached_model = translator.model
        for beam in a.beams:
            outs = {}
            for mode in ("cache", "no cache") if not a.no_uncached else ("cache",):
                translator.model = cached_model if mode == "cache" else Uncached(cached_model)  # type: ignore[assignment]
                translator.translate(lines[:32], beam=beam, lenpen=a.lenpen)          # warm-up
                t0 = time.perf_counter()
                outs[mode] = translator.translate(lines, beam=beam, lenpen=a.lenpen)
                seconds = time.perf_counter() - t0
                row = {"precision": precision, "beam": beam, "mode": mode, "sentences": len(lines),
                       "seconds": round(seconds, 2), "sentences_per_s": round(len(lines) / seconds, 1)}
                if refs is not None:
                    import sacrebleu

                    row["bleu"] = round(sacrebleu.corpus_bleu(outs[mode], [refs]).score, 2)
                rows.append(row)
                print(json.dumps(row), flush=True)
            if "no cache" in outs:
                same = sum(x == y for x, y in zip(outs["cache"], outs["no cache"], strict=True))
                rows[-2]["speedup_vs_no_cache"] = round(rows[-1]["seconds"] / rows[-2]["seconds"], 2)
                rows[-2]["identical_outputs"] = f"{same}/{len(lines)}"
    print("\n| precision | beam | decoding | sentences/s | seconds | BLEU | cache speed-up | identical outputs |")
    print("|---|---:|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['precision']} | {r['beam']} | {r['mode']} | {r['sentences_per_s']} | {r['seconds']} | "
              f"{r.get('bleu', '')} | {r.get('speedup_vs_no_cache', '')} | {r.get('identical_outputs', '')} |")


if __name__ == "__main__":
    main()
