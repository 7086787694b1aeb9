"""The README's figures have recorded sources (``make check-claims`` runs this file).

Every table in README.md carries, on the line above it, either ``<!-- source: PATH[, PATH...] -->`` — the
recorded results (``benchmarks/results/…``, a section of ``docs/results.md`` …) its figures come from — or
``<!-- no figures -->`` for a table of settings or endpoints. Each named file must exist in the repository and
contain at least one of the table's figures, so a table cannot point at an unrelated file. Shipped recipes
and the README name ``--config NAME`` only for recipes that exist.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from aiayn.config import PRESETS, RECIPES

ROOT = Path(__file__).resolve().parent.parent
SOURCE = re.compile(r"^<!-- source: (.+?) -->$")
NO_FIGURES = "<!-- no figures -->"
FIGURE = re.compile(r"\d[\d,]*\.\d+|\d{1,3}(?:,\d{3})+|\d{3,}")  # 41.90, 2,707, 4476 (not "1" or "12")


def tables(text: str) -> list[tuple[int, str, list[str]]]:
    """(1-based line of the table's first row, the line above it, the table's lines) for every table."""
    lines = text.splitlines()
    found, i = [], 0
    while i < len(lines):
        if lines[i].startswith("|") and i + 1 < len(lines) and re.match(r"^\|[-:| ]+\|$", lines[i + 1]):
            start = i
            while i < len(lines) and lines[i].startswith("|"):
                i += 1
            found.append((start + 1, lines[start - 1] if start else "", lines[start:i]))
        else:
            i += 1
    return found


def figures(rows: list[str]) -> set[str]:
    """The figures in a table's body (not its header), without thousands separators."""
    return {m.replace(",", "") for row in rows[2:] for m in FIGURE.findall(row)}


def problems(readme: Path) -> list[str]:
    """What is wrong with ``readme``'s tables: one line per table, naming its line."""
    out = []
    for line_no, above, rows in tables(readme.read_text(encoding="utf-8")):
        where = f"{readme.name}:{line_no}"
        if above.strip() == NO_FIGURES:
            continue
        match = SOURCE.match(above.strip())
        if not match:
            out.append(f"{where}: the table has no '<!-- source: PATH -->' (or '{NO_FIGURES}') line above it")
            continue
        wanted = figures(rows)
        for name in (p.strip() for p in match.group(1).split(",")):
            path = ROOT / name.split("#")[0]
            if not path.is_file():
                out.append(f"{where}: source {name} does not exist")
                continue
            recorded = path.read_text(encoding="utf-8", errors="replace").replace(",", "")
            if wanted and not any(f in recorded for f in wanted):
                out.append(f"{where}: none of the table's figures ({', '.join(sorted(wanted)[:4])}, …) is in {name}")
    return out


def test_every_readme_table_names_a_recorded_source() -> None:
    assert problems(ROOT / "README.md") == []


def test_the_check_fails_on_a_table_without_a_source_or_with_a_wrong_one(tmp_path: Path) -> None:
    (tmp_path / "results.txt").write_text("tokens/s 1234.5\n")
    readme = tmp_path / "README.md"
    readme.write_text("text\n\n| a | b |\n|---|---:|\n| x | 1,234.5 |\n")
    assert "no '<!-- source" in problems(readme)[0]
    readme.write_text("<!-- source: benchmarks/results/nothing-here.json -->\n| a | b |\n|---|---:|\n| x | 9.5 |\n")
    assert "does not exist" in problems(readme)[0]
    readme.write_text("<!-- source: README.md -->\n| a | b |\n|---|---:|\n| x | 98,765.43 |\n")
    assert "none of the table's figures" in problems(readme)[0]
    readme.write_text("<!-- no figures -->\n| a | b |\n|---|---|\n| x | 100 |\n")
    assert problems(readme) == []


def config_names() -> list[tuple[str, str]]:
    """(where, NAME) for every ``--config NAME`` in the README and in the shipped recipes' comments."""
    files = [ROOT / "README.md", *sorted((ROOT / "aiayn" / "configs").glob("*.yaml"))]
    return [(f"{f.relative_to(ROOT)}:{n}", m) for f in files
            for n, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1)
            for m in re.findall(r"--config ([^\s`]+)", line)]


@pytest.mark.parametrize(("where", "name"), config_names())
def test_config_names_in_docs_and_recipes_exist(where: str, name: str) -> None:
    assert (RECIPES / f"{name}.yaml").is_file() or (ROOT / name).is_file(), f"{where}: --config {name}: no such recipe"
    assert name not in PRESETS
