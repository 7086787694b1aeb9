"""Protected spans: what a translation must give back unchanged, whatever the model makes of the words around it.

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

import html
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Any

# printf-style: C, Python (%(name)s), positional (%1$s), PHP, Ruby (%{name}, %<name>s); %% (a percent sign) too,
# so that the one beside it is not read as a directive. In plain text ("printf"), only where no letter or digit comes
# before: "100%ig" is German, not a directive; a catalogue's c-format strings ("c-format"), wherever it stands.
_PRINTF = (r"%(?:%|\{[A-Za-z_]\w*\}|<[A-Za-z_]\w*>[-+ 0#]*\d*(?:\.\d+)?[a-zA-Z]|(?:\d+\$|\([A-Za-z_][\w.]*\))?"
           r"[-+0#]*(?:\d+|\*)?(?:\.(?:\d+|\*))?(?:hh|h|ll|l|L|q|j|z|t|I64|I32)?[diouxXeEfFgGaAcsSpnrb@])")
PRINTF = re.compile(r"(?<![\w%])" + _PRINTF)
PRINTF_STRICT = re.compile(_PRINTF + r"|%L?\d+%?")         # and Qt's, KDE's and Boost's %1, %L1, %1%
# %name% (Symfony, Windows environment variables)
PERCENT = re.compile(r"%[A-Za-z_][\w.-]+%")                 # (two characters at least: %s% is not one)
# $name, ${name}, $name$ (shell, Perl, JavaScript templates, Windows-style installers)
DOLLAR = re.compile(r"\$\{[^{}\s]*\}|\$[A-Za-z_]\w*\$?")
URL = re.compile(r"\b(?:https?|ftp)://[^\s<>\"']+[^\s<>\"'.,;:!?)\]}]|\bwww\.[\w-]+\.[^\s<>\"']*[^\s<>\"'.,;:!?)\]}]")
EMAIL = re.compile(r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b")
# an inline tag of HTML or XML (<b>, </b>, <br/>, <x id="1"/>, <a href="…">): a paired code where its end follows
TAG = re.compile(r"</?[A-Za-z][\w:.-]*(?:\s+[\w:.-]+(?:\s*=\s*(?:\"[^\"]*\"|'[^']*'|[^\s\"'>/=`]+))?)*\s*/?>")
# an override of Advanced SubStation Alpha, as subtitles carry them in SRT: {\an8}, {\i1}
ASS = re.compile(r"\{\\[^{}]*\}")
# {{ name }} (Jinja, Angular, Handlebars, Mustache)
DOUBLE_BRACE = re.compile(r"\{\{.*?\}\}")
# the head of a brace placeholder: {}, {0}, {name}, {0.attr}, {name!r:>10}, {0:N2}, {0,-10}, ICU's {count, plural, …}
_BRACE_HEAD = re.compile(r"\{\s*(?:[A-Za-z_][\w.-]*|\d+)?\s*(?:[!:,][^{}]*)?(?=[{}])")

KINDS = ("printf", "c-format", "percent", "brace", "dollar", "tags", "ass", "url", "email")
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


def check(kinds: Iterable[str]) -> tuple[str, ...]:
    """``kinds`` as a tuple, each one of :data:`KINDS`; ValueError naming one that is not."""
    out = tuple(kinds)
    for k in out:
        if k not in KINDS:
            raise ValueError(f"protected span kind {k!r}: expected any of {', '.join(KINDS)}")
    return out


def parse(text: str) -> tuple[str, ...]:
    """Kinds written as text (a flag, a form field): comma-separated, ``none`` (or nothing) for none."""
    return () if text.strip() in ("", "none") else check(k.strip() for k in text.split(","))


# what a text must hold for a span of some kind to be in it: most texts hold none, and are passed over at this cost
_ANY = re.compile(r"[%{$<@]|://|www\.")


def find(text: str, kinds: Iterable[str]) -> list[tuple[int, int, str]]:
    """Each protected span of ``text``: (start, end, kind), in order, none inside another (the earliest, then the
    longest, wins)."""
    if not _ANY.search(text):
        return []
    kinds = set(kinds)
    found: list[tuple[int, int, str]] = []
    patterns = {"printf": PRINTF, "c-format": PRINTF_STRICT, "percent": PERCENT, "dollar": DOLLAR, "url": URL,
                "email": EMAIL, "tags": TAG, "ass": ASS}
    for kind, pattern in patterns.items():
        if kind in kinds:
            found += [(m.start(), m.end(), kind) for m in pattern.finditer(text)]
    if "brace" in kinds:
        found += [(m.start(), m.end(), "brace") for m in DOUBLE_BRACE.finditer(text)]
        found += [(s, e, "brace") for s, e in _braces(text)]
    found.sort(key=lambda f: (f[0], -f[1]))
    out: list[tuple[int, int, str]] = []
    for f in found:
        if not out or f[0] >= out[-1][1]:
            out.append(f)
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
    if kind in ("printf", "c-format"):
        return span != "%%" and re.fullmatch(r"%[-+ 0#]*(?:\d+|\*)?(?:\.(?:\d+|\*))?[a-zA-Z@]+", span) is not None
    return kind == "brace" and re.fullmatch(r"\{(?:[!:][^{}]*)?\}", span) is not None


def code(text: str, kinds: Iterable[str]) -> list[Piece] | None:
    """``text`` as pieces (the module's docstring): each span an :class:`Empty` holding it, a tag with its end in
    the text a pair; None when it holds no span of ``kinds``."""
    spans = find(text, kinds)
    if not spans:
        return None
    pieces: list[Piece] = []
    opened: list[tuple[str, Open]] = []                   # open tags by name, innermost last
    at = 0
    for start, end, kind in spans:
        if start > at:
            pieces.append(text[at:start])
        span, at = text[start:end], end
        name = re.match(r"</?([\w:.-]+)", span) if kind == "tags" else None
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
            pieces.append(Empty(span, ordered(kind, span)))
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
