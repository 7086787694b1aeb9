"""A paragraph cut into the sentences a model was trained on, and their translations joined back as it was written.

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
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

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

