"""A long Word document through ``aiayn translate --input FILE --output FILE``: its time, and what came out.

    python -m benchmarks documents --model runs/demo-1200/run-de-en --src test_2016_flickr.de [--pages 100]
        [--tree before=/tmp/base]     # an earlier commit's worktree, run in turn on the same document

The document is made with python-docx from the source lines: a heading per page and 30 paragraphs of one to three
sentences, one word in four paragraphs bold (about 100 pages in Word's default layout at --pages 100). The command
runs in its own process, as a user runs it (start-up included). Reports the seconds, the paragraphs and bold runs in
and out, and whether every paragraph's text changed. Records ``results/documents/documents-<date>.json``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import record  # noqa: E402


def make(lines: list[str], pages: int, path: Path) -> int:
    """The document (the module's docstring); returns its paragraphs."""
    import docx

    d, at, n = docx.Document(), 0, 0
    for page in range(pages):
        d.add_heading(f"Kapitel {page + 1}", level=1)
        for k in range(30):
            text = " ".join(lines[(at + j) % len(lines)] for j in range(1 + k % 3))
            at += 1 + k % 3
            p = d.add_paragraph()
            words = text.split()
            if k % 4 == 0 and len(words) > 3:
                p.add_run(" ".join(words[:2]) + " ")
                p.add_run(words[2]).bold = True
                p.add_run(" " + " ".join(words[3:]))
            else:
                p.add_run(text)
            n += 1
        d.add_page_break()
    d.save(str(path))
    return n + pages


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks documents", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--src", required=True)
    ap.add_argument("--pages", type=int, default=100)
    ap.add_argument("--engine", default="auto", choices=["torch", "ctranslate2", "auto"])
    ap.add_argument("--tree", action="append", default=[], metavar="NAME=PATH",
                    help="also run aiayn from another source tree (a git worktree of an earlier commit), in turn with "
                         "this one, on the same document")
    a = ap.parse_args(argv)
    import docx

    lines = Path(a.src).read_text(encoding="utf-8").splitlines()
    trees = {"this": str(HERE.parent), **dict(t.split("=", 1) for t in a.tree)}
    figures: dict[str, object] = {"model": a.model, "engine": a.engine, "pages": a.pages}
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "bericht.docx"
        figures["paragraphs"] = make(lines, a.pages, src)
        for name, tree in trees.items():
            out = Path(tmp) / f"report-{name}.docx"
            start = time.perf_counter()
            model = str(Path(a.model).resolve())
            subprocess.run([sys.executable, "-m", "aiayn", "translate", "--model", model, "--engine", a.engine,
                            "--input", str(src), "--output", str(out), "--quiet"], check=True, cwd=tree,
                           env={**os.environ, "PYTHONPATH": tree})
            seconds = time.perf_counter() - start
            before, after = docx.Document(str(src)), docx.Document(str(out))
            texts = [(p.text, q.text) for p, q in zip(before.paragraphs, after.paragraphs, strict=True)
                     if p.text.strip()]
            bold = [sum(1 for p in d.paragraphs for r in p.runs if r.bold) for d in (before, after)]
            row = {"paragraphs_with_text": len(texts), "changed": sum(p != q for p, q in texts),
                   "bold_runs_in": bold[0], "bold_runs_out": bold[1], "seconds": round(seconds, 1),
                   "paragraphs_per_s": round(len(texts) / seconds, 1)}
            if name == "this":
                figures.update(row)
            else:
                figures.setdefault("trees", {})[name] = row  # type: ignore[index]
    print(figures)
    print(f"recorded {record.write('documents', figures)}")
