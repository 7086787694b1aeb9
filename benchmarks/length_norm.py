"""Beam search's length normalisation and its alpha, chosen on a validation set (never on a test set):

    python -m benchmarks length-norm --model runs/demo/run-de-en --src runs/demo/data/valid.de \\
        --ref runs/demo/data/valid.en [--alphas 0.6 1.0 1.5 2.0] [--beam 5]

Translates --src with every ``decode.length_norm`` (gnmt: ((5 + |Y|) / 6) ** alpha, the paper's; length:
|Y| ** alpha, that of CTranslate2 and transformers) at every alpha, fp32, and scores each against --ref with the
run's sacreBLEU settings. Prints a Markdown table (BLEU, lowercased BLEU, mean output length) and records the
rows as ``results/length-norm/length-norm-<date>.json`` (record.py).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--src", required=True)
    ap.add_argument("--ref", required=True)
    ap.add_argument("--alphas", type=float, nargs="+", default=[0.6, 1.0, 1.5, 2.0])
    ap.add_argument("--beam", type=int, default=0, help="beam size (0 = the run's decode.beam)")
    a = ap.parse_args(argv)
    from aiayn import Translator, configure
    from aiayn.rundir import RunDir
    from aiayn.training.evaluate import score

    configure()
    sys.path.insert(0, str(HERE))
    import record

    src = Path(a.src).read_text(encoding="utf-8").splitlines()
    ref = Path(a.ref).read_text(encoding="utf-8").splitlines()
    if len(src) != len(ref):
        sys.exit(f"length_norm.py: {a.src} has {len(src)} lines but {a.ref} has {len(ref)}")
    t = Translator.load(a.model, "torch", device="cpu", precision="fp32")
    lang = RunDir.locate(a.model)[0].target_language()
    beam = a.beam or t.engine.decode.beam
    rows = []
    print(f"| length_norm | alpha | BLEU | BLEU lc | mean length | identical to length/alpha={a.alphas[-1]:g} |")
    print("|---|---|---|---|---|---|")
    outputs = {}
    for norm in ("gnmt", "length"):
        for alpha in a.alphas:
            t0 = time.perf_counter()
            hyps = t.translate(src, beam=beam, lenpen=alpha, length_norm=norm)
            outputs[norm, alpha] = hyps
            s = score(hyps, ref, lang)
            rows.append({"length_norm": norm, "alpha": alpha, "beam": beam, "bleu": s["bleu"], "bleu_lc": s["bleu_lc"],
                         "mean_words": round(sum(len(h.split()) for h in hyps) / len(hyps), 2),
                         "seconds": round(time.perf_counter() - t0, 1)})
    last = outputs["length", a.alphas[-1]]
    for r in rows:
        same = sum(x == y for x, y in zip(outputs[r["length_norm"], r["alpha"]], last, strict=True))
        print(f"| {r['length_norm']} | {r['alpha']:g} | {r['bleu']:.2f} | {r['bleu_lc']:.2f} | {r['mean_words']:.2f} "
              f"| {same}/{len(src)} |")
    best = max(rows, key=lambda r: r["bleu"])
    print(f"\nbest on {a.src}: length_norm={best['length_norm']} alpha={best['alpha']:g} (BLEU {best['bleu']:.2f})")
    out = record.write("length-norm", {"model": a.model, "src": a.src, "ref": a.ref, "rows": rows, "best": best})
    print(f"recorded in {out}")


if __name__ == "__main__":
    main()
