"""The same requests through aiayn's own engine and CTranslate2, through the one request pipeline
(aiayn/translation/pipeline.py): how many lines come out identical — text, word alignments, HTML with inline tags —
and the time each takes.

    python -m benchmarks engines --model runs/demo/run-de-en --src runs/demo/data/test.de [--lines 1000]

Both engines decode the model's fp32 weights with its own settings (CTranslate2: its conversion, cached in the run
dir). Word alignments on CTranslate2 come from the attention it returns (``return_attention``, the layer and heads
align.method reads); HTML places its tags by them. The tagged lines are markup_bench's (1-3 inline tags per line, a
fixed seed). ``--engine auto`` stands on these figures: records ``results/engines/engines-<date>.json``.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import record  # noqa: E402
from markup_bench import tag_line  # noqa: E402


def _timed(run: Any) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = run()
    return out, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> None:
    from aiayn import Translator
    from aiayn.translation.pipeline import Request, translate

    p = argparse.ArgumentParser(prog="python -m benchmarks engines", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, type=Path)
    p.add_argument("--src", required=True, type=Path)
    p.add_argument("--lines", type=int, default=1000)
    a = p.parse_args(argv)
    lines = [x for x in a.src.read_text(encoding="utf-8").splitlines() if x.strip()][: a.lines]
    rng = random.Random(1)
    html = [tag_line(x, rng)[0] for x in lines]
    engines = {name: Translator.load(a.model, name, device="cpu", precision="fp32") for name in ("torch", "ctranslate2")}
    out: dict[str, dict[str, Any]] = {}
    for name, e in engines.items():
        aligned, s1 = _timed(lambda e=e: translate(e.engine, Request(lines, alignments=True)).translations)
        tagged, s2 = _timed(lambda e=e: translate(e.engine, Request(html, format="html")).translations)
        out[name] = {"text": [t[0].text for t in aligned], "alignments": [t[0].alignment for t in aligned],
                     "html": [t[0].text for t in tagged], "seconds_aligned": round(s1, 2), "seconds_html": round(s2, 2)}
    figures: dict[str, Any] = {"lines": len(lines), "model": str(a.model), "src": str(a.src)}
    print(f"{len(lines)} lines of {a.src}, fp32, each engine's settings as loaded")
    for what in ("text", "alignments", "html"):
        same = sum(x == y for x, y in zip(out["torch"][what], out["ctranslate2"][what], strict=True))
        both = sum(x == y for x, y, tx, ty in zip(out["torch"][what], out["ctranslate2"][what], out["torch"]["text"],
                                                  out["ctranslate2"]["text"], strict=True) if tx == ty)
        figures[f"identical_{what}"] = same
        figures[f"identical_{what}_share"] = round(same / len(lines), 4)
        print(f"  {what:10s} identical on {same}/{len(lines)} lines ({100 * same / len(lines):.1f}%)"
              + ("" if what == "text" else f"; {both} of the lines whose text is identical"))
        if what != "text":
            figures[f"identical_{what}_where_text_is"] = both
    for name in engines:
        figures[f"{name}_seconds_aligned"] = out[name]["seconds_aligned"]
        figures[f"{name}_seconds_html"] = out[name]["seconds_html"]
        print(f"  {name:11s} text + alignments {out[name]['seconds_aligned']:.1f} s, html {out[name]['seconds_html']:.1f} s")
    print(f"recorded in {record.write('engines', figures)}")
