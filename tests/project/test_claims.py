"""The figures of the README and of the documentation site have recorded sources (``make check-claims`` runs
this file).

Every table in README.md and in docs/*.md (but the record pages, :data:`RECORD_PAGES`) carries, on the line above it,
either ``<!-- source: PATH[, PATH...] -->`` — the recorded results (``benchmarks/results/…``, a section of
``docs/results.md`` …) its figures come from — or ``<!-- no figures -->`` for a table of settings or endpoints. Each
named file must exist in the repository, and every figure of the table must be a number of one of them: a whole number
token of the file (``12.3`` is not found inside ``112.34``), or a longer one that rounds to it (``1.1759`` shows as
``1.18``). Shipped recipes and the README name ``--config NAME`` only for recipes that exist.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from aiayn.config import PRESETS
from aiayn.training.recipes import RECIPES

ROOT = Path(__file__).resolve().parents[2]
SOURCE = re.compile(r"^<!-- source: (.+?) -->$")
NO_FIGURES = "<!-- no figures -->"
RECORD = re.compile(r"^<!-- record: .{20,} -->$")
# A figure: 41.90, 2,707, 4476, 100% (not "1" or "12", nor the 3.5 of a version 3.5.1); a trailing % kept
FIGURE = re.compile(r"(?<![\d.,])(?:\d[\d,]*\.\d+|\d{1,3}(?:,\d{3})+|\d{3,})(?!\d|\.\d)%?")


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
    """The figures in a table's body (not its header, nor its `code`: commands), without thousands separators."""
    return {m.replace(",", "") for row in rows[2:] for m in FIGURE.findall(re.sub(r"`[^`]*`", "", row))}


# A whole number token of a record: not part of a longer number (112.34 holds no 12.3) or of a version (3.5.1)
NUMBER = re.compile(r"(?<![\d.])\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?!\d|\.\d)")


def numbers(text: str) -> set[str]:
    """Every number of a record, as a token, thousands separators dropped."""
    return set(NUMBER.findall(re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", text)))


def recorded(figure: str, record: set[str]) -> bool:
    """Whether ``figure`` is one of the record's numbers, or a longer one rounded to its decimals (``1.1759`` shows
    as ``1.18``), or a shorter one padded with zeros (JSON writes ``35.40`` as ``35.4``); a percentage may be recorded
    as a fraction (``100%`` as ``1.0``)."""
    value, percent = figure.removesuffix("%"), figure.endswith("%")
    places = len(value.partition(".")[2])
    if value in record:
        return True
    for x in record:
        decimals = len(x.partition(".")[2])
        if decimals > places and f"{float(x):.{places}f}" == value:
            return True
        if "." in x and decimals < places and f"{float(x):.{places}f}" == value:
            return True
        if percent and f"{100 * float(x):.{places}f}" == value and "." in x:
            return True
    return False


def problems(readme: Path, root: Path = ROOT, record_page: bool = False) -> list[str]:
    """What is wrong with ``readme``'s tables: one line per table, naming its line and what it lacks. Sources are
    named relative to ``root``. On a record page a table may instead say that it is the record itself,
    ``<!-- record: how its figures were taken -->``."""
    out = []
    for line_no, above, rows in tables(readme.read_text(encoding="utf-8")):
        where = f"{readme.name}:{line_no}"
        if above.strip() == NO_FIGURES or record_page and RECORD.match(above.strip()):
            continue
        match = SOURCE.match(above.strip())
        if not match:
            out.append(f"{where}: the table has no '<!-- source: PATH -->' (or '{NO_FIGURES}') line above it")
            continue
        record: set[str] = set()
        for name in (p.strip() for p in match.group(1).split(",")):
            path = root / name.split("#")[0]
            if not path.is_file():
                out.append(f"{where}: source {name} does not exist")
                continue
            record |= numbers(path.read_text(encoding="utf-8", errors="replace"))
        missing = sorted(f for f in figures(rows) if not recorded(f, record))
        if missing:
            out.append(f"{where}: {', '.join(missing)} are in no source named above the table")
    return out


# Pages that are records themselves: lab notebooks, which the README and the other pages name as their source. A
# table there names its source file where one was kept; where its figures were transcribed from runs whose
# directories are not kept, it says so and how (<!-- record: ... -->), so that no table is left unaccounted for.
RECORD_PAGES = {"results.md"}


def pages() -> list[Path]:
    """The README and every page of the documentation site."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.name)
def test_every_table_names_a_recorded_source(page: Path) -> None:
    assert problems(page, record_page=page.name in RECORD_PAGES) == []


def test_the_check_fails_on_a_table_without_a_source_or_with_a_wrong_one(tmp_path: Path) -> None:
    (tmp_path / "results.txt").write_text("tokens/s 1,234.5 and 112.34; bleu 41.8976\n")
    readme = tmp_path / "README.md"

    def check(rows: str, source: str = "<!-- source: results.txt -->") -> str:
        readme.write_text(f"text\n{source}\n| a | b |\n|---|---:|\n{rows}")
        return "\n".join(problems(readme, root=tmp_path))

    assert "no '<!-- source" in check("| x | 1,234.5 |\n", source="")
    assert "does not exist" in check("| x | 9.5 |\n", source="<!-- source: benchmarks/results/nothing-here.json -->")
    assert check("| x | 1,234.5 |\n| y | 112.34 |\n| z | 41.90 |\n") == ""    # as recorded, or rounded from it
    assert "12.3 are in no source" in check("| x | 1,234.5 |\n| y | 12.3 |\n")    # not found inside 112.34
    assert "43.90 are in no source" in check("| x | 1,234.5 |\n| z | 43.90 |\n")  # one figure off: the table fails
    assert "234.5 are in no source" in check("| x | 234.5 |\n")                      # not found inside 1,234.5
    assert check("| x | `--vocab-size 6000` |\n| y | version 3.5.1 |\n") == ""       # commands, versions
    (tmp_path / "results.txt").write_text('{"identical": 1.0, "share": 0.4917}\n')
    assert check("| x | 100% |\n| y | 49.17% |\n") == ""                             # fractions as percentages
    assert "49.20% are in no source" in check("| y | 49.20% |\n")
    assert check("| x | 100 |\n", source="<!-- no figures -->") == ""
    marker = "<!-- record: transcribed from the run's metrics.jsonl -->"
    assert "no '<!-- source" in check("| x | 100 |\n", source=marker)                 # not on an ordinary page
    readme.write_text(f"text\n{marker}\n| a | b |\n|---|---:|\n| x | 100 |\n")
    assert problems(readme, root=tmp_path, record_page=True) == []


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


def test_a_figure_matches_its_record_only_as_the_same_number() -> None:
    record = numbers('{"a": 35.4, "b": 1.1759, "c": 0.985, "d": 2,707, "v": "3.5.1"}')
    assert all(recorded(f, record) for f in ("35.4", "35.40", "1.18", "1.176", "98.5%", "2707"))
    assert not any(recorded(f, record) for f in ("35.41", "35.5", "1.17", "3.5", "97%", "270"))
