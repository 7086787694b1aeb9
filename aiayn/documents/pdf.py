"""PDF: each paragraph of a page translated as whole sentences and written back into its own box; the rest of the
page as it was.

- **Read** with pdfminer.six (MIT): every character with its position, size and colour, grouped by its layout analysis
  into lines and boxes (a box: a paragraph, a heading, a table cell, a list item). A box's lines are joined into one
  text (a word hyphenated at a line's end joined again), so that a sentence broken across lines is translated whole.
  A box with no letters (a page number, a figure's numbers) is left as it is. A formula inline is one code of its
  sentence, with the pieces pdfminer read as lines of their own (a sum's limits, a fraction's parts) and its own bars.
  TeX's bitmap fonts in LaTeX's T1 encoding, which have no ToUnicode map, are read by their codes (:data:`CORK`).
- **Taken out**: the page's content stream is read with pikepdf (MPL 2.0, over qpdf) and each operator that shows text
  starting inside a translated box is removed, and each that paints a bar of its formulas; everything else of the page
  (images, vector graphics, other text) stays in its place, and so do links, annotations, form fields, bookmarks and
  metadata.
- **Written**: the translation drawn in its box, in its colour, in an embedded subset of the bundled face closest to
  its original font (Liberation Serif, Sans or Mono, regular, bold, italic: metric-compatible with Times, Arial and
  Courier, covering Latin, Greek and Cyrillic; aiayn/bundled/fonts/, subset by fontTools), or for other scripts in a
  TrueType font given or installed, its size the original's or smaller, so that its lines stay inside the box; each
  formula drawn again as the PDF drew it, glyph by glyph in its own fonts, its bars with it. A character no font has
  is refused by name. The document's language (``/Lang``) is set to the target's.

A page turned by its /Rotate (a landscape table in a paper) is read and drawn as it is shown; text that does not read
upright there (set sideways or upside down) is left as it is, and said.

Not yet: text drawn inside form XObjects (it could be translated but not taken out, so the page would say it twice:
such a box is left as it is), scripts that need shaping. Refused, by name: an
encrypted PDF, a damaged one, one whose objects nest more than 500 deep (qpdf would drop them), and one with no text to
translate (a scan, which needs OCR first).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import io
import itertools
import re
import statistics
import unicodedata
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from ..translation import spans
from .common import DocumentError, Limits, Options, Texts

FONTS = Path(__file__).parents[1] / "bundled" / "fonts"     # Liberation's, metric-compatible with Times, Arial, Courier
SYMBOLS = FONTS / "DejaVuSans-Symbols.ttf"   # DejaVu Sans's arrows and operators, for a formula's symbols inline
SMALL = 0.5                      # a translation drawn under this share of its box's size is named in the report
SMALLEST = 0.2                   # and none under this one: past it, it overflows its box (named too)
SHOWS = {"Tj", "TJ", "'", '"'}   # the operators that show text
PAINTS = {"S", "s", "f", "f*", "B", "B*", "b", "b*"}  # the operators that paint a path (pdfminer's F paints nothing)


@dataclass
class Box:
    """A paragraph of a page as pdfminer's layout analysis found it: its rectangle (in the coordinates of the page as
    it is shown, turned by its /Rotate, from the media box's first corner: :func:`_placing`), its text, its lines'
    size and pitch, its colour (RGB in [0, 1])."""

    page: int
    rect: tuple[float, float, float, float]
    text: str
    size: float
    pitch: float
    color: tuple[float, float, float]
    translation: str = field(default="", compare=False)
    right: float = 0.0            # how far right its translation may reach (:func:`room`); its own edge at least
    face: str = "Sans-Regular"    # the bundled face its translation is drawn in (:func:`face`)
    ops: frozenset[int] = frozenset()  # the page's text-showing operators its characters came from (-1: a form's)
    wall: float = float("inf")    # where a vertical rule right of it stands (a table's column), which it may not pass
    marked: str = ""              # its text with each formula inline between :data:`OPEN` and :data:`SHUT`
    letters: bool = True          # whether it has words to translate (a box without, or a formula or music, is only
    #                               redrawn if it must be: :func:`symbolic`)
    glyphs: dict[str, Glyph] = field(default_factory=dict, compare=False, repr=False)  # its formulas' characters
    base: float | None = None     # its first line's baseline (where a translation's first line is drawn)
    paths: frozenset[int] = frozenset()  # the page's painting operators that drew its formulas' bars
    upright: bool = True          # whether its text reads upright on the page as it is shown (turned by /Rotate)
    item: bool = False            # whether it starts with a list item's bullet (:func:`_bullet`): a unit of its own
    entry: bool = False           # whether it is an entry of a table of contents (:func:`_entries`): its page ends it
    centred: bool = False         # whether its lines are centred (a slide's title): its translation's lines are too


@dataclass(frozen=True)
class Glyph:
    """A formula inline as the PDF draws it, to be drawn again as it was wherever its sentence moves it: each of its
    characters in the PDF's own font (its name in the page's resources), by the bytes that showed it, at its place and
    size in ems of the line's text (its rendering matrix, from where the formula starts and the line's baseline), and
    its width. In a box's marked text it stands as one private-use character (:func:`runs`)."""

    text: str                                               # as pdfminer reads it: "f(x)", or "(cid:5)" with no Unicode
    shown: tuple[tuple[str, bytes, tuple[float, ...]], ...]
    width: float
    rules: tuple[tuple[float, float, float, float], ...] = ()   # its bars (an overline, a fraction's): x, y, width, height
    paths: frozenset[int] = frozenset()                     # the page's painting operators that drew them (:func:`strip`)


class Bar(NamedTuple):
    """A thin horizontal line of a page (a rule, an underline, a fraction's or an overline's bar): where it runs, the
    rectangle it covers, and the index of the page's painting operator that drew it, counted as :func:`strip` counts
    them (-1 inside a form XObject, or where that operator drew more than this line)."""

    x0: float
    x1: float
    y: float
    rect: tuple[float, float, float, float]
    op: int = -1
    near: frozenset[int] = frozenset()   # the characters over and under it (their ids): a formula's, or another line's


def _rgb(color: Any) -> tuple[float, float, float]:
    """A pdfminer colour (gray, RGB or CMYK components, or none) as RGB."""
    c = color if isinstance(color, (list, tuple)) else (color,) if isinstance(color, (int, float)) else ()
    c = tuple(float(v) for v in c if isinstance(v, (int, float)))
    if len(c) == 1:
        return (c[0], c[0], c[0])
    if len(c) == 3:
        return (c[0], c[1], c[2])
    if len(c) == 4:
        k = c[3]
        return ((1 - c[0]) * (1 - k), (1 - c[1]) * (1 - k), (1 - c[2]) * (1 - k))
    return (0.0, 0.0, 0.0)


BULLETS = ("\u2022\u25e6\u25aa\u25ab\u2023\u2219\u2043\u25a0\u25a1\u25cf\u25cb\u25c6\u25c7\u27a2\u2713"   # a list item's,
           "\uf0b7\uf0a7\uf0a8\uf076\uf0d8\uf0fc\uf06e")   # and Word's in Symbol and Wingdings (private use)
# a section's number ("1.2.3 Heading", "4. ", LaTeX's "1" set apart by a quad, which :func:`_lead` marks with an em
# space) or a list item's bullet
NUMBERED = re.compile(rf"^[\ue010-\ue01b]?(\d+(?:\.\d+)+\.?|\d+\.|\d+(?:\.\d+)*(?=\u2003)|[{BULLETS}])\s+(?=\S)")
LEADERS = re.compile(r"(\s*(?:\.\s?){3,}\s*[0-9ivxlcdm]*)$")          # a contents line's dots and page: ". . . 17"
ENTRY_END = re.compile(r"(\s*(?:\.\s?)*\s[0-9ivxlcdm]+)$")           # a contents entry's page, with dots or none


def ends(text: str, tail_of: re.Pattern[str] = LEADERS) -> tuple[str, str, str]:
    """(a section's number before the text, the text, a contents line's leader dots and page after it, or what
    ``tail_of`` finds there: a contents entry's page with no room for dots, :func:`_tail`): the number and the leaders
    are kept as they are, only the text between them translated."""
    head = NUMBERED.match(text)
    start = head.end() if head else 0
    tail = tail_of.search(text, start)
    end = tail.start() if tail else len(text)
    return text[:start], text[start:end], text[end:]


# fonts of symbols, not words: TeX's math (cmmi, cmsy, cmex, AMS's msam/msbm, Euler, rsfs, stmary, esint, wasy),
# Symbol and Dingbats, STIX's and Cambria's math, and music (LilyPond's Emmentaler and feta, Bravura, Sonata)
MUSIC = re.compile(r"emmentaler|feta|bravura|sonata|musi[ck]", re.IGNORECASE)
BIG = re.compile(r"cmex|esint", re.IGNORECASE)   # TeX's fonts of big delimiters, sums, integrals, roots' signs
SYMBOL_FONTS = re.compile(r"cmmi|cmsy|cmex|msam|msbm|eufm|eurm|rsfs|stmary|esint|wasy|lasy|symbol|dingbat|zapfd|"
                          r"math|emmentaler|feta|bravura|sonata|musi[ck]", re.IGNORECASE)


OPEN, SHUT = "\ue000", "\ue001"      # (private use) around a formula inline in a box's marked text
FIXED = "\ue002"                     # a formula that cannot move (it has a fraction's bar): its box is left as it is
# the bundled faces (:func:`face`), and the private-use character that, in a box's marked text and its translation,
# says that what follows is drawn in that face: a word's own bold, italic or code inside a paragraph
FACES = [f"{family}-{style}" for family in ("Serif", "Sans", "Mono") for style in ("Regular", "Bold", "Italic",
                                                                                    "BoldItalic")]
STYLE = {name: chr(0xE010 + k) for k, name in enumerate(FACES)}
STYLED = {mark: name for name, mark in STYLE.items()}
MARKS = "".join(STYLED)
_UNMARKED = str.maketrans("", "", MARKS)
_GLUED = re.compile(f"{SHUT}([^\\w{OPEN}]*){OPEN}")   # two formulas with nothing but signs and spaces between: one


def _math(char: Any) -> bool:
    """Whether a pdfminer character is drawn in a font of symbols or has no Unicode, or is a fraction's part by its
    place (:func:`_fractions`: ``cos`` under a fraction's bar is set in the text's roman)."""
    return bool(SYMBOL_FONTS.search(char.fontname.split("+", 1)[-1])) or char.get_text().startswith("(cid:") or \
        getattr(char, "fraction", False)


def inline(marked: str, own: str = "Sans-Regular", start: str | None = None) -> list[Any]:
    """A box's marked text as spans.py's pieces, placed on the translation's aligned words: its words as text, each
    formula inline as a code that comes back as it is (:class:`spans.Empty`), and each run of words in a face other
    than the box's own (``own``; ``start`` where the text starts: :func:`face_at`) between the paired codes
    (:class:`spans.Open` holding the face, :class:`spans.Close`) that :func:`unmarked` turns back into marks."""
    out: list[Any] = []
    now, opened = own, None
    if start is not None and start != own:
        now, opened = start, spans.Open(start)
        out.append(opened)
    for k, part in enumerate(re.split(f"{OPEN}(.*?){SHUT}", marked)):
        if k % 2:
            out.append(spans.Empty(part))
            continue
        for piece in re.split(f"([{MARKS}])", part):
            if piece in STYLED:
                if opened is not None:
                    out.append(spans.Close(opened))
                now, opened = STYLED[piece], None
                if now != own:
                    opened = spans.Open(now)
                    out.append(opened)
            elif piece:
                out.append(piece)
    if opened is not None:
        out.append(spans.Close(opened))
    return out


def unmarked(pieces: list[Any], own: str) -> str:
    """A translation's pieces (:func:`inline`'s, placed on its words) as text: a face's paired code as the mark of
    that face and a return to ``own``, a formula as the character that stands for it."""
    out = []
    for p in pieces:
        if isinstance(p, spans.Open):
            out.append(STYLE[p.value])
        elif isinstance(p, spans.Close):
            out.append(STYLE[own])
        else:
            out.append(str(p if isinstance(p, str) else p.value))
    return "".join(out)


def symbolic(chars: list[Any]) -> bool:
    """Whether a box is a formula or music rather than words: half its characters (pdfminer's) or more drawn in a font
    of symbols (:data:`SYMBOL_FONTS`) or glyphs without Unicode (read as ``(cid:5)``), or some, and fewer than two
    words in the others (``E(x) =``, whose letters are math italic). It is kept as it is drawn, as PDFMathTranslate
    keeps a formula by its font; a sentence with mathematics inline is translated."""
    math = [_math(c) for c in chars]
    if sum(math) * 2 >= max(1, len(chars)):
        return True
    # (a PDF may draw no spaces, TeX's do not: a gap between two characters, or a new line, is one)
    text = "".join((" " if k and (c.x0 - chars[k - 1].x1 > 0.1 * c.size or c.x0 < chars[k - 1].x0) else "") +
                   (" " if m else c.get_text()) for k, (c, m) in enumerate(zip(chars, math, strict=True)))
    return any(math) and len(re.findall(r"[^\W\d_]{2,}", text)) < 2


def overlaps(found: list[Box]) -> int:
    """How many pairs of boxes on one page overlap (what a translated page must not add)."""
    n = 0
    for i, a in enumerate(found):
        for b in found[i + 1:]:
            if a.page == b.page and a.rect[0] < b.rect[2] and b.rect[0] < a.rect[2] and a.rect[1] < b.rect[3] \
                    and b.rect[1] < a.rect[3]:
                n += 1
    return n


@functools.lru_cache(maxsize=1024)
def face(fontname: str) -> str:
    """The bundled face closest to a PDF font's name: its family (serif, sans or mono) and its weight and slant, so that
    a translation keeps its original's look and, the faces being metric-compatible, about its width
    (``ABCDEF+Times-BoldItalic`` -> ``Serif-BoldItalic``)."""
    name = fontname.split("+", 1)[-1].lower()
    if re.search(r"mono|courier|consol|typewriter|cmtt|menlo|code", name):
        family = "Mono"
    elif re.search(r"times|serif|roman|georgia|garamond|minion|palatino|cambria|cmr|cmti|cmbx|nimbusrom|charter|"
                   r"baskerville|utopia|century|book", name) and "sans" not in name:
        family = "Serif"
    else:
        family = "Sans"
    bold = re.search(r"bold|black|heavy|semibold|demi|cmbx", name) is not None
    italic = re.search(r"italic|oblique|cmti|cmsl|slanted", name) is not None
    return f"{family}-{'Bold' if bold else ''}{'Italic' if italic else ''}" if bold or italic else f"{family}-Regular"


# TeX's fonts (OT1) draw an accented letter as a spacing accent and then the letter, which pdfminer reads as two
ACCENTS = {"\u00a8": "\u0308", "\u00b4": "\u0301", "\u02c6": "\u0302", "\u02dc": "\u0303", "\u00b8": "\u0327",
           "\u02da": "\u030a", "\u02c7": "\u030c", "\u00af": "\u0304", "\u02d8": "\u0306", "\u02d9": "\u0307",
           "\u02dd": "\u030b", "\u02db": "\u0328"}    # ASCII's ` ^ ~ not among them: in code they are themselves
_ACCENTED = re.compile(f"([{''.join(ACCENTS)}])([^\\W\\d_])")


def composed(text: str) -> str:
    """``text`` with each spacing accent drawn before a letter (``B¨arenreiter``, as pdfminer reads a TeX font's
    ``\\"a``) as the one accented letter (``Bärenreiter``) where Unicode has it; other accents as they are."""

    def one(m: re.Match[str]) -> str:
        single = unicodedata.normalize("NFC", m[2] + ACCENTS[m[1]])
        return single if len(single) == 1 else m[0]

    return _ACCENTED.sub(one, text)


def joined(lines: list[str]) -> str:
    """A box's lines as one text: a word hyphenated at a line's end joined again (``Über-`` + ``setzung``), the other
    line ends spaces, spacing accents joined to their letters (:func:`composed`)."""
    text = ""
    for line in (ln.strip() for ln in lines):
        if not line:
            continue
        if re.search(r"\w-$", text) and line.lstrip(MARKS)[:1].islower():
            text = text[:-1] + line
        else:
            text = f"{text} {line}" if text else line
    return composed(re.sub(r"\s+", " ", text))


# TeX's Cork encoding (T1, LaTeX's \usepackage[T1]{fontenc}), as TeX Live's ec.enc names its glyphs, where it is not
# ASCII: the letters of Europe's Latin alphabets at 128-255, quotes, dashes and ligatures below 32. pdfTeX and dvipdfmx
# draw a font they have no outlines of (cm-super not installed) as bitmaps, a Type 3 font whose glyphs are named only by
# their codes (/a228, /xE4) and which has no ToUnicode map: pdfminer reads its ä as "(cid:228)".
CORK = dict(enumerate(
    "grave acute circumflex tilde dieresis hungarumlaut ring caron breve macron dotaccent cedilla ogonek "
    "quotesinglbase guilsinglleft guilsinglright quotedblleft quotedblright quotedblbase guillemotleft "
    "guillemotright endash emdash compwordmark zero dotlessi uni0237 ff fi fl ffi ffl uni2423".split()))
CORK.update({0x27: "quoteright", 0x60: "quoteleft", 0x7F: "hyphen"})
CORK.update(zip(range(0x80, 0xC0), (
    "Abreve Aogonek Cacute Ccaron Dcaron Ecaron Eogonek Gbreve Lacute Lcaron Lslash Nacute Ncaron Eng Ohungarumlaut "
    "Racute Rcaron Sacute Scaron Scedilla Tcaron Tcedilla Uhungarumlaut Uring Ydieresis Zacute Zcaron Zdotaccent IJ "
    "Idotaccent dcroat section abreve aogonek cacute ccaron dcaron ecaron eogonek gbreve lacute lcaron lslash nacute "
    "ncaron eng ohungarumlaut racute rcaron sacute scaron scedilla tcaron tcedilla uhungarumlaut uring ydieresis "
    "zacute zcaron zdotaccent ij exclamdown questiondown sterling").split(), strict=True))
CORK.update({code: f"uni{code:04X}" for code in range(0xC0, 0x100)})          # Latin-1's letters, but for four:
CORK.update({0xD7: "OE", 0xDF: "S_S", 0xF7: "oe", 0xFF: "germandbls"})
# (the compound word mark, which only breaks a ligature, reads as nothing; the per-thousand sign's second zero as 0)
TEXT_ONLY = {ord(c) for c in "aefghijkopqrstuvwxyz"}   # letters that LaTeX's other 256-glyph encoding, TS1 (textcomp's
#                                                        symbols: its bullet is 0x88), has no glyph for


def _read_cork(font: Any, spec: Any) -> None:
    """Give pdfminer's ``font`` the Unicode of its glyphs where it is one of TeX's bitmap fonts in the Cork encoding: a
    Type 3 font without a ToUnicode map whose glyphs are all named by their codes (``/a228`` as pdfTeX names them,
    ``/xE4`` as dvipdfmx does), one of whose codes is above 127 (TeX's text fonts in T1 have 256 glyphs; its OT1 and
    math fonts 128, whose low codes mean other things in each) and one a letter TS1 has not (textcomp's symbols, 256
    glyphs too). A font of T1 that draws no such letter (a lone ``\\char190``) cannot be told from TS1's and is left
    as pdfminer reads it."""
    from pdfminer.encodingdb import name2unicode
    from pdfminer.pdffont import PDFType3Font
    from pdfminer.pdftypes import resolve1
    from pdfminer.psparser import PSLiteral

    if not isinstance(font, PDFType3Font) or font.unicode_map is not None:
        return
    encoding = resolve1(spec.get("Encoding")) if isinstance(spec, dict) else None
    differences = resolve1(encoding.get("Differences")) if isinstance(encoding, dict) else None
    codes, code = [], 0
    for item in differences if isinstance(differences, list) else ():
        if isinstance(item, int):
            code = item
        elif isinstance(item, PSLiteral) and isinstance(item.name, str):
            if item.name != ".notdef":
                if item.name not in (f"a{code}", f"x{code:02X}"):          # (pdfTeX's names, dvipdfmx's)
                    return
                codes.append(code)
            code += 1
    if any(c > 127 for c in codes) and any(c in TEXT_ONLY for c in codes):
        font.cid2unicode.update({c: "" if CORK[c] == "compwordmark" else name2unicode(CORK[c])
                                 for c in codes if c in CORK})


def _text_boxes(items: Any) -> Any:
    """pdfminer's text boxes among ``items``, those inside figures (form XObjects) too."""
    from pdfminer.layout import LTFigure, LTTextBox

    for item in items:
        if isinstance(item, LTTextBox):
            yield item
        elif isinstance(item, LTFigure):
            yield from _text_boxes(item)


def _marking() -> Any:
    """pdfminer's page aggregator, marking each character with the index of the page's text-showing operator that
    drew it (``op``, set by :func:`_counting`'s interpreter; -1 inside a form XObject), the font's name in the page's
    resources, its code and its rendering matrix (``shown``); and each line or rectangle of a path with the index of
    the page's painting operator that drew it (``op``; -1 inside a form XObject or where it drew more than one) and
    the thickness of its stroke (``thick``), counted as :func:`strip` counts them."""
    from pdfminer.converter import PDFPageAggregator
    from pdfminer.utils import mult_matrix

    class Marking(PDFPageAggregator):
        op, depth, paints, painting = -1, 0, -1, False
        names: dict[int, str] = {}     # the page's fonts' names in its resources, by pdfminer's font (its id)

        def render_char(self, matrix: Any, font: Any, fontsize: float, scaling: float, rise: float, cid: int,
                        *args: Any) -> float:
            advance = super().render_char(matrix, font, fontsize, scaling, rise, cid, *args)
            char = self.cur_item._objs[-1]                                   # the character just added
            char.op = self.op  # type: ignore[attr-defined]
            char.shown = (self.names.get(id(font)), _shown_code(font, cid),  # type: ignore[attr-defined]
                          mult_matrix((fontsize * scaling, 0, 0, fontsize, 0, rise), matrix))
            return float(advance)

        def paint_path(self, gstate: Any, stroke: bool, fill: bool, evenodd: bool, path: Any) -> None:
            if self.painting:                           # (pdfminer paints each of a path's parts on its own)
                return super().paint_path(gstate, stroke, fill, evenodd, path)
            self.paints += self.depth == 0
            objs, painted = self.cur_item._objs, self.paints if self.depth == 0 else -1
            before, self.painting = len(objs), True
            try:
                super().paint_path(gstate, stroke, fill, evenodd, path)
            finally:
                self.painting = False
            a, b, c, d = self.ctm[:4]
            for item in objs[before:]:                  # an operator's one line is its own; a part of many is not
                item.op = painted if len(objs) == before + 1 else -1  # type: ignore[attr-defined]
                item.thick = gstate.linewidth * abs(a * d - b * c) ** 0.5 if stroke else 0.0  # type: ignore[attr-defined]

    return Marking


def _counting() -> Any:
    """pdfminer's page interpreter, counting the page's text-showing operators for :func:`_marking`'s device (each
    form XObject's in an interpreter of its own, one level deeper) and telling it the page's fonts' names."""
    from pdfminer.pdfinterp import PDFPageInterpreter

    class Counting(PDFPageInterpreter):
        shown = -1

        def init_resources(self, resources: Any) -> None:
            super().init_resources(resources)
            self.device.names = {id(f): str(name) for name, f in self.fontmap.items()}  # type: ignore[attr-defined]

        def do_TJ(self, seq: Any) -> None:           # (Tj, ' and " are shown through it, once each)
            self.shown += 1
            self.device.op = self.shown if self.device.depth == 0 else -1  # type: ignore[attr-defined]
            super().do_TJ(seq)

        def do_Do(self, xobjid: Any) -> None:
            device: Any = self.device
            device.depth, names = device.depth + 1, device.names
            try:
                super().do_Do(xobjid)
            finally:
                device.depth, device.names = device.depth - 1, names

    return Counting


def _pages(src: Any) -> Any:
    """pdfminer's pages of ``src`` (a path or a file), text inside figures grouped as well (``all_texts``), each
    character and rule marked with the operator that drew it (:func:`_marking`)."""
    from pdfminer.layout import LAParams
    from pdfminer.pdfinterp import PDFResourceManager
    from pdfminer.pdfpage import PDFPage

    class Resources(PDFResourceManager):
        def get_font(self, objid: object, spec: Any) -> Any:
            font = super().get_font(objid, spec)
            _read_cork(font, spec)
            return font

    with (open(src, "rb") if isinstance(src, (str, Path)) else contextlib.nullcontext(src)) as f:
        resources = Resources()
        device = _marking()(resources, laparams=LAParams(all_texts=True))
        interpreter = _counting()(resources, device)
        for page in PDFPage.get_pages(f):
            interpreter.shown, device.paints, device.depth = -1, -1, 0
            interpreter.process_page(page)
            yield device.get_result()


def _shown_code(font: Any, cid: int) -> bytes | None:
    """The bytes that show character ``cid`` in pdfminer's ``font``: one byte in a simple font, two in a composite
    font with the identity encoding; None in another composite font (its CMap is not inverted)."""
    from pdfminer.cmapdb import IdentityCMap, IdentityCMapByte
    from pdfminer.pdffont import PDFCIDFont

    if not isinstance(font, PDFCIDFont):
        return bytes([cid]) if 0 <= cid < 256 else None
    if isinstance(font.cmap, IdentityCMap):
        return cid.to_bytes(2, "big")
    return bytes([cid]) if isinstance(font.cmap, IdentityCMapByte) and cid < 256 else None


# the private-use characters that stand for a formula's characters in a box's marked text (planes 15 and 16)
_PRIVATE = [*range(0xF0000, 0xFFFFE), *range(0x100000, 0x10FFFE)]
_ONE = "[\U000f0000-\U0010fffd]"


def _attached(obj: Any) -> bool:
    """Whether a character beside a formula's symbols belongs to the formula: a digit, a bracket, an operator (not a
    letter, a space or a sentence's punctuation)."""
    text = obj.get_text()
    return hasattr(obj, "shown") and not text.isalpha() and not text.isspace() and text not in ",.;:!?"


def _inside(obj: Any, other: Any) -> bool:
    """Whether a character is drawn inside another's width (the ``c`` of TeX's ``©``, set in its circle)."""
    return hasattr(obj, "shown") and hasattr(other, "shown") and other.x0 < (obj.x0 + obj.x1) / 2 < other.x1


def _formulas(objs: list[Any]) -> list[tuple[int, int]]:
    """The formulas among a run's ``objs`` (pdfminer's characters and the spaces it adds), as (start, end): each
    stretch of symbols (:func:`_math`) and the characters attached to them or drawn inside them, up to a space (so
    that a long formula can be broken across lines where it has spaces; :data:`_GLUED` joins the pieces again as one
    code), but for a space pdfminer put between two characters set over one another, or inside a fraction's
    numerator or denominator."""
    out: list[tuple[int, int]] = []
    k = 0

    def stacked(k: int) -> bool:     # a space pdfminer put between characters set over one another (a sum's limits)
        return 0 < k < len(objs) - 1 and not hasattr(objs[k], "shown") and hasattr(objs[k - 1], "shown") and \
            hasattr(objs[k + 1], "shown") and (objs[k + 1].x0 < objs[k - 1].x1 - 0.1 * objs[k - 1].size or
                                               getattr(objs[k - 1], "fraction", False) and
                                               getattr(objs[k + 1], "fraction", False))   # (a space in a fraction)

    while k < len(objs):
        if not (hasattr(objs[k], "shown") and _math(objs[k])):
            k += 1
            continue
        start = k
        while start > (out[-1][1] if out else 0) and (_attached(objs[start - 1]) or
                                                      _inside(objs[start - 1], objs[start])):
            start -= 1
        end = k + 1
        while end < len(objs) and (_attached(objs[end]) or stacked(end) or _inside(objs[end], objs[end - 1]) or
                                   (hasattr(objs[end], "shown") and _math(objs[end]))):
            end += 1
        out.append((start, end))
        k = end
    return out


def glyph(chars: list[Any], line: Any, bars: list[Bar], glyphs: dict[str, Glyph]) -> str | None:
    """A formula's ``chars`` of pdfminer's ``line`` as the private-use character that stands for it in ``glyphs`` (its
    :class:`Glyph` added, with the bars among ``bars`` that are its own: over or under it, no wider than it, each
    drawn by an operator of its own); None where it cannot be drawn again as it was: a character without a font's name
    or code; :data:`FIXED` where a bar beside it is not its own alone (a character over or under it is not the
    formula's, as a fraction's part that pdfminer read as a line of its own; a bar drawn with others), as it would
    stay behind (a bar over or under none of its characters but another's is that one's: an overline on the next
    line), and where a character of its line over or under it is not its own (a limit that went into another
    formula or into text). A rule far wider than the formula (a frame's, a table's) is not the formula's."""
    if any(c.shown[0] is None or c.shown[1] is None for c in chars) or len(glyphs) >= len(_PRIVATE):
        return None
    text = [c for c in line if hasattr(c, "shown")]
    largest = max(c.size for c in text)     # (the line's text, not its limits and scripts, however many they are)
    em = statistics.median(c.size for c in text if c.size >= 0.85 * largest) or 1.0
    left, right = min(c.x0 for c in chars), max(c.x1 for c in chars)
    bottom, top = min(c.y0 for c in chars) - 0.4 * em, max(c.y1 for c in chars) + 0.4 * em
    mine = {id(c) for c in chars}
    near = [b for b in bars if b.x0 < right and b.x1 > left and bottom < b.y < top and
            b.x1 - b.x0 < right - left + 4 * em and (not b.near or b.near & mine)]  # (not the next line's overline)
    if any(b.op == -1 or b.x0 < left - 0.5 * em or b.x1 > right + 0.5 * em or not b.near <= mine for b in near):
        return FIXED
    if any(id(c) not in mine and left < (c.x0 + c.x1) / 2 < right for c in text):
        return FIXED        # a character of its line over or under it is not its own: a limit read into another piece
    baseline = _base(text)
    shown = tuple((c.shown[0], c.shown[1], (c.shown[2][0] / em, c.shown[2][1] / em, c.shown[2][2] / em,
                                            c.shown[2][3] / em, (c.shown[2][4] - left) / em,
                                            (c.shown[2][5] - baseline) / em)) for c in chars)
    rules = tuple(((x0 - left) / em, (y0 - baseline) / em, (x1 - x0) / em, (y1 - y0) / em)
                  for x0, y0, x1, y1 in (b.rect for b in near))
    key = chr(_PRIVATE[len(glyphs)])
    glyphs[key] = Glyph("".join(c.get_text() for c in chars), shown, (right - left) / em, rules,
                        frozenset(b.op for b in near))
    return key


def marking(objs: list[Any], line: Any, bars: list[Bar],
            glyphs: dict[str, Glyph] | None) -> str:
    """A run's text with each formula marked (:data:`OPEN`, :data:`SHUT`): each character of a symbol's font as it
    reads, or (``glyphs`` given) each formula as the character that stands for it (:func:`glyph`)."""
    if glyphs is None:
        return _faced(objs)
    out, k = "", 0
    for start, end in _whole_fractions(_formulas(objs), objs, bars):
        key = glyph([o for o in objs[start:end] if hasattr(o, "shown")], line, bars, glyphs)
        out += marking(objs[k:start], line, bars, None)
        formula = marking(objs[start:end], line, bars, None)
        out += f"{OPEN}{key}{SHUT}" if key and key != FIXED else f"{FIXED}{formula}" if key else formula
        k = end
    return out + marking(objs[k:], line, bars, None)


def _whole_fractions(spans: list[tuple[int, int]], objs: list[Any], bars: list[Bar]) -> list[tuple[int, int]]:
    """The formulas (:func:`_formulas`' spans of ``objs``) each widened to the whole of every fraction it is part of:
    all of the run's characters over and under the fraction's bar (characters of the run both over and under it), which
    pdfminer may have cut into several formulas with its spaces (``−f (b) (b−a)``), or whose punctuation is not a
    formula's (``1/k!``); and to all of the run's characters under an overline, where all of those it spans are right
    under it and none is a word's letter (``p − 1`` barred; the line above an overline may be as near to it as its own
    characters); a fraction set smaller than its text that no formula touches made one (digits alone, ``½``);
    formulas that then overlap made one. So that a fraction moves whole, with its bar."""
    fractions = []                              # each fraction's bar, and the indexes of the run's characters at it
    for bar in bars:
        at = [(k, (o.y0 + o.y1) / 2) for k, o in enumerate(objs) if hasattr(o, "shown") and _spanned(o, bar)]
        if any(y > bar.y for _, y in at) and any(y < bar.y for _, y in at) or \
                at and all(0 < bar.y - y < 0.75 * objs[k].size and not _worded(objs[k]) for k, y in at):
            # over and under it: a fraction's; all right under it and none a word's letter: an overline's (not a rule
            # over a line of text)
            fractions.append((bar, min(k for k, _ in at), max(k for k, _ in at) + 1))
    largest = max((o.size for o in objs if hasattr(o, "shown")), default=0.0)
    spans = sorted(spans + [(first, last) for _, first, last in fractions      # (a fraction of digits alone: ½)
                            if all(o.size < 0.85 * largest for o in objs[first:last] if hasattr(o, "shown")) and
                            not any(start < last and first < end for start, end in spans)])
    out: list[tuple[int, int]] = []
    for start, end in spans:
        while mine := [o for o in objs[start:end] if hasattr(o, "shown")]:
            left, right = min(c.x0 for c in mine), max(c.x1 for c in mine)
            em = max(c.size for c in mine)           # (an overline clears its characters' height: 0.4 em, as glyph's)
            bottom, top = min(c.y0 for c in mine) - 0.4 * em, max(c.y1 for c in mine) + 0.4 * em
            wider = (start, end)
            for bar, first, last in fractions:
                if bar.x0 < right and bar.x1 > left and bottom < bar.y < top:
                    wider = (min(wider[0], first), max(wider[1], last))
            if wider == (start, end):
                break
            start, end = wider
        while out and start < out[-1][1]:
            before = out.pop()
            start, end = min(before[0], start), max(before[1], end)
        out.append((start, end))
    return out


def _faced(objs: list[Any]) -> str:
    """Characters as they read, each formula's between :data:`OPEN` and :data:`SHUT`, and before each word whose face
    is not the one before it (the first's too) the mark of its face (:data:`STYLE`), which :func:`styled` reduces to
    where the face changes from the box's own. A word's face is its first letter's (a word without letters, a number
    or a sign, takes the face before it: TeX sets digits in another font than its text's letters)."""
    out, now, start = [], None, True
    for k, o in enumerate(objs):
        text = o.get_text()
        if hasattr(o, "shown") and _math(o):
            out.append(f"{OPEN}{text}{SHUT}")
            start = True
            continue
        if start and text.strip():
            letter = next((c for c in itertools.takewhile(lambda c: c.get_text().strip(), objs[k:])
                           if hasattr(c, "fontname") and c.get_text().isalpha() and not _math(c)), None)
            if letter is not None and (mine := face(letter.fontname)) != now:
                out.append(STYLE[mine])
                now = mine
        start = not text.strip()
        out.append(text)
    return "".join(out)


def styled(marked: str, own: str) -> str:
    """A box's marked text with only the marks of its faces (:func:`_faced`) that change the face from the one before
    (``own``, the box's, at its start). A word's weight and slant are its own, and a monospaced face; a serif or sans
    serif family is the box's (a PDF may name a font by nothing, as pdfTeX's bitmap fonts, set beside one it names:
    a family told apart so would be noise)."""
    family = own.split("-")[0]
    out, now = [], own
    for ch in marked:
        if ch in STYLED:
            mine = STYLED[ch]
            if "Mono" not in (family, mine.split("-")[0]):
                mine = f"{family}-{mine.split('-')[1]}"
            if mine != now:
                out.append(STYLE[mine])
                now = mine
            continue
        out.append(ch)
    return "".join(out)


def face_at(marked: str, end: int, own: str) -> str:
    """The face a box's marked text is drawn in at ``end``: its last mark before, else ``own``."""
    return next((STYLED[ch] for ch in reversed(marked[:end]) if ch in STYLED), own)


@dataclass
class Run:
    """Characters of one line of a box that no rule divides: pdfminer's line, or a part of it where a table's rule
    runs through it."""

    chars: list[Any]
    text: str

    @functools.cached_property
    def rect(self) -> tuple[float, float, float, float]:   # (read once its characters are all in: :func:`runs`)
        return (min(c.x0 for c in self.chars), min(c.y0 for c in self.chars),
                max(c.x1 for c in self.chars), max(c.y1 for c in self.chars))


@dataclass
class Rules:
    """A page's rules: horizontal ones as (left, right, height), vertical ones as (across, bottom, top)."""

    across: list[tuple[float, float, float]] = field(default_factory=list)
    down: list[tuple[float, float, float]] = field(default_factory=list)
    bars: list[Bar] = field(default_factory=list)   # every thin horizontal line

    def between_rows(self, above: tuple[float, ...], below: tuple[float, ...]) -> bool:
        """Whether a horizontal rule runs between two rectangles (x0, y0, x1, y1), one above the other."""
        (a0, ay0, a1, _), (b0, _, b1, by1) = above, below
        return any(left < min(a1, b1) and right > max(a0, b0) and by1 - 1 <= y <= ay0 + 1
                   for left, right, y in self.across)

    def between(self, x0: float, x1: float, y: float) -> bool:
        """Whether a vertical rule runs at height ``y`` between ``x0`` (where a character or run ends) and ``x1``
        (where the next begins)."""
        return any(x0 - 1 <= x <= x1 + 1 and bottom <= y <= top for x, bottom, top in self.down)


def _rules(items: Any, rules: Rules | None = None) -> Rules:
    """The rules among ``items`` (in figures too): lines and thin rectangles at least 5 points long, such as a table
    draws between its rows and columns."""
    from pdfminer.layout import LTCurve, LTFigure

    rules = rules or Rules()
    for item in items:
        if isinstance(item, LTFigure):
            _rules(item, rules)
        elif isinstance(item, LTCurve) and item.height <= 2:
            y, half = (item.y0 + item.y1) / 2, getattr(item, "thick", 0.0) / 2
            if item.width >= 5:
                rules.across.append((item.x0, item.x1, y))
            rules.bars.append(Bar(item.x0, item.x1, y, (item.x0, item.y0 - half, item.x1, item.y1 + half),
                                  getattr(item, "op", -1)))
        elif isinstance(item, LTCurve) and item.width <= 2 and item.height >= 5:
            rules.down.append(((item.x0 + item.x1) / 2, item.y0, item.y1))
    return rules


def _base(chars: list[Any]) -> float:
    """The baseline of a line's characters: of those of its largest size, not its sub- and superscripts', nor a big
    sum's or integral's sign (TeX's font of them hangs each from a point above the baseline)."""
    size = max(c.size for c in chars)
    body = [c for c in chars if c.size >= 0.85 * size]
    return statistics.median(c.shown[2][5] for c in [c for c in body if not BIG.search(getattr(c, "fontname", ""))]
                             or body)


def _edges(lines: list[list[Any]]) -> set[int]:
    """Where a column's lines start (the points, rounded, at which three lines or more start, give or take one)."""
    starts = collections.Counter(round(min(c.x0 for c in chars)) for chars in lines)
    return {x for x in range(min(starts, default=0) - 1, max(starts, default=0) + 2)
            if starts[x - 1] + starts[x] + starts[x + 1] >= 3}


def _rejoined(page: Any) -> None:
    """pdfminer's lines that a formula's sub- or superscript broke in two joined again: pdfminer starts a new line
    where a character is not level with the one before it (a subscript after a superscript, ``Σ_{i=1}^n``), and the
    rest of the line may end up in another box. A line that starts where another ends (within an em, and not at the
    start of a column after a gap: :func:`_edges`), on its baseline
    (or, where one of them is a formula's symbols only, such as a root's sign, which hangs from it, or a sum's sign
    with its limits, beside the other's text), and where the break is at a formula's character or a small one, is put
    back at that one's end (its characters under or over that end, a lower limit under an upper one, in their
    places)."""
    from pdfminer.layout import LTChar, LTTextLine

    lines = [(item, ln, chars) for item in _text_boxes(page) for ln in item if isinstance(ln, LTTextLine)
             for chars in [[c for c in ln if isinstance(c, LTChar) and hasattr(c, "shown")]]
             if chars and not any(MUSIC.search(c.fontname) for c in chars)]
    lines.sort(key=lambda x: min(c.x0 for c in x[2]))

    def ends(chars: list[Any]) -> tuple[float, float, float, Any, float, float, float, bool]:
        """A line's baseline, largest size, the end of its text of that size, its last character, bottom, top, the
        middle of its text of that size, and whether it is a formula's symbols, digits and signs only."""
        size, last = max(c.size for c in chars), max(chars, key=lambda c: c.x1)
        body = max((c.x1 for c in chars if c.size >= 0.85 * size), default=last.x1)
        middle = statistics.median((c.y0 + c.y1) / 2 for c in chars if c.size >= 0.85 * size)
        return (_base(chars), size, body, last, min(c.y0 for c in chars), max(c.y1 for c in chars), middle,
                any(_math(c) for c in chars) and not any(_worded(c) for c in chars))

    end, edges = {id(ln): ends(chars) for _, ln, chars in lines}, _edges([chars for *_, chars in lines])
    for item, line, chars in lines:
        first, (base, *_, middle, _) = min(chars, key=lambda c: c.x0), end[id(line)]
        symbols = all(_math(c) for c in chars)
        for _, other, theirs in lines:
            if other is line or not theirs:
                continue
            their_base, size, body, last, bottom, top, _, sign = end[id(other)]
            if not body - 0.25 * size <= first.x0 <= last.x1 + size or \
                    round(first.x0) in edges and first.x0 - last.x1 > 0.3 * size:     # (across a column's gap)
                continue
            # on its baseline; or one of them a formula's symbols only (a root's sign, a sum's with its limits, which
            # hang from or stand over the baseline) beside the other's text
            level = abs(base - their_base) < 0.15 * size or symbols and bottom < (first.y0 + first.y1) / 2 < top \
                or sign and bottom < middle < top
            if level and (_math(first) or _math(last) or first.size < 0.85 * size or last.size < 0.85 * size):
                objs, k = line._objs, 0
                # its characters under or over that end (a lower limit) in their places, with no space between
                under = [isinstance(o, LTChar) and o.x0 < last.x1 - 0.1 * size for o in objs] + [False]
                while k < len(objs) and (under[k] or not isinstance(objs[k], LTChar) and under[k + 1]):
                    if under[k]:
                        _placed(other, objs[k])
                    k += 1
                _appended(other, theirs, item, line, chars, objs[k:])
                end[id(other)] = ends(theirs)
                break


def _satellites(page: Any) -> None:
    """The pieces of a formula that pdfminer read as lines of their own (a sum's limits, a fraction's numerator and
    denominator, an exponent after a subscript, an integral's lower limit: set smaller than the text beside them, and
    nothing but a formula's symbols, digits and signs; or a big delimiter in TeX's font of them, or a root's sign,
    whatever its size: a closing parenthesis around a fraction) put back into the line they belong to: of the lines of larger
    text around them whose words they do not stand over or under, one with a character over or under them (a sum's
    sign), else the nearest; each character at its place along it, so that they are taken out, moved and drawn again
    with their formula."""
    from pdfminer.layout import LTChar, LTTextLine

    homes = [(item, ln, [c for c in ln if isinstance(c, LTChar)]) for item in _text_boxes(page) for ln in item
             if isinstance(ln, LTTextLine)]
    for item, line, chars in homes:
        if not chars or any(MUSIC.search(c.fontname) or _worded(c) for c in chars):
            continue
        size, x0, x1 = max(c.size for c in chars), min(c.x0 for c in chars), max(c.x1 for c in chars)
        y, symbols = (min(c.y0 for c in chars) + max(c.y1 for c in chars)) / 2, any(_math(c) for c in chars)
        big = all(BIG.search(c.fontname) or c.get_text() == "\u221a" for c in chars)   # (a big delimiter, a root's sign)
        near = []
        for _, other, theirs in homes:
            if other is line or not theirs:
                continue
            # its size, or that of its characters beside the piece (an integral's sign among the limits it carries)
            beside = [c for c in theirs if c.x0 - size < x1 and x0 < c.x1 + size]
            if not symbols and not any(_math(c) for c in beside):
                continue        # digits and signs only: beside a formula's symbol (a limit's), not a word's letters
            em = max([statistics.median(c.size for c in theirs)] + [c.size for c in beside])
            top, bottom = max(c.y1 for c in theirs), min(c.y0 for c in theirs)
            if (size < 0.85 * em or big) and min(c.x0 for c in theirs) - em < x1 and x0 < max(c.x1 for c in theirs) + em \
                    and bottom - 0.5 * em < y < top + 0.5 * em and \
                    not any(c.x0 < x1 and c.x1 > x0 and _worded(c) for c in theirs):   # (over or under words)
                gap = min(max(c.x0 - x1, x0 - c.x1, 0) for c in theirs)   # (0: over or under one of them)
                near.append((gap > 0, abs(y - (top + bottom) / 2), id(other), other, theirs))
        if near:
            *_, home, theirs = min(near)
            _taken(home, theirs, item, line, chars)


def _fractions(page: Any, bars: list[Bar]) -> None:
    """A fraction set as large as its text, whose numerator and denominator pdfminer read as lines of their own (or
    one of them): each such piece, a line of a few characters over or under the fraction's bar (within an em and a
    half) and no wider than it, put into the line the bar stands in (the line with characters right before or after
    the bar, whether it ends there or goes on past it, at its height give or take a point), each character at its
    place along it and counted as the formula's (``cos`` is set in roman), and the line on the bar's other side
    joined to it; so that the fraction is taken out, moved and drawn again with its bar."""
    from pdfminer.layout import LTAnno, LTChar, LTTextLine

    homes = [(item, ln, chars, [min(c.x0 for c in chars), max(c.x1 for c in chars), min(c.y0 for c in chars),
                                max(c.y1 for c in chars)])
             for item in _text_boxes(page) for ln in item if isinstance(ln, LTTextLine)
             for chars in [[c for c in ln if isinstance(c, LTChar)]] if chars]
    for bar in bars:
        if bar.x1 - bar.x0 > 120:
            continue
        pieces = [h for h in homes if h[2] and len(h[2]) <= 24 and bar.x0 - 6 < h[3][0] and h[3][1] < bar.x1 + 6 and
                  all(0 < abs((c.y0 + c.y1) / 2 - bar.y) < 1.2 * c.size and bar.x0 - 0.5 * c.size < c.x0 and
                      c.x1 < bar.x1 + 0.5 * c.size for c in h[2])]
        # the lines beside the bar, by their text outside its span (a part of the fraction may have gone into one)
        left = [h for h in homes if h[2] and h[3][2] - 1 < bar.y < h[3][3] + 1 and bar.x0 - h[2][-1].size <=
                max((c.x1 for c in h[2] if not _spanned(c, bar) and c.x1 <= bar.x0 + 1), default=float("nan"))]
        right = [h for h in homes if h[2] and h[3][2] - 1 < bar.y < h[3][3] + 1 and bar.x1 + h[2][0].size >=
                 min((c.x0 for c in h[2] if not _spanned(c, bar) and c.x0 >= bar.x1 - 1), default=float("nan"))]
        host, parts = next(iter(left or right), None), [c for h in pieces for c in h[2]]
        if host is None or not parts or any(MUSIC.search(c.fontname) for c in parts) or \
                not any(_math(c) for c in parts + [c for c in host[2] if _spanned(c, bar)]):
            continue            # (a rule with text over or under it, a staff: not a fraction; 1/c_k's 1 is a digit)
        for item, line, chars, _ in [h for h in pieces if h is not host]:
            _taken(host[1], host[2], item, line, chars, fraction=True)
        if left and right and right[0] is not host:        # the text after the fraction, which pdfminer set apart
            item, line, chars, _ = right[0]
            _appended(host[1], host[2], item, line, chars, [LTAnno(" "), *line._objs])
        host[3][:] = [min(c.x0 for c in host[2]), max(c.x1 for c in host[2]), min(c.y0 for c in host[2]),
                      max(c.y1 for c in host[2])]


def _spanned(char: Any, bar: Bar) -> bool:
    """Whether a character stands over or under a bar's span (its middle within it, give or take half a point)."""
    return bar.x0 - 0.5 < (char.x0 + char.x1) / 2 < bar.x1 + 0.5


def _taken(home: Any, theirs: list[Any], item: Any, line: Any, chars: list[Any], fraction: bool = False) -> None:
    """pdfminer's ``line`` (its ``chars``, in box ``item``) taken into line ``home`` (its characters ``theirs``), each
    character at its place along it (:func:`_placed`); ``fraction``: each counted as a fraction's (:func:`_math`)."""
    for char in sorted(chars, key=lambda c: c.x0):
        if fraction:
            char.fraction = True
        _placed(home, char)
        theirs.append(char)
    item._objs.remove(line)
    chars.clear()


def _appended(home: Any, theirs: list[Any], item: Any, line: Any, chars: list[Any], objs: list[Any]) -> None:
    """pdfminer's ``line`` (its ``chars``, in box ``item``) put at the end of line ``home`` (its characters
    ``theirs``), as ``objs`` (its objects, or those of them not yet placed), in place of ``home``'s line end."""
    from pdfminer.layout import LTChar

    while home._objs and not isinstance(home._objs[-1], LTChar):     # (its line's end, "\n")
        home._objs.pop()
    home._objs.extend(objs)
    theirs.extend(chars)
    home.set_bbox((min(home.x0, line.x0), min(home.y0, line.y0), max(home.x1, line.x1), max(home.y1, line.y1)))
    item._objs.remove(line)
    chars.clear()


def _worded(char: Any) -> bool:
    """Whether a pdfminer character is a letter of a word: a letter not drawn in a font of symbols."""
    return char.get_text().isalpha() and not _math(char)


def _placed(line: Any, char: Any) -> None:
    """``char`` put into pdfminer's ``line`` after the last of its characters that starts before it (and after the
    space that follows that one, where it starts past its end)."""
    from pdfminer.layout import LTAnno, LTChar

    objs, at, last = line._objs, 0, None
    for k, obj in enumerate(objs):
        if isinstance(obj, LTChar) and obj.x0 <= char.x0:
            at, last = k + 1, obj
    if last is not None and at < len(objs) and isinstance(objs[at], LTAnno) and char.x0 > last.x1 + 0.1 * last.size:
        at += 1
    objs.insert(at, char)
    line.set_bbox((min(line.x0, char.x0), min(line.y0, char.y0), max(line.x1, char.x1), max(line.y1, char.y1)))


def _near(bars: list[Bar], page: Any) -> list[Bar]:
    """``bars`` each with the characters of ``page`` over and under it: centred above its span, their centres within
    half their size of it (a fraction's numerator and denominator; an overline's letters, not the line above)."""
    import bisect

    from pdfminer.layout import LTChar, LTTextLine

    chars = sorted(((c.x0 + c.x1) / 2, (c.y0 + c.y1) / 2, c.size, id(c)) for item in _text_boxes(page)
                   for line in item if isinstance(line, LTTextLine) for c in line if isinstance(c, LTChar))
    xs = [c[0] for c in chars]
    return [b._replace(near=frozenset(k for _, y, size, k in chars[bisect.bisect_left(xs, b.x0):
                                                                     bisect.bisect_right(xs, b.x1)]
                                      if abs(y - b.y) < 0.55 * size)) for b in bars]


def runs(line: Any, rules: Rules, glyphs: dict[str, Glyph] | None = None) -> list[Run]:
    """pdfminer's ``line`` as runs: split where a vertical rule runs between two of its characters. A formula is
    marked (:data:`OPEN`, :data:`SHUT`), as one private-use character that stands for it in ``glyphs`` when given
    (:func:`marking`)."""
    from pdfminer.layout import LTChar

    out, objs, prev = [Run([], "")], [[]], None   # type: ignore[var-annotated]
    for obj in line:
        if isinstance(obj, LTChar):
            if prev is not None and prev.x1 <= obj.x0 + 1 and rules.between(prev.x1, obj.x0, (obj.y0 + obj.y1) / 2):
                out.append(Run([], ""))
                objs.append([])
            out[-1].chars.append(obj)
            prev = obj
        objs[-1].append(obj)
    for run, mine in zip(out, objs, strict=True):
        run.text = marking(mine, line, rules.bars, glyphs)
    return [r for r in out if r.chars]


def cells(found: list[Run], rules: Rules) -> list[list[list[Run]]]:
    """A box's runs as its cells, each as its rows of runs (left to right): runs side by side on one line belong
    together unless a vertical rule divides them, a run and one under it that it overlaps unless a horizontal rule
    divides them or the lower starts with a bullet (a list item is its own unit)."""
    rows: list[list[Run]] = []
    for run in sorted(found, key=lambda r: (-(r.rect[1] + r.rect[3]) / 2, r.rect[0])):
        y, h = (run.rect[1] + run.rect[3]) / 2, run.rect[3] - run.rect[1]
        if rows and abs(y - (rows[-1][0].rect[1] + rows[-1][0].rect[3]) / 2) < h / 2:
            rows[-1].append(run)
        else:
            rows.append([run])
    parent = list(range(len(found)))
    index = {id(r): k for k, r in enumerate(found)}

    def root(k: int) -> int:
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    for row in rows:
        row.sort(key=lambda r: r.rect[0])
    for n, row in enumerate(rows):
        for left, right in itertools.pairwise(row):
            if not rules.between(left.rect[2], right.rect[0], (left.rect[1] + left.rect[3]) / 2):
                parent[root(index[id(right)])] = root(index[id(left)])
        for above in row:
            item = n + 1 < len(rows) and rows[n + 1][0].chars[0].get_text()[:1] in BULLETS  # (a row's first run's,
            # as drawn: a bullet in a font of symbols, TeX's itemize's, is marked as a formula in the run's text)
            for below in rows[n + 1] if n + 1 < len(rows) and not item else []:
                if above.rect[0] < below.rect[2] and below.rect[0] < above.rect[2] and \
                        not rules.between_rows(above.rect, below.rect):
                    parent[root(index[id(below)])] = root(index[id(above)])
    groups: dict[int, list[list[Run]]] = {}
    for row in rows:
        for k in {root(index[id(r)]) for r in row}:
            groups.setdefault(k, []).append([r for r in row if root(index[id(r)]) == k])
    return list(groups.values())


def _entries(rows: list[list[Run]], glyphs: dict[str, Glyph]) -> list[list[list[Run]]]:
    """A cell's rows as the entries of a table of contents where two rows or more end with leader dots and a page
    (:data:`LEADERS`): each entry ends at such a row, or at a row whose page stands at the right edge with no room for
    dots, or is a row without a letter (the page of a heading above, which pdfminer set with the entries at its
    right); other cells as they are, one unit."""
    texts = [read(" ".join(r.text.strip() for r in row), glyphs).strip() for row in rows]
    if sum(bool(LEADERS.search(t)) for t in texts) < 2:
        return [rows]
    edge = max(max(r.rect[2] for r in row) for row, t in zip(rows, texts, strict=True) if LEADERS.search(t)) - 1
    out: list[list[list[Run]]] = [[]]
    for row, text in zip(rows, texts, strict=True):
        if not re.search(r"[^\W\d_]", text) and out[-1]:
            out.append([])
        out[-1].append(row)
        if LEADERS.search(text) or not re.search(r"[^\W\d_]", text) or \
                re.search(r"\s[0-9ivxlcdm]+$", text) and max(r.rect[2] for r in row) >= edge:  # (no room for dots)
            out.append([])
    return [entry for entry in out if entry]


def gathered(groups: list[list[Run]]) -> list[list[Run]]:
    """pdfminer's boxes (as their runs) with each that lies inside another's width, on the lines of it, put back
    into it: the words of a justified line whose wide spaces pdfminer took for gaps between boxes (``tragen,``); and
    a formula's symbols alone (not music) past another's width but inside its column, within a few quads after the
    end of one of its lines of words and last on that line (a display's ``⇔`` after its text, which a box whose last
    line is short does not reach; not a piece of a formula that goes on after it)."""
    def span(g: list[Run]) -> tuple[float, float]:
        return min(r.rect[0] for r in g), max(r.rect[2] for r in g)

    def on(run: Run, other: list[Run]) -> bool:
        y, h = (run.rect[1] + run.rect[3]) / 2, run.rect[3] - run.rect[1]
        return any(abs(y - (o.rect[1] + o.rect[3]) / 2) < h / 2 for o in other)

    def after(g: list[Run], h: list[Run]) -> bool:
        """Whether g ends a line of words of h: within five ems after its end, and nothing after it in h's column."""
        (x0, y0, x1, y1), em = g[0].rect, max(c.size for c in g[0].chars)

        def level(r: Run) -> bool:
            return abs((y0 + y1) / 2 - (r.rect[1] + r.rect[3]) / 2) < em / 2

        return any(0 <= x0 - r.rect[2] <= 5 * em and level(r) and any(_worded(c) for c in r.chars) for r in h) and \
            not any(x1 - 1 <= r.rect[0] <= column(h) and level(r) for o in out if o is not g for r in o)

    def column(g: list[Run]) -> float:        # where the column of a box ends: the widest box starting where it does
        left, em = span(g)[0], max(c.size for r in g for c in r.chars)
        return max(b for (a, b), h in zip(spans, out, strict=True) if h and abs(a - left) <= 1.5 * em)

    out, moved = [list(g) for g in groups], True
    spans = [span(g) for g in out]
    while moved:
        moved = False
        for k, group in enumerate(out):
            if not group:
                continue
            (x0, x1), math = spans[k], all(_math(c) and not MUSIC.search(c.fontname) for r in group for c in r.chars)
            home = next((j for j, h in enumerate(out) if j != k and h and spans[j][0] <= x0 + 1 and
                         (x1 <= spans[j][1] + 1 or math and x1 <= column(h) + 1 and after(group, h)) and
                         all(on(r, h) for r in group)), None)
            if home is not None:
                out[home] += group
                spans[home] = (min(spans[home][0], x0), max(spans[home][1], x1))
                group.clear()
                moved = True
    return [g for g in out if g]


def boxes(src: Path, name: str, every: bool = False) -> list[Box]:
    """Every box of text of ``src`` with a letter in it (``every``: and those without), page by page, in pdfminer's
    reading order; a box that a table's rules divide split into its cells, a list's items each its own
    (:func:`cells`)."""
    from pdfminer.layout import LTTextLine

    found, glyphs = [], {}   # type: ignore[var-annotated]
    for number, page in enumerate(_pages(src)):
        rules, mine = _rules(page), []
        rules.bars = _near(rules.bars, page)
        _rejoined(page)
        _fractions(page, rules.bars)
        _satellites(page)
        groups = [[r for ln in item if isinstance(ln, LTTextLine) for r in runs(ln, rules, glyphs)]
                  for item in _text_boxes(page)]
        for parts in gathered([g for g in groups if g]):
            for rows, entry in ((e, len(es) > 1) for cell in cells(parts, rules) for es in [_entries(cell, glyphs)]
                                for e in es):
                box = _box(number, rows, every, glyphs, rules.bars)
                if box:
                    box.entry = entry
                    x0, y0, x1, y1 = box.rect
                    box.wall = min((x for x, bottom, top in rules.down if x >= x1 - 1 and bottom < y1 and top > y0),
                                   default=box.wall)
                    mine.append(box)
        found += continued(mine, rules)
    return found


def continued(found: list[Box], rules: Rules) -> list[Box]:
    """A page's boxes, each that goes on in the box right under it joined to it: the same face and size, the same
    left edge or its paragraph's indent, a line's gap and no rule between them, its text ending mid-sentence (not
    with a contents line's leaders and page, nor a contents entry), and the one under it not a list item of its own
    (a slide's list item whose last line pdfminer set apart, a paragraph's indented first line)."""
    out: list[Box] = []
    for box in found:
        prev = out[-1] if out else None
        if prev is not None and prev.letters and box.letters and not box.item and prev.face == box.face and \
                not rules.between_rows(prev.rect, box.rect) and \
                abs(prev.size - box.size) < 0.1 and -1 < prev.rect[0] - box.rect[0] < prev.size * 2.5 and \
                0 <= prev.rect[1] - box.rect[3] <= prev.size * 0.6 and not re.search(r"[.!?:;]\W*$", prev.text) and \
                not LEADERS.search(prev.text) and not prev.entry:
            lines = max(1, round((prev.rect[3] - prev.rect[1] - prev.size) / prev.pitch) + 1)
            rect = (min(prev.rect[0], box.rect[0]), box.rect[1], max(prev.rect[2], box.rect[2]), prev.rect[3])
            prev.pitch = (rect[3] - rect[1] - prev.size) / lines if lines else prev.pitch
            prev.rect, prev.ops, prev.paths = rect, prev.ops | box.ops, prev.paths | box.paths
            prev.text, prev.marked = joined([prev.text, box.text]), joined([prev.marked, box.marked])
            prev.wall = min(prev.wall, box.wall)
            continue
        out.append(box)
    return out


def _bullet(char: Any) -> bool:
    """Whether a pdfminer character is a list item's bullet: one of :data:`BULLETS`, or a private-use character (a
    symbol font's bullet, as LibreOffice draws it)."""
    text = char.get_text()
    return text in BULLETS or unicodedata.category(text[:1]) == "Co"


def _lead(chars: list[Any], marked: str) -> tuple[list[Any], str]:
    """A box's characters and marked text with its lead seen to: a bullet drawn by an operator of its own left out of
    the box (it stays as drawn, in its own font, which may have no Unicode for it); a number that a quad sets apart
    (LaTeX's section "1  Hunde") marked as the section's number, with an em space (:data:`NUMBERED`)."""
    first = chars[0].get_text()
    if _bullet(chars[0]):
        rest = chars[1:]
        if rest and getattr(chars[0], "op", -1) != -1 and chars[0].op not in {getattr(c, "op", -1) for c in rest}:
            return rest, re.sub(f"^[\\s{MARKS}]*{OPEN}?(?:{re.escape(first)}|{_ONE})?{SHUT}?\\s*", "", marked, count=1)
    digits = 0
    while digits < len(chars) - 1 and (chars[digits].get_text().isdigit() or digits and chars[digits].get_text() == "."):
        digits += 1
    number = "".join(c.get_text() for c in chars[:digits])
    bare = marked.lstrip(MARKS)
    if digits and chars[digits].x0 - chars[digits - 1].x1 >= 0.6 * chars[digits - 1].size and bare.startswith(number):
        marked = f"{number}\u2003{bare[len(number):].lstrip()}"
    return chars, marked


def _code(chars: list[Any], text: str) -> bool:
    """Whether a box is one word of code: a path, a command, a file's name, set in a monospaced face (``/etc/``)."""
    return " " not in text.strip() and face(statistics.mode(c.fontname for c in chars)).startswith("Mono")


def _box(page: int, rows: list[list[Run]], every: bool, glyphs: dict[str, Glyph],
         bars: list[Bar]) -> Box | None:
    """A cell's ``rows`` of runs as a :class:`Box`; None where they have no letter and not ``every``. Its text has
    its formulas' characters as they read (``glyphs``); its marked text, as the characters that stand for them."""
    chars = [c for row in rows for r in row for c in r.chars]
    marked = _GLUED.sub(lambda m: m[1].translate(_UNMARKED), joined([" ".join(r.text.strip() for r in row) for row in rows]))
    item = bool(chars) and _bullet(chars[0])              # (a list item: :func:`continued` joins none to the one above)
    if chars:
        chars, marked = _lead(chars, marked)
    text = read(marked, glyphs)
    letters = any(ch.isalpha() for ch in text) and not symbolic(chars) and not _code(chars, text)
    if not chars or not (letters or every):
        return None
    x0, y0 = min(c.x0 for c in chars), min(c.y0 for c in chars)
    x1, y1 = max(c.x1 for c in chars), max(c.y1 for c in chars)
    size = statistics.median(c.size for c in chars)
    paths = frozenset(op for ch in marked if ch in glyphs for op in glyphs[ch].paths)
    if any(_stacked(r, size) for row in rows for r in row) or \
            _barred(chars, [b for b in bars if b.op not in paths], size):
        marked = FIXED + marked
    pitch = (y1 - y0 - size) / (len(rows) - 1) if len(rows) > 1 else size * 1.2
    color = _rgb(statistics.mode(tuple(_rgb(c.graphicstate.ncolor)) for c in chars))
    first = [c.shown[2][5] for r in rows[0] for c in r.chars if hasattr(c, "shown")]
    own = face(statistics.mode(c.fontname for c in chars))
    lines = [(min(c.x0 for c in words), max(c.x1 for c in words)) for row in rows    # (a bullet not counted, nor
             for words in [[c for r in row for c in r.chars if not _bullet(c)]]     # a row that is a formula's piece)
             if sum(_worded(c) for c in words) >= 4]
    middles = [(a + b) / 2 for a, b in lines]
    firsts = sorted(c.x0 for r in rows[0] for c in r.chars)
    hanging = {round(b) for a, b in itertools.pairwise(firsts) if b - a > size}    # (where a heading's text starts)
    centred = len(lines) > 1 and max(middles) - min(middles) < 0.15 * size and \
        min(max(e) - min(e) for e in zip(*lines, strict=True)) > 1.5 * size and \
        not any(round(a) in hanging for a, _ in lines[1:])   # (both edges moved, one middle; not under a number)
    return Box(page, (x0, y0, x1, y1), text, size, max(pitch, size), color,
               base=statistics.median(first) if first else None, face=own,
               ops=frozenset(getattr(c, "op", -1) for c in chars), marked=styled(marked, own), letters=letters,
               glyphs=glyphs, paths=paths, upright=all(_upright(c) for c in chars), item=item, centred=centred)


def _upright(char: Any) -> bool:
    """Whether a character reads upright on the page as it is shown: its rendering matrix neither turned (by a
    quarter or more, or upside down) nor mirrored; slanted (an italic's shear) is upright."""
    a, b, _, d, _, _ = char.matrix
    return bool(a > 0 and d > 0 and abs(b) < 0.05 * a)


def _stacked(run: Run, size: float) -> bool:
    """Whether a run is a piece of a formula that pdfminer read as a line of its own: a sum's limits, a binomial's
    lower half, set smaller than the box's text (``size``) and nothing but symbols, digits and signs."""
    return any(_math(c) for c in run.chars) and all(_math(c) or not c.get_text().isalpha() for c in run.chars) and \
        max(c.size for c in run.chars) < 0.85 * size


def _barred(chars: list[Any], bars: list[Bar], size: float) -> bool:
    """Whether a character of a box set smaller than its text sits right over or under a short bar (an inline
    fraction's numerator or denominator, which pdfminer may read apart from the rest of its fraction; an underline is
    under text of the box's size; a bar over or under none of the box's characters but another's is that one's: the
    next line's overline)."""
    small, mine = [c for c in chars if c.size < 0.85 * size], {id(c) for c in chars}
    return any(x1 - x0 < 3 * size and x0 < c.x1 and x1 > c.x0 and (not near or near & mine) and
               (0 <= y - c.y1 < 0.5 * size or 0 <= c.y0 - y < 0.5 * size)
               for x0, x1, y, _, _, near in bars for c in small)


def read(marked: str, glyphs: dict[str, Glyph]) -> str:
    """A box's marked text as it reads: its formulas unmarked, each character that stands for one of theirs as its
    own text."""
    return "".join(glyphs[c].text if c in glyphs else c for c in re.sub(f"[{OPEN}{SHUT}{FIXED}{MARKS}]", "", marked))


# --- taking the original text out ---------------------------------------------------------------------------------


def strip(operations: list[Any], remove: set[int], paths: frozenset[int] = frozenset()) -> list[Any]:
    """A content stream's operations without its text-showing operators whose index (counted among them, as
    :func:`_pages` counts them) is in ``remove``; a ``'`` or ``"`` removed keeps its move to the next line (and
    ``"`` its spacings). A painting operator whose index (among :data:`PAINTS`) is in ``paths`` ends its path
    unpainted (``n``: a formula's bar, drawn again with it)."""
    import pikepdf

    kept: list[Any] = []
    shown, painted = -1, -1
    for operands, operator in operations:
        op = str(operator)
        if op in PAINTS:
            painted += 1
            if painted in paths:
                kept.append(([], pikepdf.Operator("n")))
                continue
        if op in SHOWS:
            shown += 1
            if shown in remove:
                if op == '"' and len(operands) == 3:
                    kept += [([operands[0]], pikepdf.Operator("Tw")), ([operands[1]], pikepdf.Operator("Tc")),
                             ([], pikepdf.Operator("T*"))]
                elif op == "'":
                    kept.append(([], pikepdf.Operator("T*")))
                continue
        kept.append((operands, operator))
    return kept


# --- the font -----------------------------------------------------------------------------------------------------


class Font:
    """A bundled face: its metrics, read once, and :meth:`embedded`, its subset to the characters drawn in it as a
    Type 0 font (Identity-H, glyphs by their ids in the whole face, a ToUnicode map so that the text can be copied
    and searched)."""

    def __init__(self, face: str = "Sans-Regular", path: Path | None = None) -> None:
        from fontTools.ttLib import TTFont

        self.path = path or FONTS / f"Liberation{face}.ttf"
        self.fallbacks: list[Font] = []      # where a character it lacks is drawn from (:data:`SYMBOLS`, :func:`scripts`)
        self.glyphs: dict[str, Glyph] = {}   # a formula's characters, drawn as the PDF drew them (:func:`runs`)
        self.styles: dict[str, Font] = {}    # the faces its text's marks switch to (:data:`STYLE`: a word's own bold)
        self.face, self.resource = face, f"Aiayn{re.sub(r'[^A-Za-z0-9]', '', face)}"  # its name in a page's resources
        try:
            font = TTFont(self.path, fontNumber=0) if self.path.suffix.lower() == ".ttc" else TTFont(self.path)
        except Exception as e:  # noqa: BLE001 - a missing or damaged font file (fontTools' TTLibError, OSError), named
            raise DocumentError(f"the font {self.path} cannot be read: {type(e).__name__}: {e}") from None
        if "glyf" not in font:
            raise DocumentError(f"the font {self.path.name} has PostScript (CFF) outlines: aiayn embeds TrueType fonts "
                                "(give a .ttf or .ttc font with --font)")
        self.cmap = {chr(u): font.getGlyphID(g) for u, g in font.getBestCmap().items()}
        self.upem = font["head"].unitsPerEm
        self.widths = {font.getGlyphID(g): font["hmtx"][g][0] for g in font.getGlyphOrder()}
        self.ascent, self.descent = font["hhea"].ascent, font["hhea"].descent
        self.bbox = [font["head"].xMin, font["head"].yMin, font["head"].xMax, font["head"].yMax]

    def width(self, text: str, size: float) -> float:
        """``text``'s advance at ``size`` points (a character it lacks at its fallback's; a run that a mark puts in
        another face at that face's)."""
        total = 0.0
        for font, run in self.runs(text):
            if font is None:
                total += sum(self.glyphs[ch].width for ch in run)
            else:
                total += sum(font.widths.get(font.cmap.get(ch, 0), 0) for ch in run) / font.upem
        return total * size

    def drawing(self, ch: str) -> Font:
        """The font ``ch`` is drawn in: this one, or the first of its fallbacks that has it where it lacks it."""
        return next((f for f in self.fallbacks if ch in f.cmap), self) if ch not in self.cmap else self

    def has(self, ch: str) -> bool:
        """Whether it or a fallback can draw ``ch``."""
        return ch in self.cmap or any(ch in f.cmap for f in self.fallbacks)

    def runs(self, text: str) -> list[tuple[Font | None, str]]:
        """``text`` cut where the font it is drawn in changes: its own, or the face a mark switches to (:attr:`styles`),
        their fallback for what they lack, or (None) the PDF's own fonts for a formula's characters (:attr:`glyphs`).
        The marks themselves are in no run."""
        out: list[tuple[Font | None, str]] = []
        now: Font = self
        for ch in text:
            if ch in STYLED:
                now = self.styles.get(ch, self) if STYLED[ch] != self.face else self
                continue
            font = None if ch in self.glyphs else now.drawing(ch)
            if out and out[-1][0] is font:
                out[-1] = (font, out[-1][1] + ch)
            else:
                out.append((font, ch))
        return out

    def encoded(self, text: str) -> bytes:
        """``text`` as the glyph ids a ``Tj`` shows (two bytes each)."""
        return b"".join(self.cmap.get(c, 0).to_bytes(2, "big") for c in text if c.isprintable())

    def _subset(self, chars: list[str]) -> bytes:
        from fontTools.subset import Options as SubsetOptions
        from fontTools.subset import Subsetter
        from fontTools.ttLib import TTFont

        options = SubsetOptions()
        options.name_IDs, options.notdef_outline, options.glyph_names = ["*"], True, False
        options.retain_gids = True                      # the ids :meth:`encoded` writes stay the glyphs' ids
        options.drop_tables += ["FFTM"]                 # FontForge's timestamps, which fontTools cannot subset
        font = TTFont(self.path, fontNumber=0) if self.path.suffix.lower() == ".ttc" else TTFont(self.path)
        subsetter = Subsetter(options)
        subsetter.populate(unicodes=[ord(c) for c in chars])
        subsetter.subset(font)
        out = io.BytesIO()
        font.save(out)
        return out.getvalue()

    def embedded(self, pdf: Any, text: str) -> Any:
        """The face, subset to the characters of ``text``, as an indirect object of ``pdf``; a DocumentError naming
        a character it lacks."""
        import pikepdf

        chars = sorted(set(text) | {" "})
        missing = [c for c in chars if not self.has(c) and c.isprintable()]
        if missing:
            raise DocumentError(f"the translation holds {', '.join(repr(c) for c in missing[:5])}, which the font "
                                f"{self.path.name} does not have, nor any font installed: install one that has them "
                                "(Debian: fonts-droid-fallback for Chinese, Japanese and Korean) or give one with "
                                "--font")
        chars = [c for c in chars if c in self.cmap]
        data = self._subset(chars)
        tag = "".join(chr(65 + (sum(map(ord, self.face)) + k * 7) % 26) for k in range(6))   # a subset's prefix
        name = pikepdf.Name(f"/{tag}+{self.path.stem}")
        scale = 1000 / self.upem
        descriptor = pdf.make_indirect(pikepdf.Dictionary(
            Type=pikepdf.Name.FontDescriptor, FontName=name, Flags=32,
            FontBBox=[round(v * scale) for v in self.bbox], ItalicAngle=0, Ascent=round(self.ascent * scale),
            Descent=round(self.descent * scale), CapHeight=round(self.ascent * scale), StemV=80,
            FontFile2=pdf.make_stream(data, Length1=len(data))))
        widths: list[Any] = []
        for gid in sorted({self.cmap[c] for c in chars}):
            widths += [gid, [round(self.widths[gid] * scale)]]
        cid = pikepdf.Dictionary(
            Type=pikepdf.Name.Font, Subtype=pikepdf.Name.CIDFontType2, BaseFont=name,
            CIDSystemInfo=pikepdf.Dictionary(Registry="Adobe", Ordering="Identity", Supplement=0),
            FontDescriptor=descriptor, W=widths, CIDToGIDMap=pikepdf.Name.Identity, DW=1000)
        return pdf.make_indirect(pikepdf.Dictionary(
            Type=pikepdf.Name.Font, Subtype=pikepdf.Name.Type0, BaseFont=name, Encoding=pikepdf.Name("/Identity-H"),
            DescendantFonts=[pdf.make_indirect(cid)], ToUnicode=pdf.make_stream(self._to_unicode(chars))))

    def _to_unicode(self, chars: list[str]) -> bytes:
        pairs = sorted((self.cmap[ch], ch) for ch in chars)
        lines = [f"<{gid:04X}> <{''.join(f'{u:04X}' for u in _utf16(ch))}>" for gid, ch in pairs]
        chunks = [lines[i:i + 100] for i in range(0, len(lines), 100)]
        body = "".join(f"{len(c)} beginbfchar\n" + "\n".join(c) + "\nendbfchar\n" for c in chunks)
        return ("/CIDInit /ProcSet findresource begin\n12 dict begin\nbegincmap\n"
                "/CIDSystemInfo << /Registry (Adobe) /Ordering (UCS) /Supplement 0 >> def\n"
                "/CMapName /Adobe-Identity-UCS def\n/CMapType 2 def\n"
                "1 begincodespacerange\n<0000> <FFFF>\nendcodespacerange\n"
                f"{body}endcmap\nCMapName currentdict /CMap defineresource pop\nend\nend\n").encode()


def _utf16(ch: str) -> list[int]:
    data = ch.encode("utf-16-be")
    return [int.from_bytes(data[i:i + 2], "big") for i in range(0, len(data), 2)]


# --- the translation written in its box ---------------------------------------------------------------------------


# where a line may break without a space: before and after each character of Chinese, Japanese and Korean
_WIDE = "\u2e80-\u30ff\u3100-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef"
_WORDS = re.compile(f"(\\s*)([{_WIDE}]|[^\\s{_WIDE}]+)")
# never first on a line (kinsoku): closing punctuation, small kana, the prolonged sound mark
_CLOSING = set("。，、．：；！？）」』】〉》〕］｝ー々ぁぃぅぇぉっゃゅょァィゥェォッャュョ")


def wrapped(text: str, font: Font, size: float, width: float) -> list[str]:
    """``text`` broken into lines no wider than ``width`` at ``size`` (a word wider than that alone on its line): at
    spaces, and between two characters of Chinese, Japanese or Korean."""
    lines: list[str] = []
    now = ""                                    # the mark of the face a line starts in (:data:`STYLE`), carried over
    for space, word in _WORDS.findall(text):
        joined = f"{lines[-1]}{' ' if space else ''}{word}" if lines else word
        if lines and (font.width(joined, size) <= width or (not space and word in _CLOSING)):
            lines[-1] = joined
        else:
            lines.append(now + word)
        now = next((ch for ch in reversed(word) if ch in STYLED), now)
    return lines


# scripts whose letters must be shaped (joined, reordered) or set right to left, which drawing one glyph per
# character does not do: Hebrew, Arabic, Syriac, Thaana, N'Ko; the Indic scripts; Tibetan, Myanmar, Khmer
_SHAPED = re.compile("[\u0590-\u08ff\u0900-\u0dff\u0f00-\u109f\u1780-\u17ff\ufb1d-\ufdff\ufe70-\ufeff]")


def scripts(text: str, fonts: list[Font], given: Path | None) -> list[Font]:
    """The fonts that draw what ``text`` holds and ``fonts`` lack: ``given`` (``--font``), then those fontconfig
    finds installed (``fc-match``), one for each character still lacking, while one has it. A script that needs
    shaping is refused, named."""
    import shutil
    import subprocess

    shaped = _SHAPED.search(text)
    if shaped:
        raise DocumentError(f"the translation holds {shaped[0]!r} (U+{ord(shaped[0]):04X}), of a script whose letters "
                            "must be shaped or set right to left, which aiayn's PDF writer does not do yet")
    lacking = sorted({c for c in text if c.isprintable() and not c.isspace() and not any(c in f.cmap for f in fonts)})
    out = [Font(f"Given-{given.stem}", given)] if given else []
    tool = shutil.which("fc-match")
    while lacking and tool:
        lacking = [c for c in lacking if not any(c in f.cmap for f in out)]
        if not lacking:
            break
        found = subprocess.run([tool, "-f", "%{file}", f":charset={ord(lacking[0]):x}"], capture_output=True,
                               text=True, timeout=30).stdout.strip()
        font = Font(f"Script{len(out)}-{Path(found).stem}", Path(found)) if found and Path(found).is_file() else None
        if font is None or lacking[0] not in font.cmap or any(f.path == font.path for f in out):
            break
        out.append(font)
    return out


def room(boxes: list[Box], width: float) -> None:
    """Set each box's :attr:`Box.right`: a translation longer than its text may reach right, up to the next box beside
    it (a column, a cell) or, with none, the page's right margin (as wide as its left one), never over other text."""
    left = min((b.rect[0] for b in boxes), default=0.0)
    for box in boxes:
        x0, y0, x1, y1 = box.rect
        beside = [b.rect[0] for b in boxes if b is not box and b.rect[0] >= x1 - 1 and b.rect[1] < y1 and b.rect[3] > y0]
        box.right = max(x1, min(min(beside) - box.size * 0.5 if beside else width - left, box.wall - box.size * 0.3))


def fitted(box: Box, font: Font) -> tuple[float, list[str], bool]:
    """The size, lines and whether they fit: the box's own size, or smaller (down to :data:`SMALLEST` of it) until
    the translation's lines fit the box's height and the width it may take (:func:`room`)."""
    x0, y0, _, y1 = box.rect
    x1 = max(box.right, box.rect[2])
    ratio = box.pitch / box.size
    size = box.size
    while True:
        lines = wrapped(_tail(box).sub(_few_leaders, box.translation), font, size, x1 - x0)
        height = size + (len(lines) - 1) * size * ratio
        wide = max((font.width(ln, size) for ln in lines), default=0.0)
        if (height <= (y1 - y0) * 1.02 and wide <= (x1 - x0) * 1.02) or size <= box.size * SMALLEST:
            return size, lines, height <= (y1 - y0) * 1.02 and wide <= (x1 - x0) * 1.02
        size *= 0.95


def _tail(box: Box) -> re.Pattern[str]:
    """What ends a box's text as a contents line's: its leaders and page (:data:`LEADERS`), or an entry's page with
    no room for dots (:data:`ENTRY_END`)."""
    return ENTRY_END if box.entry else LEADERS


def _page(tail: re.Match[str]) -> str:
    """The page of a contents line's end (:func:`_tail`), without its dots; empty where it has none."""
    return re.sub(r"[\s.]", "", tail[1])


def _few_leaders(tail: re.Match[str]) -> str:
    """A contents line's leader dots and page as three dots and the page, to fit its words by (:func:`drawn` fills
    the dots up to the page again)."""
    return f" . . . {_page(tail)}" if _page(tail) else tail[1]


def drawn(box: Box, font: Font) -> tuple[bytes, str]:
    """The content that draws ``box``'s translation (in the coordinates it was read in: :func:`_placing` maps them
    to the page's), and whether it fit: "yes", "small" (under :data:`SMALL` of its size) or "no"."""
    size, lines, fits = fitted(box, font)
    x0, _, _, y1 = box.rect
    pitch = size * box.pitch / box.size
    # the first line on its original's baseline (raised by what a smaller size leaves above it), else under the top
    top = (box.base + (box.size - size) * font.ascent / font.upem if box.base is not None else
           y1 - size * font.ascent / font.upem)
    r, g, b = box.color
    out = [f"q BT {r:.3f} {g:.3f} {b:.3f} rg"]
    tail = _tail(box).search(lines[-1]) if lines else None
    page = _page(tail) if tail else ""
    if tail and page:           # a contents entry: its leaders filled up to its page, set flush with the box's right
        right, dot = max(box.right, box.rect[2]), font.width(" .", size)
        head = lines[-1][:tail.start()]
        room = right - x0 - font.width(head, size) - font.width(page, size) - dot
        lines[-1] = head + " ." * max(3, int(room / dot))
        out.append(shown(font, page, size, right - font.width(page, size), top - (len(lines) - 1) * pitch))
    for k, line in enumerate(lines):
        # a centred box's line in the middle of its box (from its left edge, where it is wider)
        left = x0 + max(0.0, (box.rect[2] - x0 - font.width(line, size)) / 2) if box.centred else x0
        out.append(shown(font, line, size, left, top - k * pitch))
    out.append("ET Q\n")
    return "\n".join(out).encode(), "no" if not fits else "small" if size < box.size * SMALL else "yes"


def shown(font: Font, line: str, size: float, x: float, y: float) -> str:
    """The operators that show ``line`` at ``size`` from (``x``, ``y``): each run in the font that draws it, and each
    formula's character in the PDF's own font, scaled with the line, at its place above or below the baseline."""
    out, cursor = [f"1 0 0 1 {x:.2f} {y:.2f} Tm"], x
    for drawing, run in font.runs(line):
        if drawing is not None:
            out.append(f"/{drawing.resource} {size:.2f} Tf <{drawing.encoded(run).hex()}> Tj")
            cursor += drawing.width(run, size)
            continue
        for ch in run:
            for name, code, (a, b, c, d, e, f) in font.glyphs[ch].shown:
                out.append(f"/{name} 1 Tf {a * size:.4f} {b * size:.4f} {c * size:.4f} {d * size:.4f} "
                           f"{cursor + e * size:.2f} {y + f * size:.2f} Tm <{code.hex()}> Tj")
            if font.glyphs[ch].rules:                    # its bars: a path, between text objects
                out.append("ET " + " ".join(f"{cursor + rx * size:.2f} {y + ry * size:.2f} {w * size:.2f} "
                                            f"{h * size:.2f} re" for rx, ry, w, h in font.glyphs[ch].rules) + " f BT")
            cursor += font.glyphs[ch].width * size
        out.append(f"1 0 0 1 {cursor:.2f} {y:.2f} Tm")
    return " ".join(out)


def _placing(page: Any) -> str:
    """The ``cm`` operator that maps the coordinates pdfminer reads ``page`` in (the page as it is shown: turned by
    its /Rotate, the media box's first corner at 0, 0) to the page's own: the inverse of the matrix pdfminer's
    interpreter starts from (pdfinterp.PDFPageInterpreter.process_page), from the same media box and rotation."""
    x0, y0, x1, y1 = (float(v) for v in page.mediabox)
    a, b, c, d, e, f = {90: (0, -1, 1, 0, -y0, x1), 180: (-1, 0, 0, -1, x1, y1),
                        270: (0, 1, -1, 0, y1, -x0)}.get(int(page.rotation) % 360, (1, 0, 0, 1, -x0, -y0))
    det = a * d - b * c
    inverse = (d / det, -b / det, -c / det, a / det, (c * f - d * e) / det, (b * e - a * f) / det)
    return " ".join(f"{v:.4f}" for v in inverse) + " cm"


def _stripped(pdf: Any, todo: list[Box]) -> dict[int, list[Any]]:
    """Each page's content stream without the text-showing operators of its boxes in ``todo``."""
    import pikepdf

    out = {}
    for number in sorted({b.page for b in todo}):
        remove = set().union(*(b.ops for b in todo if b.page == number)) - {-1}
        paths = frozenset().union(*(b.paths for b in todo if b.page == number))
        out[number] = strip(pikepdf.parse_content_stream(pdf.pages[number]), remove, paths)
    return out


def _left(src: Path, todo: list[Box]) -> set[int]:
    """The indexes in ``todo`` of the boxes a character is still inside once the pages are stripped (in a copy, read
    again): another box's (a sum's limits, a fraction's part, which pdfminer read as boxes of their own inside a
    paragraph's), or the box's own, should a content stream be counted otherwise than pdfminer counted it. A space
    is not counted: it draws nothing that a translation could hide (LibreOffice draws a link's trailing space with the
    operator that draws the punctuation after the link, inside the link's box)."""
    import pikepdf
    from pdfminer.layout import LTChar, LTTextLine

    with pikepdf.open(src) as copy:
        for number, operations in _stripped(copy, todo).items():
            copy.pages[number].obj.Contents = copy.make_stream(pikepdf.unparse_content_stream(operations))
        data = io.BytesIO()
        copy.save(data)
    data.seek(0)
    left = set()
    for number, page in enumerate(_pages(data)):
        chars = [((c.x0 + c.x1) / 2, (c.y0 + c.y1) / 2) for item in _text_boxes(page)
                 for line in item if isinstance(line, LTTextLine) for c in line
                 if isinstance(c, LTChar) and c.get_text().strip()]
        for k, box in enumerate(todo):
            r = box.rect
            if box.page == number and any(r[0] + 1 < x < r[2] - 1 and r[1] + 1 < y < r[3] - 1 for x, y in chars):
                left.add(k)
    return left


def chosen(pdf: Any, src: Path, every: list[Box], notes: list[str]) -> list[Box]:
    """The boxes to translate: those with letters, but not one drawn inside a form XObject, nor one whose text does
    not read upright as the page is shown (a translation is drawn upright), nor one with text inside it that stays
    when its own is taken out (:func:`_left`), nor one with a formula that cannot move (:data:`FIXED`); each kind left
    out said in ``notes``."""
    todo = [b for b in every if b.letters and -1 not in b.ops]
    if len(todo) < sum(b.letters for b in every):
        notes.append(f"{sum(b.letters for b in every) - len(todo)} paragraph(s) left as they are: their text is drawn "
                     "in a way aiayn cannot take out (inside a form XObject)")
    turned = [b for b in todo if not b.upright]
    if turned:
        notes.append(f"{len(turned)} paragraph(s) left as they are: their text does not read upright on the page as "
                     "it is shown (set sideways or upside down), and a translation is drawn upright")
        todo = [b for b in todo if b.upright]
    unsure = _left(src, todo)
    if unsure:
        notes.append(f"{len(unsure)} paragraph(s) left as they are: text that is not theirs lies inside their box and "
                     "would stay under their translation (a display formula's limits, text drawn over theirs)")
    todo = [b for k, b in enumerate(todo) if k not in unsure]
    fixed = [b for b in todo if FIXED in b.marked]
    if fixed:
        notes.append(f"{len(fixed)} paragraph(s) left as they are: their formulas have a fraction's or a root's bar, "
                     "or parts set above one another, which cannot move with them")
    return [b for b in todo if FIXED not in b.marked]


def again(every: list[Box], todo: list[Box]) -> list[Box]:
    """The boxes to draw again as they were: those shown by an operator that a translated box's text shares (a number
    beside a heading), which taking that text out takes out too; each is taken out whole, and so is what shares its
    operators in turn."""
    taken = {(b.page, op) for b in todo for op in b.ops}
    while True:
        found = [b for b in every if b not in todo and any((b.page, op) in taken for op in b.ops)]
        more = {(b.page, op) for b in found for op in b.ops if op != -1} - taken
        if not more:
            break
        taken |= more
    for box in found:
        box.translation = re.sub(f"[{OPEN}{SHUT}{FIXED}]", "", box.marked) or box.text
    return found


def faithful(every: list[Box], todo: list[Box], notes: list[str] | None = None) -> list[Box]:
    """``todo`` without the boxes that share an operator, directly or through others, with a box that could not be
    drawn again as it was (:func:`again`): one with a formula that cannot move (:data:`FIXED`), or a glyph without
    Unicode outside a formula drawn as the PDF drew it; such boxes are all left as they are, said in ``notes``."""
    owners: dict[tuple[int, int], list[int]] = {}
    for k, box in enumerate(every):
        for op in box.ops - {-1}:
            owners.setdefault((box.page, op), []).append(k)
    mine, component = {id(b) for b in todo}, {}
    for start in range(len(every)):
        if start in component:
            continue
        component[start], stack = start, [start]
        while stack:
            box = every[stack.pop()]
            for k in (k for op in box.ops - {-1} for k in owners[(box.page, op)] if k not in component):
                component[k] = start
                stack.append(k)
    bad = {component[k] for k, b in enumerate(every) if id(b) not in mine and
           (FIXED in b.marked or "(cid:" in (re.sub(f"[{OPEN}{SHUT}]", "", b.marked) or b.text))}
    out = [b for k, b in enumerate(every) if id(b) in mine and component[k] not in bad]
    if notes is not None and len(out) < len(todo):
        notes.append(f"{len(todo) - len(out)} paragraph(s) left as they are: they share the operators that draw them "
                     "with text that could not be drawn again as it was")
    return out


def unfit(todo: list[Box], fonts: dict[str, Font]) -> list[Box]:
    """The boxes whose translation does not fit even at :data:`SMALLEST` of their size: they are left as they were,
    so that no translation is drawn over other text."""
    return [b for b in todo if not fitted(b, fonts[b.face])[2]]


def _draw(pdf: Any, number: int, operations: list[Any], mine: list[Box], faces: dict[str, Font],
          fonts: dict[str, tuple[Font, Any]]) -> int:
    """Page ``number``: its stripped content, then its boxes' translations, each in its face (``faces``) and the fonts
    its runs are drawn in (``fonts``: each and its embedded object); how many were drawn small to fit
    (:func:`drawn`)."""
    import pikepdf

    page = pdf.pages[number]
    # the page's own drawing in a q ... Q of its own, so that what is drawn after it starts from the default graphics
    # state (a page may leave its coordinates scaled or flipped); the translations in the coordinates they were read in
    content, counts = b"q\n" + pikepdf.unparse_content_stream(operations) + b"\nQ", {"small": 0, "no": 0, "yes": 0}
    content += f"\nq {_placing(page)}".encode()
    for box in mine:
        more, fits = drawn(box, faces[box.face])
        content += b"\n" + more
        counts[fits] += 1
    content += b"\nQ"
    page.obj.Contents = pdf.make_stream(content)
    if "/Resources" not in page.obj:
        page.obj.Resources = pikepdf.Dictionary()
    if "/Font" not in page.obj.Resources:
        page.obj.Resources.Font = pikepdf.Dictionary()
    used = {font.face for b in mine for font, _ in faces[b.face].runs(b.translation) if font is not None}
    for face in used & fonts.keys():
        font, embedded = fonts[face]
        page.obj.Resources.Font[f"/{font.resource}"] = embedded
    return counts["small"]


def _undrawable(todo: list[Box], faces: dict[str, Font], texts: Texts) -> list[Box]:
    """The boxes whose translation holds characters their face (and :data:`SYMBOLS`) lacks, each of them from their
    original too (a formula's symbol inline), or a glyph without Unicode (``(cid:5)``): left as they are, and said.
    A character the translation brought in itself stays an error, named (:meth:`Font.embedded`)."""
    def lacking(box: Box) -> set[str]:
        return {c for c in box.translation if not faces[box.face].has(c) and c.isprintable()}

    out = [b for b in todo if lacking(b) and lacking(b) <= set(b.text) or "(cid:" in b.translation]
    if out:
        chars = sorted(set().union(*(lacking(b) for b in out)))
        texts.report.notes.append(f"{len(out)} paragraph(s) left as they are: their formulas hold "
                                  f"{', '.join(repr(c) for c in chars[:8]) or 'glyphs without Unicode'}, which the "
                                  "bundled fonts lack")
    return out


def checked(pdf: Any, name: str, limits: Limits) -> None:
    """A DocumentError, before anything is parsed or decoded, where ``pdf`` holds more pages than ``limits`` allows or
    a compressed stream that inflates past :attr:`Limits.part` bytes (or all of them past :attr:`Limits.expanded`):
    each is inflated with that bound, never whole."""
    import pikepdf

    pages = len(pdf.pages)
    nested(pdf.get_warnings(), name)
    if pages > limits.pages:
        raise DocumentError(f"{name} has {pages:,} pages; at most {limits.pages:,}")
    total = 0
    for obj in pdf.objects:
        if not isinstance(obj, pikepdf.Stream):
            continue
        filters = obj.stream_dict.get("/Filter")
        names = [str(f) for f in filters] if isinstance(filters, pikepdf.Array) else [str(filters)] if filters else []
        if names[:1] != ["/FlateDecode"]:
            total += len(obj.read_raw_bytes())
            continue
        inflater = zlib.decompressobj()
        size = len(inflater.decompress(obj.read_raw_bytes(), limits.part + 1))
        total += size
        if size > limits.part:
            raise DocumentError(f"{name}: a stream (object {obj.objgen[0]}) inflates past {limits.part:,} bytes")
        if total > limits.expanded:
            raise DocumentError(f"{name}: its streams inflate past {limits.expanded:,} bytes in all")
    nested(pdf.get_warnings(), name)


# qpdf's parser stops at this depth of arrays and dictionaries within one another, warns, and drops the object
_NESTED = re.compile(r"\(object (\d+) \d+, offset \d+\): .*excessively deeply nested")
_DEEP = re.compile(rb"(?:\[\s*){500}|(?:<<\s*/[^\s/<>\[\]()]+\s*){500}")


def nested(warnings: list[str], name: str) -> None:
    """A DocumentError naming the object where qpdf's ``warnings`` say it dropped one nested too deep (a PDF whose
    objects nest thousands deep: read on, it would be a damaged document with its pages or text silently missing)."""
    deep = next((m for m in map(_NESTED.search, warnings) if m), None)
    if deep:
        raise DocumentError(f"{name}: object {deep[1]} nests arrays or dictionaries more than 500 deep, past what "
                            "aiayn reads")


def facing(pdf: Any, src: Path) -> None:
    """A bilingual edition of translated ``pdf``: each of ``src``'s pages put before its translation, so that a
    two-page view shows them side by side (``/PageLayout /TwoPageRight``); links, bookmarks and the rest point to the
    translated pages."""
    import pikepdf

    with pikepdf.open(src) as original:
        for k in range(len(original.pages)):
            pdf.pages.insert(2 * k, original.pages[k])
    pdf.Root.PageLayout = pikepdf.Name.TwoPageRight


def translations(todo: list[Box], texts: Texts) -> list[Box]:
    """The boxes of ``todo`` whose translation has words, each translation set (:attr:`Box.translation`): a section's
    number and a contents line's leaders kept, the words between translated with their formulas and faces as codes
    (:func:`inline`), those put back as they are drawn (:func:`unmarked`), the face at each end as the original's."""
    parts = [ends(b.marked or b.text, _tail(b)) for b in todo]
    translated = texts.coded([inline(body, b.face, face_at(b.marked, len(head), b.face))
                              for b, (head, body, _) in zip(todo, parts, strict=True)])
    for box, (head, body, tail), pieces in zip(todo, parts, translated, strict=True):
        text = unmarked(pieces, box.face)
        if any(ch in STYLED for ch in box.marked):
            text = STYLE[box.face] + text + STYLE[face_at(box.marked, len(head) + len(body), box.face)]
        box.translation = f"{head}{text}{tail}".replace(OPEN, "").replace(SHUT, "") if text.strip(MARKS).strip() \
            else ""
    return [b for b in todo if b.translation.strip()]


def translate(src: Path, dst: Path, texts: Texts, options: Options) -> None:
    import pikepdf

    name = texts.name
    try:
        pdf = pikepdf.open(src)
    except pikepdf.PasswordError:
        raise DocumentError(f"{name} is encrypted: aiayn cannot read it; decrypt it first (qpdf --decrypt)") from None
    except pikepdf.PdfError as e:
        if _DEEP.search(src.read_bytes()):
            raise DocumentError(f"{name} nests arrays or dictionaries more than 500 deep, past what aiayn reads") from None
        raise DocumentError(f"{name} is damaged: {e}") from None
    with pdf:
        checked(pdf, name, texts.limits)
        every = boxes(src, name, every=True)
        if not any(b.letters for b in every):
            raise DocumentError(f"{name} has no text to translate: a scanned document needs OCR first "
                                "(for example ocrmypdf), which adds its text layer")
        todo = translations(chosen(pdf, src, every, texts.report.notes), texts)
        faces = {face: Font(face) for face in sorted({b.face for b in every} |
                                                     {STYLED[c] for b in every for c in b.marked if c in STYLED})}
        more = [Font("Symbols", SYMBOLS)]
        more += scripts("".join(b.translation for b in todo), [*faces.values(), *more], options.font)
        for font in faces.values():
            font.fallbacks, font.glyphs = more, every[0].glyphs
            font.styles = {STYLE[name]: other for name, other in faces.items()}
        for number, page in enumerate(pdf.pages):
            room([b for b in every if b.page == number], abs(float(page.mediabox[2]) - float(page.mediabox[0])))
        too_long = unfit(todo, faces)
        if too_long:
            texts.report.notes.append(f"{len(too_long)} paragraph(s) left as they are: their translation does not fit "
                                      f"their box even at {SMALLEST:.0%} of its size")
        todo = [b for b in todo if b not in too_long]
        undrawable = _undrawable(todo, faces, texts)
        todo = [b for b in todo if b not in undrawable]
        todo = faithful(every, todo, texts.report.notes)
        drawn_boxes = todo + again(every, todo)
        drawing: dict[str, tuple[Font, list[str]]] = {}     # each font and what it draws: a box's face, a word's
        for b in drawn_boxes:                                 # own, a fallback
            for used, run in faces[b.face].runs(b.translation):
                if used is not None:
                    drawing.setdefault(used.face, (used, []))[1].append(run)
        fonts = {name: (f, f.embedded(pdf, "".join(runs))) for name, (f, runs) in drawing.items()}
        for number, operations in _stripped(pdf, drawn_boxes).items():
            small = _draw(pdf, number, operations, [b for b in drawn_boxes if b.page == number], faces, fonts)
            if small:
                texts.report.notes.append(f"page {number + 1}: {small} paragraph(s) drawn under {SMALL:.0%} of their "
                                          "size to fit their box")
        if options.target:
            pdf.Root.Lang = pikepdf.String(options.target)
        if options.bilingual:
            facing(pdf, src)
        pdf.save(dst)
