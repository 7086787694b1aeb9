"""Degenerate output on a test set (aiayn/translation/pipeline.py): how many sentences are flagged, by kind, and BLEU
with and without decoding them again.

    python -m benchmarks repair --model runs/demo-1200/run-de-en --src test.de --ref test.en [--engine torch]
        [--beam 1 4]

For each beam, the test set is translated twice (``repair: false``, the default, then ``repair: true``) and scored;
the flagged and repaired counts come from ``evaluate``'s ``repair`` field. Records ``results/repair/repair-<date>.json``.
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
    ap = argparse.ArgumentParser(prog="python -m benchmarks repair", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--src", required=True)
    ap.add_argument("--ref", required=True)
    ap.add_argument("--engine", default="torch", choices=["torch", "ctranslate2", "auto"])
    ap.add_argument("--beam", type=int, nargs="+", default=[1, 4])
    a = ap.parse_args(argv)
    from aiayn import Translator
    from aiayn.data.datadir import read_lines
    from aiayn.rundir import RunDir
    from aiayn.training.evaluate import evaluate

    src, ref = list(read_lines(Path(a.src))), list(read_lines(Path(a.ref)))
    engine = Translator.load(a.model, a.engine)
    lang = RunDir.locate(a.model)[0].target_language()
    rows: dict[str, Any] = {"norms": engine.engine.norms.to_dict()}
    for beam in a.beam:
        off = evaluate(engine, src, ref, lang=lang, beam=beam, repair=False)
        on = evaluate(engine, src, ref, lang=lang, beam=beam, repair=True)
        changed = sum(x != y for x, y in zip(engine.translate(src, beam=beam, repair=False),
                                            engine.translate(src, beam=beam, repair=True), strict=True))
        rows[f"beam{beam}"] = {"bleu_off": off["bleu"], "bleu_lc_off": off["bleu_lc"], "bleu_on": on["bleu"],
                               "bleu_lc_on": on["bleu_lc"], "repair": on["repair"], "lines_changed": changed,
                               "seconds_off": off["seconds"], "seconds_on": on["seconds"]}
        flagged = {k: v["flagged"] for k, v in on["repair"].items() if v["flagged"]}
        print(f"beam {beam}: BLEU {off['bleu']:.2f} -> {on['bleu']:.2f} (lowercased {off['bleu_lc']:.2f} -> "
              f"{on['bleu_lc']:.2f}); flagged {flagged or 'none'}; {changed} lines changed")
    path = record.write("repair", {"model": a.model, "engine": engine.engine, "src": a.src, "ref": a.ref,
                                   "lines": len(src), **rows})
    print(f"recorded {path}")
