"""How to build the shortlist, chosen on the VALIDATION set: co-occurrence (Dice) against eflomal's alignments, at
several k:

    python -m benchmarks shortlist-methods --model runs/demo/run-de-en --data runs/demo/data [--k 20 50] [--beams 1 4]

For each method and k, builds the shortlist of --model from --data's training pairs (not saved in the run), then
translates the validation split (int8, one worker) with and without it, greedy and beam 4. Records the build time,
how well it covers the validation references, the lines identical to the full-vocabulary search, BLEU and time, as
``results/shortlist-methods/shortlist-methods-<date>.json``, and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import record  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, type=Path)
    ap.add_argument("--data", required=True, type=Path)
    ap.add_argument("--k", type=int, nargs="+", default=[20, 50])
    ap.add_argument("--frequent", type=int, default=100)
    ap.add_argument("--beams", type=int, nargs="+", default=[1, 4])
    a = ap.parse_args(argv)
    import torch

    from aiayn import Translator
    from aiayn.data.datadir import DataDir
    from aiayn.decoding.lexicon import build
    from aiayn.training.evaluate import score

    torch.set_num_threads(1)
    d = DataDir(a.data)
    src, ref = d.raw_lines("valid", "src"), d.raw_lines("valid", "tgt")
    t = Translator.load(a.model, "torch", precision="int8", workers=1, device="cpu")
    lang = d.tgt
    lists = {(m, k): build(d.path, t.engine.model.cfg, k=k, frequent=a.frequent, method=m) for m in ("cooc", "eflomal")
             for k in a.k}
    rows = []
    for beam in a.beams:
        t0 = time.perf_counter()
        full = t.translate(src, beam=beam)
        base = {"seconds": round(time.perf_counter() - t0, 2), "bleu": score(full, ref, lang)["bleu"]}
        rows.append({"method": "none", "k": 0, "beam": beam, **base, "identical": len(src)})
        for (method, k), sl in lists.items():
            t.engine.shortlist = sl
            t0 = time.perf_counter()
            out = t.translate(src, beam=beam, shortlist=True)
            same = sum(x == y for x, y in zip(out, full, strict=True))
            rows.append({"method": method, "k": k, "beam": beam, "seconds": round(time.perf_counter() - t0, 2),
                         "bleu": score(out, ref, lang)["bleu"], "identical": same,
                         "build_seconds": sl.meta["seconds"], "coverage": sl.meta["valid"]})
            print(rows[-1], flush=True)
    print("\n| method | k | search | build s | ref tokens covered | candidates/sentence | identical | BLEU | s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        c, search = r.get("coverage") or {}, "greedy" if r["beam"] == 1 else f"beam {r['beam']}"
        print(f"| {r['method']} | {r['k'] or '-'} | {search} "
              f"| {r.get('build_seconds', '-')} | {c.get('tokens', '-')} | {c.get('candidates_per_sentence', '-')} "
              f"| {r['identical']}/{len(src)} | {r['bleu']:.2f} | {r['seconds']} |")
    path = record.write("shortlist-methods", {"model": str(a.model), "data": str(a.data), "lines": len(src),
                                              "frequent": a.frequent, "rows": rows})
    print(f"recorded in {path}")


if __name__ == "__main__":
    main()
