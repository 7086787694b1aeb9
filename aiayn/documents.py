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
  rebuilt in the translation's order, each a copy of the run it came from (its properties, its link). A line break
  or a tab cuts the paragraph into lines, each translated on its own, so that they stay between the same texts; a
  field, an image or a footnote's mark stays after its line's text. Styles, numbering and section properties are not
  touched.
- **.pptx** (python-pptx): every paragraph of every slide (text boxes, placeholders, tables, groups) and of its
  speaker notes, its runs and lines as in docx (DrawingML's runs: a link is part of a run's properties). Layouts, masters,
  pictures, charts and animations are not touched.

- **.epub** (EbookLib): the body of every content document as one HTML fragment, as .html is translated (EbookLib
  writes it back as XHTML, every element closed); the package's metadata, navigation, styles and images are not
  touched.

- **.odt / .odp** (odfpy): every paragraph and heading of the body (tables, frames and text boxes, slides, notes)
  and of the master pages (headers, footers). A paragraph's spans and links are its runs, as in docx: one that
  differs from the paragraph's main look lands on the words aligned with its own; spaces are written as ODF keeps
  them (``text:s``). A line break or a tab cuts a paragraph into lines, each translated on its own, and keeps its
  place between them; anything else in it (a frame, a note, a bookmark) stays after its line's text.

- **.md / .markdown** (markdown-it-py, CommonMark with tables): each paragraph, heading, list item, quote and table
  cell, its inline markdown (emphasis, links, images, code spans) translated as HTML and written back as markdown on
  one line in its container (``- ``, ``> ``, ``## ``); code blocks, HTML blocks, a front matter and blank lines
  unchanged.

:data:`FORMATS` is what is read.
"""

from __future__ import annotations

import copy
import html
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

# texts (and their format: "text" or "html") -> their translations, in order
Translate = Callable[[list[str], str], list[str]]
# what is read (.txt first: `aiayn translate` reads it line by line, as any input, and the others as documents)
FORMATS = (".txt", ".html", ".htm", ".md", ".markdown", ".srt", ".po", ".pot", ".xlf", ".xliff", ".docx", ".pptx",
           ".epub", ".odt", ".odp")


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
        if ext == ".pptx":
            return _pptx(src, dst, translating)
        if ext == ".epub":
            return _epub(src, dst, translating)
        if ext in (".odt", ".odp"):
            return _odf(src, dst, translating)
        if ext in (".md", ".markdown"):
            return _markdown(src, dst, translating)
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


def _epub(src: Path, dst: Path, translate: Translate) -> int:
    import warnings

    import ebooklib
    from ebooklib import epub

    with warnings.catch_warnings():                          # (EbookLib's notices of its own future defaults)
        warnings.simplefilter("ignore")
        book = epub.read_epub(str(src), {"ignore_ncx": True})
    chapters = [item for item in book.get_items_of_type(ebooklib.ITEM_DOCUMENT)
                if not isinstance(item, epub.EpubNav)]
    parts = []
    for item in chapters:
        text = item.get_content().decode("utf-8")
        body = re.search(r"(<body\b[^>]*>)(.*)(</body\s*>)", text, re.S | re.I)
        if body is None:
            raise DocumentError(f"{src.name}: {item.get_name()} has no <body>")
        parts.append((text[: body.end(1)], body.group(2), text[body.start(3):]))
    for item, (head, _, tail), out in zip(chapters, parts, translate([p[1] for p in parts], "html"), strict=True):
        item.set_content((head + out + tail).encode("utf-8"))     # (EbookLib writes it as XHTML: <br/>)
    _name_toc(book.toc)
    epub.write_epub(str(dst), book)
    return len(chapters)


def _name_toc(toc: Any, n: int = 0) -> int:
    """Give every entry of a table of contents read from an EPUB 3 navigation document an id (EbookLib reads them
    without one, and then cannot write the NCX it adds: ebooklib issue #325); returns the next number."""
    for entry in toc:
        if isinstance(entry, (tuple, list)):
            n = _name_toc(entry, n)
        elif hasattr(entry, "uid") and entry.uid is None:
            entry.uid, n = f"navpoint-{n}", n + 1
    return n


# --- Markdown ------------------------------------------------------------------------------------------------------


def _markdown(src: Path, dst: Path, translate: Translate) -> int:
    from markdown_it import MarkdownIt

    lines = src.read_text(encoding="utf-8").split("\n")
    front = 0                                             # a YAML front matter: kept as it is
    if lines and lines[0].strip() == "---":
        front = next((k + 1 for k in range(1, len(lines)) if lines[k].strip() in ("---", "...")), 0)
    md = MarkdownIt("commonmark").enable("table")
    tokens = md.parse("\n".join(lines[front:]))
    blocks: list[tuple[int, int, str]] = []               # (first line, end line, inline markdown)
    rows: dict[int, list[str]] = {}                       # a table row's line -> its cells' inline markdown
    for k, t in enumerate(tokens):
        if t.type != "inline" or t.map is None:
            continue
        start, end = t.map[0] + front, t.map[1] + front
        if tokens[k - 1].type in ("th_open", "td_open"):
            rows.setdefault(start, []).append(t.content)
        elif t.content.strip():
            blocks.append((start, end, t.content))
    cells = [c for row in rows.values() for c in row]
    texts = [md.renderInline(b[2]) for b in blocks] + [md.renderInline(c) for c in cells]
    out = iter(_as_markdown(h) for h in translate(texts, "html")) if texts else iter(())
    joined: set[int] = set()                              # a paragraph's later lines: it is written on its first
    for start, end, content in blocks:
        first, last = content.split("\n")[0], content.split("\n")[-1]
        at, to = lines[start].find(first), lines[end - 1].rfind(last)
        new = next(out)
        if at >= 0 and to >= 0:
            lines[start] = lines[start][:at] + new + lines[end - 1][to + len(last):]
            joined.update(range(start + 1, end))
    for line, row in rows.items():
        lines[line] = "| " + " | ".join(next(out).replace("|", "\\|") for _ in row) + " |"
    dst.write_text("\n".join(x for k, x in enumerate(lines) if k not in joined), encoding="utf-8")
    return len(texts)


class _Markdown(HTMLParser):
    """Inline HTML (markdown-it's rendering of inline markdown, translated) written back as inline markdown."""

    MARKS = {"em": "*", "strong": "**"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self.links: list[str] = []
        self.code = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        title = f' "{a["title"]}"' if a.get("title") else ""
        if tag in self.MARKS:
            self.out.append(self.MARKS[tag])
        elif tag == "code":
            self.out.append("`")
            self.code = True
        elif tag == "a":
            self.out.append("[")
            self.links.append(f"]({a.get('href') or ''}{title})")
        elif tag == "img":
            self.out.append(f"![{_md_escape(a.get('alt') or '')}]({a.get('src') or ''}{title})")
        else:
            self.out.append(self.get_starttag_text() or "")           # inline HTML of the source, as it was

    def handle_endtag(self, tag: str) -> None:
        if tag in self.MARKS:
            self.out.append(self.MARKS[tag])
        elif tag == "code":
            self.out.append("`")
            self.code = False
        elif tag == "a":
            self.out.append(self.links.pop() if self.links else "")
        elif tag != "img":
            self.out.append(f"</{tag}>")

    def handle_data(self, data: str) -> None:
        data = " ".join(data.split("\n"))
        self.out.append(data if self.code else _md_escape(data))


def _md_escape(text: str) -> str:
    """Text that markdown reads back as the same text (its punctuation that would start markup escaped)."""
    return re.sub(r"([\\`*_\[\]<])", r"\\\1", text)


def _as_markdown(fragment: str) -> str:
    parser = _Markdown()
    parser.feed(fragment)
    parser.close()
    return "".join(parser.out).strip()


# --- OpenDocument: odt and odp ---------------------------------------------------------------------------------------


def _odf(src: Path, dst: Path, translate: Translate) -> int:
    from odf import opendocument, text

    document = opendocument.load(str(src))
    paragraphs = [p for part in (document.body, document.masterstyles) for kind in (text.P, text.H)
                  for p in part.getElementsByType(kind)]
    parts = {id(p): _odf_parts(p) for p in paragraphs}
    lines = [(p, k) for p in paragraphs for k, part in enumerate(parts[id(p)])
             if isinstance(part, list) and any(t.strip() for t, _ in part)]
    asks = [_odf_asked(parts[id(p)][k]) for p, k in lines]
    out = _translated(asks, translate)
    done: dict[int, dict[int, tuple[str, bool]]] = {}
    for i, (p, k) in enumerate(lines):
        done.setdefault(id(p), {})[k] = (out[i], asks[i][0] == "html")
    for p in paragraphs:
        if id(p) in done:
            _odf_rebuild(p, parts[id(p)], done[id(p)])
    document.save(str(dst))
    return len(done)


_ODF_TEXT = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"


def _odf_run(child: Any) -> tuple[str, Any] | None:
    """A paragraph's child as a run: (text, None) for its own text (spaces too), (text, element) for a span or link
    holding text only; None for anything else (a line break, a tab, a frame, a note, a bookmark)."""
    from odf.element import Node

    def spaces(e: Any) -> str:
        return " " * int(e.getAttrNS(_ODF_TEXT, "c") or 1)

    if child.nodeType == Node.TEXT_NODE:
        return child.data, None
    if child.qname == (_ODF_TEXT, "s"):
        return spaces(child), None
    if child.qname in ((_ODF_TEXT, "span"), (_ODF_TEXT, "a")) and all(
            c.nodeType == Node.TEXT_NODE or c.qname == (_ODF_TEXT, "s") for c in child.childNodes):
        return "".join(c.data if c.nodeType == Node.TEXT_NODE else spaces(c) for c in child.childNodes), child
    return None


_ODF_BREAKS = {(_ODF_TEXT, "line-break"), (_ODF_TEXT, "tab")}


def _odf_parts(p: Any) -> list[Any]:
    """A paragraph's children in order, its runs gathered into lines: a list of runs (:func:`_odf_run`) for each line
    (a line break or a tab ends one), and each other child as it is; one inside a line (a frame, a note, a bookmark)
    comes after that line's runs, so that it does not cut a sentence in two."""
    parts: list[Any] = []
    line: list[tuple[str, Any]] | None = None
    for child in p.childNodes:
        run = _odf_run(child)
        if run is None:
            parts.append(child)
            if child.nodeType == child.ELEMENT_NODE and child.qname in _ODF_BREAKS:
                line = None
        elif line is not None:
            line.append(run)
        else:
            line = [run]
            parts.append(line)
    return parts


def _odf_look(e: Any) -> Any:
    return None if e is None else (e.qname, tuple(sorted(e.attributes.items())))


def _odf_asked(runs: list[tuple[str, Any]]) -> tuple[str, str]:
    return _asked([t for t, _ in runs], [_odf_look(e) for _, e in runs])


def _odf_rebuild(p: Any, parts: list[Any], translated: dict[int, tuple[str, bool]]) -> None:
    """The paragraph rebuilt from its parts, in order: each translated line (``translated``: by its place among
    the parts, its translation and whether it is HTML) as plain pieces of the paragraph's own text and the others each
    in a copy of its span or link; a line left as it was (whitespace), and every other child, where it stood."""
    from odf import teletype
    from odf.element import Element

    children = list(p.childNodes)
    p.childNodes = []                      # (odfpy's removeChild refuses text nodes: the children are let go at once)
    for c in children:
        c.parentNode = c.nextSibling = c.previousSibling = None
    for k, part in enumerate(parts):
        if not isinstance(part, list):
            p.appendChild(part)
            continue
        if k not in translated:
            teletype.addTextToElement(p, "".join(t for t, _ in part))
            continue
        translation, marked = translated[k]
        main = _main([t for t, _ in part], [_odf_look(e) for _, e in part])
        for t, i in _pieces(translation, marked, main, len(part)):
            carrier = part[i][1]
            if carrier is None:
                teletype.addTextToElement(p, t)
            else:
                clone = Element(qname=carrier.qname, qattributes=dict(carrier.attributes), check_grammar=False)
                teletype.addTextToElement(clone, t)
                p.appendChild(clone)


# --- Office Open XML: docx and pptx -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Dialect:
    """The elements of one Office Open XML vocabulary that hold a paragraph's text: Word's (docx) or DrawingML's
    (pptx), as Clark names."""

    p: str                   # a paragraph
    r: str                   # a run of text with one formatting
    t: str                   # its text
    rpr: str                 # its formatting
    link: str | None         # the element a linked run sits in (Word's w:hyperlink; DrawingML links inside a:rPr)
    space: bool              # whether a w:t needs xml:space="preserve" to keep its edge spaces


_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
_R_ID = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}id"
WORD = _Dialect(_W + "p", _W + "r", _W + "t", _W + "rPr", _W + "hyperlink", True)
DRAWING = _Dialect(_A + "p", _A + "r", _A + "t", _A + "rPr", None, False)


def _translate_paragraphs(paragraphs: list[Any], d: _Dialect, translate: Translate) -> int:
    """Each paragraph's text translated in place, line by line (:func:`_lines`: a line break or a tab keeps its place
    between them), each line as text, or as HTML where its runs differ (the module's docstring); returns how many
    paragraphs held text."""
    lines = [(p, runs) for p in paragraphs for runs in _lines(p, d)]
    asks = [_as_asked(runs, d) for _, runs in lines]
    out = _translated(asks, translate)
    for i, (_, runs) in enumerate(lines):
        _rebuild(runs, out[i], asks[i][0] == "html", d)
    return len({id(p) for p, _ in lines})


_BREAKS = {_W + "br", _W + "tab", _W + "cr", _A + "br"}


def _lines(p: Any, d: _Dialect) -> list[list[Any]]:
    """A paragraph's text runs cut into lines at its line breaks and tabs (Word keeps them in a run, which is cut in
    two there first: :func:`_cut_at_breaks`; DrawingML between runs). Anything else (a field, an image, a footnote's
    mark) does not cut a sentence in two: it stays where it is, after the line's translation. Lines of whitespace
    alone are left as they are."""
    _cut_at_breaks(p, d)
    lines: list[list[Any]] = [[]]
    for e in p.iter():
        if e.tag == d.r and _is_text_run(e, d):
            lines[-1].append(e)
        elif e.tag in _BREAKS:
            lines.append([])
    return [runs for runs in lines if "".join(t.text or "" for r in runs for t in r.iter(d.t)).strip()]


def _cut_at_breaks(p: Any, d: _Dialect) -> None:
    """Each run holding text beside line breaks or tabs (Word's ``<w:r><w:t/><w:br/><w:t/></w:r>``) replaced by
    runs of one kind each, with its formatting: so that the text on either side is a line of its own."""
    for r in list(p.iter(d.r)):
        kids = [c for c in r if c.tag != d.rpr]
        if not (any(c.tag == d.t for c in kids) and any(c.tag in _BREAKS for c in kids)
                and all(c.tag == d.t or c.tag in _BREAKS for c in kids)):
            continue
        groups: list[list[Any]] = []
        for c in kids:
            if groups and (groups[-1][0].tag == d.t) == (c.tag == d.t):
                groups[-1].append(c)
            else:
                groups.append([c])
        props = r.find(d.rpr)
        for group in groups:
            run = r.makeelement(r.tag, r.attrib)
            if props is not None:
                run.append(copy.deepcopy(props))
            run.extend(group)                                         # (moved from r)
            r.addprevious(run)
        r.getparent().remove(r)


def _docx(src: Path, dst: Path, translate: Translate) -> int:
    import docx

    document = docx.Document(str(src))
    n = _translate_paragraphs(list(_paragraphs(document)), WORD, translate)
    document.save(str(dst))
    return n


def _paragraphs(document: Any) -> Iterator[Any]:
    """Every paragraph element (w:p) of a Word document's body (its tables too), headers and footers."""
    parts = [document.element.body]
    for section in document.sections:
        for part in (section.header, section.footer, section.first_page_header, section.first_page_footer,
                     section.even_page_header, section.even_page_footer):
            if not part.is_linked_to_previous:
                parts.append(part._element)
    for part in parts:                          # (separate trees: a paragraph is in one of them)
        yield from list(part.iter(WORD.p))


def _pptx(src: Path, dst: Path, translate: Translate) -> int:
    """Every paragraph (a:p) of every slide (text boxes, placeholders, tables, groups) and of its speaker notes;
    layouts and masters (the template's own placeholder text) are not touched."""
    import pptx

    deck = pptx.Presentation(str(src))
    paragraphs: list[Any] = []
    for slide in deck.slides:
        paragraphs += list(slide._element.iter(DRAWING.p))
        if slide.has_notes_slide:
            paragraphs += list(slide.notes_slide._element.iter(DRAWING.p))
    n = _translate_paragraphs(paragraphs, DRAWING, translate)
    deck.save(str(dst))
    return n


_HINTS = {_W + "lastRenderedPageBreak"}    # where Word last broke the page: in a text run, not a text of its own


def _is_text_run(r: Any, d: _Dialect) -> bool:
    """Whether a run holds text and nothing else (beside its properties and Word's rendering hints)."""
    kids = [c for c in r if c.tag != d.rpr and c.tag not in _HINTS]
    return bool(kids) and all(c.tag == d.t for c in kids)


def _carrier(r: Any, d: _Dialect) -> Any:
    """What a run is copied as: the run, or the hyperlink around it."""
    parent = r.getparent()
    return parent if d.link and parent is not None and parent.tag == d.link else r


def _look(r: Any, d: _Dialect) -> bytes:
    """A run's formatting, to compare: its properties and the hyperlink it is in."""
    from lxml import etree

    props = r.find(d.rpr)
    link = _carrier(r, d).get(_R_ID) if _carrier(r, d) is not r else None
    return (etree.tostring(props) if props is not None else b"") + (link or "").encode()


def _main(texts: list[str], looks: list[Any]) -> int:
    """The run a paragraph's main look is copied from: the longest run of the look that holds the most text."""
    weight: dict[Any, int] = {}
    for look, text in zip(looks, texts, strict=True):
        weight[look] = weight.get(look, 0) + len(text)
    main = max(weight, key=weight.__getitem__)
    return max((i for i, look in enumerate(looks) if look == main), key=lambda i: len(texts[i]))


def _translated(asks: list[tuple[str, str]], translate: Translate) -> list[str]:
    """The translation of each (format, text) of :func:`_asked`: the plain ones in one call, the HTML ones in another,
    in ``asks``' order."""
    out = [""] * len(asks)
    for fmt in ("text", "html"):
        which = [i for i, (f, _) in enumerate(asks) if f == fmt]
        for i, t in zip(which, translate([asks[i][1] for i in which], fmt), strict=True):
            out[i] = t
    return out


def _asked(texts: list[str], looks: list[Any]) -> tuple[str, str]:
    """("text", the paragraph's text) when its runs look alike, else ("html", each run that differs from the main
    look in a span naming it), for every format whose runs differ in their look (docx, pptx, odt)."""
    if len(set(looks)) == 1:
        return "text", "".join(texts)
    main = looks[_main(texts, looks)]
    return "html", "".join(html.escape(t, quote=False) if look == main else f'<span class="r{i}">{html.escape(t)}</span>'
                           for i, (look, t) in enumerate(zip(looks, texts, strict=True)))


def _as_asked(runs: list[Any], d: _Dialect) -> tuple[str, str]:
    return _asked(["".join(t.text or "" for t in r) for r in runs], [_look(r, d) for r in runs])


def _pieces(translation: str, marked: bool, main: int, n: int) -> list[tuple[str, int]]:
    """A paragraph's translation as (text, run) pieces, in order: the whole of it in run ``main`` when it was plain;
    else each piece of the HTML in the run its span names (:class:`_Spans`; outside a span, or a run that is not one
    of the ``n``: ``main``), neighbours of one run joined (one copy of it each)."""
    if marked:
        parser = _Spans()
        parser.feed(translation)
        parser.close()
        pieces = [(text, main if i is None or i >= n else i) for text, i in parser.pieces if text]
    else:
        pieces = [(translation, main)]
    merged: list[tuple[str, int]] = []
    for text, i in pieces:
        if merged and merged[-1][1] == i:
            merged[-1] = (merged[-1][0] + text, i)
        else:
            merged.append((text, i))
    return merged


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


def _rebuild(runs: list[Any], translation: str, marked: bool, d: _Dialect) -> None:
    """A line's text runs replaced by its translation: one run (a copy of the main look's) for a plain line; for a
    marked one, a copy of each piece's own run, in the translation's order."""
    main = _main(["".join(t.text or "" for t in r) for r in runs], [_look(r, d) for r in runs])
    merged = _pieces(translation, marked, main, len(runs))
    carriers = list(dict.fromkeys(_carrier(r, d) for r in runs))
    anchor = carriers[0]
    for text, i in merged:
        clone = copy.deepcopy(_carrier(runs[i], d))
        inner = [r for r in clone.iter(d.r) if r.find(d.t) is not None]
        for extra in inner[1:]:
            extra.getparent().remove(extra)
        ts = inner[0].findall(d.t) if inner else []
        for extra in ts[1:]:
            inner[0].remove(extra)
        if ts:
            ts[0].text = text
            if d.space:
                ts[0].set("{http://www.w3.org/XML/1998/namespace}space", "preserve")
        anchor.addprevious(clone)
    for c in carriers:
        c.getparent().remove(c)
