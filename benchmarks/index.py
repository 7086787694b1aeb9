"""The records' index: ``python -m benchmarks index`` writes ``benchmarks/RECORDS.md`` (beside results/: it is not
a record itself): each benchmark's folder, its records, the newest of them, and the pages that cite them. A record
that no page, benchmark or test cites, and that is not its benchmark's newest, is not kept (git keeps it):
tests/project/test_benchmarks.py holds both rules.

    python -m benchmarks index            # rewrite benchmarks/RECORDS.md
    python -m benchmarks index --check    # exit 1 where it is not what this command writes
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import record  # noqa: E402

ROOT = record.HERE.parent
INDEX = record.HERE / "RECORDS.md"


def citing_files() -> list[Path]:
    """Where a record may be cited: the README, the documentation, CONTRIBUTING, the changelog, the benchmarks (their
    performance notebook too) and the tests."""
    found = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "CHANGELOG.md", record.HERE / "README.md",
             record.HERE / "NOTEBOOK.md", record.HERE / "results" / "ci.md",
             *sorted((ROOT / "docs").rglob("*.md")), *sorted(record.HERE.glob("*.py")),
             *sorted((ROOT / "tests").rglob("*.py")), *sorted((ROOT / "aiayn").rglob("*.py"))]
    return [p for p in found if p.is_file()]


def records(results: Path | None = None) -> dict[str, list[Path]]:
    """Each benchmark's records, by its folder under results/ (oldest first)."""
    results = results or record.HERE / "results"
    return {d.name: sorted(p for p in d.iterdir() if p.is_file()) for d in sorted(results.iterdir()) if d.is_dir()}


def _stamp(path: Path) -> str:
    """A record's date as it names it (YYYYMMDD-HHMM; a day alone sorts before its minutes)."""
    m = re.search(r"(\d{8})(?:-(\d{4}))?", path.name)
    return f"{m.group(1)}-{m.group(2) or '0000'}" if m else ""


def newest(paths: list[Path]) -> Path:
    """The newest record of a benchmark (a plot stands with its record: the record is named)."""
    return max((p for p in paths if p.suffix != ".png") or paths, key=lambda p: (_stamp(p), p.name))


def cited(texts: dict[Path, str], name: str) -> list[Path]:
    """The files whose text names the record ``name`` (a plot: by its name without the suffix too)."""
    stem = name.rsplit(".", 1)[0]
    return [p for p, t in texts.items() if name in t or name.endswith(".png") and stem in t]


def render() -> str:
    """The index, as this command writes it."""
    texts = {p: p.read_text(encoding="utf-8", errors="replace") for p in citing_files()}
    lines = ["# Records", "",
             "Every measurement a page cites, by benchmark: `results/BENCHMARK/NAME-YYYYMMDD-HHMM.json` (or `.txt`, a "
             "transcript; `.jsonl`, a trial a line; `.png`, a plot), each naming its command, commit, machine and date "
             "(record.py). CI runs are summarised in [results/ci.md](results/ci.md). Written by "
             "`python -m benchmarks index`; do not edit.", "",
             "<!-- no figures -->",
             "| benchmark | records | newest | cited by |", "|---|---:|---|---|"]
    for bench, paths in records().items():
        last = newest(paths)
        pages = sorted({str(p.relative_to(ROOT)) for path in paths for p in cited(texts, path.name)
                        if not p.is_relative_to(ROOT / "tests")})
        lines.append(f"| {bench} | {len(paths)} | [{last.name}](results/{bench}/{last.name}) | {', '.join(pages) or '—'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks index", description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 where RECORDS.md is not what this writes")
    a = ap.parse_args(argv)
    text = render()
    if a.check:
        same = INDEX.is_file() and INDEX.read_text(encoding="utf-8") == text
        print("RECORDS.md is up to date" if same else "RECORDS.md is stale: run python -m benchmarks index")
        return 0 if same else 1
    INDEX.write_text(text, encoding="utf-8")
    print(INDEX)
    return 0


if __name__ == "__main__":
    sys.exit(main())
