"""Web pages: HTML (.html, .htm) through markup.py, XHTML (.xhtml, and an EPUB's chapters: epub.py) through
xmltext.py.

- **HTML**: a page that begins with an XML declaration and is well-formed XML is XHTML (below); any other page is
  one fragment for markup.py: its blocks (the ``title`` among them) translated, inline
  tags on their aligned words, ``script``/``style``/``pre``/``code`` untouched, the XML declaration, doctype and
  comments where they were. It is read in the encoding its byte-order mark, ``<meta charset>`` (or ``http-equiv``) or
  XML declaration names (else UTF-8, else charset-normalizer's guess) and written in UTF-8, the declarations saying so.
- **XHTML**: every byte but the translated text kept (xmltext.py); the ``title`` and the ``body`` translated, by the
  same blocks as HTML; ``script``, ``style``, ``pre``, ``code``, ``translate="no"``, SVG and MathML untouched.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..translation.htmltree import BLOCK, VERBATIM
from . import xmltext
from .common import DocumentError, Options, Texts
from .encoding import bom, decode

XHTML = "http://www.w3.org/1999/xhtml"
_CHARSET = re.compile(rb"""<meta\b[^>]*?charset\s*=\s*["']?\s*([A-Za-z0-9._-]+)""", re.I)
_XML_ENCODING = re.compile(rb"""^(?:\xef\xbb\xbf)?\s*<\?xml[^>]*?encoding\s*=\s*["']([A-Za-z0-9._-]+)""")


def declared(data: bytes) -> str | None:
    """The encoding an HTML page declares in its first KiB (an XML declaration or a ``meta``), if any."""
    head = data[:4096]
    m = _XML_ENCODING.match(head) or _CHARSET.search(head)
    return m.group(1).decode("ascii") if m else None


def translate_html(src: Path, dst: Path, texts: Texts, options: Options) -> None:
    data = texts.read(src)
    if re.match(rb"(?:\xef\xbb\xbf)?\s*<\?xml\b", data):                       # XHTML, if it is XML
        try:
            doc = xmltext.Document(data, texts.name)
        except DocumentError:                               # not well-formed: HTML after all
            doc = None
        if doc is not None:
            return _xhtml(doc, dst, texts)
    text, texts.report.encoding = decode(data, texts.name, None if bom(data) else declared(data))
    out = texts.html([text])[0] if text.strip() else text
    out = re.sub(r"""(<meta\b[^>]*?charset\s*=\s*["']?\s*)[A-Za-z0-9._-]+""", r"\1utf-8", out, count=1, flags=re.I)
    out = re.sub(r"""^(\s*<\?xml[^>]*?encoding\s*=\s*["'])[A-Za-z0-9._-]+""", r"\1UTF-8", out, count=1)
    dst.write_bytes(out.encode("utf-8"))


def _xhtml_rules() -> xmltext.Rules:
    def foreign(el: xmltext.Element) -> bool:
        return "}" in el.name and not el.name.startswith("{" + XHTML + "}")

    return xmltext.Rules(
        block=lambda el: el.local in BLOCK and not foreign(el),
        skip=lambda el: foreign(el) or el.local in VERBATIM or el.attrs.get("translate") == "no")


RULES = _xhtml_rules()


def xhtml_segments(doc: xmltext.Document) -> list[xmltext.Segment]:
    """The segments of an XHTML document: its title's and its body's."""
    roots = [el for el in doc.root.iter() if el.local == "body" and el.parent is doc.root
             or el.local == "title" and el.parent is not None and el.parent.local == "head"]
    return xmltext.segments(doc, roots, RULES)


def translate_xhtml(src: Path, dst: Path, texts: Texts, options: Options) -> None:
    _xhtml(xmltext.Document(texts.read(src), texts.name), dst, texts)


def _xhtml(doc: xmltext.Document, dst: Path, texts: Texts) -> None:
    texts.report.encoding = doc.encoding
    dst.write_bytes(xmltext.translate({"": (doc, xhtml_segments(doc))}, texts.coded)[""])
