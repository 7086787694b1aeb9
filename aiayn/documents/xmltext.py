"""XML whose text is translated in place, every byte around it kept: XHTML (EPUB chapters, .xhtml), OpenDocument's
content, XLIFF's sources.

The file is read once by expat, which says where in the bytes each tag, text, comment and processing instruction
starts; the elements are built from those tokens (:class:`Element`), cut into *segments* (a run of text and inline
elements between two block boundaries, as markup.py cuts HTML), and each segment's byte range is the only thing that
is rewritten. So the XML declaration, the doctype, comments, namespace declarations, attribute quoting, indentation and
every untranslated element come out byte for byte as they went in (a file with nothing to translate is identical).

Inside a segment, an inline element is a paired code (spans.Open/Close: its start and end tags as they were, around
the words aligned with its own); an empty one, one not to translate, a comment, and an inline element that holds a
block (an OpenDocument note or frame, an annotation) are empty codes, placed before the aligned word. An empty code
that holds blocks is an *island*: its blocks are segments of their own, translated too, and written inside it.
"""

from __future__ import annotations

import html
import re
import xml.parsers.expat
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..translation import spans
from .common import DocumentError


@dataclass
class Token:
    """One piece of the file: ``kind`` "start", "end", "text" or "other" (a comment, a processing instruction,
    CDATA's markers), its bytes ``[start, end)``; a tag's element name (``{namespace}local``) and attributes; a text's
    characters."""

    kind: str
    start: int
    end: int = 0
    name: str = ""
    attrs: dict[str, str] = field(default_factory=dict)
    text: str = ""


@dataclass(eq=False)
class Element:
    """An element: its name, attributes, start and end tokens (indices; one token for ``<x/>``'s both) and children
    (elements and text tokens' indices)."""

    name: str
    attrs: dict[str, str]
    first: int
    last: int = -1
    children: list[Element | int] = field(default_factory=list)
    parent: Element | None = None

    @property
    def local(self) -> str:
        return self.name.rsplit("}", 1)[-1]

    def iter(self) -> list[Element]:
        out = [self]
        for c in self.children:
            if isinstance(c, Element):
                out += c.iter()
        return out


class Document:
    """An XML file as tokens and elements (:attr:`root`), with the encoding its bytes are in."""

    def __init__(self, data: bytes, name: str) -> None:
        self.data, self.name = data, name
        self.tokens: list[Token] = []
        self.encoding = _declared(data)
        parser = xml.parsers.expat.ParserCreate(namespace_separator="}")
        parser.ordered_attributes = False
        stack: list[Element] = []
        root: list[Element] = []
        at = lambda: parser.CurrentByteIndex  # noqa: E731

        def start(tag: str, attrs: dict[str, str]) -> None:
            name = "{" + tag if "}" in tag else tag
            el = Element(name, attrs, len(self.tokens), parent=stack[-1] if stack else None)
            self.tokens.append(Token("start", at(), name=name, attrs=attrs))
            (stack[-1].children if stack else root).append(el)
            stack.append(el)

        def end(tag: str) -> None:
            el = stack.pop()
            self.tokens.append(Token("end", at(), name=el.name))
            el.last = len(self.tokens) - 1

        def text(data: str) -> None:
            self.tokens.append(Token("text", at(), text=data))
            if stack:
                stack[-1].children.append(len(self.tokens) - 1)

        def other(*_: object) -> None:
            self.tokens.append(Token("other", at()))
            if stack:
                stack[-1].children.append(len(self.tokens) - 1)

        def skipped(name: str, parameter: bool) -> None:      # &nbsp; of a DTD not read: HTML's, or kept as it is
            known = html.unescape(f"&{name};")
            if parameter or known == f"&{name};":
                other()
            else:
                text(known)

        parser.StartElementHandler, parser.EndElementHandler, parser.CharacterDataHandler = start, end, text
        parser.SkippedEntityHandler = skipped
        parser.CommentHandler = parser.ProcessingInstructionHandler = other
        parser.StartCdataSectionHandler = parser.EndCdataSectionHandler = other
        parser.EntityDeclHandler = _refuse_entities(name)
        parser.SetParamEntityParsing(xml.parsers.expat.XML_PARAM_ENTITY_PARSING_NEVER)
        parser.UseForeignDTD(False)
        try:
            parser.Parse(data, True)
        except xml.parsers.expat.ExpatError as e:
            raise DocumentError(f"{name} is not well-formed XML: line {e.lineno}, column {e.offset + 1}: "
                                f"{xml.parsers.expat.ErrorString(e.code)}") from None
        if not root:
            raise DocumentError(f"{name} has no root element")
        self.root = root[0]
        # each token ends where the next begins (<x/>: its start token is the whole tag, its end token empty)
        for k, tok in enumerate(self.tokens):
            tok.end = self.tokens[k + 1].start if k + 1 < len(self.tokens) else len(data)
        self.elements = {el.first: el for el in self.root.iter()}
        self.rules: Rules | None = None                   # what segments() cut it by

    def raw(self, a: int, b: int) -> bytes:
        """The bytes of tokens ``a`` to ``b`` (inclusive)."""
        return self.data[self.tokens[a].start:self.tokens[b].end]

    def text_of(self, el: Element) -> str:
        """An element's text, all of it."""
        return "".join(self.tokens[c].text if isinstance(c, int) else self.text_of(c) for c in el.children
                       if not isinstance(c, int) or self.tokens[c].kind == "text")

    def escape(self, text: str) -> bytes:
        """Text as this file writes it: XML-escaped, in its encoding (characters it cannot hold as references)."""
        text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        return text.encode(self.encoding, "xmlcharrefreplace")


def _refuse_entities(name: str) -> Callable[..., None]:
    """expat's handler of an entity declaration: a document that declares its own entities is refused there, before
    any is expanded (a billion-laughs file, a few KB that expand to gigabytes; no format aiayn reads needs them)."""
    def refuse(entity: str, *_: object) -> None:
        raise DocumentError(f"{name} declares its own XML entities (<!ENTITY {entity} …>): refused, as an entity can "
                            "expand to gigabytes (a billion-laughs file)")

    return refuse


def _declared(data: bytes) -> str:
    """The encoding an XML file's bytes are in: its byte-order mark, else its declaration's, else UTF-8."""
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return "utf-16-le" if data[:2] == b"\xff\xfe" else "utf-16-be"
    m = re.match(rb"(?:\xef\xbb\xbf)?<\?xml[^>]*encoding\s*=\s*[\"']([A-Za-z0-9._-]+)", data)
    return m.group(1).decode("ascii").lower() if m else "utf-8"


@dataclass
class Rules:
    """What a vocabulary's elements are to segmentation: ``block`` (a boundary: a paragraph, a cell, a line break),
    ``skip`` (not translated: kept as it is), ``space`` (an empty code that is spacing, kept at a segment's edges:
    OpenDocument's ``text:s``)."""

    block: Callable[[Element], bool]
    skip: Callable[[Element], bool] = lambda el: False
    space: Callable[[Element], bool] = lambda el: False


@dataclass(eq=False)
class Segment:
    """A run of text and inline elements between block boundaries: its tokens ``[first, last]`` and its pieces (text,
    and codes whose values are token ranges: (first, last) of an element or of its start or end tag)."""

    first: int
    last: int
    pieces: list[spans.Piece]
    lead: list[spans.Piece] = field(default_factory=list)     # spacing before the text, kept as it is
    trail: list[spans.Piece] = field(default_factory=list)
    out: list[spans.Piece] | None = None                     # its translation's pieces

    def text(self) -> str:
        return "".join(p for p in self.pieces if isinstance(p, str))


def _holds_block(el: Element, rules: Rules, memo: dict[int, bool]) -> bool:
    if id(el) not in memo:
        memo[id(el)] = any(isinstance(c, Element) and (rules.block(c) or _holds_block(c, rules, memo))
                           for c in el.children)
    return memo[id(el)]


def segments(doc: Document, roots: Sequence[Element], rules: Rules) -> list[Segment]:
    """Every segment of the elements ``roots`` (each a container of blocks or text), with text to translate."""
    found: list[Segment] = []
    memo: dict[int, bool] = {}
    doc.rules = rules

    def walk(el: Element) -> None:
        current: list[Element | int] = []
        for child in [*el.children, None]:
            if child is None or isinstance(child, Element) and rules.block(child):
                if current:
                    _segment(doc, current, rules, found, memo, walk)
                current = []
                if child is not None and not rules.skip(child):
                    walk(child)
            else:
                current.append(child)

    for root in roots:
        if rules.block(root) or not rules.skip(root):
            walk(root)
    found.sort(key=lambda s: s.first)
    return [s for s in found if s.text().strip()]


def _segment(doc: Document, nodes: list[Element | int], rules: Rules, found: list[Segment], memo: dict[int, bool],
             walk: Callable[[Element], None]) -> None:
    pieces: list[spans.Piece] = []

    def add(node: Element | int) -> None:
        if isinstance(node, int):
            tok = doc.tokens[node]
            pieces.append(re.sub(r"\s+", " ", tok.text) if tok.kind == "text" else spans.Empty((node, node)))
            return
        if rules.space(node):                                   # spacing: a space to the model, kept as it is
            pieces.extend([" ", spans.Empty((node.first, node.last))])
            return
        if rules.skip(node) or not node.children or _holds_block(node, rules, memo):
            pieces.append(spans.Empty((node.first, node.last)))
            if _holds_block(node, rules, memo) and not rules.skip(node):
                walk(node)                                  # an island: its blocks are segments of their own
            return
        opened = spans.Open((node.first, node.last))
        pieces.append(opened)
        for c in node.children:
            add(c)
        pieces.append(spans.Close(opened))

    for node in nodes:
        add(node)
    first = nodes[0] if isinstance(nodes[0], int) else nodes[0].first
    last = nodes[-1] if isinstance(nodes[-1], int) else nodes[-1].last
    seg = Segment(first, last, _merged(pieces))
    _edges(doc, seg, rules)
    found.append(seg)


def _merged(pieces: list[spans.Piece]) -> list[spans.Piece]:
    out: list[spans.Piece] = []
    for p in pieces:
        if isinstance(p, str) and out and isinstance(out[-1], str):
            out[-1] += p
        elif p != "":
            out.append(p)
    return out


def _edges(doc: Document, seg: Segment, rules: Rules) -> None:
    """Spacing at a segment's ends (whitespace, OpenDocument's text:s) set apart, kept as it is."""
    def spacing(p: spans.Piece) -> bool:
        if isinstance(p, str):
            return not p.strip()
        return isinstance(p, spans.Empty) and p.value[0] in doc.elements and rules.space(doc.elements[p.value[0]])

    while seg.pieces and spacing(seg.pieces[0]):
        seg.lead.append(seg.pieces.pop(0))
    while seg.pieces and spacing(seg.pieces[-1]):
        seg.trail.insert(0, seg.pieces.pop())
    if seg.pieces and isinstance(seg.pieces[0], str) and seg.pieces[0] != seg.pieces[0].lstrip():
        seg.lead.append(seg.pieces[0][:len(seg.pieces[0]) - len(seg.pieces[0].lstrip())])
        seg.pieces[0] = seg.pieces[0].lstrip()
    if seg.pieces and isinstance(seg.pieces[-1], str) and seg.pieces[-1] != seg.pieces[-1].rstrip():
        seg.trail.insert(0, seg.pieces[-1][len(seg.pieces[-1].rstrip()):])
        seg.pieces[-1] = seg.pieces[-1].rstrip()


def render(doc: Document, found: Sequence[Segment], a: int | None = None, b: int | None = None) -> bytes:
    """The bytes of tokens ``[a, b]`` (default: the whole file) with each translated segment in it rewritten."""
    start = 0 if a is None else doc.tokens[a].start
    end = len(doc.data) if b is None else doc.tokens[b].end
    out, at = [], start
    for seg in found:
        s, e = doc.tokens[seg.first].start, doc.tokens[seg.last].end
        if seg.out is None or s < at or e > end:
            continue
        out.append(doc.data[at:s])
        out.append(written(doc, found, [*seg.lead, *seg.out, *seg.trail]))
        at = e
    out.append(doc.data[at:end])
    return b"".join(out)


def written(doc: Document, found: Sequence[Segment], pieces: Sequence[spans.Piece]) -> bytes:
    out = []
    for p in pieces:
        if isinstance(p, str):
            out.append(doc.escape(p))
        elif isinstance(p, spans.Open):
            out.append(doc.raw(p.value[0], p.value[0]))          # its start tag
        elif isinstance(p, spans.Close):
            out.append(doc.raw(p.open.value[1], p.open.value[1]))    # its end tag
        else:
            a, b = p.value
            if a in doc.elements and doc.rules is not None and doc.rules.space(doc.elements[a]) and out and \
                    out[-1].endswith(b" "):
                out[-1] = out[-1][:-1]                          # (the space it stood for, to the model)
            nested = [s for s in found if a < s.first and s.last < b and s.out is not None]
            out.append(render(doc, found, a, b) if nested else doc.raw(a, b))
    return b"".join(out)


def translate(parts: dict[str, tuple[Document, list[Segment]]],
              texts: Callable[[list[list[spans.Piece]]], list[list[spans.Piece]]]) -> dict[str, bytes]:
    """Every segment of every document translated in one call (``texts``: the format's
    :meth:`~.common.Texts.coded`), each document rewritten: part name -> (document, its segments) -> its bytes."""
    found = [seg for _, segs in parts.values() for seg in segs]
    for seg, out in zip(found, texts([s.pieces for s in found]), strict=True):
        seg.out = out
    return {part: render(doc, segs) for part, (doc, segs) in parts.items()}
