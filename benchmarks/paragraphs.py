"""Paragraphs through the model: consecutive test sentences joined into one input, translated with and without
sentence splitting (aiayn/translation/spans.py), scored against the references joined alike.

    python -m benchmarks paragraphs --model runs/demo/run-de-en --src runs/demo/data/test.de \\
        --ref runs/demo/data/test.en [--per 1 2 3 5] [--engine torch]

For each ``--per`` k, every k consecutive lines become one input (joined with a space), and so do their references.
Three translations of them are scored (lowercased BLEU and the output's length over the reference's, sacreBLEU):
each sentence on its own then joined (what a paragraph should come to), each input whole as one sentence
(``sentences: false``: aiayn before it split them), and each input split into its sentences (the default). k = 1 is
the test set as it is: splitting a one-sentence line must not move its BLEU. Two more ways in, for k > 1: with a line
break instead of the space after every other sentence (``newlines``; the output's line breaks are kept, and become
spaces for BLEU), and through LibreTranslate's API of a real ``aiayn serve`` with the ``libretranslatepy`` client, one
request per input (``--libretranslate``). Records ``results/paragraphs/paragraphs-<date>.json``.
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


def joined(lines: list[str], per: int, breaks: bool = False) -> list[str]:
    """Every ``per`` consecutive lines as one text (``breaks``: a line break after every other one, else a space)."""
    def glue(group: list[str]) -> str:
        return "".join(x + ("" if j == len(group) - 1 else "\n" if breaks and j % 2 == 0 else " ")
                       for j, x in enumerate(group))

    return [glue(lines[i:i + per]) for i in range(0, len(lines) - per + 1, per)]


def one_line(texts: list[str]) -> list[str]:
    return [" ".join(t.split()) for t in texts]


def libretranslate(model: str, inputs: list[str], src: str, tgt: str) -> list[str]:
    """Each input through LibreTranslate's API of ``aiayn serve`` (aiayn's own engine), with the real client."""
    import os
    import socket
    import subprocess
    import urllib.request

    from libretranslatepy import LibreTranslateAPI

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "aiayn", "serve", "--model", model, "--engine", "torch",
                               "--port", str(port), "--max-chars", "100000"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, env={**os.environ, "AIAYN_API_KEY": ""})
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except OSError:
                time.sleep(0.2)
        client = LibreTranslateAPI(f"http://127.0.0.1:{port}/")
        return [client.translate(text, src, tgt) for text in inputs]
    finally:
        server.terminate()
        server.wait(timeout=60)


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
    ap.add_argument("--libretranslate", action="store_true", help="also through LibreTranslate's API (k > 1)")
    a = ap.parse_args(argv)
    from aiayn import Translator
    from aiayn.translation.pipeline import Request, translate

    src = Path(a.src).read_text(encoding="utf-8").splitlines()
    ref = Path(a.ref).read_text(encoding="utf-8").splitlines()
    engine = Translator.load(a.model, a.engine)
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
        if per > 1:
            texts = joined(src, per, breaks=True)
            out = [t[0].text for t in translate(engine.engine, Request(texts)).translations]   # (line breaks kept)
            r["newlines"] = {**score(one_line(out), refs), "line_breaks_kept": sum(
                o.count("\n") == t.count("\n") for o, t in zip(out, texts, strict=True)) / len(texts)}
        if per > 1 and a.libretranslate:
            langs = engine.languages or ("de", "en")
            r["libretranslate"] = score(one_line(libretranslate(a.model, inputs, *langs)), refs)
        print(f"{per} per input: one by one {r['one_by_one']['bleu_lc']:6.2f}   whole {r['whole']['bleu_lc']:6.2f} "
              f"(x{r['whole']['length_ratio']:.2f})   split {r['split']['bleu_lc']:6.2f} "
              f"(x{r['split']['length_ratio']:.2f})   " + "   ".join(f"{k} {r[k]['bleu_lc']:6.2f}" for k in
                                                               ("newlines", "libretranslate") if k in r))
    path = record.write("paragraphs", {"model": a.model, "engine": engine.engine, "src": a.src, "ref": a.ref,
                                       "lines": len(src), "per": rows})
    print(f"recorded {path}")
