"""Office Open XML: Word (.docx) and PowerPoint (.pptx), read and written part by part with lxml (archive.py: the
parts that hold text are parsed, every other entry, images included, copied as a stream).

- **What is translated**: in a docx, the body (tables and text boxes too), headers, footers, footnotes, endnotes and
  comments: every part ``[Content_Types].xml`` names as one of those; in a pptx, every slide (text boxes,
  placeholders, tables, groups) and its speaker notes. Styles, numbering, layouts, masters, charts are not touched.
- **A paragraph** is cut into lines at its line breaks and tabs (each translated on its own, the break kept between
  them). A line's runs that look alike (the same properties) are one text; a run that looks otherwise (bold, a
  font) is a paired code around its words, and a hyperlink (with its runs) another, so each lands on the words
  aligned with its own and a link is never split (spans.py, markup.py). Whatever else sits in the line (a footnote
  or endnote mark, a field from its begin to its end, an image, a text box, a bookmark, a comment's range) is an
  empty code, moved with the words aligned with it; a text box's own paragraphs are translated as paragraphs are. A
  link written as a field (``HYPERLINK``, as LibreOffice writes its links) is a paired code around the text it shows,
  as a hyperlink element is.
  Rebuilt runs are copies of the ones they came from (their properties, the link around them).
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..translation import spans
from .archive import Archive
from .common import DocumentError, Options, Texts


@dataclass(frozen=True)
class Dialect:
    """The elements of one vocabulary that hold a paragraph's text: Word's (docx) or DrawingML's (pptx), as Clark
    names."""

    p: str                       # a paragraph
    r: str                       # a run of text with one formatting
    t: str                       # its text
    rpr: str                     # its formatting
    containers: frozenset[str]   # elements around runs that stay around their words (Word's hyperlink)
    breaks: frozenset[str]       # what cuts a paragraph into lines
    hints: frozenset[str]        # what a text run may hold beside its text (Word's rendering hints)
    last: frozenset[str]         # what stays at a paragraph's end (DrawingML's endParaRPr)
    space: bool                  # whether a w:t needs xml:space="preserve" to keep its edge spaces


W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
XML_SPACE = "{http://www.w3.org/XML/1998/namespace}space"
WORD = Dialect(W + "p", W + "r", W + "t", W + "rPr", frozenset({W + "hyperlink", W + "smartTag", W + "ins"}),
               frozenset({W + "br", W + "tab", W + "cr", W + "ptab"}), frozenset({W + "lastRenderedPageBreak"}),
               frozenset(), True)
DRAWING = Dialect(A + "p", A + "r", A + "t", A + "rPr", frozenset(), frozenset({A + "br"}), frozenset(),
                  frozenset({A + "endParaRPr"}), False)
_CT = "application/vnd.openxmlformats-officedocument."
DOCX_PARTS = {_CT + "wordprocessingml." + k for k in ("document.main+xml", "template.main+xml", "header+xml",
                                                        "footer+xml", "footnotes+xml", "endnotes+xml", "comments+xml")}
DOCX_PARTS |= {"application/vnd.ms-word.document.macroEnabled.main+xml",
               "application/vnd.ms-word.template.macroEnabledTemplate.main+xml"}
PPTX_PARTS = {_CT + "presentationml.slide+xml", _CT + "presentationml.notesSlide+xml"}


def _parser() -> Any:
    from lxml import etree

    return etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False,
                           remove_blank_text=False)


def parts(archive: Archive, wanted: set[str], name: str) -> list[str]:
    """The archive's parts whose content type ([Content_Types].xml's overrides) is one of ``wanted``, in its order."""
    from lxml import etree

    if not archive.has("[Content_Types].xml"):
        raise DocumentError(f"{name} is not an Office Open XML file: it has no [Content_Types].xml")
    try:
        types = etree.fromstring(archive.read("[Content_Types].xml"), _parser())
    except etree.XMLSyntaxError as e:
        raise DocumentError(f"{name}: [Content_Types].xml is damaged ({e})") from None
    found = {o.get("PartName", "").lstrip("/") for o in types if o.get("ContentType") in wanted}
    return [n for n in archive.names if n in found]


def _translate(src: Path, dst: Path, texts: Texts, d: Dialect, wanted: set[str], main: str) -> None:
    from lxml import etree

    with Archive(src, texts.limits, texts.name) as archive:
        names = parts(archive, wanted, texts.name)
        if not any(re.search(main, n) for n in names):
            raise DocumentError(f"{texts.name} has no {main.replace(chr(92), '')} part: it is not a {src.suffix[1:]} "
                                "file")
        trees = {}
        for n in names:
            try:
                trees[n] = etree.fromstring(archive.read(n), _parser())
            except etree.XMLSyntaxError as e:
                raise DocumentError(f"{texts.name}: {n} is damaged ({e})") from None
        lines = [line for tree in trees.values() for p in list(tree.iter(d.p)) for line in _lines(p, d)]
        out = texts.coded([line.pieces for line in lines])
        for line, pieces in zip(lines, out, strict=True):
            line.rebuild(pieces)
        archive.write(dst, {n: etree.tostring(tree, xml_declaration=True, encoding="UTF-8", standalone=True)
                            for n, tree in trees.items()})


def translate_docx(src: Path, dst: Path, texts: Texts, options: Options) -> None:
    _translate(src, dst, texts, WORD, DOCX_PARTS, r"document\.xml$|^word/")


def translate_pptx(src: Path, dst: Path, texts: Texts, options: Options) -> None:
    _translate(src, dst, texts, DRAWING, PPTX_PARTS, r"slides/slide")


# --- a paragraph's lines ---------------------------------------------------------------------------------------


def _is_text_run(r: Any, d: Dialect) -> bool:
    """Whether a run holds text and nothing else (beside its properties and rendering hints)."""
    kids = [c for c in r if c.tag != d.rpr and c.tag not in d.hints]
    return bool(kids) and all(c.tag == d.t for c in kids)


def _is_break(e: Any, d: Dialect) -> bool:
    """A line break or a tab: on its own (DrawingML) or the only thing in a run (Word, after _cut_at_breaks)."""
    if e.tag in d.breaks:
        return True
    kids = [c for c in e if c.tag != d.rpr] if e.tag == d.r else []
    return bool(kids) and all(c.tag in d.breaks for c in kids)


def _cut_at_breaks(p: Any, d: Dialect) -> None:
    """Each run holding text beside line breaks or tabs (``<w:r><w:t/><w:br/><w:t/></w:r>``) replaced by runs of one
    kind each, with its formatting: so that the text on either side is a line of its own."""
    for r in [c for c in p if c.tag == d.r] + [c for k in p if k.tag in d.containers for c in k if c.tag == d.r]:
        kids = [c for c in r if c.tag != d.rpr and c.tag not in d.hints]
        if not (any(c.tag == d.t for c in kids) and any(c.tag in d.breaks for c in kids)
                and all(c.tag == d.t or c.tag in d.breaks for c in kids)):
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


def _text(r: Any, d: Dialect) -> str:
    return "".join(t.text or "" for t in r.iter(d.t))


def _look(r: Any, d: Dialect) -> bytes:
    from lxml import etree

    props = r.find(d.rpr)
    return etree.tostring(props) if props is not None else b""


def _main(runs: list[Any], d: Dialect) -> Any:
    """The run a text's main look is copied from: the longest run of the look that holds the most text."""
    weight: dict[bytes, int] = {}
    for r in runs:
        weight[_look(r, d)] = weight.get(_look(r, d), 0) + len(_text(r, d))
    main = max(weight, key=weight.__getitem__)
    return max((r for r in runs if _look(r, d) == main), key=lambda r: len(_text(r, d)))


class Line:
    """The items of one line of a paragraph (consecutive children of it), as pieces, and how to put a translation
    back in their place."""

    def __init__(self, p: Any, items: list[Any], d: Dialect) -> None:
        self.p, self.items, self.d = p, items, d
        self.pieces = self._pieces(items, p)

    def _pieces(self, items: list[Any], container: Any) -> list[spans.Piece]:
        d = self.d
        runs = [e for e in items if e.tag == d.r and _is_text_run(e, d)]
        main = _main(runs, d) if runs else None
        out: list[spans.Piece] = []
        group: list[Any] = []                                   # a field, from its begin to its end
        for e in items:
            if group or _field(e, d) == "begin":
                group.append(e)
                if _depth(group) == 0:
                    out += self._field(group, container)
                    group = []
                continue
            if e.tag == d.r and _is_text_run(e, d):
                if main is not None and _look(e, d) == _look(main, d):
                    out.append(_text(e, d))
                else:
                    o = spans.Open(("run", e))
                    out += [o, _text(e, d), spans.Close(o)]
            elif e.tag in d.containers and any(c.tag == d.r for c in e):
                o = spans.Open(("container", e, [c for c in e if c.tag == d.r and _is_text_run(c, d)]))
                out += [o, *self._pieces([c for c in e if c.tag not in (d.rpr,)], e), spans.Close(o)]
            else:
                out.append(spans.Empty(("elements", [e])))
        if group:
            out.append(spans.Empty(("elements", list(group))))
        return [p for p in out if p != ""]

    def _field(self, group: list[Any], container: Any) -> list[spans.Piece]:
        """A complex field, from its begin to its end: a link's (LibreOffice writes its links so, ``HYPERLINK`` in
        its instruction) a paired code around the text it shows, which is translated as a ``w:hyperlink``'s is, its
        instruction kept; any other (a page number, a reference, a field inside a field) an empty code, kept whole."""
        kinds = [_field(e, self.d) for e in group]
        if kinds.count("begin") == 1 and kinds.count("separate") == 1 and \
                re.match(r"\s*HYPERLINK\b", "".join(t.text or "" for e in group for t in e.iter(W + "instrText"))):
            cut = kinds.index("separate") + 1
            shown = group[cut:-1]
            if shown and all(e.tag == self.d.r and _is_text_run(e, self.d) for e in shown):
                o = spans.Open(("field", group[:cut], group[-1:], shown))
                return [o, *self._pieces(shown, container), spans.Close(o)]
        return [spans.Empty(("elements", list(group)))]

    def rebuild(self, pieces: list[spans.Piece]) -> None:
        """The line's items replaced by the translation's pieces, where the first of them stood."""
        marker = self.items[0].makeelement("aiayn-marker", {})
        self.items[0].addprevious(marker)
        runs = [r for e in self.items for r in ([e] if e.tag == self.d.r else e.iter(self.d.r))
                if _is_text_run(r, self.d)]
        new = self._elements(pieces, self.items, _main(runs, self.d))
        for e in new:
            marker.addprevious(e)
        kept = set(map(id, new))
        for e in self.items:
            if e.getparent() is not None and id(e) not in kept and not _holds(new, e):
                e.getparent().remove(e)
        marker.getparent().remove(marker)

    def _elements(self, pieces: list[spans.Piece], items: list[Any], fallback: Any) -> list[Any]:
        """Elements for ``pieces`` at one level (the paragraph's, or inside a container); ``fallback``: the run whose
        look carries text where this level has no run of its own."""
        d = self.d
        runs = [e for e in items if e.tag == d.r and _is_text_run(e, d)]
        main = _main(runs, d) if runs else fallback
        out: list[Any] = []
        pieces = _spaces_forward(pieces)
        k = 0
        while k < len(pieces):
            p = pieces[k]
            if isinstance(p, str):
                if p:
                    out.append(_run(main, p, d))
                k += 1
            elif isinstance(p, spans.Empty):
                out += p.value[1]
                k += 1
            elif isinstance(p, spans.Open):
                inner, k = _until_close(pieces, k)
                if p.value[0] == "run":
                    text = "".join(x for x in inner if isinstance(x, str))
                    out.append(_run(p.value[1], text, d))
                    out += [e for x in inner if isinstance(x, spans.Empty) for e in x.value[1]]
                elif p.value[0] == "field":                 # its begin and instruction, its text, its end
                    out += [*p.value[1], *self._elements(inner, p.value[3], main), *p.value[2]]
                else:
                    shell = p.value[1].makeelement(p.value[1].tag, p.value[1].attrib)
                    for c in p.value[1]:
                        if c.tag == d.rpr:
                            shell.append(copy.deepcopy(c))
                    for e in self._elements(inner, list(p.value[1]), main):
                        shell.append(e)
                    out.append(shell)
            else:
                k += 1
        return _merge_runs(out, d)


def _spaces_forward(pieces: list[spans.Piece]) -> list[spans.Piece]:
    """A space alone between two codes given to the text after it (the run or link that follows), so that no run holds
    a space and nothing else."""
    out = list(pieces)
    for k, p in enumerate(out):
        if isinstance(p, str) and p and not p.strip() and k + 1 < len(out):
            nxt = next((j for j in range(k + 1, len(out)) if isinstance(out[j], str)), None)
            if nxt is not None and all(isinstance(x, spans.Open) for x in out[k + 1:nxt]):
                out[k], out[nxt] = "", p + str(out[nxt])
    return out


def _holds(elements: list[Any], e: Any) -> bool:
    """Whether ``e`` is now inside one of ``elements`` (an empty code moved into a rebuilt link)."""
    return any(e in x.iter() for x in elements if x is not e)


def _until_close(pieces: list[spans.Piece], k: int) -> tuple[list[spans.Piece], int]:
    """The pieces inside the Open at ``k``, and the index after its Close."""
    o = pieces[k]
    for j in range(k + 1, len(pieces)):
        p = pieces[j]
        if isinstance(p, spans.Close) and p.open is o:
            return pieces[k + 1:j], j + 1
    return pieces[k + 1:], len(pieces)


def _run(model: Any, text: str, d: Dialect) -> Any:
    """A copy of the run ``model`` (its properties) holding ``text``."""
    run = model.makeelement(model.tag, model.attrib)
    props = model.find(d.rpr)
    if props is not None:
        run.append(copy.deepcopy(props))
    t = run.makeelement(d.t, {})
    t.text = text
    if d.space and text != text.strip():
        t.set(XML_SPACE, "preserve")
    run.append(t)
    return run


def _merge_runs(elements: list[Any], d: Dialect) -> list[Any]:
    """Neighbouring runs of one look (as the translation put them) made one."""
    out: list[Any] = []
    for e in elements:
        prev = out[-1] if out else None
        if prev is not None and e.tag == prev.tag == d.r and _is_text_run(e, d) and _is_text_run(prev, d) \
                and _look(e, d) == _look(prev, d) and e.attrib == prev.attrib:
            t = prev.find(d.t)
            t.text = (t.text or "") + _text(e, d)
            if d.space and t.text != t.text.strip():
                t.set(XML_SPACE, "preserve")
        else:
            out.append(e)
    return out


def _field(e: Any, d: Dialect) -> str | None:
    """A Word run's complex-field character: "begin", "separate", "end", or None."""
    if d is not WORD or e.tag != d.r:
        return None
    char = e.find(W + "fldChar")
    return char.get(W + "fldCharType") if char is not None else None


def _depth(group: list[Any]) -> int:
    depth = 0
    for e in group:
        kind = _field(e, WORD)
        depth += (kind == "begin") - (kind == "end")
    return depth


def _lines(p: Any, d: Dialect) -> list[Line]:
    """A paragraph's lines with text (its own children only: a text box's paragraphs are paragraphs of their own)."""
    _cut_at_breaks(p, d)
    lines: list[list[Any]] = [[]]
    for e in p:
        if e.tag == d.rpr or e.tag == d.p.replace("}p", "}pPr") or e.tag in d.last:
            continue
        if _is_break(e, d):
            lines.append([])
        else:
            lines[-1].append(e)
    out = []
    for items in lines:
        text = "".join(_text(e, d) for e in items if e.tag == d.r and _is_text_run(e, d) or e.tag in d.containers)
        if text.strip():
            out.append(Line(p, items, d))
    return out
