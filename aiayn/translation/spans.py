"""The spans of a text that translation cuts and keeps: its sentences, and its protected spans.

**Sentences (:func:`split`, :func:`join`).** A paragraph cut into the sentences a model was trained on, and their
translations joined back as it was written.

A translation model learns from single sentences; given three at once, it translates one or two and drops the rest.
So every input is split first (pipeline.prepare), each sentence is decoded with all the others in one batch, and the
translations are joined with the source's own whitespace (pipeline.finish):

- **Sentences** are sentencex's (Wikimedia's rules for ~250 languages; its wheel needs nothing at run time). It was
  chosen by measurement: ``python -m benchmarks split`` on Universal Dependencies' held-out treebanks, German,
  Chinese, French and English, against pysbd, blingfire and a punctuation baseline (docs/text.md has the table).
  Two rules are added: the full-width stops ``。！？`` end a sentence (where a closing quote or bracket follows them,
  sentencex decides), where sentencex keeps ``。`` and a following digit together; and a full stop after a word of
  four letters or more ends one before a number (``… Kurve. 3 Spieler …``; ``Nr. 3`` and ``S. 3`` stay whole).
- **A line break always ends a sentence**, and is kept (before, between and after the sentences; the spaces around
  it are not): a text of N lines is translated as N lines.
- **Clauses**: a sentence longer than the model takes well (``DecodeConfig.sentence_tokens``) is cut further, at the
  clause boundary (``, ; :`` and their full-width forms, after a dash between spaces) nearest its middle, again until each
  part fits or has no boundary left. It is never truncated.
- **Joining**: the translations are separated by the source's whitespace where it holds a line break; otherwise by
  one space, or none into a language written without spaces between sentences (Chinese, Japanese, Thai).

A sentence is a span of the input (:class:`Pieces`), so word alignments of the parts become the alignment of the
whole input (:func:`merge_links`), and HTML markup (markup.py) is placed on the joined translation as on one
sentence's.

**Protected spans (:func:`find`, :func:`code`).** Protected spans: what a translation must give back unchanged,
whatever the model makes of the words around it.

A placeholder (``%s``, ``{count}``), an inline tag (``<b>``, XLIFF's ``<x/>``), a URL or an e-mail address is not
language: a model that never saw one in training drops or mangles it, and a program that loads the translated
catalogue then crashes. So each is taken out of the text before decoding and put back on the target words aligned
with the source words around it, the way HTML's inline tags are (markup.py, after Firefox Translations): the model
never sees it, and nothing can drop it.

The mechanism, once for every front end and document format:

- :func:`find` names a text's spans of the given :data:`KINDS`;
- :func:`code` turns a text into a list of pieces (text, :class:`Open` / :class:`Close` of a paired code such as
  ``<b>…</b>``, :class:`Empty` for one that holds no text: a placeholder, ``<br/>``, ``<x/>``), and :func:`to_html`
  into an HTML fragment where each code is an element markup.py places (a ``span`` holds words, an ``img`` none);
- after translation, :func:`from_html` reads the fragment back into the same pieces, in the translation's order, and
  :func:`text` writes a string text back with its spans as they were.

Document formats whose inline codes are elements (XLIFF, XHTML, OpenDocument) give their own pieces, each code's
``value`` the element itself; the HTML between is the same.

Two rules keep a catalogue loadable: every code comes back exactly once (markup.py places every element it is given),
and codes whose meaning is their place in the order (``%s``, ``%d`` and ``{}`` without a position or a name: C's and
Python's printf, Python's ``str.format``) keep the source's order among themselves, wherever alignment put them
(:func:`from_html`), as ``msgfmt -c`` requires.
"""

from __future__ import annotations

import bisect
import html
import re
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Any

from . import formatstrings

# printf-style: C, Python (%(name)s), positional (%1$s), PHP, Ruby (%{name}, %<name>s), <inttypes.h>'s macros as
# xgettext writes them (%<PRIuMAX>); %% (a percent sign) too, so that the one beside it is not read as a directive.
# Only where no letter or digit comes before ("100%ig" is German, not a directive) and with no space flag ("50% off"
# is not "% o"): plain text. A catalogue's strings are read by their flags' grammars instead (formatstrings.py:
# kinds "c-format", "python-format", …, where a directive is one wherever it stands).
_PRINTF = (r"%(?:%|\{[A-Za-z_]\w*\}|" + formatstrings.PRI + r"|<[A-Za-z_]\w*>[-+0#]*\d*(?:\.\d+)?[a-zA-Z]|"
           r"(?:\d+\$|\([A-Za-z_][\w.]*\))?[-+0#']*(?:\d+|\*)?(?:\.(?:\d+|\*))?(?:hh|h|ll|l|L|q|j|z|t|I64|I32)?"
           r"[diouxXeEfFgGaAcsSpnrb@])")
PRINTF = re.compile(r"(?<![\w%])" + _PRINTF)
# %name% (Symfony, Windows environment variables)
PERCENT = re.compile(r"%[A-Za-z_][\w.-]+%")                 # (two characters at least: %s% is not one)
# $name, ${name}, $name$ (shell, Perl, JavaScript templates, Windows-style installers)
DOLLAR = re.compile(r"\$\{[^{}\s]*\}|\$[A-Za-z_]\w*\$?")
URL = re.compile(r"\b(?:https?|ftp)://[^\s<>\"']+[^\s<>\"'.,;:!?)\]}]|\bwww\.[\w-]+\.[^\s<>\"']*[^\s<>\"'.,;:!?)\]}]")
EMAIL = re.compile(r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b")
# an inline tag of HTML or XML (<b>, </b>, <br/>, <x id="1"/>, <a href="…">): a paired code where its end follows;
# and WebVTT's timestamp tags (karaoke: <00:00:17.500>)
TAG = re.compile(r"</?[A-Za-z][\w:.-]*(?:\s+[\w:.-]+(?:\s*=\s*(?:\"[^\"]*\"|'[^']*'|[^\s\"'>/=`]+))?)*\s*/?>|"
                 r"<(?:\d+:)?\d{2}:\d{2}\.\d{3}>")
# an override of Advanced SubStation Alpha, as subtitles carry them in SRT: {\an8}, {\i1}
ASS = re.compile(r"\{\\[^{}]*\}")
# {{ name }} (Jinja, Angular, Handlebars, Mustache)
DOUBLE_BRACE = re.compile(r"\{\{.*?\}\}")
# the head of a brace placeholder: {}, {0}, {name}, {0.attr}, {name!r:>10}, {0:N2}, {0,-10}, ICU's {count, plural, …}
_BRACE_HEAD = re.compile(r"\{\s*(?:[A-Za-z_][\w.-]*|\d+)?\s*(?:[!:,][^{}]*)?(?=[{}])")

# a program's name for a thing, of several underscores or capitals (G_FILENAME_ENCODING, KP_Page_Up, SO_RCVBUF):
# not words; a catalogue that marks its accelerators with "_" protects them (documents/catalogs.py)
IDENTIFIER = re.compile(r"\b[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+){2,}\b|\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b")

KINDS = ("printf", "percent", "brace", "dollar", "tags", "ass", "url", "email", "identifier", *formatstrings.flags())
# what a plain text is taken to hold when nothing says otherwise (the command line, both APIs): each kind whose
# pattern does not turn up in ordinary prose; tags are markup only where a format says so (--format html, a PO's
# strings, subtitles)
DEFAULT = ("printf", "percent", "brace", "dollar", "url", "email")


@dataclass(frozen=True, eq=False)
class Open:
    """The start of a paired code (``<b>``): what it holds is text to translate."""

    value: Any


@dataclass(frozen=True, eq=False)
class Close:
    """The end of the paired code opened by ``open`` (the same :class:`Open`)."""

    open: Open


@dataclass(frozen=True, eq=False)
class Empty:
    """A code that holds no text: a placeholder, an empty tag (``<br/>``, ``<x/>``), a URL."""

    value: Any
    ordered: bool = False       # its place among the other ordered codes is its meaning (%s, {}): kept in order


Piece = str | Open | Close | Empty


@dataclass(frozen=True, eq=False)
class Group:
    """Codes that hold no words, taken out of a text as one empty code (a link around a code span or an image: were
    its parts placed apart, the link would come back empty): :func:`grouped`, and written back as they were."""

    pieces: tuple[Piece, ...]


def outside(text: str, kinds: Iterable[str]) -> str:
    """What of ``text`` is not in its protected spans of ``kinds``: what a model reads of it."""
    at, rest = 0, []
    for start, end, _ in find(text, kinds):
        rest.append(text[at:start])
        at = end
    return "".join(rest) + text[at:]


def grouped(pieces: Sequence[Piece], kinds: Iterable[str] = ()) -> list[Piece]:
    """``pieces`` with each paired code that holds no words (only codes, spaces and protected spans of ``kinds``)
    made one :class:`Empty` of a :class:`Group`, ordered where a code in it is; :func:`ungrouped` undoes it."""
    kinds = tuple(kinds)
    out: list[Piece] = []
    opened: list[Open] = []
    for p in pieces:
        out.append(p)
        if isinstance(p, Open):
            opened.append(p)
        elif isinstance(p, Close) and opened and opened[-1] is p.open:
            opened.pop()
            k = next(i for i in range(len(out) - 1, -1, -1) if out[i] is p.open)
            if all(not isinstance(q, str) or not any(ch.isalnum() for ch in outside(q, kinds)) for q in out[k + 1:-1]):
                inner = tuple(out[k:])
                out[k:] = [Empty(Group(inner), any(isinstance(q, Empty) and q.ordered for q in inner))]
    return out


def ungrouped(pieces: Sequence[Piece]) -> list[Piece]:
    """The pieces of :func:`grouped` with each group's codes back in their place."""
    out: list[Piece] = []
    for p in pieces:
        if isinstance(p, Empty) and isinstance(p.value, Group):
            out += ungrouped(p.value.pieces)
        else:
            out.append(p)
    return out


def check(kinds: Iterable[str]) -> tuple[str, ...]:
    """``kinds`` as a tuple, each one of :data:`KINDS`; ValueError naming one that is not."""
    out = tuple(kinds)
    for k in out:
        if k not in KINDS:
            raise ValueError(f"protected span kind {k!r}: expected any of {', '.join(KINDS[:8])} or a gettext "
                             f"format flag ({', '.join(formatstrings.flags())})")
    return out


def parse(text: str) -> tuple[str, ...]:
    """Kinds written as text (a flag, a form field): comma-separated, ``none`` (or nothing) for none."""
    return () if text.strip() in ("", "none") else check(k.strip() for k in text.split(","))


# what a text must hold for a span of some kind to be in it: most texts hold none, and are passed over at this cost
_ANY = re.compile(r"[%{}$<@_]|://|www\.")


def find(text: str, kinds: Iterable[str]) -> list[tuple[int, int, str]]:
    """Each protected span of ``text``: (start, end, kind), in order, none inside another: a format flag's
    directives (formatstrings.py) first, then of the rest the earliest, then the longest."""
    if not _ANY.search(text):
        return []
    kinds = set(kinds)
    found: list[tuple[int, int, str]] = []
    patterns = {"printf": PRINTF, "percent": PERCENT, "dollar": DOLLAR, "url": URL, "email": EMAIL, "tags": TAG,
                "ass": ASS, "identifier": IDENTIFIER}
    for kind, pattern in patterns.items():
        if kind in kinds:
            found += [(m.start(), m.end(), kind) for m in pattern.finditer(text)]
    if "brace" in kinds:
        found += [(m.start(), m.end(), "brace") for m in DOUBLE_BRACE.finditer(text)]
        found += [(s, e, "brace") for s, e in _braces(text)]
    found.sort(key=lambda f: (f[0], -f[1]))
    out: list[tuple[int, int, str]] = []
    for flag in sorted(kinds & set(formatstrings.GRAMMARS)):     # a format's own directives first: they are certain
        out += [(d.start, d.end, flag) for d in formatstrings.directives(text, flag)
                if not any(s < d.end and d.start < e for s, e, _ in out)]
    for f in found:
        if not any(s < f[1] and f[0] < e for s, e, _ in out):
            out.append(f)
    out.sort()
    return out


def _braces(text: str) -> Iterator[tuple[int, int]]:
    """Brace placeholders (:data:`_BRACE_HEAD`), their nested braces balanced (ICU's plural and select)."""
    at = 0
    while (start := text.find("{", at)) >= 0:
        at = start + 1
        if not _BRACE_HEAD.match(text, start):
            continue
        depth, k = 0, start
        while k < len(text):
            depth += {"{": 1, "}": -1}.get(text[k], 0)
            if depth == 0:
                break
            k += 1
        if depth == 0 and k - start < 2000:
            yield start, k + 1
            at = k + 1


def ordered(kind: str, span: str) -> bool:
    """Whether a span's meaning is its place among its like (printf without a position or a name, an empty {})."""
    if kind in formatstrings.GRAMMARS:
        return any(d.ordered for d in formatstrings.directives(span, kind))
    if kind == "printf":
        return span != "%%" and re.fullmatch(r"%[-+ 0#']*(?:\d+|\*)?(?:\.(?:\d+|\*))?(?:[a-zA-Z@]+|"
                                             + formatstrings.PRI + ")", span) is not None
    return kind == "brace" and re.fullmatch(r"\{(?:[!:][^{}]*)?\}", span) is not None


# what may stand between two protected spans that are taken out as one: a few marks, no letter, digit or space
# ("%d.%d", "%s-%s", "%s%s", "{0}/{1}"): the model would see a lone mark between two holes and make a word of it
_BETWEEN = re.compile(r"[^\w\s]{0,3}")


def protected(text: str, kinds: Iterable[str]) -> list[tuple[int, int, str, bool]]:
    """The spans :func:`find` finds, as they are taken out of a text: (start, end, kind, ordered), those only a few
    marks apart (:data:`_BETWEEN`) joined into one (of the first one's kind), which is ordered where any of its parts
    is. Tags are not joined (each is one end of a pair)."""
    out: list[tuple[int, int, str, bool]] = []
    for start, end, kind in find(text, kinds):
        mine = ordered(kind, text[start:end])
        if out and kind != "tags" and out[-1][2] != "tags" and _BETWEEN.fullmatch(text, out[-1][1], start):
            s0, _, k0, was = out[-1]
            out[-1] = (s0, end, k0, was or mine)
        else:
            out.append((start, end, kind, mine))
    for k, (start, end, kind, mine) in enumerate(out):      # 'in quotes': the quotes with it ("'%s'", "„%s“")
        before, after = text[start - 1:start], text[end:end + 1]
        if kind != "tags" and before in _QUOTES and _QUOTES[before] == after and not text[start - 2:start - 1].isalnum() \
                and not text[end + 1:end + 2].isalnum():
            out[k] = (start - 1, end + 1, kind, mine)
    return out


# an opening quote and the closing one that matches it, as programs' messages write them around a placeholder (GNU's
# 'quote' and `quote', German „ “, French « »): taken out with it, as the model drops a quote that encloses nothing
_QUOTES = {"'": "'", '"': '"', "`": "'", "‘": "’", "“": "”", "„": "“", "‚": "‘", "«": "»", "»": "«", "「": "」"}


def code(text: str, kinds: Iterable[str]) -> list[Piece] | None:
    """``text`` as pieces (the module's docstring): each span an :class:`Empty` holding it, a tag with its end in
    the text a pair; None when it holds no span of ``kinds``."""
    spans = protected(text, kinds)
    if not spans:
        return None
    pieces: list[Piece] = []
    opened: list[tuple[str, Open]] = []                   # open tags by name, innermost last
    at = 0
    for start, end, kind, is_ordered in spans:
        if start > at:
            pieces.append(text[at:start])
        span, at = text[start:end], end
        name = re.match(r"</?([A-Za-z][\w:.-]*)", span) if kind == "tags" else None
        if name and span.startswith("</") and any(n == name.group(1) for n, _ in opened):
            while opened:                                 # close it; a tag left open inside it: a code of its own
                n, o = opened.pop()
                if n == name.group(1):
                    o.value[1] = span                     # (an Open of a string holds [start tag, end tag])
                    pieces.append(Close(o))
                    break
                pieces[pieces.index(o)] = Empty(o.value[0])
        elif name and not span.startswith("</") and not span.endswith("/>"):
            o = Open([span, ""])
            opened.append((name.group(1), o))
            pieces.append(o)
        else:
            pieces.append(Empty(span, is_ordered))
    if at < len(text):
        pieces.append(text[at:])
    for _, o in opened:                                   # a tag never closed: a code of its own, where it stood
        pieces[pieces.index(o)] = Empty(o.value[0])
    return pieces


def text(pieces: Sequence[Piece]) -> str:
    """A string text's pieces (:func:`code`) written back: its spans as they were."""
    out = []
    for p in pieces:
        if isinstance(p, str):
            out.append(p)
        elif isinstance(p, Open):
            out.append(p.value[0])
        elif isinstance(p, Close):
            out.append(p.open.value[1])
        elif isinstance(p.value, Group):
            out.append(text(p.value.pieces))
        else:
            out.append(p.value)
    return "".join(out)


def to_html(pieces: Sequence[Piece]) -> tuple[str, list[Open | Empty]]:
    """An HTML fragment of ``pieces`` for markup.py, and its codes by number: a paired code ``<span class="aiayn-N">``
    around what it holds, an empty one ``<img class="aiayn-N">``, text escaped, a line break ``<br>``."""
    codes: list[Open | Empty] = []
    out = []
    for p in pieces:
        if isinstance(p, str):
            out.append("<br>".join(html.escape(line, quote=False) for line in p.split("\n")))
        elif isinstance(p, Close):
            out.append("</span>")
        else:
            out.append(f'<{"span" if isinstance(p, Open) else "img"} class="aiayn-{len(codes)}">')
            codes.append(p)
    return "".join(out), codes


class _Reader(HTMLParser):
    def __init__(self, codes: Sequence[Open | Empty]) -> None:
        super().__init__(convert_charrefs=True)
        self.codes, self.pieces, self.stack = codes, [], []     # type: ignore[var-annotated]
        self.seen: set[int] = set()

    def _code(self, attrs: list[tuple[str, str | None]]) -> int | None:
        m = re.fullmatch(r"aiayn-(\d+)", dict(attrs).get("class") or "")
        n = int(m.group(1)) if m else None
        return n if n is not None and n < len(self.codes) and n not in self.seen else None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        n = self._code(attrs)
        if tag == "br":
            self.pieces.append("\n")
        elif n is not None and tag == "span" and isinstance(self.codes[n], Open):
            self.seen.add(n)
            self.pieces.append(self.codes[n])
            self.stack.append(self.codes[n])
        elif n is not None and isinstance(self.codes[n], Empty):
            self.seen.add(n)
            self.pieces.append(self.codes[n])
        elif tag == "span":
            self.stack.append(None)

    def handle_endtag(self, tag: str) -> None:
        if tag == "span" and self.stack:
            o = self.stack.pop()
            if o is not None:
                self.pieces.append(Close(o))

    def handle_data(self, data: str) -> None:
        self.pieces.append(data)


def from_html(fragment: str, codes: Sequence[Open | Empty]) -> list[Piece]:
    """The pieces of a translated fragment of :func:`to_html`, in its order: every code once (one the translation
    lost, at the end: never dropped), the ordered ones (:class:`Empty`) in the source's order among themselves."""
    reader = _Reader(codes)
    reader.feed(fragment)
    reader.close()
    pieces: list[Piece] = reader.pieces
    for n, c in enumerate(codes):                         # (markup.py places every code: this is a last resort)
        if n not in reader.seen:
            pieces += [c, Close(c)] if isinstance(c, Open) else [c]
    ordered = [c for c in codes if isinstance(c, Empty) and c.ordered]
    slots = [k for k, p in enumerate(pieces) if isinstance(p, Empty) and p.ordered]
    for k, c in zip(slots, ordered, strict=True):
        pieces[k] = c
    return pieces


def kept(source: str, target: str, kinds: Iterable[str]) -> tuple[int, int]:
    """(kept, total): how many of ``source``'s protected spans ``target`` holds unchanged (each as often as the
    source has it)."""
    counts: dict[str, int] = {}
    for s, e, _ in find(source, kinds):
        counts[source[s:e]] = counts.get(source[s:e], 0) + 1
    return sum(min(n, target.count(span)) for span, n in counts.items()), sum(counts.values())


# --- Sentences: a paragraph cut into sentences, and joined back ----------------------------------------------------

# languages written without spaces between sentences (their translations are joined without one)
UNSPACED = frozenset({"zh", "ja", "th", "lo", "km", "my", "bo", "yue", "wuu"})
_FULL_STOP = re.compile(r"[。！？]+(?![」』”’\"')）\]】》〉])")
# a full stop after a word of four letters or more, then a number: sentencex keeps them together (``… eine
# Dschungellandschaft. 2 blonde Mädchen …``), taking the stop for an ordinal's or an abbreviation's
_STOP_NUMBER = re.compile(r"(?<=[^\W\d_]{4}\.)\s+(?=\d)")
_CLAUSE = re.compile(r"(?<=[,;:])\s+|(?<=\s[—–])\s+|(?<=[，；：])")


@dataclass(frozen=True)
class Pieces:
    """An input and where its sentences are in it: ``spans``, each (start, end) in ``text``, whitespace left out."""

    text: str
    spans: tuple[tuple[int, int], ...]

    @property
    def sentences(self) -> list[str]:
        return [self.text[a:b] for a, b in self.spans]


def whole(text: str) -> Pieces:
    """``text`` as one sentence (none when blank): what is decoded when splitting is off or cannot apply."""
    stripped = text.strip()
    if not stripped:
        return Pieces(text, ())
    start = text.index(stripped[0])
    return Pieces(text, ((start, start + len(stripped)),))


def split(text: str, lang: str | None) -> Pieces:
    """``text`` cut into sentences (the module's docstring: by sentencex, at line breaks and full-width stops)."""
    import sentencex

    spans: list[tuple[int, int]] = []
    for line in re.finditer(r"[^\n]+", text):
        pos = line.start()
        for piece in sentencex.segment(_code(lang), line.group()):
            for a, b in _cut(piece):
                _add(spans, text, pos + a, pos + b)
            pos += len(piece)
    return Pieces(text, tuple(spans))


def _code(lang: str | None) -> str:
    """sentencex's code for a language (its rules fall back along its own chains; unknown: English's)."""
    return (lang or "en").lower().replace("_", "-").split("-")[0]


def _cut(piece: str) -> list[tuple[int, int]]:
    """One of sentencex's sentences cut further by aiayn's two rules (the module's docstring), as (start, end)s."""
    cuts = {m.end() for m in _FULL_STOP.finditer(piece) if m.end() < len(piece.rstrip())}
    cuts |= {m.start() for m in _STOP_NUMBER.finditer(piece)}
    edges = [0, *sorted(cuts), len(piece)]
    return list(zip(edges, edges[1:], strict=False))


def _add(spans: list[tuple[int, int]], text: str, a: int, b: int) -> None:
    """The span a..b of ``text`` with the whitespace around it left out (nothing, when it is all whitespace)."""
    while a < b and text[a].isspace():
        a += 1
    while b > a and text[b - 1].isspace():
        b -= 1
    if a < b:
        spans.append((a, b))


def cut_runon(pieces: Pieces, openers: Collection[str]) -> Pieces:
    """Each sentence cut before every word of ``openers`` (config.Norms: words that, capitalized, start a sentence
    and almost nothing else) inside it: sentences run on without their full stops, which no splitter can find. Not
    after a word that ends in a clause or quote mark (``Er sagte: Die``), nor after another opener, nor so that a
    part would be a lone word."""
    if not openers:
        return pieces
    spans: list[tuple[int, int]] = []
    for a, b in pieces.spans:
        words = list(re.finditer(r"\S+", pieces.text[a:b]))
        cuts = [a + w.start() for k, w in enumerate(words) if 2 <= k <= len(words) - 2 and w.group() in openers
                and words[k - 1].group() not in openers and words[k - 1].group()[-1] not in _NO_CUT_AFTER]
        edges = [a, *cuts, b]
        for x, y in zip(edges, edges[1:], strict=False):
            _add(spans, pieces.text, x, y)
    return Pieces(pieces.text, tuple(spans))


def best_cut(sentence: str, starters: dict[str, float]) -> int | None:
    """Where in ``sentence`` a run-on sentence most likely begins (pipeline.guarded): before the word of ``starters``
    (config.Norms: a capitalized word and the share of its uses that start a sentence) with the largest share, under
    cut_runon's rules; None without one."""
    words = list(re.finditer(r"\S+", sentence))
    best: tuple[float, int] | None = None
    for k, w in enumerate(words):
        share = starters.get(w.group())
        if share is not None and 2 <= k <= len(words) - 2 and words[k - 1].group()[-1] not in _NO_CUT_AFTER:
            if best is None or share > best[0]:
                best = (share, w.start())
    return None if best is None else best[1]


# a run-on cut is not made after a word ending in one of these (a clause goes on, a quotation starts)
_NO_CUT_AFTER = frozenset(",;:-–—(\"'„“«»‚‘/&")


def cut_long(pieces: Pieces, too_long: Callable[[str], bool]) -> Pieces:
    """Each sentence for which ``too_long`` is true cut at its clause boundaries (the module's docstring)."""
    spans: list[tuple[int, int]] = []
    for a, b in pieces.spans:
        spans.extend(_clauses(pieces.text, a, b, too_long))
    return Pieces(pieces.text, tuple(spans))


def _clauses(text: str, a: int, b: int, too_long: Callable[[str], bool]) -> list[tuple[int, int]]:
    if not too_long(text[a:b]):
        return [(a, b)]
    cuts = [(a + m.start(), a + m.end()) for m in _CLAUSE.finditer(text[a:b]) if 0 < m.start() and m.end() < b - a]
    if not cuts:
        return [(a, b)]
    middle = (a + b) / 2
    end, start = min(cuts, key=lambda c: abs((c[0] + c[1]) / 2 - middle))
    left: list[tuple[int, int]] = []
    _add(left, text, a, end)
    right: list[tuple[int, int]] = []
    _add(right, text, start, b)
    return [s for part in (*left, *right) for s in _clauses(text, *part, too_long)]


def join(pieces: Pieces, outputs: Sequence[str], target: str | None) -> tuple[str, list[int]]:
    """The translations of the sentences joined as the source was written (the module's docstring), and where each
    starts in the joined text. Line breaks are kept, before the first sentence and after the last as between them
    (a blank input: its line breaks); the spaces around them are not."""
    def kept(gap: str) -> str | None:
        return "\n" * gap.count("\n") or None

    if not pieces.spans:
        return kept(pieces.text) or "", []
    unspaced = _code(target) in UNSPACED
    text, starts = kept(pieces.text[:pieces.spans[0][0]]) or "", []
    for i, out in enumerate(outputs):
        if i:
            gap = pieces.text[pieces.spans[i - 1][1]:pieces.spans[i][0]]
            text += kept(gap) or ("" if unspaced or not text.strip() or not out else " ")
        starts.append(len(text))
        text += out
    return text + (kept(pieces.text[pieces.spans[-1][1]:]) or ""), starts


def _words(text: str) -> list[int]:
    """Where each word (a run of non-space characters: markup.py's and the alignments' unit) starts."""
    return [m.start() for m in re.finditer(r"\S+", text)]


def merge_links(pieces: Pieces, outputs: Sequence[str], joined: str, starts: Sequence[int],
                links: Sequence[str]) -> str:
    """The word alignment (``"i-j ..."``) of the whole input with the joined translation, from each sentence's own."""
    src_words, tgt_words = _words(pieces.text), _words(joined)
    out = []
    for (a, b), out_text, start, piece_links in zip(pieces.spans, outputs, starts, links, strict=True):
        sw, tw = _words(pieces.text[a:b]), _words(out_text)
        for link in piece_links.split():
            i, j = (int(x) for x in link.split("-"))
            if i < len(sw) and j < len(tw):
                gi = bisect.bisect_right(src_words, a + sw[i]) - 1
                gj = bisect.bisect_right(tgt_words, start + tw[j]) - 1
                out.append(f"{gi}-{gj}")
    return " ".join(dict.fromkeys(out))

