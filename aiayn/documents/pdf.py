"""PDF: each paragraph of a page translated as whole sentences and written back into its own box; the rest of the
page as it was.

- **Read** with pdfminer.six (MIT): every character with its position, size and colour, grouped by its layout analysis
  into lines and boxes (a box: a paragraph, a heading, a table cell, a list item). A box's lines are joined into one
  text (a word hyphenated at a line's end joined again), so that a sentence broken across lines is translated whole.
  A box with no letters (a page number, a figure's numbers) is left as it is.
- **Taken out**: the page's content stream is read with pikepdf (MPL 2.0, over qpdf) and each operator that shows text
  starting inside a translated box is removed; everything else of the page (images, vector graphics, other text) stays
  in its place, and so do links, annotations, form fields, bookmarks and metadata.
- **Written**: the translation drawn in its box, in its colour, in an embedded subset of the bundled face closest to
  its original font (Liberation Serif, Sans or Mono, regular, bold, italic: metric-compatible with Times, Arial and
  Courier, covering Latin, Greek and Cyrillic; aiayn/bundled/fonts/, subset by fontTools), its size the original's or
  smaller, so that its lines stay inside the box. A character the face lacks is refused by name.
  The document's language (``/Lang``) is set to the target's.

Not yet: text drawn inside form XObjects (it is translated but not taken out, so the page says it twice: such a box is
left as it is), rotated pages (left as they are), formulas told apart from prose, fonts for other scripts,
a bilingual edition. Refused, by name: an encrypted PDF, a damaged one, and one with no text to translate (a scan,
which needs OCR first).
"""

from __future__ import annotations

import contextlib
import io
import re
import statistics
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .common import DocumentError, Limits, Options, Texts

FONTS = Path(__file__).parents[1] / "bundled" / "fonts"     # Liberation's, metric-compatible with Times, Arial, Courier
SMALL = 0.5                      # a translation drawn under this share of its box's size is named in the report
SMALLEST = 0.2                   # and none under this one: past it, it overflows its box (named too)
SHOWS = {"Tj", "TJ", "'", '"'}   # the operators that show text


@dataclass
class Box:
    """A paragraph of a page as pdfminer's layout analysis found it: its rectangle (in the page's user space, from the
    media box's lower left corner), its text, its lines' size and pitch, its colour (RGB in [0, 1])."""

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
    letters: bool = True          # whether it has a letter (a box without is not translated, only redrawn if it must be)


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


NUMBERED = re.compile(r"^(\d+(?:\.\d+)+\.?|\d+\.)\s+(?=\S)")          # a section's number: "1.2.3 Heading", "4. "
LEADERS = re.compile(r"(\s*(?:\.\s?){3,}\s*[0-9ivxlcdm]*)$")          # a contents line's dots and page: ". . . 17"


def ends(text: str) -> tuple[str, str, str]:
    """(a section's number before the text, the text, a contents line's leader dots and page after it): the number
    and the leaders are kept as they are, only the text between them translated."""
    head = NUMBERED.match(text)
    start = head.end() if head else 0
    tail = LEADERS.search(text, start)
    end = tail.start() if tail else len(text)
    return text[:start], text[start:end], text[end:]


def overlaps(found: list[Box]) -> int:
    """How many pairs of boxes on one page overlap (what a translated page must not add)."""
    n = 0
    for i, a in enumerate(found):
        for b in found[i + 1:]:
            if a.page == b.page and a.rect[0] < b.rect[2] and b.rect[0] < a.rect[2] and a.rect[1] < b.rect[3] \
                    and b.rect[1] < a.rect[3]:
                n += 1
    return n


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


def joined(lines: list[str]) -> str:
    """A box's lines as one text: a word hyphenated at a line's end joined again (``Über-`` + ``setzung``), the other
    line ends spaces."""
    text = ""
    for line in (ln.strip() for ln in lines):
        if not line:
            continue
        if re.search(r"\w-$", text) and line[:1].islower():
            text = text[:-1] + line
        else:
            text = f"{text} {line}" if text else line
    return re.sub(r"\s+", " ", text)


def _text_boxes(items: Any) -> Any:
    """pdfminer's text boxes among ``items``, those inside figures (form XObjects) too."""
    from pdfminer.layout import LTFigure, LTTextBox

    for item in items:
        if isinstance(item, LTTextBox):
            yield item
        elif isinstance(item, LTFigure):
            yield from _text_boxes(item)


def _pages(src: Any) -> Any:
    """pdfminer's pages of ``src`` (a path or a file), text inside figures grouped as well (``all_texts``), each
    character marked with the index of the page's text-showing operator that drew it (``op``; -1 inside a form
    XObject), counted as :func:`strip` counts them."""
    from pdfminer.converter import PDFPageAggregator
    from pdfminer.layout import LAParams
    from pdfminer.pdfinterp import PDFPageInterpreter, PDFResourceManager
    from pdfminer.pdfpage import PDFPage

    class Marking(PDFPageAggregator):
        op = -1

        def render_char(self, *args: Any, **kw: Any) -> float:
            advance = super().render_char(*args, **kw)
            self.cur_item._objs[-1].op = self.op  # type: ignore[attr-defined]   # the character just added
            return float(advance)

    class Counting(PDFPageInterpreter):
        shown, depth = -1, 0

        def _show(self) -> None:
            self.shown += 1
            device.op = self.shown if self.depth == 0 else -1

        def do_TJ(self, seq: Any) -> None:           # (Tj, ' and " are shown through it, once each)
            self._show()
            super().do_TJ(seq)

        def do_Do(self, xobjid: Any) -> None:
            self.depth += 1
            try:
                super().do_Do(xobjid)
            finally:
                self.depth -= 1

    with (open(src, "rb") if isinstance(src, (str, Path)) else contextlib.nullcontext(src)) as f:
        resources = PDFResourceManager()
        device = Marking(resources, laparams=LAParams(all_texts=True))
        interpreter = Counting(resources, device)
        for page in PDFPage.get_pages(f):
            interpreter.shown, interpreter.depth = -1, 0
            interpreter.process_page(page)
            yield device.get_result()


def boxes(src: Path, name: str, every: bool = False) -> list[Box]:
    """Every box of text of ``src`` with a letter in it (``every``: and those without), page by page, in pdfminer's
    reading order."""
    from pdfminer.layout import LTChar, LTTextLine

    found = []
    for number, page in enumerate(_pages(src)):
        for item in _text_boxes(page):
            lines = [ln for ln in item if isinstance(ln, LTTextLine)]
            chars = [c for ln in lines for c in ln if isinstance(c, LTChar)]
            text = joined([ln.get_text() for ln in lines])
            letters = any(ch.isalpha() for ch in text)
            if not chars or not (letters or every):
                continue
            size = statistics.median(c.size for c in chars)
            pitch = (item.height - size) / (len(lines) - 1) if len(lines) > 1 else size * 1.2
            color = _rgb(statistics.mode(tuple(_rgb(c.graphicstate.ncolor)) for c in chars))
            found.append(Box(number, (item.x0, item.y0, item.x1, item.y1), text, size, max(pitch, size), color,
                             face=face(statistics.mode(c.fontname for c in chars)),
                             ops=frozenset(getattr(c, "op", -1) for c in chars), letters=letters))
    return found


# --- taking the original text out ---------------------------------------------------------------------------------


def strip(operations: list[Any], remove: set[int]) -> list[Any]:
    """A content stream's operations without its text-showing operators whose index (counted among them, as
    :func:`_pages` counts them) is in ``remove``; a ``'`` or ``"`` removed keeps its move to the next line (and
    ``"`` its spacings)."""
    import pikepdf

    kept, shown = [], -1
    for operands, operator in operations:
        op = str(operator)
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

    def __init__(self, face: str = "Sans-Regular") -> None:
        from fontTools.ttLib import TTFont

        self.path = FONTS / f"Liberation{face}.ttf"
        self.face, self.resource = face, f"Aiayn{face.replace('-', '')}"       # its name in a page's resources
        font = TTFont(self.path)
        self.cmap = {chr(u): font.getGlyphID(g) for u, g in font.getBestCmap().items()}
        self.upem = font["head"].unitsPerEm
        self.widths = {font.getGlyphID(g): font["hmtx"][g][0] for g in font.getGlyphOrder()}
        self.ascent, self.descent = font["hhea"].ascent, font["hhea"].descent
        self.bbox = [font["head"].xMin, font["head"].yMin, font["head"].xMax, font["head"].yMax]

    def width(self, text: str, size: float) -> float:
        """``text``'s advance at ``size`` points."""
        return sum(self.widths.get(self.cmap.get(c, 0), 0) for c in text) * size / self.upem

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
        font = TTFont(self.path)
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
        missing = [c for c in chars if c not in self.cmap and c.isprintable()]
        if missing:
            raise DocumentError(f"the translation holds {', '.join(repr(c) for c in missing[:5])}, which the font "
                                f"{self.path.name} does not have (fonts for other scripts are not bundled yet)")
        chars = [c for c in chars if c in self.cmap]
        data = self._subset(chars)
        tag = "".join(chr(65 + (sum(map(ord, self.face)) + k * 7) % 26) for k in range(6))   # a subset's prefix
        name = pikepdf.Name(f"/{tag}+Liberation{self.face}")
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


def wrapped(text: str, font: Font, size: float, width: float) -> list[str]:
    """``text`` broken into lines no wider than ``width`` at ``size`` (a word wider than that alone on its line)."""
    lines: list[str] = []
    for word in text.split():
        if lines and font.width(f"{lines[-1]} {word}", size) <= width:
            lines[-1] += f" {word}"
        else:
            lines.append(word)
    return lines


def room(boxes: list[Box], width: float) -> None:
    """Set each box's :attr:`Box.right`: a translation longer than its text may reach right, up to the next box beside
    it (a column, a cell) or, with none, the page's right margin (as wide as its left one), never over other text."""
    left = min((b.rect[0] for b in boxes), default=0.0)
    for box in boxes:
        x0, y0, x1, y1 = box.rect
        beside = [b.rect[0] for b in boxes if b is not box and b.rect[0] >= x1 - 1 and b.rect[1] < y1 and b.rect[3] > y0]
        box.right = max(x1, min(beside) - box.size * 0.5 if beside else width - left)


def fitted(box: Box, font: Font) -> tuple[float, list[str], bool]:
    """The size, lines and whether they fit: the box's own size, or smaller (down to :data:`SMALLEST` of it) until
    the translation's lines fit the box's height and the width it may take (:func:`room`)."""
    x0, y0, _, y1 = box.rect
    x1 = max(box.right, box.rect[2])
    ratio = box.pitch / box.size
    size = box.size
    while True:
        lines = wrapped(box.translation, font, size, x1 - x0)
        height = size + (len(lines) - 1) * size * ratio
        wide = max((font.width(ln, size) for ln in lines), default=0.0)
        if (height <= (y1 - y0) * 1.02 and wide <= (x1 - x0) * 1.02) or size <= box.size * SMALLEST:
            return size, lines, height <= (y1 - y0) * 1.02 and wide <= (x1 - x0) * 1.02
        size *= 0.95


def drawn(box: Box, font: Font, origin: tuple[float, float]) -> tuple[bytes, str]:
    """The content that draws ``box``'s translation (in user space: ``origin`` added), and whether it fit: "yes",
    "small" (under :data:`SMALL` of its size) or "no"."""
    size, lines, fits = fitted(box, font)
    x0, _, _, y1 = box.rect
    pitch = size * box.pitch / box.size
    top = y1 + origin[1] - size * font.ascent / font.upem
    r, g, b = box.color
    out = [f"q BT {r:.3f} {g:.3f} {b:.3f} rg /{font.resource} {size:.2f} Tf"]
    for k, line in enumerate(lines):
        out.append(f"1 0 0 1 {x0 + origin[0]:.2f} {top - k * pitch:.2f} Tm <{font.encoded(line).hex()}> Tj")
    out.append("ET Q\n")
    return "\n".join(out).encode(), "no" if not fits else "small" if size < box.size * SMALL else "yes"


def _origin(page: Any) -> tuple[float, float]:
    media = [float(v) for v in page.mediabox]
    return min(media[0], media[2]), min(media[1], media[3])


def _stripped(pdf: Any, todo: list[Box]) -> dict[int, list[Any]]:
    """Each page's content stream without the text-showing operators of its boxes in ``todo``."""
    import pikepdf

    out = {}
    for number in sorted({b.page for b in todo}):
        remove = set().union(*(b.ops for b in todo if b.page == number)) - {-1}
        out[number] = strip(pikepdf.parse_content_stream(pdf.pages[number]), remove)
    return out


def _left(src: Path, todo: list[Box]) -> set[int]:
    """A check of :func:`_stripped`: the indexes in ``todo`` of the boxes a character is still inside once the pages
    are stripped (in a copy, read again), should a content stream be counted otherwise than pdfminer counted it."""
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
                 for line in item if isinstance(line, LTTextLine) for c in line if isinstance(c, LTChar)]
        for k, box in enumerate(todo):
            r = box.rect
            if box.page == number and any(r[0] + 1 < x < r[2] - 1 and r[1] + 1 < y < r[3] - 1 for x, y in chars):
                left.add(k)
    return left


def chosen(pdf: Any, src: Path, every: list[Box]) -> list[Box]:
    """The boxes to translate: those with letters, but not one drawn inside a form XObject or on a rotated page, nor
    one whose text stays when it is taken out (:func:`_left`)."""
    rotated = {k for k, page in enumerate(pdf.pages) if int(page.obj.get("/Rotate", 0)) % 360}
    todo = [b for b in every if b.letters and -1 not in b.ops and b.page not in rotated]
    unsure = _left(src, todo)
    return [b for k, b in enumerate(todo) if k not in unsure]


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
        box.translation = box.text
    return found


def unfit(todo: list[Box], fonts: dict[str, Font]) -> list[Box]:
    """The boxes whose translation does not fit even at :data:`SMALLEST` of their size: they are left as they were,
    so that no translation is drawn over other text."""
    return [b for b in todo if not fitted(b, fonts[b.face])[2]]


def _draw(pdf: Any, number: int, operations: list[Any], mine: list[Box], fonts: dict[str, tuple[Font, Any]]
          ) -> int:
    """Page ``number``: its stripped content, then its boxes' translations, each in its face (``fonts``: each face and
    its embedded object); how many were drawn small to fit (:func:`drawn`)."""
    import pikepdf

    page = pdf.pages[number]
    origin = _origin(page)
    # the page's own drawing in a q ... Q of its own, so that what is drawn after it starts from the default graphics
    # state (a page may leave its coordinates scaled or flipped)
    content, counts = b"q\n" + pikepdf.unparse_content_stream(operations) + b"\nQ", {"small": 0, "no": 0, "yes": 0}
    for box in mine:
        more, fits = drawn(box, fonts[box.face][0], origin)
        content += b"\n" + more
        counts[fits] += 1
    page.obj.Contents = pdf.make_stream(content)
    if "/Resources" not in page.obj:
        page.obj.Resources = pikepdf.Dictionary()
    if "/Font" not in page.obj.Resources:
        page.obj.Resources.Font = pikepdf.Dictionary()
    for face in {b.face for b in mine}:
        font, embedded = fonts[face]
        page.obj.Resources.Font[f"/{font.resource}"] = embedded
    return counts["small"]


def checked(pdf: Any, name: str, limits: Limits) -> None:
    """A DocumentError, before anything is parsed or decoded, where ``pdf`` holds more pages than ``limits`` allows or
    a compressed stream that inflates past :attr:`Limits.part` bytes (or all of them past :attr:`Limits.expanded`):
    each is inflated with that bound, never whole."""
    import pikepdf

    if len(pdf.pages) > limits.pages:
        raise DocumentError(f"{name} has {len(pdf.pages):,} pages; at most {limits.pages:,}")
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


def facing(pdf: Any, src: Path) -> None:
    """A bilingual edition of translated ``pdf``: each of ``src``'s pages put before its translation, so that a
    two-page view shows them side by side (``/PageLayout /TwoPageRight``); links, bookmarks and the rest point to the
    translated pages."""
    import pikepdf

    with pikepdf.open(src) as original:
        for k in range(len(original.pages)):
            pdf.pages.insert(2 * k, original.pages[k])
    pdf.Root.PageLayout = pikepdf.Name.TwoPageRight


def translate(src: Path, dst: Path, texts: Texts, options: Options) -> None:
    import pikepdf

    name = texts.name
    try:
        pdf = pikepdf.open(src)
    except pikepdf.PasswordError:
        raise DocumentError(f"{name} is encrypted: aiayn cannot read it; decrypt it first (qpdf --decrypt)") from None
    except pikepdf.PdfError as e:
        raise DocumentError(f"{name} is damaged: {e}") from None
    with pdf:
        checked(pdf, name, texts.limits)
        every = boxes(src, name, every=True)
        if not any(b.letters for b in every):
            raise DocumentError(f"{name} has no text to translate: a scanned document needs OCR first "
                                "(for example ocrmypdf), which adds its text layer")
        todo = chosen(pdf, src, every)
        if len(todo) < sum(b.letters for b in every):
            texts.report.notes.append(f"{sum(b.letters for b in every) - len(todo)} paragraph(s) left as they are: "
                                      "their text is drawn in a way aiayn cannot take out (inside a form XObject, or "
                                      "on a rotated page)")
        parts = [ends(b.text) for b in todo]
        for box, (head, _, tail), text in zip(todo, parts, texts([body for _, body, _ in parts]), strict=True):
            box.translation = f"{head}{text}{tail}" if str(text).strip() else ""
        todo = [b for b in todo if b.translation.strip()]
        faces = {face: Font(face) for face in sorted({b.face for b in every})}
        for number, page in enumerate(pdf.pages):
            room([b for b in every if b.page == number], abs(float(page.mediabox[2]) - float(page.mediabox[0])))
        too_long = unfit(todo, faces)
        if too_long:
            texts.report.notes.append(f"{len(too_long)} paragraph(s) left as they are: their translation does not fit "
                                      f"their box even at {SMALLEST:.0%} of its size")
        todo = [b for b in todo if b not in too_long]
        drawn_boxes = todo + again(every, todo)
        fonts = {face: (faces[face], faces[face].embedded(pdf, "".join(b.translation for b in drawn_boxes
                                                                         if b.face == face)))
                 for face in sorted({b.face for b in drawn_boxes})}
        for number, operations in _stripped(pdf, drawn_boxes).items():
            small = _draw(pdf, number, operations, [b for b in drawn_boxes if b.page == number], fonts)
            if small:
                texts.report.notes.append(f"page {number + 1}: {small} paragraph(s) drawn under {SMALL:.0%} of their "
                                          "size to fit their box")
        if options.target:
            pdf.Root.Lang = pikepdf.String(options.target)
        if options.bilingual:
            facing(pdf, src)
        pdf.save(dst)
