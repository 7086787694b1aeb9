"""The front door describes the software as it is: README.md in at most 100 lines, no issue number or commit hash
in the README's or the documentation's prose (the project's history is CHANGELOG.md's, each measurement's its
record's and the performance notebook's), and no doc, comment or docstring naming a module that does not exist."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ISSUE = re.compile(r"\b[Ii]ssues? #?\d+")
# a commit hash: 7-12 hex digits with a letter and a digit, a word of its own (not 3.13e+07, not a record's name)
HASH = re.compile(r"(?<![.\w/-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,12}(?![+\w-])")
RECORD_NAME = re.compile(r"\S+\.(?:json|txt|md|png|jsonl)\b")
MODULE = re.compile(r"(?<![\w./-])((?:[\w-]+/)*[A-Za-z_]\w*\.py)(?!\w|\.\w)")


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def history(text: str) -> list[str]:
    """The issue numbers and commit hashes of a page's prose (comments and record names left out)."""
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        prose = RECORD_NAME.sub("", re.sub(r"<!--.*?-->", "", line))
        found += [f"{n}: {m.group(0)}" for m in (*ISSUE.finditer(prose), *HASH.finditer(prose))]
    return found


def test_the_readme_is_a_front_door() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 100, f"README.md has {len(lines)} lines: its figures belong in docs/results.md"


def test_no_issue_number_or_commit_hash_in_the_readme_or_the_docs() -> None:
    found = {p.name: h for p in pages() if (h := history(p.read_text(encoding="utf-8")))}
    assert found == {}, f"history belongs in CHANGELOG.md and the records: {found}"


def test_the_check_finds_issue_numbers_and_hashes_but_not_numbers_or_record_names() -> None:
    assert history("Issue 54 asked for it, at b951dc5.") == ["1: Issue 54", "1: b951dc5"]
    assert history("3.1369282e+07 bytes; `serve-20261128-1431-b951dc5.json`; 2026-11-28; <!-- at 6977a5d -->") == []


def _modules() -> set[str]:
    return {p.name for p in ROOT.rglob("*.py") if not {".venv", "build", "runs", ".git"} & set(p.parts)}


def named_modules(text: str) -> list[str]:
    return MODULE.findall(text)


def test_every_module_a_doc_or_comment_names_exists() -> None:
    """What docs and the package's comments and docstrings call ``something.py`` is a file of the repository (code
    blocks of the docs left out: they show other projects' files too)."""
    known = _modules()
    missing = []
    for page in [*pages(), ROOT / "CONTRIBUTING.md", ROOT / "benchmarks" / "README.md"]:
        if page.is_file():
            prose = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
            missing += [f"{page.name}: {m}" for m in named_modules(prose) if m.rsplit("/", 1)[-1] not in known]
    for path in sorted((ROOT / "aiayn").rglob("*.py")):
        for tok in tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline):
            if tok.type in (tokenize.COMMENT, tokenize.STRING):
                missing += [f"{path.relative_to(ROOT)}:{tok.start[0]}: {m}" for m in named_modules(tok.string)
                            if m.rsplit("/", 1)[-1] not in known]
    assert missing == []


def test_the_module_check_sees_a_file_named_in_prose() -> None:
    assert named_modules("ct2.py and engines/ctranslate2.py, not x.pyc nor a.py.gz: see b.py.") == [
        "ct2.py", "engines/ctranslate2.py", "b.py"]
