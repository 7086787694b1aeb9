"""Real files through ``aiayn translate --input FILE --output FILE`` with a trained model, measured as their users'
tools measure them (tests/documents/fidelity.py), the figures summed per file type.

    make realfiles                                   # fetch them (tests/documents/realfiles.py)
    python -m benchmarks realfiles --model runs/demo/run-de-en [--extra DIR ...] [--only po,md]
        [--tree /tmp/base]       # an earlier commit's worktree instead (each file in its own process)

The files: build/realfiles/ (catalogues of 17 Debian packages and Django, READMEs of 22 npm and PyPI packages,
subtitles of webvtt-py and pysrt, Symfony's XLIFF, Debian's reference in German, pandoc's office documents and
EPUBs), and any folder given with ``--extra`` (files brought with the search tool's fetch, which are not committed:
Okapi's XLIFF test files, IDPF's EPUB samples). Each file is translated in this process by the command line's own
``main`` (the model loaded once per file, as a user runs it); its exit status, seconds and the fidelity figures are
kept. Records ``results/realfiles/realfiles-<date>.json``: per type the sums, per file its figures and the first
problems found.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import record  # noqa: E402

TYPES = {".pot": "po", ".po": "po", ".md": "md", ".srt": "subtitles", ".vtt": "subtitles", ".xlf": "xliff",
         ".xliff": "xliff", ".sdlxliff": "xliff", ".mqxliff": "xliff", ".html": "html", ".docx": "office",
         ".pptx": "office", ".odt": "office", ".epub": "epub"}


def measure(kind: str, src: Path, out: Path) -> dict[str, Any]:
    from tests.documents import fidelity, realfiles

    if kind == "po":
        return fidelity.catalogue(src, out)
    if kind == "md":
        return fidelity.markdown(src, out)
    if kind == "subtitles":
        return fidelity.subtitles(src, out, encoding="cp1252" if "1252" in src.name else None)
    if kind == "xliff":
        return fidelity.xliff(src, out, {"1.2": realfiles.schema("xliff-core-1.2-strict.xsd"),
                                         "2.0": realfiles.schema("xliff-core-2.0.xsd")})
    if kind == "html":
        return fidelity.page(src, out)
    m = fidelity.archive(src, out)
    if kind == "epub":
        before, after = fidelity.epubcheck(src), fidelity.epubcheck(out)
        if before is not None:
            m.update(epubcheck_before=before, epubcheck_after=after)
    return m


def one(model: str, src: Path, tmp: Path, extra: list[str], tree: str | None = None) -> dict[str, Any]:
    """A file translated by the command line (in this process; ``tree``: another source tree's, in its own), its
    exit status, seconds, figures."""
    from aiayn.cli.main import main as cli

    kind = TYPES[src.suffix.lower()]
    copy = tmp / src.name
    shutil.copy(src, copy)
    out = tmp / f"out-{src.name}"
    log = io.StringIO()
    start = time.perf_counter()
    args = ["translate", "--model", model, "--input", str(copy), "--output", str(out), "--quiet", *extra]
    if tree is not None:
        run = subprocess.run([sys.executable, "-m", "aiayn", *args], capture_output=True, text=True, cwd=tree,
                             env={**os.environ, "PYTHONPATH": tree})
        rc = run.returncode
        log.write(run.stderr)
    else:
        with contextlib.redirect_stderr(log):
            rc = cli(args)
    row: dict[str, Any] = {"file": str(src), "type": kind, "rc": rc, "seconds": round(time.perf_counter() - start, 1),
                           "log": [line for line in log.getvalue().splitlines() if "left untranslated" in line
                                   or "nothing was translated" in line or "error" in line.lower()][:10]}
    if out.is_file():
        m = measure(kind, src, out)
        row["problems"] = m.pop("problems", [])[:5]
        row.update(m)
    return row


def summed(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per type: files, exit statuses, and every count summed (``X_kept`` of ``X`` as a share too)."""
    out: dict[str, dict[str, Any]] = {}
    for kind in sorted({r["type"] for r in rows}):
        mine = [r for r in rows if r["type"] == kind]
        total: Counter[str] = Counter()
        for r in mine:
            total.update({k: v for k, v in r.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
                          and k not in ("rc", "seconds")})
            total.update({k: int(v) for k, v in r.items() if isinstance(v, bool)})
        share = {f"{k[:-5]}_share": round(total[k] / total[k[:-5]], 4) for k in total if k.endswith("_kept")
                 and total.get(k[:-5])}
        out[kind] = {"files": len(mine), "exit_0": sum(r["rc"] == 0 for r in mine),
                     "seconds": round(sum(r["seconds"] for r in mine), 1), **dict(total), **share}
    return out


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks realfiles", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--extra", action="append", default=[], type=Path, help="a folder of more real files")
    ap.add_argument("--only", default="", help="types to run (comma-separated: po, md, subtitles, xliff, html, "
                                               "office, epub)")
    ap.add_argument("--flags", default="", help="more flags for aiayn translate (e.g. '--engine torch')")
    ap.add_argument("--tree", metavar="PATH", help="run another source tree's aiayn (a git worktree of an earlier "
                                                   "commit) instead, each file in its own process")
    a = ap.parse_args(argv)
    from tests.documents import realfiles

    files = realfiles.files(tuple(TYPES)) + [p for d in a.extra for p in sorted(d.rglob("*"))
                                             if p.is_file() and p.suffix.lower() in TYPES]
    files = [p for p in files if not a.only or TYPES[p.suffix.lower()] in a.only.split(",")]
    if not files:
        sys.exit("no real files: run make realfiles first")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for k, src in enumerate(files):
            folder = Path(tmp) / str(k)
            folder.mkdir()
            rows.append(one(str(Path(a.model).resolve()), src, folder, a.flags.split(), a.tree))
            r = rows[-1]
            print(f"{k + 1}/{len(files)} {r['type']:9} rc={r['rc']} {r['seconds']:6.1f}s {src.name} "
                  f"{'; '.join(r.get('problems', []))[:150]}", flush=True)
    totals = summed(rows)
    for kind, t in totals.items():
        print(kind, t)
    figures = {"model": a.model, "tree": a.tree or "this", "files": len(rows), "types": totals, "rows": rows}
    print(f"recorded {record.write('realfiles', figures)}")


if __name__ == "__main__":
    main(sys.argv[1:])
