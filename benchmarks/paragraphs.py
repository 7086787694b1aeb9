"""Paragraphs through the model: consecutive test sentences joined into one input, translated with and without
sentence splitting (aiayn/sentences.py), scored against the references joined alike.

    python -m benchmarks paragraphs --model runs/demo/run-de-en --src runs/demo/data/test.de \\
        --ref runs/demo/data/test.en [--per 1 2 3 5] [--engine torch]

For each ``--per`` k, every k consecutive lines become one input (joined with a space), and so do their references.
Three translations of them are scored (lowercased BLEU and the output's length over the reference's, sacreBLEU):
each sentence on its own then joined (what a paragraph should come to), each input whole as one sentence
(``sentences: false``: aiayn before it split them), and each input split into its sentences (the default). k = 1 is
the test set as it is: splitting a one-sentence line must not move its BLEU. Records ``results/paragraphs-<date>.json``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import record  # noqa: E402


def joined(lines: list[str], per: int) -> list[str]:
    return [" ".join(lines[i:i + per]) for i in range(0, len(lines) - per + 1, per)]


def score(hyps: list[str], refs: list[str]) -> dict[str, float]:
    import sacrebleu

    b = sacrebleu.corpus_bleu(hyps, [refs], lowercase=True)
    return {"bleu_lc": round(b.score, 2), "length_ratio": round(b.sys_len / max(b.ref_len, 1), 3)}


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks paragraphs", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--src", required=True)
    ap.add_argument("--ref", required=True)
    ap.add_argument("--per", type=int, nargs="+", default=[1, 2, 3, 5])
    ap.add_argument("--engine", default="torch", choices=["torch", "ctranslate2", "auto"])
    a = ap.parse_args(argv)
    from aiayn.interop.ct2 import load

    src = Path(a.src).read_text(encoding="utf-8").splitlines()
    ref = Path(a.ref).read_text(encoding="utf-8").splitlines()
    engine = load(a.model, a.engine)
    alone = engine.translate(src, sentences=False)
    rows: dict[str, Any] = {}
    for per in a.per:
        inputs, refs = joined(src, per), joined(ref, per)
        start = time.perf_counter()
        split = engine.translate(inputs)
        seconds = time.perf_counter() - start
        rows[str(per)] = {"inputs": len(inputs),
                          "one_by_one": score(joined(alone, per), refs),
                          "whole": score(engine.translate(inputs, sentences=False), refs),
                          "split": score(split, refs), "split_seconds": round(seconds, 2)}
        r = rows[str(per)]
        print(f"{per} per input: one by one {r['one_by_one']['bleu_lc']:6.2f}   whole {r['whole']['bleu_lc']:6.2f} "
              f"(x{r['whole']['length_ratio']:.2f})   split {r['split']['bleu_lc']:6.2f} "
              f"(x{r['split']['length_ratio']:.2f})")
    path = record.write("paragraphs", {"model": a.model, "engine": engine.engine, "src": a.src, "ref": a.ref,
                                       "lines": len(src), "per": rows})
    print(f"recorded {path}")
