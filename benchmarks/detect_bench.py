"""Language detection on short texts, as ``aiayn serve`` answers ``/detect`` and ``source: auto``: the first two and
three words of test_2016_flickr's lines in German, English, French and Czech (Multi30k, 1,000 each), each detected
among every language py3langid knows, by the detector alone and with the languages a German-English server serves
(de, en) put first where the detector is unsure (serving/api.py, Detector.UNSURE, and other ratios).

    python -m benchmarks detect [--data ../shared/data/multi30k]

Records benchmarks/results/detect/detect-<date>.json: per words, per ratio, the per cent of lines found in their
language.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))
import record  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "multi30k")
    a = p.parse_args(argv)
    record.COMMAND[:] = ["python", "-m", "benchmarks", "detect", "--data", str(a.data)]
    from aiayn.serving.api import Detector

    detector, served = Detector(), ["de", "en"]
    lines = {lang: gzip.open(a.data / f"test_2016_flickr.{lang}.gz", "rt", encoding="utf-8").read().splitlines()
             for lang in ("de", "en", "fr", "cs")}
    report: dict[str, object] = {"served": served, "chosen_ratio": Detector.UNSURE, "lines_per_language": 1000}
    for words in (2, 3):
        table: dict[str, dict[str, float]] = {}
        for ratio in (None, 0.1, 0.3, 0.5):
            if ratio is not None:
                detector.UNSURE = ratio
            found = {}
            for lang, texts in lines.items():
                short = [" ".join(t.split()[:words]).rstrip(".,") + "." for t in texts]
                hits = sum(detector.rank(t, best=1, preferred=served if ratio is not None else None)[0]["language"]
                           == lang for t in short)
                found[lang] = round(100 * hits / len(short), 1)         # (per cent)
            table["detector alone" if ratio is None else f"served first at {ratio:g}"] = found
        report[f"{words} words"] = table
    print(json.dumps(report, indent=2))
    print(f"recorded in {record.write('detect', report)}")


if __name__ == "__main__":
    main()
