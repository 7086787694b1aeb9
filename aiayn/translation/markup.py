"""HTML through translation: the text of an HTML fragment is translated and its inline tags are put around the
target words aligned with the source words they held (word alignments: align.py), as Firefox Translations
(bergamot-translator) does.

The rules, one place:

- **Blocks** (``p``, ``div``, ``li``, ``td``, headings, ``br`` … :data:`BLOCK`) keep their structure: each run of
  text and inline elements between block boundaries is one segment, translated as one line.
- **Inline tags** (``b``, ``i``, ``a``, ``span`` … anything not a block) cover the source words they hold (a tag
  inside a word covers that word) and are placed around the target words aligned with them (a source word with no
  link: its own best target word); where those are not adjacent, around the longest run of adjacent ones, the first
  of equals (measured: 52.64% of one-word tags exactly on eflomal's words, against 49.15% around all of them). A
  tag inside another stays inside it; of two side by side, the later starts after the earlier ends. A tag whose
  words have no aligned word, and an empty or void element (``img``), stands before the target word aligned with
  the source word after it (else at the end). Attributes are kept as written.
- **Not translated**: ``script``, ``style``, ``pre``, ``code``, ``textarea`` and elements with ``translate="no"`` are
  copied as they are (the text of ``script`` and ``style``, which HTML does not escape, byte for byte); an inline one
  is taken out of the text and put back as an empty element is.
- **Depth**: elements nested more than :data:`MAX_DEPTH` deep are refused (:class:`MarkupError`), so that no fragment
  can exhaust the recursion of the code that walks the tree.
- **An inline tag that held words holds at least one** (the one at the same relative place where none of its words
  is aligned; the last word of the sibling before it where that sibling has more than one and the words ran out),
  and an empty one never lands inside a sibling that starts where it stands: no link comes out empty where the
  translation has words enough (where it has not, the tag keeps its own words, untranslated), and none inside
  another. A text between inline elements that only separates them
  (``|``, ``·``, brackets) is kept as it is and placed as an empty element is.
- **Protected spans** (spans.py: placeholders such as ``{name}``, ``%s``, ``%(name)s``, ``{{ name }}``, ``${x}``;
  URLs and e-mail addresses; the kinds a request asks for) come out unchanged: they are taken out of the text (the
  model has not learnt to copy them) and put back as an empty element is; those whose order is their meaning
  (``%s``, ``{}``) keep the source's order among themselves.
- **Comments, the doctype and processing instructions** (``<?xml …?>``) are kept where they stand (one inside a
  segment: as an empty element).
- **Broken HTML** is repaired, not refused: an element left open is closed where its parent closes (or at the end),
  an end tag with no open element is dropped, and the output is always well-formed (every element closed, text
  and attribute values escaped).
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from . import spans
from .htmltree import BLOCK, RAW, VOID, Node, close_tag, open_tag, parse, serialize

CLOSING = ".,;:!?)]}\"'»“”’"           # marks that end a word (a placeholder before them goes inside that word)
# a text between inline elements that only separates them (" | ", " · ", "(", " / "): kept as it is, as a tag is,
# rather than given to the model, which drops it (sentence punctuation is not one: the model needs it; nor is the
# text of an element, a permalink's "¶")
SEPARATOR = re.compile(r"\s*[^\w\s.,;:!?'\"]{1,3}\s*")


def refuse_others(asked: dict[str, bool], flag: str = "format html", unit: str = "fragment") -> None:
    """HTML gives one translation per fragment, its markup placed by the word alignment: ValueError naming the other
    options a request asked for (``asked``: each, in its front end's words, and whether it was; ``flag`` and
    ``unit``: how that front end names the format and a fragment). One rule for the CLI and both APIs."""
    if any(asked.values()):
        raise ValueError(f"{flag} gives one translation per {unit} (an HTML fragment), its markup placed by the word "
                         f"alignment: it takes no {', '.join(asked)}")


# --- a segment: text and inline elements between two block boundaries ------------------------------------------------


@dataclass
class Segment:
    """One line to translate: its ``text``, and each inline element (or a verbatim one, as a placeholder) with the
    character range of the text it held and its depth (its parent: ``parent``, an index into ``tags`` or -1)."""

    text: str = ""
    tags: list[tuple[Node, int, int, int]] = field(default_factory=list)    # node, start, end, parent
    nodes: list[Node | str] = field(default_factory=list)                   # as parsed (kept if not translated)
    kinds: tuple[str, ...] = spans.DEFAULT                                  # the protected spans of its text

    glues: list[str] = field(default_factory=list)                          # per tag, what an empty one touched

    def kept(self, markup: str, parent: int, ordered: bool = False) -> None:
        """Markup taken out of the text (a protected span, a verbatim element): an empty element here; ``ordered``:
        its place among the ordered ones is its meaning (spans.py)."""
        attrs: list[tuple[str, str | None]] = [("", markup)]
        if ordered:
            attrs.append(("ordered", ""))
        self.tags.append((Node(RAW, attrs), len(self.text), len(self.text), parent))

    def glue(self) -> None:
        """What each empty tag touched in the source (_glue), so that it touches the same in the translation; one
        that an opening mark comes before and a space after ("(%d Dateien)") gives the model "(Dateien)"."""
        self.glues = []
        for t in range(len(self.tags)):
            node, start, end, _ = self.tags[t]
            glue = _glue(self.text[start - 1:start], self.text[end:end + 1]) if start == end else ""
            if glue.startswith("into:") and self.text[end:end + 1] == " " and node.tag in (RAW, "img"):
                self.text = self.text[:end] + self.text[end + 1:]
                self.tags = [(n, s - (s > end), e - (e > end), p) for n, s, e, p in self.tags]
                glue += " "
            elif glue == "before" and self.text[start - 1:start] == " " and self.text[end:end + 1] in CLOSING \
                    and start > 1 and node.tag in (RAW, "img"):     # ("über %s.": the model reads "über.")
                marks = len(self.text[end:]) - len(self.text[end:].lstrip(CLOSING))
                self.text = self.text[:start - 1] + self.text[start:]
                self.tags = [(n, s - (s >= start), e - (e >= start), p) for n, s, e, p in self.tags]
                glue = f"tail:{marks}"
            self.glues.append(glue)

    def add(self, node: Node | str, parent: int) -> None:
        if isinstance(node, str):
            text, at = re.sub(r"\s+", " ", node), 0
            if SEPARATOR.fullmatch(text) and parent < 0:             # " | " between two links: kept as it is
                self.text += " " if text[:1] == " " and self.text[-1:] not in ("", " ") else ""
                self.kept(html.escape(text.strip(), quote=False), parent)
                self.text += " " if text[-1:] == " " else ""
                return
            for start, end, _, ordered in spans.protected(text, self.kinds):
                self.text += text[at:start]
                self.kept(html.escape(text[start:end], quote=False), parent, ordered)
                at = end
            self.text += text[at:]
            return
        if node.verbatim() or node.tag == RAW:
            self.kept(serialize(node), parent)
            return
        start, index = len(self.text), len(self.tags)
        self.tags.append((node, start, start, parent))
        for c in node.children:
            self.add(c, index)
        self.tags[index] = (node, start, len(self.text), parent)


def _word_spans(text: str) -> list[tuple[int, int]]:
    return [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]


def place(seg: Segment, target: str, links: Sequence[tuple[int, int]], more: Sequence[tuple[int, int]] = ()) -> str:
    """The segment's translation ``target`` with its inline tags put around the target words aligned (``links``:
    source word - target word) with the words they held (a word with no link there by ``more``: each source word's
    own best target word); well-formed HTML."""
    src_words, out_words = _word_spans(seg.text), target.split()
    aligned: dict[int, set[int]] = {}
    for i, j in links:
        if j < len(out_words):
            aligned.setdefault(i, set()).add(j)
    second: dict[int, set[int]] = {}
    for i, j in more:
        if j < len(out_words):
            second.setdefault(i, set()).add(j)
    places: list[tuple[int, int]] = []                         # per tag: target words [a, b), a == b: before a
    fills: dict[int, str] = {}                                 # a tag that held words and got none: its source text
    for _, start, end, parent in seg.tags:                     # parents before children, siblings in source order
        held = [i for i, (s, e) in enumerate(src_words) if s < end and e > start] if end > start else []
        js = sorted({j for i in held for j in aligned.get(i) or second.get(i) or ()})
        if js:                                                 # the longest run of adjacent words, the first
            runs: list[list[int]] = []
            for j in js:
                if runs and j == runs[-1][-1] + 1:
                    runs[-1].append(j)
                else:
                    runs.append([j])
            best = max(runs, key=len)
            a, b = best[0], best[-1] + 1
        elif held:                                             # words, none aligned: as many at the same place
            a = min(len(out_words) - 1, held[0] * len(out_words) // max(1, len(src_words)))
            b = a + min(len(held), len(out_words) - a)
        else:
            a = b = _spot(seg.glues[len(places)] if len(places) < len(seg.glues) else "", start, end, src_words,
                          aligned, len(out_words))
        lo, hi = places[parent] if parent >= 0 else (0, len(out_words))
        least = 1 if held and hi > lo else 0                   # a tag that held words holds one
        a, b = _inside(min(a, hi - least), max(b, a + least), lo, hi)     # inside its parent
        moved = True
        while moved:                                           # after the earlier siblings it overlaps
            moved = False
            for k, (sa, sb) in enumerate(places):
                if seg.tags[k][3] == parent and sa < sb and a < sb and sa < max(b, a + 1) and a != sb:
                    a, b = _inside(sb, max(b, sb + least), lo, hi)
                    moved = a != hi
        if least and a == b and a > lo:                        # no word left: one from the sibling before it
            before = [k for k, (sa, sb) in enumerate(places) if seg.tags[k][3] == parent and sb == a and sb - sa > 1
                      and not any(seg.tags[c][3] == k for c in range(len(places)))]
            if before:
                sa, sb = places[before[-1]]
                places[before[-1]] = (sa, sb - 1)
                a, b = sb - 1, sb
        if held and a == b:                                   # no word at all: its own words, untranslated
            fills[len(places)] = " ".join(seg.text[start:end].split())
        places.append((a, b))
    _in_order(seg, places)
    return _emit(seg, out_words, places, fills)


def _spot(glue: str, start: int, end: int, src_words: list[tuple[int, int]], aligned: dict[int, set[int]],
          n: int) -> int:
    """Where an empty tag goes among the ``n`` target words: before the word aligned with the next source word, or
    where its glue (Segment.glue) puts it."""
    def near(keep: Callable[[int, int], bool]) -> list[int]:
        return [j for i, (s, e) in enumerate(src_words) if keep(s, e) for j in aligned.get(i, ())]

    later = sorted(near(lambda s, e: s >= end))
    at = later[0] if later else n
    if glue == "after":                                        # (100%%: after the word aligned with 100)
        prev = near(lambda s, e: e == start)
        return max(prev) + 1 if prev else at
    if glue.startswith("into:"):                               # ("{1}": into the word aligned with the quotes)
        into = near(lambda s, e: s < start <= e)
        return min(into) if into else at
    if glue.startswith("tail:"):                               # ("über %s.": before the mark ending that word)
        into = near(lambda s, e: s < start < e)
        return max(into) if into else at
    return at


def _in_order(seg: Segment, places: list[tuple[int, int]]) -> None:
    """The ordered placeholders (``%s``, ``{}``) given back in the source's order, at the places alignment chose."""
    ordered = [t for t, (node, _, _, _) in enumerate(seg.tags) if node.tag == RAW and _attr(node, "ordered") == ""]
    markups = [seg.tags[t][0].attrs[0] for t in ordered]
    for t, markup in zip(sorted(ordered, key=lambda t: (places[t][0], t)), markups, strict=True):
        node, start, end, parent = seg.tags[t]
        seg.tags[t] = (Node(RAW, [markup, *node.attrs[1:]]), start, end, parent)


def _attr(node: Node, name: str) -> str | None:
    return next((v or "" for k, v in node.attrs if k == name), None) if node.tag == RAW else None


def _tail(seg: Segment, t: int) -> str:
    """The punctuation right after a tag that ended inside a word ("<a>Ende</a>."), which the word's translation
    carries: put back outside the tag."""
    _, start, end, _ = seg.tags[t]
    m = re.match(r"[.,;:!?)]+", seg.text[end:]) if start < end and seg.text[end - 1:end].strip() else None
    return html.escape(m.group(0), quote=False) if m else ""


def _glue(before: str, after: str) -> str:
    """How a protected span touched its neighbours in the source, so that it touches them in the translation:
    "after" the word it ends (100%%, Datei{1}), "into:C" a word that starts with the punctuation C before it ("{1}",
    (%d), "before" the word or mark it comes before ({count}x, %name%!); "" with spaces either side."""
    if before and (before.isalnum() or before == "_"):
        return "after"
    if before and not before.isspace():
        return "into:" + before
    if after and not after.isspace():
        return "before"
    return ""


def _inside(a: int, b: int, lo: int, hi: int) -> tuple[int, int]:
    a = min(max(a, lo), hi)
    return a, min(max(b, a), hi)


class _Out:
    """A segment's output as _emit writes it: words (each with its space), tags, and empty tags (protected spans,
    void elements), so that a glued one touches its word and two that were apart in the source do not run together
    ("%count%%s" would read as other placeholders)."""

    def __init__(self) -> None:
        self.chunks: list[str] = []
        self.empties: dict[int, int] = {}                      # chunk -> where its tag stood in the source

    def word(self, text: str) -> None:
        self.chunks.append(text + " ")

    def tag(self, text: str) -> None:
        self.chunks.append(text)

    def empty(self, markup: str, glue: str, last: bool, source: int) -> None:
        if glue == "after":                                    # no space between it and the word it ends
            k = len(self.chunks) - 1
            while k >= 0 and self.chunks[k].startswith("</"):
                k -= 1
            if k >= 0 and k not in self.empties and self.chunks[k].endswith(" "):
                self.chunks[k] = self.chunks[k][:-1]
        k = len(self.chunks) - 1
        if k in self.empties and not self.chunks[k].endswith(" ") and self.empties[k] != source:
            self.chunks[k] += " "
        self.chunks.append(markup + ("" if glue == "before" or last else " "))
        self.empties[len(self.chunks) - 1] = source

    def text(self) -> str:
        text, before = "".join(self.chunks), ""
        while text != before:                                  # spaces out of the elements they end
            text, before = re.sub(r" (</[^>]+>)", r"\1 ", text), text
        return text.strip()


def _emit(seg: Segment, words: list[str], places: list[tuple[int, int]], fills: dict[int, str] | None = None) -> str:
    """The words with the tags opened and closed at their places' ends, outermost first (places nest by place()); an
    empty tag at a place where a sibling starts comes before that sibling (inside the ancestor that starts there)."""
    def key(t: int) -> tuple[int, float, int]:
        a, b = places[t]
        if a < b:
            return a, -b, t
        parent = seg.tags[t][3]
        while parent >= 0 and places[parent][0] != a:
            parent = seg.tags[parent][3]
        return a, (-places[parent][1] + 0.5 if parent >= 0 else -float("inf")), t

    order = sorted(range(len(places)), key=key)
    out, open_ = _Out(), list[int]()

    def close_until(j: int) -> None:
        while open_ and places[open_[-1]][1] <= j:
            t = open_.pop()
            tail = _tail(seg, t)                                # "<a>Ende</a>.": the mark stays after the tag
            c = out.chunks
            last = next((k_ for k_ in range(len(c) - 1, -1, -1) if not c[k_].startswith("<")), None)
            if tail and last is not None and c[last].endswith(tail + " ") and len(c[last]) > len(tail) + 1:
                c[last] = c[last][:-len(tail) - 1]
                out.tag(close_tag(seg.tags[t][0]) + tail + " ")
            else:
                out.tag(close_tag(seg.tags[t][0]))

    k = 0
    for j in range(len(words) + 1):
        close_until(j)
        inside, tail, marks = "", "", 0                         # glued into this word: after its first character,
        while k < len(order) and places[order[k]][0] == j:     # before its last marks
            t = order[k]
            node, glue = seg.tags[t][0], seg.glues[t] if t < len(seg.glues) else ""
            if places[t][1] != j:
                out.tag(open_tag(node))
                open_.append(t)
            elif glue.startswith("into:") and j < len(words) and words[j].startswith(glue[5:].rstrip(" ")) and \
                    len(words[j]) > 1:
                inside += (" " if inside and not inside.endswith(" ") else "") + open_tag(node) + \
                    (" " if glue.endswith(" ") else "")
            elif glue.startswith("tail:") and j < len(words):
                tail, marks = tail + " " + open_tag(node), int(glue[5:])
            else:                                               # empty here: opened and closed at once
                fill = html.escape((fills or {}).get(t, ""), quote=False)
                out.empty(open_tag(node) + fill + close_tag(node), glue, j == len(words), seg.tags[t][1])
            k += 1
        if j < len(words):
            out.word(_glued(words[j], inside, tail, marks))
    close_until(len(words) + 1)
    while open_:
        out.tag(close_tag(seg.tags[open_.pop()][0]))
    return out.text()


def _glued(word: str, inside: str, tail: str, marks: int) -> str:
    """A target word, escaped, with the protected spans glued into it: ``inside`` after its first character ("{1}"),
    ``tail`` before the last ``marks`` marks that end it (over %s.), or after it if it ends in fewer."""
    if tail:
        ending = len(word) - len(word.rstrip(CLOSING))
        cut = len(word) - marks if 0 < marks <= ending else len(word)
        word = word[:cut] + "\1" + word[cut:]
    if inside:
        word = word[:1] + "\0" + word[1:]
    return html.escape(word, quote=False).replace("\0", inside).replace("\1", tail)


# --- a fragment --------------------------------------------------------------------------------------------------


class Fragment:
    """An HTML fragment cut into what stays (markup) and the segments to translate: :attr:`lines` (their text) go to
    the translator; :meth:`render` puts back its (translation, word alignment, each source word's own link)."""

    def __init__(self, fragment: str, kinds: tuple[str, ...] = spans.DEFAULT) -> None:
        self.segments: list[Segment] = []
        self.pieces = _segment(parse(fragment), self.segments, kinds)
        for seg in self.segments:
            seg.glue()
        self.todo = [seg for seg in self.segments if seg.text.strip()]
        self.lines = [" ".join(seg.text.split()) for seg in self.todo]

    def render(self, translated: list[tuple[str, str, str]]) -> str:
        from ..decoding.align import parse_links

        results = {id(seg): r for seg, r in zip(self.todo, translated, strict=True)}

        def one(item: Node | Segment | str) -> str:
            if isinstance(item, str):
                return item
            if isinstance(item, Node):
                return serialize(item)
            if id(item) not in results:                        # nothing to translate: as it was
                return "".join(serialize(n) for n in item.nodes)
            text, links, more = results[id(item)]
            lead, trail = (" " if x[:1].isspace() else "" for x in (item.text, item.text[::-1]))
            return lead + place(_stripped(item), text, parse_links(links), parse_links(more)) + trail

        return "".join(one(x) for x in self.pieces)


def split(fragments: list[str], kinds: tuple[str, ...] = spans.DEFAULT) -> tuple[list[Fragment], list[str]]:
    """The fragments cut up (``kinds``: the protected spans of their text), and all their segments' lines, in order
    (for one translation call)."""
    parts = [Fragment(f, kinds) for f in fragments]
    return parts, [x for p in parts for x in p.lines]


def join(parts: list[Fragment], translated: list[tuple[str, str, str]]) -> list[str]:
    """Each fragment with its segments' (translation, word alignment) put back, in the order :func:`split` gave."""
    out, at = [], 0
    for p in parts:
        out.append(p.render(translated[at : at + len(p.lines)]))
        at += len(p.lines)
    return out


def _stripped(seg: Segment) -> Segment:
    """The segment with its text stripped at both ends (the tags' ranges shifted to match)."""
    cut = len(seg.text) - len(seg.text.lstrip())
    text = seg.text.strip()
    tags = [(n, max(0, s - cut), max(0, min(len(text), e - cut)), p) for n, s, e, p in seg.tags]
    return Segment(text, tags, seg.nodes, seg.kinds, seg.glues)


def _holds_block(node: Node) -> bool:
    """Whether an inline element holds a block (``<a>`` around a heading): then it is one as well, its blocks kept
    in their order and its text translated in them, rather than all of it one line."""
    return not node.verbatim() and any(isinstance(c, Node) and (c.tag in BLOCK or _holds_block(c))
                                       for c in node.children)


def _segment(node: Node, segments: list[Segment], kinds: tuple[str, ...]) -> list[Node | Segment | str]:
    """The node's content as HTML pieces (str), verbatim nodes and segments to translate, in order."""
    out: list[Node | Segment | str] = []
    current: Segment | None = None
    for child in node.children:
        if isinstance(child, Node) and (child.tag in BLOCK or child.tag in ("script", "style", "pre") or
                                        _holds_block(child)):
            current = None
            if child.verbatim() or child.tag in VOID:
                out.append(child)
                continue
            out.append(open_tag(child))
            out.extend(_segment(child, segments, kinds))
            out.append(close_tag(child))
        else:
            if current is None:
                current = Segment(kinds=kinds)
                segments.append(current)
                out.append(current)
            current.add(child, -1)
            current.nodes.append(child)
    return out
