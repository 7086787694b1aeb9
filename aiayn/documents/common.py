"""What every format module shares: the error a front end shows, the limits a file is read within, the options a
translation of a document takes, and :class:`Texts`, through which a format hands its texts to the translation
(protected spans counted, the number of texts bounded)."""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..translation import spans

# (texts, "text" or "html", the kinds of protected span of their text: spans.KINDS) -> their translations, in order
# (each a str, or a Scored one that says how sure it is)
Translate = Callable[[list[str], str, tuple[str, ...]], list[str]]


class Scored(str):
    """A translation that carries its confidence (in [0, 1]: hypotheses.py), as a front end's :data:`Translate`
    gives it; a format that marks entries for review reads it (:func:`confidence`)."""

    confidence: float | None

    def __new__(cls, text: str, confidence: float | None) -> Scored:
        me = super().__new__(cls, text)
        me.confidence = confidence
        return me


def confidence(text: object) -> float | None:
    """How sure a translation is, where its front end said (:class:`Scored`)."""
    return getattr(text, "confidence", None)


class DocumentError(ValueError):
    """A file that cannot be translated (its format, its content, its size), named with the reason: a 400 from the
    server, exit 2 from the command line."""


@dataclass(frozen=True)
class Limits:
    """What a document may hold, checked while it is read (an archive's sizes from its central directory, before
    anything is unpacked), so that a small upload cannot cost gigabytes (a zip bomb) or minutes."""

    texts: int = 20_000                 # texts (paragraphs, cells, cues, units) at most
    expanded: int = 256 << 20           # bytes an archive's entries hold in all, unpacked
    part: int = 64 << 20                # bytes of one part that is parsed (a chapter, document.xml, a PO file)
    ratio: int = 100                    # unpacked over packed size of one entry, past its first MiB
    entries: int = 10_000               # entries of an archive
    pages: int = 2_000                  # pages of a PDF


@dataclass(frozen=True)
class Options:
    """How a document is translated, beyond its texts."""

    source: str | None = None           # the language codes, where known (a PO header's Language, XLIFF's trgLang)
    target: str | None = None
    review: bool = True                 # machine translations marked for review (PO: fuzzy; XLIFF: its states)
    min_confidence: float = 0.5         # with review off, those less sure than this are marked all the same
    bilingual: bool = False             # a PDF: each page followed by its translation, on facing pages
    font: Path | None = None            # a PDF: a TrueType font for what the bundled ones lack (another script)


@dataclass
class Report:
    """What a document's translation did: its texts, and how many protected spans (placeholders, inline tags) of
    theirs came through."""

    texts: int = 0
    kept: int = 0
    spans: int = 0
    format: str | None = None           # formats.Format.name
    encoding: str | None = None         # the encoding the file was read in, where it is text
    left: int = 0                       # entries or units translated but not written: they failed their check
    notes: list[str] = field(default_factory=list)  # what a reviewer must know: each one left, and why

    @property
    def nothing(self) -> bool:
        """Whether nothing of the document was translated: no text to translate, or every one left."""
        return self.texts == 0 or 0 < self.texts <= self.left


def needs_review(options: Options, sure: float | None) -> bool:
    """Whether a machine translation this sure is marked for review (review off and its confidence not known: not)."""
    return options.review or sure is not None and sure < options.min_confidence


class Texts:
    """A format's texts to the translation (the front end's :data:`Translate`), counted and bounded."""

    def __init__(self, translate: Translate, limits: Limits, name: str, kinds: Sequence[str] = spans.DEFAULT) -> None:
        self.translate, self.limits, self.name = translate, limits, name
        self.kinds = tuple(kinds)                        # the format's protected spans (formats.Format.spans)
        self.report = Report()
        self.confidence: list[float | None] = []         # per item of the last call to coded(): how sure it is

    def read(self, src: Path) -> bytes:
        """A file's bytes (one that is parsed whole: text, XML), within :attr:`Limits.part`."""
        if src.stat().st_size > self.limits.part:
            raise DocumentError(f"{self.name} is {src.stat().st_size:,} bytes; at most {self.limits.part:,}")
        return src.read_bytes()

    def count(self, n: int) -> None:
        """``n`` more texts; DocumentError past :attr:`Limits.texts`."""
        self.report.texts += n
        if self.report.texts > self.limits.texts:
            raise DocumentError(f"{self.name} has more than {self.limits.texts} texts (paragraphs, cells, units) to "
                                "translate: it is over the limit")

    def __call__(self, texts: list[str], kinds: Sequence[str] | None = None) -> list[str]:
        """Plain texts translated, the spans of ``kinds`` (default: the format's) protected."""
        return self._counted(texts, "text", self.kinds if kinds is None else tuple(kinds))

    def html(self, fragments: list[str]) -> list[str]:
        """HTML fragments translated (markup.py: their inline tags on the aligned words)."""
        return self._counted(fragments, "html", tuple(k for k in self.kinds if k != "tags"))

    def _counted(self, texts: list[str], fmt: str, kinds: tuple[str, ...]) -> list[str]:
        """``texts`` translated as ``fmt``, counted, their protected spans kept and lost counted."""
        if not texts:
            return []
        self.count(len(texts))
        out = self._translated(texts, fmt, kinds)
        for source, target in zip(texts, out, strict=True):
            kept, total = spans.kept(source, target, kinds)
            self.report.kept += kept
            self.report.spans += total
        return out

    def _translated(self, texts: list[str], fmt: str, kinds: tuple[str, ...]) -> list[str]:
        """The front end's translation of ``texts``: their soft hyphens (``&shy;``) kept out of it (SentencePiece's
        normalisation drops them) and put back in the words the translation keeps as they were (a name, a term);
        a text without a letter (``…``, ``2000``, GNU's quote characters `` ` `` and ``'``, ``%1:``) is its own
        translation (a model makes nothing, or a word, of it)."""
        worded = [k for k, t in enumerate(texts) if any(ch.isalpha() for ch in _visible(t, fmt, kinds))]
        bare, hyphenated = zip(*(soft_hyphens(texts[k], fmt == "html") for k in worded), strict=True) if worded \
            else ((), ())
        out: list[str] = list(texts)
        for k, t, words in zip(worded, self.translate(list(bare), fmt, kinds) if worded else [], hyphenated,
                               strict=True):
            out[k] = t if not words else scored_like(t, with_soft_hyphens(str(t), words))
        return out

    def coded(self, items: list[list[spans.Piece]], kinds: Sequence[str] | None = None) -> list[list[spans.Piece]]:
        """Texts with inline codes (spans.py's pieces: a format's own tags, as elements or markup) translated, each
        code put back on its aligned words; those without a code go as plain text."""
        kinds = self.kinds if kinds is None else tuple(kinds)
        edges = [_edges(spans.grouped(pieces, kinds)) for pieces in items]
        items = [core for _, core, _ in edges]
        out: list[list[spans.Piece]] = [list(pieces) for pieces in items]      # (no text: as it was)
        self.confidence = [1.0] * len(items)
        worded = [k for k, pieces in enumerate(items) if _plain(pieces).strip()]
        plain = [k for k in worded if all(isinstance(p, str) for p in items[k])]
        for k, text in zip(plain, self([_plain(items[k]) for k in plain], kinds), strict=True):
            out[k] = [str(text)]
            self.confidence[k] = confidence(text)
        marked = [k for k in worded if k not in set(plain)]
        if marked:
            self.count(len(marked))
            coded = [spans.to_html(items[k]) for k in marked]
            html = self._translated([h for h, _ in coded], "html", tuple(k for k in kinds if k != "tags"))
            for k, (_, codes), fragment in zip(marked, coded, html, strict=True):
                out[k] = spans.from_html(str(fragment), codes)
                self.confidence[k] = confidence(fragment)
                kept, total = spans.kept(_plain(items[k]), _plain(out[k]), kinds)
                self.report.kept += kept + sum(1 for p in spans.ungrouped(out[k]) if isinstance(p, (spans.Open,
                                                                                                    spans.Empty)))
                self.report.spans += total + sum(1 for p in spans.ungrouped(items[k]) if isinstance(p, (spans.Open,
                                                                                                       spans.Empty)))
        return [spans.ungrouped([*lead, *mine, *trail]) for (lead, _, trail), mine in zip(edges, out, strict=True)]


def _visible(text: str, fmt: str, kinds: tuple[str, ...]) -> str:
    """What of a text a model would read: outside its protected spans, and an HTML fragment's tags."""
    return spans.outside(re.sub(r"<[^>]*>", " ", text) if fmt == "html" else text, kinds)


SHY = "\u00ad"
_SHY_REF = re.compile(r"&shy;|&#173;|&#[xX]0*[aA][dD];")
_HYPHENATED = re.compile(r"\w*(?:\u00ad\w*)+")


def soft_hyphens(text: str, html: bool = False) -> tuple[str, dict[str, str]]:
    """``text`` without its soft hyphens (HTML's ``&shy;`` too, where ``html``), and each word that held some by its
    plain form (the entity, where it was written so)."""
    if SHY not in text and not (html and "&" in text and _SHY_REF.search(text)):
        return text, {}
    entity = html and "&shy;" in text
    if html:
        text = _SHY_REF.sub(SHY, text)
    words = {w.replace(SHY, ""): w.replace(SHY, "&shy;") if entity else w for w in _HYPHENATED.findall(text)}
    return text.replace(SHY, ""), words


def with_soft_hyphens(text: str, words: dict[str, str]) -> str:
    """A translation with its source's soft hyphens put back in each word it kept as it was (:func:`soft_hyphens`)."""
    for plain, hyphenated in words.items():
        if plain:
            text = re.sub(rf"(?<![\w&#]){re.escape(plain)}(?!\w)", hyphenated.replace("\\", "\\\\"), text)
    return text


def scored_like(before: str, after: str) -> str:
    """``after`` carrying ``before``'s confidence (:class:`Scored`), where it had one."""
    sure = confidence(before)
    return after if sure is None else Scored(after, sure)


def _plain(pieces: list[spans.Piece]) -> str:
    return "".join(p for p in pieces if isinstance(p, str))


def balance(words: Sequence[str], widths: Sequence[int], n: int,
            can_start: Callable[[str], bool] = lambda word: True) -> list[list[str]]:
    """``words`` on ``n`` lines (fewer if there are fewer words), so that the widest line (each word ``widths`` wide,
    a space between) is as narrow as it can be; of equal ones, the earlier lines longer. A line after the first
    starts only with a word ``can_start`` allows (Markdown: not one that would start a list or a heading)."""
    n = max(1, min(n, len(words)))
    at = [0]
    for w in widths:
        at.append(at[-1] + w + 1)

    @functools.cache
    def best(i: int, lines: int) -> tuple[float, tuple[int, ...]]:
        """(the widest line, where each line after the first starts) for words [i:] on ``lines`` lines."""
        if lines == 1:
            return at[len(words)] - at[i] - 1, ()
        options = [(max(at[j] - at[i] - 1, best(j, lines - 1)[0]), -j, (j, *best(j, lines - 1)[1]))
                   for j in range(i + 1, len(words) - lines + 2) if can_start(words[j])]
        if not options:
            return float("inf"), ()
        widest, _, cuts = min(options)
        return widest, cuts

    cuts = best(0, n)[1] if n > 1 and best(0, n)[0] != float("inf") else ()
    bounds = [0, *cuts, len(words)]
    return [list(words[a:b]) for a, b in itertools.pairwise(bounds)]


def _edges(pieces: list[spans.Piece]) -> tuple[list[spans.Piece], list[spans.Piece], list[spans.Piece]]:
    """(lead, core, trail): the empty codes and spaces at each end of a text (a footnote's own mark, an indent) set
    apart, so that they stay at the ends."""
    def edge(p: spans.Piece) -> bool:
        return isinstance(p, spans.Empty) or isinstance(p, str) and not p.strip()

    core = list(pieces)
    lead: list[spans.Piece] = []
    trail: list[spans.Piece] = []
    while core and edge(core[0]):
        lead.append(core.pop(0))
    while core and edge(core[-1]):
        trail.insert(0, core.pop())
    if core and isinstance(core[0], str) and core[0] != core[0].lstrip():
        lead.append(core[0][:len(core[0]) - len(core[0].lstrip())])
        core[0] = core[0].lstrip()
    if core and isinstance(core[-1], str) and core[-1] != core[-1].rstrip():
        trail.insert(0, core[-1][len(core[-1].rstrip()):])
        core[-1] = core[-1].rstrip()
    return lead, core, trail
