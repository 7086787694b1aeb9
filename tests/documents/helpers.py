"""What the document tests share: a stand-in translation that goes through the same protection and markup code as
the pipeline (words upper-cased, each word aligned with itself, or their order reversed), the corpus folder, and the
formats' own validators (``msgfmt -c``, the XLIFF schemas, XML well-formedness)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from aiayn.documents.common import Report
from aiayn.documents.formats import translate_document
from aiayn.translation import spans
from aiayn.translation.markup import Fragment

FILES = Path(__file__).parent / "files"
SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"


def _words(line: str, reverse: bool, careless: bool = False) -> tuple[str, str]:
    words = line.split()
    keep = [i for i, w in enumerate(words) if not careless or any(c.isalnum() for c in w) and not w.startswith("[!")
            and "<" not in w]                           # (markup it never saw, as text: dropped too)
    order = keep[::-1] if reverse else keep
    return " ".join(words[i].upper() for i in order), " ".join(f"{i}-{j}" for j, i in enumerate(order))


def _fragment(html: str, kinds: tuple[str, ...], reverse: bool, careless: bool = False) -> str:
    frag = Fragment(html, kinds)
    return frag.render([(*_words(line, reverse, careless), "") for line in frag.lines])


def stand_in(texts: list[str], fmt: str, kinds: tuple[str, ...], reverse: bool = False,
             careless: bool = False) -> list[str]:
    """What the pipeline makes of ``texts`` when its model upper-cases each word (``reverse``: and reverses their
    order; ``careless``: and drops a word of marks alone, "-", ".", "[!NOTE]", "<00:01.000>", as a small model drops
    what it never saw), aligned word for word: protected spans and markup through spans.py and markup.py, as
    pipeline.py does."""
    out = []
    for t in texts:
        if fmt == "html":
            out.append(_fragment(t, tuple(k for k in kinds if k != "tags"), reverse, careless))
            continue
        pieces = spans.code(t.strip(), kinds)
        if pieces is None:                              # (a line break cuts a text into lines: pipeline.py)
            out.append("\n".join(_words(line, reverse, careless)[0] for line in t.split("\n")) if reverse or careless
                       else t.upper())
            continue
        html, codes = spans.to_html(pieces)
        lead, trail = t[:len(t) - len(t.lstrip())], t[len(t.rstrip()):]
        out.append(lead + spans.text(spans.from_html(_fragment(html, (), reverse, careless), codes)).strip() + trail)
    return out


def reversed_stand_in(texts: list[str], fmt: str, kinds: tuple[str, ...]) -> list[str]:
    return stand_in(texts, fmt, kinds, reverse=True)


def careless_stand_in(texts: list[str], fmt: str, kinds: tuple[str, ...]) -> list[str]:
    return stand_in(texts, fmt, kinds, careless=True)


def translated(src: Path, dst: Path, translate: Any = stand_in, **kw: Any) -> Report:
    return translate_document(src, dst, translate, **kw)


def corpus(name: str, tmp_path: Path) -> Path:
    """A copy of a corpus file in ``tmp_path``."""
    return Path(shutil.copy(FILES / name, tmp_path / name))


def msgfmt(path: Path, *flags: str) -> None:
    """``msgfmt -c`` (and ``flags``: --use-fuzzy, --check-accelerators) on a catalogue: it passes (the test fails
    with msgfmt's words otherwise)."""
    tool = shutil.which("msgfmt")
    if tool is None:
        pytest.skip("msgfmt (GNU gettext) is not installed: apt-get install gettext")
    run = subprocess.run([tool, "-c", *flags, "-o", "/dev/null", str(path)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


def xliff_schema(version: str) -> Any:
    """The XLIFF 1.2 or 2.0 schema: OASIS's xsd files as Symfony ships them (1.2 strict), from Debian's source of
    Symfony (make realfiles: realfiles.py), else ../shared/data/xliff (1.2 transitional); the version where neither
    is there, and :func:`valid` then checks what this project writes against the schema's rules by hand."""
    from lxml import etree

    from .realfiles import schema

    name = "xliff-core-1.2-strict.xsd" if version == "1.2" else "xliff-core-2.0.xsd"
    folder = schema(name).parent if schema(name) is not None else SHARED / "xliff"   # type: ignore[union-attr]
    if not (folder / name).is_file():
        name = "xliff-core-1.2-transitional.xsd" if version == "1.2" else name
    if not (folder / name).is_file() or not (folder / "xml.xsd").is_file():
        return version
    text = (folder / name).read_text(encoding="utf-8")
    local = (folder / "xml.xsd").as_uri()
    text = text.replace("http://www.w3.org/2001/xml.xsd", local).replace(
        "informativeCopiesOf3rdPartySchemas/w3c/xml.xsd", local)
    return etree.XMLSchema(etree.fromstring(text.encode("utf-8"), base_url=folder.as_uri() + "/"))


# the schemas' enumerations of the states this project writes (XLIFF 1.2 §state, 2.0 §state)
STATES = {"1.2": {"final", "needs-adaptation", "needs-l10n", "needs-review-adaptation", "needs-review-l10n",
                  "needs-review-translation", "needs-translation", "new", "signed-off", "translated"},
          "2.0": {"initial", "translated", "reviewed", "final"}}


def valid(schema: Any, path: Path) -> None:
    """``path`` valid against the XLIFF schema (without the xsd files: a target right after its source, in the
    document's namespace, its state one the schema allows, nothing approved that was not)."""
    from lxml import etree

    if not isinstance(schema, str):
        assert schema.validate(etree.parse(str(path))), [str(e) for e in schema.error_log][:5]
        return
    root = etree.parse(str(path)).getroot()
    ns = root.tag.split("}")[0] + "}"
    assert ns == {"1.2": "{urn:oasis:names:tc:xliff:document:1.2}", "2.0": "{urn:oasis:names:tc:xliff:document:2.0}"}[
        schema]
    for target in root.iter(ns + "target"):
        previous = target.getprevious()
        while previous is not None and not isinstance(previous.tag, str):
            previous = previous.getprevious()
        assert previous is not None and previous.tag in (ns + "source", ns + "seg-source")
        holder = target.getparent() if schema == "2.0" else target
        assert holder.get("state") is None or holder.get("state") in STATES[schema]


def no_worse(schema: Any, src: Path, out: Path) -> None:
    """``out`` valid against the XLIFF schema wherever ``src`` is: each complaint of the schema about ``out`` is one
    it makes of ``src`` (a Trados or memoQ file's own extensions break the strict schema before any translation)."""
    from lxml import etree

    if isinstance(schema, str):
        return valid(schema, out)

    def complaints(path: Path) -> set[str]:
        schema.validate(etree.parse(str(path)))
        return {re.sub(r"^.*?:\d+:\d+:", "", str(e)) for e in schema.error_log}

    assert complaints(out) <= complaints(src), sorted(complaints(out) - complaints(src))[:5]


def well_formed(data: bytes) -> Any:
    from lxml import etree

    return etree.fromstring(data, etree.XMLParser(resolve_entities=False))


def text_of(html: str) -> str:
    """The words of HTML or XML, its tags removed."""
    return " ".join(re.sub(r"<[^>]*>", " ", html).split())
