"""XLIFF 1.2 and 2.0 (.xlf, .xliff): each unit's source without a translation gets a target, and nothing else in the
file changes, byte for byte (xmltext.py: the new target is spliced in after its source).

- **What is translated**: XLIFF 1.2's ``trans-unit`` and XLIFF 2.0's ``segment`` whose ``target`` is missing or
  empty, unless it (or a ``group``/``unit``/``file`` around it) says ``translate="no"``.
- **Inline codes** come back on their aligned words: 1.2's ``<g>``, ``<mrk>`` (paired) and ``<x/>``, ``<bx/>``,
  ``<ex/>``, ``<ph>``, ``<bpt>``, ``<ept>``, ``<it>``; 2.0's ``<pc>``, ``<mrk>`` and ``<ph/>``, ``<sc/>``, ``<ec/>``,
  ``<sm/>``, ``<em/>``, each as it was written in the source.
- **Machine output is marked as such**: a new 1.2 target has ``state="needs-review-translation"`` and
  ``state-qualifier="leveraged-mt"``, a 2.0 segment ``state="initial"`` (``Options.review`` off: ``translated``);
  no unit is ever marked ``approved``. The target language is written where the file does not name one
  (1.2's ``target-language``, 2.0's ``trgLang``).
"""

from __future__ import annotations

import re
from pathlib import Path

from . import xmltext
from .common import DocumentError, Options, Texts, needs_review

V12, V20 = "urn:oasis:names:tc:xliff:document:1.2", "urn:oasis:names:tc:xliff:document:2.0"
RULES = xmltext.Rules(block=lambda el: False, skip=lambda el: el.local in ("ph", "bpt", "ept", "it", "cp"))


def _version(doc: xmltext.Document) -> str:
    if doc.root.local != "xliff":
        raise DocumentError(f"{doc.name} is not XLIFF: its root element is <{doc.root.local}>")
    if doc.root.name.startswith("{" + V20) or doc.root.attrs.get("version", "").startswith("2."):
        return "2.0"
    return "1.2"


def _units(doc: xmltext.Document, version: str) -> list[tuple[xmltext.Element, xmltext.Element, xmltext.Element | None]]:
    """(the element the state goes on, its source, its target or None) of each unit to translate."""
    found = []
    holder = "segment" if version == "2.0" else "trans-unit"
    for el in doc.root.iter():
        if el.local != holder or _not_translated(el):
            continue
        kids = [c for c in el.children if isinstance(c, xmltext.Element)]
        source = next((c for c in kids if c.local == "source"), None)
        target = next((c for c in kids if c.local == "target"), None)
        if source is None or target is not None and doc.text_of(target).strip():
            continue
        if target is not None and any(isinstance(c, xmltext.Element) for c in target.children):
            continue
        found.append((el, source, target))
    return found


def _not_translated(el: xmltext.Element | None) -> bool:
    while el is not None:
        if el.attrs.get("translate") == "no":
            return True
        el = el.parent
    return False


def _with_attr(raw: bytes, name: str, value: str, encoding: str) -> bytes:
    """A start tag with one attribute added (before its ``>`` or ``/>``)."""
    end = len(raw.rstrip()) - (2 if raw.rstrip().endswith(b"/>") else 1)
    return raw[:end] + f' {name}="{value}"'.encode(encoding) + raw[end:]


def translate(src: Path, dst: Path, texts: Texts, options: Options) -> None:
    doc = xmltext.Document(texts.read(src), texts.name)
    texts.report.encoding = doc.encoding
    version = _version(doc)
    units = _units(doc, version)
    found = [xmltext.segments(doc, [source], RULES) for _, source, _ in units]
    todo = [(unit, segs[0]) for unit, segs in zip(units, found, strict=True) if segs]
    out = texts.coded([seg.pieces for _, seg in todo])
    edits: list[tuple[int, int, bytes]] = []                 # (start, end, bytes): [start, end) replaced
    enc = doc.encoding
    for ((holder, source, target), seg), pieces, sure in zip(todo, out, texts.confidence, strict=True):
        review = needs_review(options, sure)
        state = ("initial" if review else "translated") if version == "2.0" else \
            ("needs-review-translation" if review else "translated")
        seg.out = pieces
        prefix = re.match(rb"<([\w.-]+:)?source", doc.raw(source.first, source.first))
        tag = (prefix.group(1) or b"").decode(enc) + "target" if prefix else "target"
        attrs = f' state="{state}"' + (' state-qualifier="leveraged-mt"' if version == "1.2" else "")
        if version == "2.0":
            attrs = ""
            if "state" not in holder.attrs:
                start = doc.tokens[holder.first]
                edits.append((start.start, start.end, _with_attr(doc.raw(holder.first, holder.first), "state",
                                                                   state, enc)))
        body = xmltext.written(doc, [], [*seg.lead, *pieces, *seg.trail])
        new = f"<{tag}{attrs}>".encode(enc) + body + f"</{tag}>".encode(enc)
        if target is not None:
            edits.append((doc.tokens[target.first].start, doc.tokens[target.last].end, new))
        else:
            k = source.first                        # the source's indentation (expat cuts text at line breaks)
            while k > 0 and doc.tokens[k - 1].kind == "text" and not doc.tokens[k - 1].text.strip():
                k -= 1
            indent = doc.data[doc.tokens[k].start:doc.tokens[source.first].start]
            end = doc.tokens[source.last].end
            edits.append((end, end, indent + new))
    if todo and options.target:
        edits += _language(doc, version, options.target)
    data = doc.data
    for at, until, new in sorted(edits, key=lambda e: e[0], reverse=True):
        data = data[:at] + new + data[until:]
    dst.write_bytes(data)


def _language(doc: xmltext.Document, version: str, target: str) -> list[tuple[int, int, bytes]]:
    """The target language written where the file names none: 1.2's ``<file target-language>``, 2.0's ``trgLang``."""
    holders = [doc.root] if version == "2.0" else [el for el in doc.root.iter() if el.local == "file"]
    name = "trgLang" if version == "2.0" else "target-language"
    edits = []
    for el in holders:
        if name not in el.attrs:
            tok = doc.tokens[el.first]
            edits.append((tok.start, tok.end, _with_attr(doc.raw(el.first, el.first), name, target, doc.encoding)))
    return edits
