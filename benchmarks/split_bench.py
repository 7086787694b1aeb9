"""Sentence splitters compared on held-out text: which one aiayn splits paragraphs with (aiayn/translation/spans.py).

    python -m benchmarks split --ud de=PATH/de_gsd-ud-test.conllu --ud zh=PATH/zh_gsd-ud-test.conllu \\
        --ud fr=PATH/fr_gsd-ud-test.conllu --ud en=PATH/en_ewt-ud-test.conllu [--per 5]

The held-out text is Universal Dependencies' test treebanks (their ``# text =`` lines: one sentence each, written
by people, never seen by the splitters' rules): every ``--per`` consecutive sentences are joined into one paragraph,
with a space (none in Chinese and Japanese, as written), and each splitter is asked where the sentences end. Reports,
per language and splitter, the boundaries inside paragraphs found (precision, recall, F1; a paragraph's own end is
not counted) and the speed in characters per second (the best of three passes). The candidates are the maintained
splitters that work offline with what they install: sentencex (Wikimedia, rules for ~250 languages), pysbd (rules,
22 languages) and blingfire (Microsoft, a finite-state model in its wheel), against a baseline that ends a
sentence at every ``. ! ?`` followed by a space (and every ``。！？``), and aiayn's own (sentencex with the one rule
aiayn/translation/spans.py adds). pysbd and blingfire are measured when installed (``pip install pysbd blingfire``; pysbd
installs a top-level package named ``benchmarks`` that hides this one: run ``python benchmarks/__main__.py split``
then). Records ``results/split/split-<date>.json``.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import record  # noqa: E402

UNSPACED = {"zh", "ja"}


def sentences(conllu: Path) -> list[str]:
    return [line[len("# text = "):].strip() for line in conllu.read_text(encoding="utf-8").splitlines()
            if line.startswith("# text = ")]


def paragraphs(sents: list[str], per: int, lang: str) -> list[tuple[str, set[int]]]:
    """Each paragraph and the character offsets where its sentences end (its own end left out)."""
    glue = "" if lang in UNSPACED else " "
    out = []
    for i in range(0, len(sents) - per + 1, per):
        text, ends = "", set()
        for s in sents[i:i + per]:
            text = text + glue + s if text else s
            ends.add(len(text))
        out.append((text, ends - {len(text)}))
    return out


def found_ends(text: str, pieces: list[str]) -> set[int]:
    """Where a splitter's pieces end in ``text`` (pieces may have lost or kept the whitespace around them)."""
    ends, pos = set(), 0
    for piece in pieces:
        piece = piece.strip()
        if not piece:
            continue
        at = text.find(piece, pos)
        if at < 0:                                  # a splitter that rewrote the text: it cannot be placed
            return ends
        pos = at + len(piece)
        ends.add(pos)
    return ends - {len(text.rstrip())}


def baseline(lang: str) -> Callable[[str], list[str]]:
    rule = re.compile(r"(?<=[.!?])\s+|(?<=[。！？])")
    return lambda text: rule.split(text)


def splitters(lang: str) -> dict[str, Callable[[str], list[str]]]:
    """Each candidate that is installed (pip install pysbd blingfire: the two aiayn does not need), and aiayn's own
    (sentencex with its one rule: aiayn/translation/spans.py)."""
    import importlib.util

    from aiayn.translation.spans import split

    found: dict[str, Callable[[str], list[str]]] = {"aiayn": lambda text: split(text, lang).sentences}
    import sentencex

    found["sentencex"] = lambda text: list(sentencex.segment(lang, text))
    if importlib.util.find_spec("pysbd"):
        import pysbd

        found["pysbd"] = pysbd.Segmenter(language=lang, clean=False).segment
    if importlib.util.find_spec("blingfire"):
        import blingfire

        found["blingfire"] = lambda text: blingfire.text_to_sentences(text).split("\n")
    found["baseline"] = baseline(lang)
    return found


def score(split: Callable[[str], list[str]], paras: list[tuple[str, set[int]]]) -> dict[str, Any]:
    tp = fp = fn = 0
    for text, gold in paras:
        got = found_ends(text, split(text))
        tp, fp, fn = tp + len(got & gold), fp + len(got - gold), fn + len(gold - got)
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for text, _ in paras:
            split(text)
        best = min(best, time.perf_counter() - start)
    p, r = tp / max(tp + fp, 1), tp / max(tp + fn, 1)
    return {"precision": round(p, 4), "recall": round(r, 4), "f1": round(2 * p * r / max(p + r, 1e-9), 4),
            "boundaries": tp + fn, "mchars_per_s": round(sum(len(t) for t, _ in paras) / best / 1e6, 2)}


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks split", description=__doc__.split("\n\n")[0])
    ap.add_argument("--ud", action="append", required=True, metavar="LANG=CONLLU",
                    help="a Universal Dependencies test treebank and its language")
    ap.add_argument("--per", type=int, default=5, help="sentences joined into one paragraph")
    a = ap.parse_args(argv)
    results: dict[str, Any] = {}
    for spec in a.ud:
        lang, path = spec.split("=", 1)
        paras = paragraphs(sentences(Path(path)), a.per, lang)
        results[lang] = {"treebank": Path(path).name, "paragraphs": len(paras),
                         **{name: score(split, paras) for name, split in splitters(lang).items()}}
        for name in splitters(lang):
            s = results[lang][name]
            print(f"{lang}  {name:10} P {s['precision']:.3f}  R {s['recall']:.3f}  F1 {s['f1']:.3f}  "
                  f"{s['mchars_per_s']:6.2f} M chars/s")
    versions = {name: record._version(name) for name in ("sentencex", "pysbd", "blingfire")}
    path = record.write("split", {"per": a.per, "versions": versions, "languages": results})
    print(f"recorded {path}")
