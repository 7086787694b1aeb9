"""Documents in, documents out: a file's text translated where it stands, everything else left as it was.

Each format is read and written by the library its users trust, and gives its text to the request pipeline
(pipeline.py: sentences, HTML markup) as texts or HTML fragments, in one list, so that a document is batched as any
request is:

- **.txt**: each line (a line may hold a paragraph; blank lines stay blank).
- **.html / .htm**: the document as one HTML fragment (markup.py: blocks, inline tags on their aligned words,
  ``script``/``style``/``code`` untouched); its doctype kept.
- **.srt** (pysrt): each cue's text, its lines joined (a line break inside a cue does not end a sentence); timings and
  numbering unchanged.
- **.po / .pot, .xlf / .xliff** (translate-toolkit): each unit without a translation gets one (plural forms: the
  singular's and the plural's, as many as the catalogue's ``Plural-Forms`` asks); units already translated, the
  header, comments, contexts and flags (fuzzy too) unchanged.
- **.docx** (python-docx): every paragraph of the body, its tables, headers and footers. A paragraph whose text runs
  differ in formatting (bold, italics, a link, a font) is translated as HTML, each run that differs from the
  paragraph's main formatting as a ``<span>``, so that it lands on the words aligned with its own; the runs are then
  rebuilt in the translation's order, each a copy of the run it came from (its properties, its link). Images,
  fields, styles, numbering and section properties are not touched; runs holding a tab or a break keep their place
  after the paragraph's text.

Not yet: odt / odp / pptx / epub / markdown. :data:`FORMATS` is what is read.
"""

from __future__ import annotations

import copy
import html
import re
from collections.abc import Callable, Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

# texts (and their format: "text" or "html") -> their translations, in order
Translate = Callable[[list[str], str], list[str]]
# what is read (.txt first: `aiayn translate` reads it line by line, as any input, and the others as documents)
FORMATS = (".txt", ".html", ".htm", ".srt", ".po", ".pot", ".xlf", ".xliff", ".docx")


class DocumentError(ValueError):
    """A file that cannot be translated (its format, or its content), named with the reason."""


class _Raised(Exception):
    """What the translation itself raised, carried through a format's library untouched."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def kind(path: Path) -> str:
    """The format of ``path`` by its extension (one of :data:`FORMATS`); DocumentError naming the file otherwise."""
    ext = path.suffix.lower()
    if ext not in FORMATS:
        raise DocumentError(f"{path.name}: {ext or 'no extension'} is not a format aiayn translates "
                            f"({', '.join(FORMATS)})")
    return ext


def translate_file(src: Path, dst: Path, translate: Translate) -> int:
    """``src`` translated into ``dst`` (the same format, :func:`kind`); returns the number of texts translated. What
    ``translate`` raises is raised as it is; what the format's library raises, as a DocumentError naming the file."""
    ext = kind(src)

    def translating(texts: list[str], fmt: str) -> list[str]:
        try:
            return translate(texts, fmt)
        except Exception as e:
            raise _Raised(e) from e

    try:
        if ext == ".txt":
            return _txt(src, dst, translating)
        if ext in (".html", ".htm"):
            return _html(src, dst, translating)
        if ext == ".srt":
            return _srt(src, dst, translating)
        if ext == ".docx":
            return _docx(src, dst, translating)
        return _catalog(src, dst, translating)
    except _Raised as e:
        raise e.error from None
    except DocumentError:
        raise
    except (OSError, UnicodeDecodeError) as e:
        raise DocumentError(f"{src.name}: {e}") from None
    except Exception as e:  # noqa: BLE001 - a library's own error for a damaged file: named, not a traceback
        raise DocumentError(f"{src.name} cannot be read as {ext[1:]}: {type(e).__name__}: {e}") from None


def _txt(src: Path, dst: Path, translate: Translate) -> int:
    lines = src.read_text(encoding="utf-8").split("\n")
    dst.write_text("\n".join(translate(lines, "text")), encoding="utf-8")
    return len(lines)


def _html(src: Path, dst: Path, translate: Translate) -> int:
    text = src.read_text(encoding="utf-8")
    doctype = re.match(r"\s*<!doctype[^>]*>\s*", text, re.I)
    body = text[doctype.end():] if doctype else text
    dst.write_text((doctype.group().strip() + "\n" if doctype else "") + translate([body], "html")[0] + "\n",
                   encoding="utf-8")
    return 1


def _srt(src: Path, dst: Path, translate: Translate) -> int:
    import pysrt

    subs = pysrt.open(str(src), encoding="utf-8")
    for cue, text in zip(subs, translate([" ".join(s.text.split()) for s in subs], "text"), strict=True):
        cue.text = text
    subs.save(str(dst), encoding="utf-8")
    return len(subs)


def _catalog(src: Path, dst: Path, translate: Translate) -> int:
    """PO and XLIFF through translate-toolkit: the units without a translation (the module's docstring)."""
    from translate.misc.multistring import multistring
    from translate.storage import factory

    store = factory.getobject(str(src))
    todo = [u for u in store.units if not u.isheader() and u.source and not u.target]
    forms = _plural_forms(store)
    texts = [str(s) for u in todo for s in (u.source.strings if u.hasplural() else [u.source])]
    out = iter(translate(texts, "text"))
    for u in todo:
        if u.hasplural():
            singular, *plurals = (next(out) for _ in u.source.strings)
            u.target = multistring([singular, *(plurals[-1:] or [singular]) * (forms - 1)])
        else:
            u.target = next(out)
    dst.write_bytes(bytes(store))
    return len(texts)


def _plural_forms(store: Any) -> int:
    """How many plural forms the catalogue's header asks of a translation (2 where it does not say)."""
    header = store.header() if hasattr(store, "header") else None
    found = re.search(r"nplurals\s*=\s*(\d+)", str(header.target if header is not None else ""))
    return max(1, int(found.group(1))) if found else 2


# --- docx ---------------------------------------------------------------------------------------------------------


def _docx(src: Path, dst: Path, translate: Translate) -> int:
    import docx

    document = docx.Document(str(src))
    paragraphs = [p for p in _paragraphs(document) if _text_runs(p)]
    asks = [_as_asked(p) for p in paragraphs]
    plain = [i for i, (fmt, _) in enumerate(asks) if fmt == "text"]
    marked = [i for i, (fmt, _) in enumerate(asks) if fmt == "html"]
    out: dict[int, str] = dict(zip(plain, translate([asks[i][1] for i in plain], "text"), strict=True))
    out.update(zip(marked, translate([asks[i][1] for i in marked], "html"), strict=True))
    for i, p in enumerate(paragraphs):
        _rebuild(p, out[i], asks[i][0] == "html")
    document.save(str(dst))
    return len(paragraphs)


def _paragraphs(document: Any) -> Iterator[Any]:
    """Every paragraph element (w:p) of the body (its tables too), the headers and the footers."""
    from docx.oxml.ns import qn

    parts = [document.element.body]
    for section in document.sections:
        for part in (section.header, section.footer, section.first_page_header, section.first_page_footer,
                     section.even_page_header, section.even_page_footer):
            if not part.is_linked_to_previous:
                parts.append(part._element)
    for part in parts:                          # (separate trees: a paragraph is in one of them)
        yield from list(part.iter(qn("w:p")))


def _text_runs(p: Any) -> list[Any]:
    """A paragraph's runs that hold text and nothing else (w:t beside their properties)."""
    from docx.oxml.ns import qn

    runs = []
    for r in p.iter(qn("w:r")):
        kids = [c for c in r if c.tag != qn("w:rPr")]
        if kids and all(c.tag == qn("w:t") for c in kids):
            runs.append(r)
    return runs


def _carrier(r: Any) -> Any:
    """What a run is copied as: the run, or the hyperlink around it."""
    from docx.oxml.ns import qn

    parent = r.getparent()
    return parent if parent is not None and parent.tag == qn("w:hyperlink") else r


def _look(r: Any) -> bytes:
    """A run's formatting, to compare: its properties and the hyperlink it is in."""
    from docx.oxml.ns import qn
    from lxml import etree

    props = r.find(qn("w:rPr"))
    link = _carrier(r).get(qn("r:id")) if _carrier(r) is not r else None
    return (etree.tostring(props) if props is not None else b"") + (link or "").encode()


def _as_asked(p: Any) -> tuple[str, str]:
    """("text", the paragraph's text) when its runs look alike, else ("html", each run that differs from the main
    look in a span naming it)."""
    runs = _text_runs(p)
    looks = [_look(r) for r in runs]
    texts = ["".join(t.text or "" for t in r) for r in runs]
    weight: dict[bytes, int] = {}
    for look, text in zip(looks, texts, strict=True):
        weight[look] = weight.get(look, 0) + len(text)
    if len(weight) == 1:
        return "text", "".join(texts)
    main = max(weight, key=weight.__getitem__)
    return "html", "".join(html.escape(t, quote=False) if look == main else f'<span class="r{i}">{html.escape(t)}</span>'
                           for i, (look, t) in enumerate(zip(looks, texts, strict=True)))


class _Spans(HTMLParser):
    """The text of translated HTML, each piece with the run it belongs to (None: the main look)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[int | None] = []
        self.pieces: list[tuple[str, int | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        cls = dict(attrs).get("class") or ""
        self.stack.append(int(cls[1:]) if tag == "span" and re.fullmatch(r"r\d+", cls) else
                          (self.stack[-1] if self.stack else None))

    def handle_endtag(self, tag: str) -> None:
        if self.stack:
            self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.pieces.append((data, self.stack[-1] if self.stack else None))


def _rebuild(p: Any, translation: str, marked: bool) -> None:
    """The paragraph's text runs replaced by the translation: one run (a copy of the first) for a plain paragraph;
    for a marked one, a copy of each piece's own run, in the translation's order."""
    from docx.oxml.ns import qn

    runs = _text_runs(p)
    main = max(range(len(runs)), key=lambda i: len("".join(t.text or "" for t in runs[i])))
    if marked:
        parser = _Spans()
        parser.feed(translation)
        parser.close()
        pieces = [(text, main if i is None or i >= len(runs) else i) for text, i in parser.pieces if text]
    else:
        pieces = [(translation, main)]
    merged: list[tuple[str, int]] = []                      # neighbours of one run: one copy of it
    for text, i in pieces:
        if merged and merged[-1][1] == i:
            merged[-1] = (merged[-1][0] + text, i)
        else:
            merged.append((text, i))
    carriers = list(dict.fromkeys(_carrier(r) for r in runs))
    anchor = carriers[0]
    for text, i in merged:
        clone = copy.deepcopy(_carrier(runs[i]))
        inner = [r for r in clone.iter(qn("w:r")) if r.find(qn("w:t")) is not None]
        for extra in inner[1:]:
            extra.getparent().remove(extra)
        ts = inner[0].findall(qn("w:t")) if inner else []
        for extra in ts[1:]:
            inner[0].remove(extra)
        if ts:
            ts[0].text = text
            ts[0].set("{http://www.w3.org/XML/1998/namespace}space", "preserve")
        anchor.addprevious(clone)
    for c in carriers:
        c.getparent().remove(c)
