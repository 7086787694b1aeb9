"""XLIFF 1.2 and 2.0 (.xlf, .xliff; Trados's .sdlxliff, memoQ's .mqxliff, Phrase's .mxliff): each unit's source
without a translation gets a target, and nothing else in the file changes, byte for byte (xmltext.py: the new
target is spliced in after its source).

- **What is translated**: XLIFF 1.2's ``trans-unit`` and XLIFF 2.0's ``segment`` whose ``target`` is missing or
  empty, unless ``translate="no"`` says otherwise: the nearest element that says (the unit, a ``group``, the
  ``file``) wins, so a ``translate="yes"`` group inside a ``translate="no"`` file is translated.
- **Segmented units** (1.2's ``seg-source``, as Trados and Okapi write them): each ``<mrk mtype="seg">`` is its own
  text, and its translation fills the target's ``mrk`` of the same ``mid`` where that is empty (Trados writes
  ``<mrk mtype="seg" mid="1"/>``), or a new target that mirrors the ``seg-source``. A segment Trados has locked is
  left; Trados's own record of the segment (``sdl:seg``) says it is a machine draft (``conf="Draft"
  origin="mt"``; review off: ``Translated``).
- **Inline codes** come back on their aligned words: 1.2's ``<g>``, ``<mrk>`` (paired) and ``<x/>``, ``<bx/>``,
  ``<ex/>``, ``<ph>``, ``<bpt>``, ``<ept>``, ``<it>``; 2.0's ``<pc>``, ``<mrk>`` and ``<ph/>``, ``<sc/>``, ``<ec/>``,
  ``<sm/>``, ``<em/>``, each as it was written in the source.
- **Machine output is marked as such**: a new 1.2 target has ``state="needs-review-translation"`` and
  ``state-qualifier="leveraged-mt"``, a 2.0 segment ``state="initial"`` (``Options.review`` off: ``translated``);
  no unit is ever marked ``approved``. memoQ's ``mq:status`` is left for memoQ to set when the file comes back. The
  target language is written where the file does not name one (1.2's ``target-language``, 2.0's ``trgLang``).
- **Nothing to translate is said**: a file where no unit was translated says why (every one has a target, or is
  ``translate="no"``, or locked), and the command line exits non-zero.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from . import xmltext
from .common import DocumentError, Options, Texts, needs_review

V12, V20 = "urn:oasis:names:tc:xliff:document:1.2", "urn:oasis:names:tc:xliff:document:2.0"
RULES = xmltext.Rules(block=lambda el: False, skip=lambda el: el.local in ("ph", "bpt", "ept", "it", "cp"))
Edit = tuple[int, int, bytes]                                # bytes [start, end) replaced


@dataclass
class Place:
    """One text to translate and where its translation goes: ``holder`` the unit (1.2's ``trans-unit``, 2.0's
    ``segment``), ``source`` its source (or a ``seg-source``'s ``mrk``), ``target`` an empty target (or ``mrk``) to
    fill, else None (a new target after the source); ``seg`` Trados's record of the segment."""

    holder: xmltext.Element
    source: xmltext.Element
    target: xmltext.Element | None
    seg: xmltext.Element | None = None


def _version(doc: xmltext.Document) -> str:
    if doc.root.local != "xliff":
        raise DocumentError(f"{doc.name} is not XLIFF: its root element is <{doc.root.local}>")
    if doc.root.name.startswith("{" + V20) or doc.root.attrs.get("version", "").startswith("2."):
        return "2.0"
    return "1.2"


def _kids(el: xmltext.Element, local: str) -> list[xmltext.Element]:
    return [c for c in el.children if isinstance(c, xmltext.Element) and c.local == local]


def _segs(el: xmltext.Element) -> dict[str, xmltext.Element]:
    """The segment markers (``<mrk mtype="seg">``) inside ``el``, by their ``mid``."""
    return {m.attrs.get("mid", ""): m for m in el.iter() if m.local == "mrk" and m.attrs.get("mtype") == "seg"}


def _places(doc: xmltext.Document, version: str, why: dict[str, int]) -> list[Place]:
    """Every text to translate (the module's docstring); ``why`` counts the units left and why."""
    found: list[Place] = []
    for el in doc.root.iter():
        if el.local != ("segment" if version == "2.0" else "trans-unit"):
            continue
        if not translated(el):
            why["translate=no"] += 1
            continue
        source, target = next(iter(_kids(el, "source")), None), next(iter(_kids(el, "target")), None)
        parts = next(iter(_kids(el, "seg-source")), None) if version == "1.2" else None
        if parts is not None and _segs(parts):
            found += _segmented(doc, el, parts, target, why)
        elif source is None or target is not None and doc.text_of(target).strip():
            why["a target already"] += 1
        elif target is not None and any(isinstance(c, xmltext.Element) for c in target.children):
            why["a target of its own codes"] += 1
        else:
            found.append(Place(el, source, target))
    return found


def _segmented(doc: xmltext.Document, unit: xmltext.Element, parts: xmltext.Element, target: xmltext.Element | None,
               why: dict[str, int]) -> list[Place]:
    """A segmented unit's segments to translate: each ``seg-source`` ``mrk`` whose target ``mrk`` is empty (all of
    them where the unit has no target, which is then made whole), those Trados has locked left."""
    defs = {d.attrs.get("id", ""): d for d in unit.iter() if d.local == "seg" and d.name.startswith("{http://sdl.com")}
    theirs = _segs(target) if target is not None else {}
    out = []
    for mid, mrk in _segs(parts).items():
        seg = defs.get(mid)
        if seg is not None and seg.attrs.get("locked") == "true":
            why["locked"] += 1
        elif target is not None and (mid not in theirs or doc.text_of(theirs[mid]).strip()):
            why["a target already"] += 1
        elif doc.text_of(mrk).strip():
            out.append(Place(unit, mrk, theirs.get(mid), seg))
    return out


def translated(el: xmltext.Element | None) -> bool:
    """Whether an element is to be translated: what the nearest element that says ``translate`` says (XLIFF 2.0's
    inheritance; 1.2's groups and units)."""
    while el is not None:
        if "translate" in el.attrs:
            return el.attrs["translate"] != "no"
        el = el.parent
    return True


def _with_attr(raw: bytes, name: str, value: str, encoding: str) -> bytes:
    """A start tag with the attribute ``name`` set to ``value`` (replaced where it has it, else added before its
    ``>`` or ``/>``)."""
    pattern = re.compile(rb"(\s" + re.escape(name.encode(encoding)) + rb"\s*=\s*)(\"[^\"]*\"|'[^']*')")
    if pattern.search(raw):
        return pattern.sub(lambda m: m.group(1) + f'"{value}"'.encode(encoding), raw, count=1)
    end = len(raw.rstrip()) - (2 if raw.rstrip().endswith(b"/>") else 1)
    return raw[:end] + f' {name}="{value}"'.encode(encoding) + raw[end:]


def translate(src: Path, dst: Path, texts: Texts, options: Options) -> None:
    doc = xmltext.Document(texts.read(src), texts.name)
    texts.report.encoding = doc.encoding
    version = _version(doc)
    why = {"a target already": 0, "translate=no": 0, "locked": 0, "a target of its own codes": 0}
    places = _places(doc, version, why)
    found = [xmltext.segments(doc, [p.source], RULES) for p in places]
    todo = [(place, segs[0]) for place, segs in zip(places, found, strict=True) if segs]
    out = texts.coded([seg.pieces for _, seg in todo])
    edits: list[Edit] = []
    made: dict[int, list[tuple[xmltext.Element, bytes]]] = {}   # a segmented unit without a target: its mrks' texts
    for (place, seg), pieces, sure in zip(todo, out, texts.confidence, strict=True):
        review = needs_review(options, sure)
        body = xmltext.written(doc, [], [*seg.lead, *pieces, *seg.trail])
        if place.source.local == "mrk":
            if place.target is not None:
                edits.append(_filled(doc, place.target, body))
            else:
                made.setdefault(id(place.holder), []).append((place.source, body))
            if place.seg is not None:
                edits += _sdl(doc, place.seg, review)
            continue
        edits += _target(doc, version, place, body, review)
    for unit_places in made.values():
        edits += _mirrored(doc, unit_places, needs_review(options, None))
    if todo and options.target:
        edits += _language(doc, version, options.target)
    if not todo:
        reasons = [f"{n} {'has' if n == 1 else 'have'} {w}" if w.startswith("a ") else f"{n} {w}"
                   for w, n in why.items() if n]
        texts.report.notes.append("no unit to translate" + (f": of its units, {', '.join(reasons)}" if reasons else
                                                             ""))
    data = doc.data
    for at, until, new in sorted(edits, key=lambda e: e[0], reverse=True):
        data = data[:at] + new + data[until:]
    dst.write_bytes(data)


def _target(doc: xmltext.Document, version: str, place: Place, body: bytes, review: bool) -> list[Edit]:
    """A unit's new target (replacing its empty one, else after its source), and 2.0's segment's state."""
    enc = doc.encoding
    state = ("initial" if review else "translated") if version == "2.0" else \
        ("needs-review-translation" if review else "translated")
    prefix = re.match(rb"<([\w.-]+:)?source", doc.raw(place.source.first, place.source.first))
    tag = (prefix.group(1) or b"").decode(enc) + "target" if prefix else "target"
    attrs = f' state="{state}" state-qualifier="leveraged-mt"' if version == "1.2" else ""
    edits: list[Edit] = []
    if version == "2.0" and "state" not in place.holder.attrs:
        start = doc.tokens[place.holder.first]
        edits.append((start.start, start.end, _with_attr(doc.raw(place.holder.first, place.holder.first), "state",
                                                         state, enc)))
    new = f"<{tag}{attrs}>".encode(enc) + body + f"</{tag}>".encode(enc)
    if place.target is not None:
        edits.append((doc.tokens[place.target.first].start, doc.tokens[place.target.last].end, new))
    else:
        end = doc.tokens[place.source.last].end
        edits.append((end, end, _indent(doc, place.source) + new))
    return edits


def _indent(doc: xmltext.Document, el: xmltext.Element) -> bytes:
    """The space before an element's start tag on its line (expat cuts text at line breaks)."""
    k = el.first
    while k > 0 and doc.tokens[k - 1].kind == "text" and not doc.tokens[k - 1].text.strip():
        k -= 1
    return doc.data[doc.tokens[k].start:doc.tokens[el.first].start]


def _filled(doc: xmltext.Document, mrk: xmltext.Element, body: bytes) -> Edit:
    """An empty segment marker of a target (``<mrk mtype="seg" mid="1"/>`` or ``<mrk …></mrk>``) holding ``body``."""
    start = doc.raw(mrk.first, mrk.first).rstrip()
    if start.endswith(b"/>"):
        name = start[1:].split(None, 1)[0].rstrip(b"/")              # (its name as written, prefix and all)
        return doc.tokens[mrk.first].start, doc.tokens[mrk.last].end, start[:-2].rstrip() + b">" + body + b"</" + \
            name + b">"
    return doc.tokens[mrk.first].end, doc.tokens[mrk.last].start, body      # (between its tags)


def _mirrored(doc: xmltext.Document, places: list[tuple[xmltext.Element, bytes]], review: bool) -> list[Edit]:
    """A new target for a segmented unit that had none: its ``seg-source`` as written, each ``mrk``'s content its
    translation (one left untranslated: as its source)."""
    parts = places[0][0].parent
    while parts is not None and parts.local != "seg-source":
        parts = parts.parent
    if parts is None:
        return []
    inner_start, inner_end = doc.tokens[parts.first].end, doc.tokens[parts.last].start
    pieces, at = [], inner_start
    for mrk, body in sorted(places, key=lambda p: p[0].first):
        pieces += [doc.data[at:doc.tokens[mrk.first].end], body]
        at = doc.tokens[mrk.last].start
    pieces.append(doc.data[at:inner_end])
    prefix = re.match(rb"<([\w.-]+:)?seg-source", doc.raw(parts.first, parts.first))
    tag = (prefix.group(1) or b"") + b"target" if prefix else b"target"
    state = b"needs-review-translation" if review else b"translated"
    new = b"<" + tag + b' state="' + state + b'" state-qualifier="leveraged-mt">' + b"".join(pieces) + b"</" + tag + b">"
    end = doc.tokens[parts.last].end
    return [(end, end, _indent(doc, parts) + new)]


def _sdl(doc: xmltext.Document, seg: xmltext.Element, review: bool) -> list[Edit]:
    """Trados's record of a segment (``<sdl:seg id="1" …/>``): a machine draft (or translated, review off)."""
    raw = doc.raw(seg.first, seg.first)
    raw = _with_attr(_with_attr(raw, "conf", "Draft" if review else "Translated", doc.encoding), "origin", "mt",
                     doc.encoding)
    tok = doc.tokens[seg.first]
    return [(tok.start, tok.end, raw)]


def _language(doc: xmltext.Document, version: str, target: str) -> list[Edit]:
    """The target language written where the file names none: 1.2's ``<file target-language>``, 2.0's ``trgLang``."""
    holders = [doc.root] if version == "2.0" else [el for el in doc.root.iter() if el.local == "file"]
    name = "trgLang" if version == "2.0" else "target-language"
    edits = []
    for el in holders:
        if name not in el.attrs:
            tok = doc.tokens[el.first]
            edits.append((tok.start, tok.end, _with_attr(doc.raw(el.first, el.first), name, target, doc.encoding)))
    return edits
