"""A pair translated through a pivot language against a direct model of the same size and budget.

    python -m benchmarks pivot --chain runs/demo-1200/run-de-en runs/pivot/run-en-fr \\
        --direct runs/pivot/run-de-fr --src test_2016_flickr.de --ref test_2016_flickr.fr [--engine torch]

The chain is each model in turn (route.Route: what ``aiayn translate --model A --model B`` and a server's pivot
do); the direct model translates the pair itself. Both are scored on the same lines with sacreBLEU (BLEU, lowercased
BLEU, chrF) and timed. Records ``results/pivot/pivot-<date>.json``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import record  # noqa: E402


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks pivot", description=__doc__.split("\n\n")[0])
    ap.add_argument("--chain", nargs="+", required=True, help="the run dirs translated through, in order")
    ap.add_argument("--direct", required=True, help="a run dir translating the pair itself")
    ap.add_argument("--src", required=True)
    ap.add_argument("--ref", required=True)
    ap.add_argument("--engine", default="torch", choices=["torch", "ctranslate2", "auto"])
    a = ap.parse_args(argv)
    from aiayn import Translator
    from aiayn.data.datadir import read_lines
    from aiayn.rundir import RunDir
    from aiayn.training.evaluate import evaluate
    from aiayn.translation.route import Route

    src, ref = list(read_lines(Path(a.src))), list(read_lines(Path(a.ref)))
    lang = RunDir.locate(a.direct)[0].target_language()
    rows: dict[str, Any] = {}
    for name, translator in (("direct", Translator.load(a.direct, a.engine)),
                             ("pivot", Translator(Route(tuple(Translator.load(m, a.engine).engine for m in a.chain))))):
        r = evaluate(translator, src, ref, lang=lang)
        rows[name] = {k: r[k] for k in ("bleu", "bleu_lc", "chrf", "seconds", "sentences_per_s", "signature")}
        print(f"{name:7} BLEU {r['bleu']:6.2f}  lowercased {r['bleu_lc']:6.2f}  chrF {r['chrf']:6.2f}  "
              f"{r['sentences_per_s']:7.1f} sentences/s")
    runs = {"chain": a.chain, "direct": a.direct}
    steps = {m: RunDir.locate(m)[0].config().train.max_steps for m in [*a.chain, a.direct]}
    path = record.write("pivot", {"runs": runs, "max_steps": steps, "engine": a.engine, "src": a.src, "ref": a.ref,
                                  "lines": len(src), **rows})
    print(f"recorded {path}")
