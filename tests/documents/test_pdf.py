"""PDF (documents/pdf.py): a PDF that Chromium printed (a real producer: Skia, flipped coordinates, subset fonts, tagged
content) translated in place: every paragraph's text taken out and its translation drawn in its box, nothing else of
the page lost; and the PDFs refused by name (encrypted, damaged, without a text layer)."""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
import zlib
from pathlib import Path
from typing import Any

import pytest

from aiayn.cli.main import main
from aiayn.documents.common import DocumentError, Options
from aiayn.translation import spans

from .helpers import translated

pikepdf = pytest.importorskip("pikepdf", reason="pikepdf: pip install aiayn[documents]")
pytest.importorskip("pdfminer", reason="pdfminer.six: pip install aiayn[documents]")

from aiayn.documents import pdf  # noqa: E402  (after the skip: it needs the libraries above)


def _png() -> str:
    """A 2x2 red PNG as a data: URI, so that the page holds an image as well as text and vector graphics."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return len(data).to_bytes(4, "big") + kind + data + zlib.crc32(kind + data).to_bytes(4, "big")

    raw = b"".join(b"\x00" + b"\xff\x00\x00" * 2 for _ in range(2))
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", bytes.fromhex("00000002000000020802000000")) + \
        chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")
    return "data:image/png;base64," + base64.b64encode(png).decode()


PAGE = """<!doctype html><html lang="de"><head><meta charset="utf-8"><style>
body {{ font-family: serif; font-size: 12pt; margin: 2cm }} h1 {{ color: #1a4d8f }} .two {{ column-count: 2 }}
</style></head><body>
<h1>Ein Hund im Park</h1>
<p>Ein kleiner Hund läuft über die grüne Wiese. Zwei Kinder spielen mit einem roten Ball neben dem Brunnen, und eine
Frau sitzt auf einer Bank und liest eine Zeitung.</p>
<p>Mehr Bilder finden Sie auf <a href="https://example.org/bilder">unserer Seite</a>. Die Fotos wurden im Sommer
aufgenommen.</p>
<div class="two"><p>Ein Mann in einem blauen Hemd steht vor einem Gebäude. Eine Gruppe von Menschen wartet an der
Haltestelle auf den Bus.</p><p>Ein Mädchen mit einem Hut fährt Fahrrad auf der Straße. Zwei Hunde rennen durch den
Schnee.</p></div>
<svg width="60" height="30"><rect width="60" height="30" fill="#c33"/></svg> <img src="{png}" width="40" height="40">
{more}
</body></html>"""


def printed(tmp_path: Path, name: str = "park.pdf", more: str = "") -> Path:
    """The page above printed to PDF by headless Chromium (`make browser` installs it)."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser is None:
        pytest.skip("Chromium is not installed (make browser): it prints the PDFs these tests read")
    html, out = tmp_path / f"{name}.html", tmp_path / name
    html.write_text(PAGE.format(more=more, png=_png()), encoding="utf-8")
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-pdf-header-footer",
                    f"--print-to-pdf={out}", html.as_uri()], capture_output=True, timeout=120, check=True)
    return out


def clean(path: Path) -> bool:
    """Whether ``qpdf --check`` finds nothing wrong (`make tools` installs qpdf; without it, pikepdf's own check, which
    is qpdf's library)."""
    tool = shutil.which("qpdf")
    if tool is None:
        with pikepdf.open(path) as doc:
            return doc.check_pdf_syntax() == []
    run = subprocess.run([tool, "--check", str(path)], capture_output=True, text=True)
    return run.returncode == 0 and "No syntax or stream encoding errors" in run.stdout


def _links(path: Path) -> list[str]:
    """Each page's annotations: a link by where it goes (its URI, or its action or destination), others by kind."""
    with pikepdf.open(path) as doc:
        return [str(a.A.get("/URI", a.A.get("/S"))) if "/A" in a else str(a.get("/Dest", a.get("/Subtype")))
                for page in doc.pages for a in page.obj.get("/Annots", [])]


def _fonts_embedded(path: Path) -> list[tuple[str, bool]]:
    """Each font of each page, and whether its program is in the file."""
    found = []
    with pikepdf.open(path) as doc:
        for page in doc.pages:
            for font in page.obj.Resources.get("/Font", {}).values():
                if font.get("/Subtype") == "/Type3":          # its glyphs are drawn by the file's own procedures
                    found.append((str(font.get("/Name", "Type3")), True))
                    continue
                inner = font.DescendantFonts[0] if "/DescendantFonts" in font else font
                descriptor = inner.get("/FontDescriptor", {})
                found.append((str(font.BaseFont), any(k in descriptor for k in ("/FontFile", "/FontFile2",
                                                                                "/FontFile3"))))
    return found


def test_a_printed_page_is_translated_in_place_and_nothing_else_changes(tmp_path: Path) -> None:
    src = printed(tmp_path)
    before = pdf.boxes(src, src.name)
    assert [b.text for b in before][:2] == ["Ein Hund im Park", "Ein kleiner Hund läuft über die grüne Wiese. Zwei "
                                            "Kinder spielen mit einem roten Ball neben dem Brunnen, und eine Frau sitzt "
                                            "auf einer Bank und liest eine Zeitung."]
    report = translated(src, tmp_path / "out.pdf", options=Options(source="de", target="en"))
    assert report.texts == len(before) == 5 and report.notes == []
    after = pdf.boxes(tmp_path / "out.pdf", "out.pdf")
    # every paragraph now says its translation (the stand-in upper-cases), and no original text is left on the page
    assert sorted(b.text for b in after) == sorted(b.text.upper() for b in before)
    assert pdf.overlaps(after) <= pdf.overlaps(before) == 0
    with pikepdf.open(src) as a, pikepdf.open(tmp_path / "out.pdf") as b:
        assert len(a.pages) == len(b.pages) and [list(p.mediabox) for p in a.pages] == [list(p.mediabox) for p in b.pages]
        assert str(b.Root.Lang) == "en"
        images = [len(p.get_images()) for p in a.pages], [len(p.get_images()) for p in b.pages]
        assert images[0] == images[1] == [1]
    assert clean(tmp_path / "out.pdf")
    assert _links(tmp_path / "out.pdf") == _links(src) == ["https://example.org/bilder"]
    fonts = _fonts_embedded(tmp_path / "out.pdf")
    assert all(embedded for _, embedded in fonts)
    # the heading (Chromium's bold serif) in Liberation Serif Bold, the paragraphs in Liberation Serif
    assert {"LiberationSerif-Bold", "LiberationSerif-Regular"} <= {name.split("+")[-1] for name, _ in fonts}


def test_a_longer_translation_shrinks_to_its_box_or_reaches_right_into_free_space(tmp_path: Path) -> None:
    src = printed(tmp_path)

    def longer(texts: list[str], fmt: str, kinds: tuple[str, ...]) -> list[str]:
        return [" ".join(w.upper() + "X" for w in t.split()) for t in texts]

    translated(src, tmp_path / "out.pdf", translate=longer, options=Options(target="en"))
    before, after = pdf.boxes(src, src.name), pdf.boxes(tmp_path / "out.pdf", "out.pdf")
    assert pdf.overlaps(after) == 0 and len(after) == len(before)
    width = 612                                                  # Letter, Chromium's default
    left = min(b.rect[0] for b in before)
    assert all(b.rect[2] <= width - left + 1 for b in after)    # within the page's margins


def test_a_box_is_drawn_in_the_bundled_face_closest_to_its_font() -> None:
    assert [pdf.face(n) for n in ("AOGLHM+Times-Roman", "PBCOKV+Times-Bold", "WASWYS+Times-Italic", "ZIKESJ+Courier",
                                  "ArialMT", "Helvetica-BoldOblique", "CMR10", "CMTT10", "DejaVuSansMono-Bold",
                                  "LiberationSerif-BoldItalic", "Calibri")] == [
        "Serif-Regular", "Serif-Bold", "Serif-Italic", "Mono-Regular", "Sans-Regular", "Sans-BoldItalic",
        "Serif-Regular", "Mono-Regular", "Mono-Bold", "Serif-BoldItalic", "Sans-Regular"]
    assert all((pdf.FONTS / f"Liberation{f}.ttf").is_file() for f in ("Serif-Regular", "Sans-BoldItalic", "Mono-Bold"))


def _faces_of_words(path: Path) -> dict[str, set[str]]:
    """Each word of a PDF as pdfminer reads it, and the bundled faces closest to the fonts its letters are drawn in."""
    from pdfminer.high_level import extract_pages
    from pdfminer.layout import LTChar, LTTextContainer, LTTextLine

    words: dict[str, set[str]] = {}
    for page in extract_pages(path):
        for box in (b for b in page if isinstance(b, LTTextContainer)):
            for line in (ln for ln in box if isinstance(ln, LTTextLine)):
                word: list[Any] = []
                for ch in [*line, None]:
                    if isinstance(ch, LTChar) and ch.get_text().isalnum():
                        word.append(ch)
                    elif word:
                        words.setdefault("".join(c.get_text() for c in word), set()).update(
                            pdf.face(c.fontname) for c in word)
                        word = []
    return words


def test_a_words_own_bold_italic_and_code_move_with_it_into_the_translation(tmp_path: Path) -> None:
    """A paragraph drawn in one face with some words in others (bold, italic, a monospaced command): each word's
    face goes with its translation, wherever the translation puts it (a stand-in that reverses the words), and across a
    line break; the rest stays in the paragraph's own face."""
    from .helpers import reversed_stand_in

    src = printed(tmp_path, more="<p>Ein <b>winziger</b> Dackel rennt über die <i>nasse</i> Weide, und der Befehl "
                                 "<code>zeige</code> listet alle Dateien. " + "Noch ein Satz über den Hund. " * 6 +
                                 "Am Ende steht ein <b>fett gesetzter langer Teil des Satzes über mehrere Wörter "
                                 "hinweg</b> und dann ein Punkt.</p>")
    found = next(b for b in pdf.boxes(src, src.name) if "Befehl" in b.text)
    assert found.face == "Serif-Regular" and "winziger" in found.text and not set(pdf.MARKS) & set(found.text)
    assert [pdf.STYLED[c] for c in found.marked if c in pdf.STYLED] == [
        "Serif-Bold", "Serif-Regular", "Serif-Italic", "Serif-Regular", "Mono-Regular", "Serif-Regular", "Serif-Bold",
        "Serif-Regular"]
    translated(src, tmp_path / "out.pdf", translate=reversed_stand_in, options=Options(source="de", target="en"))
    before, after = _faces_of_words(src), _faces_of_words(tmp_path / "out.pdf")
    assert before["winziger"] == {"Serif-Bold"} and before["Dackel"] == {"Serif-Regular"}    # (what Chromium drew)
    assert after["WINZIGER"] == {"Serif-Bold"} and after["NASSE"] == {"Serif-Italic"} and after["ZEIGE"] == {"Mono-Regular"}
    assert after["DACKEL"] == after["WEIDE"] == after["PUNKT"] == after["LISTET"] == {"Serif-Regular"}
    assert all(after[w] == {"Serif-Bold"} for w in ("FETT", "GESETZTER", "LANGER", "TEIL", "MEHRERE", "HINWEG"))
    assert pdf.overlaps(pdf.boxes(tmp_path / "out.pdf", "out.pdf")) == 0 and clean(tmp_path / "out.pdf")
    assert all(embedded for _, embedded in _fonts_embedded(tmp_path / "out.pdf"))


def test_a_hyphenated_word_is_joined_and_a_compound_keeps_its_hyphen() -> None:
    assert pdf.joined(["Die Über-", "setzung ist gut.", ""]) == "Die Übersetzung ist gut."
    assert pdf.joined(["Die Nord-", "Süd-Achse"]) == "Die Nord- Süd-Achse"
    assert pdf.joined(["  zwei  ", "Zeilen"]) == "zwei Zeilen"


def test_pdfs_that_cannot_be_translated_are_refused_by_name(tmp_path: Path) -> None:
    src = printed(tmp_path)
    locked = tmp_path / "locked.pdf"
    with pikepdf.open(src) as doc:
        doc.save(locked, encryption=pikepdf.Encryption(owner="owner", user="user"))
    with pytest.raises(DocumentError, match="locked.pdf is encrypted"):
        translated(locked, tmp_path / "out.pdf")
    damaged = tmp_path / "damaged.pdf"
    damaged.write_bytes(b"%PDF-1.7\n" + b"\x00garbage" * 50)
    with pytest.raises(DocumentError, match="damaged.pdf"):
        translated(damaged, tmp_path / "out.pdf")
    scan = tmp_path / "scan.pdf"
    doc = pikepdf.new()
    doc.add_blank_page()
    doc.pages[0].obj.Contents = doc.make_stream(b"0.5 g 72 72 200 300 re f")
    doc.save(scan)
    with pytest.raises(DocumentError, match="scan.pdf has no text to translate: a scanned document needs OCR"):
        translated(scan, tmp_path / "out.pdf")
    with pytest.raises(DocumentError, match="not a PDF file"):
        (tmp_path / "text.pdf").write_text("Ein Hund.\n")
        translated(tmp_path / "text.pdf", tmp_path / "out.pdf")
    assert not (tmp_path / "out.pdf").exists()


def test_a_character_no_font_has_is_named_and_a_script_that_needs_shaping_is_refused(tmp_path: Path) -> None:
    """An Egyptian hieroglyph (no installed font has one here): named, with what to install or give. Arabic, whose
    letters join and run right to left: refused by name rather than drawn apart, left to right."""
    src = printed(tmp_path)
    with pytest.raises(DocumentError, match="'𓀀', which the font LiberationSerif-(Bold|Regular).ttf does not have, nor "
                                            "any font installed: install one .* or give one with --font"):
        translated(src, tmp_path / "out.pdf", translate=lambda texts, fmt, kinds: ["𓀀" for _ in texts])
    with pytest.raises(DocumentError, match="'ك' .U\\+0643., of a script whose letters must be shaped or set right to "
                                            "left"):
        translated(src, tmp_path / "out.pdf", translate=lambda texts, fmt, kinds: ["كلب يركض" for _ in texts])
    with pytest.raises(DocumentError, match="the font .*nothing.ttf cannot be read"):
        translated(src, tmp_path / "out.pdf", options=Options(font=tmp_path / "nothing.ttf"))
    assert not (tmp_path / "out.pdf").exists()


def _cjk_font() -> Path:
    """An installed TrueType font with Chinese (Debian's fonts-droid-fallback, which `make tools` installs)."""
    tool = shutil.which("fc-match")
    found = subprocess.run([tool, "-f", "%{file}", ":charset=72ac"], capture_output=True, text=True).stdout if tool else ""
    if not found.endswith((".ttf", ".ttc")) or "Droid" not in found and "WenQuanYi" not in found:
        pytest.skip("no TrueType font with Chinese is installed (make tools: fonts-droid-fallback)")
    return Path(found)


def test_chinese_is_drawn_in_an_installed_font_its_lines_broken_between_characters(tmp_path: Path) -> None:
    """A translation into Chinese: what Liberation lacks drawn in the TrueType font fontconfig finds, embedded and
    subset; lines broken between characters (there are no spaces), never before a closing mark; nothing overlapping
    that did not. ``--font`` (Options.font) names the font instead."""
    from pdfminer.high_level import extract_text

    font = _cjk_font()
    src, out = printed(tmp_path), tmp_path / "out.pdf"
    sentence = "一只小狗在绿色的草地上奔跑。"
    translated(src, out, translate=lambda texts, fmt, kinds: [sentence * (1 + len(t) // 10) for t in texts],
               options=Options(target="zh"))
    embedded = {name.split("+")[-1]: ok for name, ok in _fonts_embedded(out)}
    assert embedded.get(font.stem) is True and all(embedded.values())
    lines = [ln.strip() for ln in extract_text(out).splitlines() if ln.strip()]
    assert all(re.fullmatch("[\u4e00-\u9fff。]+", ln) for ln in lines)     # every paragraph translated, none left out
    assert any(ln[0] != "一" for ln in lines)                                  # and broken mid-sentence
    assert not any(ln.startswith("。") for ln in lines)
    before = pdf.boxes(src, src.name)
    assert pdf.overlaps(pdf.boxes(out, out.name)) <= pdf.overlaps(before) and clean(out)
    given = tmp_path / f"given{font.suffix}"
    shutil.copy(font, given)
    translated(src, out, translate=lambda texts, fmt, kinds: [sentence for _ in texts], options=Options(font=given))
    assert "given" in {name.split("+")[-1] for name, _ in _fonts_embedded(out)}


def test_the_command_line_translates_a_pdf_with_a_real_model(tmp_path: Path, copy_model: Path) -> None:
    src = printed(tmp_path)
    assert main(["translate", "--model", str(copy_model), "--input", str(src), "--output",
                 str(tmp_path / "out.pdf")]) == 0
    assert clean(tmp_path / "out.pdf")
    with pikepdf.open(tmp_path / "out.pdf") as doc:
        assert len(doc.pages) == 1
    assert len(pdf.boxes(tmp_path / "out.pdf", "out.pdf")) >= 1


def test_text_it_cannot_take_out_is_left_as_it_is_and_said(tmp_path: Path) -> None:
    """A page whose text is drawn inside a form XObject: taking it out is not done yet, so rather than draw the
    translation over text that stays (the page saying it twice), its paragraphs are left as they are, and the report
    says how many."""
    src = printed(tmp_path)
    wrapped = tmp_path / "wrapped.pdf"
    with pikepdf.open(src) as doc:
        page = doc.pages[0]
        page.contents_coalesce()
        form = doc.make_stream(page.obj.Contents.read_bytes(), Type=pikepdf.Name.XObject, Subtype=pikepdf.Name.Form,
                               BBox=page.mediabox, Resources=page.obj.Resources)
        page.obj.Resources = pikepdf.Dictionary(XObject=pikepdf.Dictionary(Fm0=form))
        page.obj.Contents = doc.make_stream(b"q /Fm0 Do Q")
        doc.save(wrapped)
    before = pdf.boxes(wrapped, wrapped.name)
    report = translated(wrapped, tmp_path / "out.pdf")
    assert report.notes == [f"{len(before)} paragraph(s) left as they are: their text is drawn in a way aiayn cannot "
                            "take out (inside a form XObject)"]
    assert [b.text for b in pdf.boxes(tmp_path / "out.pdf", "out.pdf")] == [b.text for b in before]
    assert clean(tmp_path / "out.pdf")


def _turned(src: Path, out: Path, rotate: int, upright: bool) -> Path:
    """``src``'s page with /Rotate ``rotate``; ``upright``: its content turned the other way in the page's own
    coordinates (its media box turned with it), so that it reads upright as shown, as a landscape page of a paper is
    made; else as it was, so that it reads sideways or upside down."""
    with pikepdf.open(src) as doc:
        page = doc.pages[0]
        page.contents_coalesce()
        x0, y0, w, h = (float(v) for v in page.mediabox)
        if upright:       # the inverse of what a viewer does to show the page: a turn of -rotate about the origin
            turn = {90: (0, 1, -1, 0, h, 0), 180: (-1, 0, 0, -1, w, h), 270: (0, -1, 1, 0, 0, w)}[rotate]
            page.obj.Contents = doc.make_stream(b"q " + " ".join(map(str, turn)).encode() + b" cm\n" +
                                                page.obj.Contents.read_bytes() + b"\nQ")
            if rotate != 180:
                page.obj.MediaBox = pikepdf.Array([0, 0, h, w])
        page.obj.Rotate = rotate
        for annot in page.obj.get("/Annots", []):      # (links stay where their text was: not what is tested here)
            del annot["/Rect"]
        page.obj.Annots = pikepdf.Array()
        doc.save(out)
    return out


@pytest.mark.parametrize("rotate", [90, 180, 270])
def test_a_page_turned_by_its_rotate_is_translated_as_it_is_shown(tmp_path: Path, rotate: int) -> None:
    """A page whose /Rotate turns it for showing, its content turned the other way (a landscape table): read where
    its text is shown, and its translation drawn there, upright, with nothing left of the original. Text that does
    not read upright as shown is left as it is, and said."""
    src = printed(tmp_path)
    want = pdf.boxes(src, src.name)
    turned = _turned(src, tmp_path / "turned.pdf", rotate, upright=True)
    before = pdf.boxes(turned, turned.name)
    assert [(b.text, b.upright) for b in before] == [(b.text, True) for b in want]
    assert all(abs(p - q) < 0.5 for a, b in zip(before, want, strict=True) for p, q in zip(a.rect, b.rect, strict=True))
    report = translated(turned, tmp_path / "out.pdf", options=Options(source="de", target="en"))
    assert report.texts == len(before) and report.notes == []
    after = pdf.boxes(tmp_path / "out.pdf", "out.pdf")
    assert [(b.text, b.upright) for b in after] == [(b.text.upper(), True) for b in before]
    assert all(abs(a.rect[0] - b.rect[0]) < 1 and abs(a.rect[3] - b.rect[3]) < 3 for a, b in zip(after, before,
                                                                                                 strict=True))
    assert pdf.overlaps(after) == 0 and clean(tmp_path / "out.pdf")
    sideways = _turned(src, tmp_path / "sideways.pdf", rotate, upright=False)
    read = pdf.boxes(sideways, sideways.name)
    assert read and not any(b.upright for b in read)
    report = translated(sideways, tmp_path / "out2.pdf")
    assert report.notes == [f"{len(read)} paragraph(s) left as they are: their text does not read upright on the "
                            "page as it is shown (set sideways or upside down), and a translation is drawn upright"]
    assert [b.text for b in pdf.boxes(tmp_path / "out2.pdf", "out2.pdf")] == [b.text for b in read]


def test_a_pdf_bomb_is_refused_before_it_is_read(tmp_path: Path) -> None:
    """A stream that inflates to far more than the limit is refused after inflating at most the limit (here 1 MiB of a
    64 MiB stream of zeros), and a PDF of more pages than allowed after counting them."""
    from aiayn.documents.common import Limits

    bomb = tmp_path / "bomb.pdf"
    doc = pikepdf.new()
    doc.add_blank_page()
    doc.pages[0].obj.Contents = doc.make_stream(b"BT /F1 12 Tf 72 72 Td (Hallo) Tj ET")
    doc.pages[0].obj.Thumb = doc.make_stream(zlib.compress(b"\0" * (64 << 20), 9), Filter=pikepdf.Name.FlateDecode)
    doc.save(bomb, compress_streams=False)
    assert bomb.stat().st_size < 200_000
    with pytest.raises(DocumentError, match=r"bomb.pdf: a stream \(object \d+\) inflates past 1,048,576 bytes"):
        translated(bomb, tmp_path / "out.pdf", limits=Limits(part=1 << 20))
    many = tmp_path / "many.pdf"
    doc = pikepdf.new()
    for _ in range(30):
        doc.add_blank_page()
    doc.save(many)
    with pytest.raises(DocumentError, match="many.pdf has 30 pages; at most 20"):
        translated(many, tmp_path / "out.pdf", limits=Limits(pages=20))


def _nested(path: Path, where: str, depth: int = 10_000) -> Path:
    """A one-page PDF written by hand with arrays nested ``depth`` deep in its page's dictionary, its catalog or its
    content stream (qpdf's own writer would not keep them)."""
    deep = b"[" * depth + b"]" * depth
    content = b"BT /F1 12 Tf 72 720 Td (Ein Hund rennt durch den Park.) Tj ET" + (b" " + deep + b" pop" if
                                                                                   where == "content" else b"")
    objects = [b"<< /Type /Catalog /Pages 2 0 R" + (b" /Deep " + deep if where == "catalog" else b"") + b" >>",
               b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
               b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R /Resources << /Font << /F1 5 0 R"
               b" >> >>" + (b" /Deep " + deep if where == "page" else b"") + b" >>",
               b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content),
               b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    out, offsets = bytearray(b"%PDF-1.7\n"), []
    for number, obj in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, obj)
    xref = len(out)
    out += b"xref\n0 6\n0000000000 65535 f \n" + b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size 6 /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % xref
    path.write_bytes(bytes(out))
    return path


def test_objects_nested_ten_thousand_deep_are_refused_by_name(tmp_path: Path) -> None:
    """qpdf drops an object nested past 500 levels and reads on: a page (or the whole document) silently missing.
    Such a PDF is refused, naming the object; arrays nested as deep in a content stream (operands, which pdfminer and
    qpdf read without recursion) do not stop the page's text from being translated."""
    upper = lambda texts, fmt, kinds: [t.upper() for t in texts]  # noqa: E731
    with pytest.raises(DocumentError, match="page.pdf: object 3 nests arrays or dictionaries more than 500 deep"):
        translated(_nested(tmp_path / "page.pdf", "page"), tmp_path / "out.pdf", translate=upper)
    with pytest.raises(DocumentError, match="catalog.pdf nests arrays or dictionaries more than 500 deep"):
        translated(_nested(tmp_path / "catalog.pdf", "catalog"), tmp_path / "out.pdf", translate=upper)
    assert not (tmp_path / "out.pdf").exists()
    translated(_nested(tmp_path / "content.pdf", "content"), tmp_path / "out.pdf", translate=upper)
    assert [b.text for b in pdf.boxes(tmp_path / "out.pdf", "out.pdf")] == ["EIN HUND RENNT DURCH DEN PARK."]
    assert clean(tmp_path / "out.pdf")


def test_a_translation_that_cannot_fit_leaves_its_box_as_it_was(tmp_path: Path) -> None:
    """A translation far longer than its text (a degenerate one) that would not fit its box even at a fifth of its
    size is not drawn over its neighbours: the box keeps its original text, and the report says so."""
    src = printed(tmp_path)

    def degenerate(texts: list[str], fmt: str, kinds: tuple[str, ...]) -> list[str]:
        return [("WORT " * 400).strip() if t.startswith("Ein Hund im Park") else t.upper() for t in texts]

    report = translated(src, tmp_path / "out.pdf", translate=degenerate)
    assert report.notes[0] == "1 paragraph(s) left as they are: their translation does not fit their box even at 20% of " \
                              "its size"
    after = [b.text for b in pdf.boxes(tmp_path / "out.pdf", "out.pdf")]
    assert "Ein Hund im Park" in after and "EIN KLEINER HUND" in " ".join(after)
    assert pdf.overlaps(pdf.boxes(tmp_path / "out.pdf", "out.pdf")) == 0


def test_a_bilingual_edition_puts_each_page_before_its_translation(tmp_path: Path) -> None:
    src = printed(tmp_path, more="<p style='page-break-before: always'>Eine zweite Seite mit einem Satz.</p>")
    translated(src, tmp_path / "out.pdf", options=Options(target="en", bilingual=True))
    with pikepdf.open(src) as a, pikepdf.open(tmp_path / "out.pdf") as b:
        assert len(a.pages) == 2 and len(b.pages) == 4 and str(b.Root.PageLayout) == "/TwoPageRight"
    pages: dict[int, list[str]] = {}
    for box in pdf.boxes(tmp_path / "out.pdf", "out.pdf"):
        pages.setdefault(box.page, []).append(box.text)
    assert "Ein Hund im Park" in pages[0] and "EIN HUND IM PARK" in pages[1]
    assert pages[2] == ["Eine zweite Seite mit einem Satz."] and pages[3] == ["EINE ZWEITE SEITE MIT EINEM SATZ."]
    assert clean(tmp_path / "out.pdf")


def test_a_sections_number_and_a_contents_lines_leaders_are_kept() -> None:
    """Only the words between them are translated: a model need not know what to make of "1.2.3" or ". . . 17"."""
    assert pdf.ends("1.2.2 Dateisystem-Internas") == ("1.2.2 ", "Dateisystem-Internas", "")
    assert pdf.ends("9.8.9 Einen Bereich löschen . . . . 178") == ("9.8.9 ", "Einen Bereich löschen", " . . . . 178")
    assert pdf.ends("Vorwort . . . . . xii") == ("", "Vorwort", " . . . . . xii")
    assert pdf.ends("3 Hunde laufen. Ein Ball.") == ("", "3 Hunde laufen. Ein Ball.", "")     # a sentence's number


# --- PDFs of other producers: files/pdf/, made by `make pdf-fixtures` from the sources beside them ------------------

MADE = Path(__file__).parent / "files" / "pdf"


def test_a_latex_paper_is_read_as_its_author_wrote_it() -> None:
    """pdfTeX (paper.tex): two columns of Computer Modern in OT1, which draws an umlaut as an accent over its letter;
    justified lines whose wide spaces pdfminer takes for gaps between boxes; a formula; a table with rules."""
    found = pdf.boxes(MADE / "paper.pdf", "paper.pdf", every=True)
    texts = [b.text for b in found]
    assert texts[1] == ("Ein brauner Hund kaut auf einem großen Holzstück herum. Ein älterer Mann hält einen Hund empor, "
                        "während sein anderer Hund auf seinen Schoß klettert. Zwei Menschen überqueren eine Straße.")
    assert any("Kindern, die alle Hüte tragen, unterhält sich am Strand." in t for t in texts)
    assert {b.page for b in found if b.letters} == {0, 1} and {round(b.rect[0]) for b in found if b.letters} >= {72, 311}
    # the formula's pieces (math italic letters, a sum, an integral) are not words to translate; a sentence with a
    # formula inline is, the formula a code that comes back as it is
    assert [b.letters for b in found if b.text in ("E(x) =", "i=1")] == [False, False]
    inline = next(b for b in found if "x ≤ y" in b.text)
    code, tail = pdf.inline(inline.marked)[-2:]
    assert inline.letters and isinstance(code, spans.Empty) and (pdf.read(code.value, inline.glyphs), tail) == \
        ("x ≤ y", " gilt.")
    # the table's cells, each its own box, however pdfminer grouped them (a column, a row across a rule)
    assert {"Ein Hund", "Zwei Frauen sprechen", "Eine Katze", "Ein Kind isst Obst"} <= set(texts)
    # the section's number, set apart by a quad, kept as the number
    assert pdf.ends(found[0].marked) == ("1\u2003", "Hunde im Park", "")


def test_a_latex_papers_formula_number_and_table_survive_its_translation(tmp_path: Path) -> None:
    from pdfminer.high_level import extract_pages
    from pdfminer.layout import LTChar

    src, out = MADE / "paper.pdf", tmp_path / "out.pdf"
    before = pdf.boxes(src, src.name, every=True)
    report = translated(src, out, options=Options(source="de", target="en"))
    after = pdf.boxes(out, out.name, every=True)
    texts = [b.text for b in after]
    # the display formula still drawn in TeX's math fonts, where it was (read back, pdfminer may group its limits
    # with the translated paragraph under it)
    assert "E(x) =" in texts and "(cid:88)n" in " ".join(texts) and "i=1" in " ".join(texts)
    assert texts[0] == "1 HUNDE IM PARK"
    # each formula inline drawn again as TeX drew it, in its own fonts (AMS's blackboard bold ℝ, math italic, the
    # symbols' ∀ and ≤), the words around it translated, and a paragraph's indented first line joined to it (read
    # back, pdfminer may join the two paragraphs)
    assert "WÄHREND x ≤ y GILT." in " ".join(texts) and "ZWEI HUNDE SPIELEN IM SCHNEE, WOBEI ∀x∃y GILT." in " ".join(texts)
    # a glyph without Unicode (a Type 3 font's, which pdfminer reads as "(cid:190)": T1's ¿ in a font of that one
    # glyph, which cannot be told from TS1's ¾) drawn again as it was: its paragraph is translated
    assert "EIN HUND RENNT, WOBEI f : R → R GILT." in " ".join(texts) and "EIN KIND RUFT (cid:190) IM PARK." in \
        " ".join(texts)
    drawn = {(c.get_text(), c.fontname.split("+")[-1]) for page in extract_pages(out) for box in page
             if hasattr(box, "get_text") and "RENNT" in box.get_text() for line in box for c in line
             if isinstance(c, LTChar)}
    assert {("R", "MSBM10"), ("f", "CMMI10"), ("→", "CMSY10")} <= drawn
    assert "DejaVuSans-Symbols" not in {name.split("+")[-1] for name, _ in _fonts_embedded(out)}
    # a formula's bars and the pieces that pdfminer reads as lines of their own move with it (an overline, a fraction,
    # a root's sign and bar, a sum's limits): their paragraphs translated, each bar drawn again over or under its
    # letters wherever the sentence moved it, and none left where it was
    joined = " ".join(texts)
    assert "EIN MÄDCHEN LACHT, WOBEI a = a + nZ GILT." in joined and \
        "DREI HUNDE LAUFEN, WOBEI (cid:80)ni=1 x2i GILT." in joined and "ZWEI KINDER SPIELEN, WOBEI x2 =√y GILT." in joined
    # a fraction as large as its text, whose numerator, denominator (in roman) and the words after it pdfminer reads
    # as lines of their own; an integral's limits of digits
    assert "EIN MANN SPRINGT, WOBEI co1sz GILT." in joined and "EINE FRAU SINGT, WOBEI (cid:82)01 f GILT." in joined
    assert _bars_over(out) == _bars_over(src) == [("", ""), ("", "a"), ("", "y"), ("x", "2")] and not report.notes
    assert all(any(a == "1" and sorted(b) == sorted("cosz") for a, b in _bars_over(path, reach=1.2))
               for path in (src, out))
    walls = {b.text.upper(): b.wall for b in before if b.wall < float("inf")}
    cells = [b for b in after if b.text in walls]
    assert len(cells) == 4 and all(b.rect[2] <= walls[b.text] for b in cells)   # inside the table's rules
    assert pdf.overlaps(after) <= pdf.overlaps(before) and clean(out)
    assert all(embedded for _, embedded in _fonts_embedded(out))


def _bars(path: Path) -> list[tuple[Any, list[Any]]]:
    """The short horizontal bars of a PDF's pages (an overline's, a fraction's), as pdfminer reads them, each with its
    page's characters."""
    from pdfminer.high_level import extract_pages
    from pdfminer.layout import LTChar, LTCurve

    out = []
    for page in extract_pages(path):
        chars = [c for box in page if hasattr(box, "get_text") for line in box for c in line if isinstance(c, LTChar)]
        out += [(item, chars) for item in page if isinstance(item, LTCurve) and item.height <= 1 and item.width < 40]
    return out


def _bars_over(path: Path, reach: float = 0.6) -> list[tuple[str, str]]:
    """Each short bar of a PDF: the characters centred over its span just above it, and those just below it (an
    overline: ``("", "a")``; a fraction: ``("x", "2")``), sorted."""
    out = []
    for bar, chars in _bars(path):
        mine = [c for c in chars if c.get_text().strip() and bar.x0 - 1 <= (c.x0 + c.x1) / 2 <= bar.x1 + 1 and
                abs((c.y0 + c.y1) / 2 - bar.y0) < reach * c.size]
        out.append(("".join(c.get_text() for c in mine if (c.y0 + c.y1) / 2 > bar.y0),
                    "".join(c.get_text() for c in mine if (c.y0 + c.y1) / 2 < bar.y0)))
    return sorted(out)


def test_slides_keep_their_bullets_and_an_items_last_line(tmp_path: Path) -> None:
    """LibreOffice Impress (slides.pptx, made by pandoc): each bullet drawn in a font of its own, and an item's last
    line, which pdfminer sets apart as a box of its own, joined to its item."""
    from pdfminer.high_level import extract_text

    src, out = MADE / "slides.pdf", tmp_path / "out.pdf"
    texts = [b.text for b in pdf.boxes(src, src.name)]
    assert texts[:4] == ["Ein Tag im Park", "Ein kleiner Hund läuft über die grüne Wiese.",
                         "Zwei Kinder spielen mit einem roten Ball.",
                         "Eine Frau sitzt auf einer Bank und liest eine Zeitung."]
    translated(src, out, options=Options(source="de", target="en"))
    # (read back, pdfminer may group the drawn items otherwise: what counts is that each is there, whole, in order)
    assert " ".join(b.text for b in pdf.boxes(out, out.name)).startswith(" ".join(t.upper() for t in texts[:4]))
    assert extract_text(str(out)).count("•") == extract_text(str(src)).count("•") == 3    # left as they were drawn
    assert clean(out)


def test_a_libreoffice_document_with_a_table_is_translated_in_place(tmp_path: Path) -> None:
    """LibreOffice Writer (letter.docx, made by pandoc): TrueType subsets, a table whose header has a rule under it."""
    src, out = MADE / "letter.pdf", tmp_path / "out.pdf"
    before = pdf.boxes(src, src.name)
    assert {"Wer", "Was"} <= {b.text for b in before}           # the header's cells apart from the rows under the rule
    translated(src, out, options=Options(source="de", target="en"))
    after = pdf.boxes(out, out.name)
    assert sorted(b.text for b in after) == sorted(b.text.upper() for b in before)
    assert pdf.overlaps(after) == pdf.overlaps(before) == 0 and clean(out)


def test_a_space_drawn_inside_a_box_by_another_operator_does_not_keep_it_from_being_translated(tmp_path: Path) -> None:
    """LibreOffice draws a link's trailing space with the operator that draws the punctuation after it (``; ``), which
    pdfminer reads as a box of its own: the space, inside the link's box, stays on the page when the box's text is taken
    out, and draws nothing, so the box is translated all the same (a letter left there would keep it as it was)."""
    src, spaced, out = MADE / "letter.pdf", tmp_path / "spaced.pdf", tmp_path / "out.pdf"
    heading = pdf.boxes(src, src.name)[0]
    assert heading.text == "Ein Ausflug in die Berge" and heading.rect[2] < 288
    with pikepdf.open(src) as doc:       # a space (F2's code 4) at the heading's end, then a full stop (23) outside it
        doc.pages[0].contents_add(doc.make_stream(b"BT /F2 16 Tf 1 0 0 1 283 681.1 Tm [<04> -300 <17>] TJ ET"))
        doc.save(spaced)
    assert [b.text for b in pdf.boxes(spaced, spaced.name, every=True)][:2] == [heading.text, "."]
    report = translated(spaced, out, options=Options(source="de", target="en"))
    assert not [n for n in report.notes if "not theirs" in n], report.notes
    after = [b.text for b in pdf.boxes(out, out.name)]          # (the full stop read back beside its translation)
    assert after[0].startswith(heading.text.upper()) and heading.text not in " ".join(after) and clean(out)


def test_an_accent_that_tex_draws_over_its_letter_is_read_as_the_accented_letter() -> None:
    assert pdf.composed("B¨arenreiter, durchg¨angig, ˇcesk´y, ´et´e") == "Bärenreiter, durchgängig, český, été"
    # an accent after its letter, over no letter, or one of ASCII's (code's ` ^ ~) is left as it is
    assert pdf.composed("a¨b x ¨ y `a` a^b ~c ¨1") == "a¨b x ¨ y `a` a^b ~c ¨1"


@pytest.mark.parametrize(("name", "formula"), [("bitmap.pdf", "(cid:11) + (cid:27) = (cid:12)"),
                                                ("bitmap-dvipdfmx.pdf", "α + σ = β")])
def test_a_bitmap_font_in_texs_t1_encoding_is_read_as_its_letters(tmp_path: Path, name: str, formula: str) -> None:
    """pdfTeX, and latex with dvipdfmx, without cm-super (bitmap.tex): T1's letters in Type 3 fonts with no ToUnicode
    map, their glyphs named by their codes (/a228, /xE4). Its umlauts, ß, quotes and dash are read as themselves, so
    its words go whole to the translation; pdfTeX's math fonts, bitmaps too (128 glyphs, whose codes mean Greek
    letters), stay a formula."""
    import unicodedata

    src = MADE / name
    [box] = pdf.boxes(src, src.name, every=True)
    assert unicodedata.normalize("NFKC", box.text).startswith(
        "Die Größe der Äpfel ist überall gleich. Ein Hund läuft über die Straße. Öffentliche Flächen für „Bürger“ – "
        "außer Schiffe, die Öl führen. Es gilt ")
    # TS1's bullet (a font of 256 glyphs too, without letters: not read as T1's Ĺ) a glyph without Unicode
    assert box.text.endswith(" für alle Werte. Ein Punkt (cid:136) hier.") and box.letters
    seen: list[str] = []
    report = translated(src, tmp_path / "out.pdf", translate=lambda texts, fmt, kinds: seen.extend(texts) or texts)
    formulas = r"Es gilt <img [^>]*> für alle Werte\. Ein Punkt <img [^>]*> hier\.$"      # (a formula, the bullet)
    assert len(seen) == 1 and re.search(formulas, seen[0]), seen
    words = unicodedata.normalize("NFKC", seen[0]).split()
    assert {"Größe", "Äpfel", "überall", "läuft", "Straße.", "Öffentliche", "Flächen", "„Bürger“", "außer",
            "Schiffe,", "Öl", "führen."} <= set(words), words
    # the formula's glyphs, which have no Unicode, drawn again as they were, in their own fonts
    [back] = pdf.boxes(tmp_path / "out.pdf", "out.pdf", every=True)
    assert f"Es gilt {formula} für alle Werte." in back.text
    assert not report.notes and clean(tmp_path / "out.pdf")


def test_a_tight_lists_items_each_stay_their_own_paragraph(tmp_path: Path) -> None:
    """pdfTeX (list.tex): an itemize set tight, each bullet in TeX's math symbols (read as a formula), no item ending
    in a full stop: each item is its own paragraph, not joined to the one above as a sentence that goes on would be;
    its bullet stays as drawn."""
    src = MADE / "list.pdf"
    assert [b.text for b in pdf.boxes(src, src.name, every=True)] == [
        "Was an dem Notensatz nicht stimmt:", "vor der Taktangabe ist nicht genug Platz",
        "die Hälse der Noten sind zu lang", "der zweite und vierte Takt sind zu schmal", "Ein Hund läuft über die Wiese."]
    seen: list[str] = []
    translated(src, tmp_path / "out.pdf", translate=lambda texts, fmt, kinds: seen.extend(texts) or texts)
    assert "die Hälse der Noten sind zu lang" in seen and clean(tmp_path / "out.pdf")
    from pdfminer.high_level import extract_text
    assert extract_text(str(tmp_path / "out.pdf")).count("•") == 3


def test_one_word_of_code_in_a_monospaced_face_is_not_translated() -> None:
    from types import SimpleNamespace

    mono, serif = SimpleNamespace(fontname="ABCDEF+LiberationMono"), SimpleNamespace(fontname="NimbusRomNo9L-Regu")
    assert pdf._code([mono] * 5, "/etc/") and not pdf._code([mono] * 9, "ls /etc/") and not pdf._code([serif] * 4, "Haus")


def test_a_bar_moves_with_its_formula_only_when_what_is_over_and_under_it_is_the_formulas() -> None:
    """A formula's bar is drawn again with it where every character over and under the bar is the formula's and one
    painting operator drew the bar alone; a fraction whose denominator pdfminer read into another line, or a bar drawn
    with others, would leave the bar (or the denominator) behind, so the formula's paragraph stays as it is
    (:data:`pdf.FIXED`). A rule far wider than the formula (a frame's) is not its own."""
    from types import SimpleNamespace

    def char(text: str, x0: float, y0: float, size: float = 10.0) -> Any:
        return SimpleNamespace(x0=x0, x1=x0 + 5, y0=y0, y1=y0 + size, size=size, get_text=lambda: text,
                               shown=("F1", text.encode(), (size, 0, 0, size, x0, y0 + 2)))

    x, two, word = char("x", 100, 104, 7), char("2", 100, 96, 7), char("a", 80, 100)
    bar = pdf.Bar(99, 106, 103, (99, 102.8, 106, 103.2), op=3, near=frozenset({id(x), id(two)}))
    glyphs: dict[str, pdf.Glyph] = {}
    key = pdf.glyph([x, two], [word, x, two], [bar], glyphs)
    assert key not in (None, pdf.FIXED) and glyphs[key].paths == {3} and len(glyphs[key].rules) == 1
    assert pdf.glyph([x], [word, x], [bar], glyphs) == pdf.FIXED                  # its denominator is another line's
    assert pdf.glyph([x, two], [word, x, two], [bar._replace(op=-1)], glyphs) == pdf.FIXED   # drawn with others
    frame = pdf.Bar(0, 500, 103, (0, 102.8, 500, 103.2), op=4, near=frozenset({id(x), id(two), id(word)}))
    key = pdf.glyph([x, two], [word, x, two], [frame], glyphs)
    assert key not in (None, pdf.FIXED) and glyphs[key].rules == () and not glyphs[key].paths


def test_a_formulas_stacked_pieces_stay_one_formula_or_leave_its_paragraph_as_it_is() -> None:
    """An integral's limits set over one another are one formula, though pdfminer puts a space between them; a space
    between characters side by side still ends a formula; a letter drawn inside a symbol (TeX's ``©``) is the formula's
    too. A formula with another piece's character over or under it (a limit read into the next formula or into text)
    cannot move as one: its paragraph stays (:data:`pdf.FIXED`)."""
    from types import SimpleNamespace

    def char(text: str, x0: float, y0: float, size: float = 10.0, font: str = "CMMI10") -> Any:
        return SimpleNamespace(x0=x0, x1=x0 + 4, y0=y0, y1=y0 + size, size=size, get_text=lambda: text, fontname=font,
                               shown=("F1", text.encode(), (size, 0, 0, size, x0, y0 + 2)))

    space = SimpleNamespace(get_text=lambda: " ")
    sign, lower, upper = char("\u222b", 100, 96, 10, "CMEX10"), char("a", 104, 94, 7), char("b", 105, 103, 7)
    f, word = char("f", 111, 98), char("g", 130, 98, 10, "NimbusRomNo9L")
    assert pdf._formulas([sign, lower, space, upper, f, space, word]) == [(0, 5)]
    assert pdf._formulas([sign, lower, space, f, space, word]) == [(0, 2), (3, 4)]     # (f beside a, not over it)
    circle, c, one = char("(cid:13)", 60, 96, 10, "CMSY10"), char("c", 61, 97, 7, "CMR7"), char("1", 65, 96, 10, "CMR10")
    assert pdf._formulas([word, space, c, circle, one]) == [(2, 5)]      # TeX's ©: a c drawn inside a circle
    assert pdf._formulas([word, space, circle, c]) == [(2, 4)]
    glyphs: dict[str, pdf.Glyph] = {}
    key = pdf.glyph([sign, lower, upper, f], [sign, lower, upper, f], [], glyphs)
    assert key not in (None, pdf.FIXED) and glyphs[key].shown[0][2][0] == 1.0    # (in ems of the text, not the limits)
    assert pdf.glyph([sign, lower, upper, f], [sign, lower, upper, f, word], [], glyphs) not in (None, pdf.FIXED)
    assert pdf.glyph([sign, lower], [sign, lower, upper, f, word], [], glyphs) == pdf.FIXED
    # a column's first lines start at one point: a line is not joined across the gap to the column on its left
    assert 303 in pdf._edges([[char("x", 303, y)] for y in (0, 20, 40)] + [[char("y", 57, 0)]])
    assert 57 not in pdf._edges([[char("x", 303, y)] for y in (0, 20, 40)] + [[char("y", 57, 0)]])


def test_an_inline_fractions_parts_read_into_the_lines_beside_it_go_back_into_its_line(tmp_path: Path) -> None:
    """The class notes' "Satz 2" (class-notes-reihen.md), ``a_{k+1}/a_k <= b_{k+1}/b_k`` set large in a sentence: pdfminer
    reads the first fraction's denominator into the line of the text before it and its numerator into the line of the
    text after it. Both go back into the line its bar stands in, so that the fraction moves with its sentence, bar and
    all, and the paragraph is translated instead of left as it was."""
    src, out = MADE / "class-notes-reihen.pdf", tmp_path / "out.pdf"
    satz = next(b for b in pdf.boxes(src, src.name) if b.text.startswith("Satz 2"))
    assert pdf.FIXED not in satz.marked and satz.text.endswith("für alle"), satz.text
    translated(src, out, options=Options(source="de", target="en"))
    assert any(b.text.startswith("SATZ 2: SEIEN") for b in pdf.boxes(out, out.name)) and clean(out)


def test_a_big_parenthesis_or_a_roots_sign_that_pdfminer_set_apart_goes_back_into_its_line(tmp_path: Path) -> None:
    """The class notes' criterion of Raabe, ``R_n = n (a_n / a_{n+1} - 1)``, its parentheses as large as the fraction
    (TeX's font of big delimiters), and Cauchy's root test, ``lim sup \\sqrt[k]{a_k} < 1``: pdfminer reads the closing
    parenthesis, and each root's sign, as a line of its own, inside the paragraph's box, where it would stay under the
    translation. Each goes back into its line, as a sum's limits do, and moves with its formula; the paragraphs are
    translated."""
    src, out = MADE / "class-notes-reihen.pdf", tmp_path / "out.pdf"
    found = {b.text.split(":")[0]: b.text for b in pdf.boxes(src, src.name)}
    raabe, root = found["Kriterium von Raabe"], found["Wurzelkriterium von Cauchy in Limesform"]
    assert raabe.count("(cid:16)") == raabe.count("(cid:17)") == 1 and root.count("\u221a") == 2, (raabe, root)
    report = translated(src, out, options=Options(source="de", target="en"))
    after = [b.text for b in pdf.boxes(out, out.name)]
    assert [t for t in after if t.startswith(("KRITERIUM VON RAABE", "WURZELKRITERIUM VON CAUCHY"))], report.notes


def test_a_fraction_that_pdfminer_cut_with_its_spaces_moves_whole_with_its_bar() -> None:
    """An inline fraction (``f(b)/k!``) that pdfminer cut into several formulas with the spaces it put between its
    numerator's and denominator's characters, and whose ``!`` is punctuation, not a formula's: the formula is widened
    to every character of its run over and under the bar, so that it moves whole, with its bar, where each piece alone
    would leave the bar behind (:data:`pdf.FIXED`). An overline widens a formula to every character right under it
    where none is a word's letter (``p − 1``); a bar with characters over it only (an underline) widens nothing."""
    from types import SimpleNamespace

    def char(text: str, x0: float, y0: float, size: float = 7.0, font: str = "CMMI7") -> Any:
        return SimpleNamespace(x0=x0, x1=x0 + 3, y0=y0, y1=y0 + size, size=size, get_text=lambda: text, fontname=font,
                               shown=("F1", text.encode(), (size, 0, 0, size, x0, y0 + 1)))

    space = SimpleNamespace(get_text=lambda: " ")
    word, sign = char("a", 70, 100, 10, "CMR10"), char("=", 90, 100, 10, "CMSY10")
    f, b, k, bang = char("f", 100, 105), char("b", 106, 105), char("k", 100, 95), char("!", 103, 95, font="CMR7")
    line = [word, space, sign, f, space, b, k, bang]
    bar = pdf.Bar(99, 110, 103.5, (99, 103.3, 110, 103.7), op=5, near=frozenset({id(f), id(b), id(k), id(bang)}))
    assert pdf._formulas(line) == [(2, 4), (5, 7)]                     # cut at the space; the ! not a formula's
    assert pdf._whole_fractions(pdf._formulas(line), line, [bar]) == [(2, 8)]
    glyphs: dict[str, pdf.Glyph] = {}
    assert pdf.glyph([f], line, [bar], glyphs) == pdf.FIXED               # a piece alone leaves the bar behind
    key = pdf.glyph([sign, f, b, k, bang], line, [bar], glyphs)
    assert key not in (None, pdf.FIXED) and glyphs[key].paths == {5}
    g = char("g", 106, 105)
    over = [word, space, sign, f, space, g]                              # f and g both over the line: an underline's
    underline = pdf.Bar(99, 108, 104, (99, 103.8, 108, 104.2), op=6)
    assert pdf._formulas(over) == [(2, 4), (5, 6)] == pdf._whole_fractions(pdf._formulas(over), over, [underline])
    p, minus, one = char("p", 100, 100, 10), char("\u2212", 106, 100, 10, "CMSY10"), char("1", 112, 100, 10, "CMR10")
    barred = [word, space, p, space, minus, space, one]                  # p − 1 under an overline, cut at its spaces
    overline = pdf.Bar(99, 116, 107.5, (99, 107.3, 116, 107.7), op=7)
    assert pdf._formulas(barred) == [(2, 3), (4, 5)] and pdf._whole_fractions(pdf._formulas(barred), barred,
                                                                              [overline]) == [(2, 7)]
    words = [word, space, char("b", 80, 100, 10, "CMR10"), char("e", 85, 100, 10, "CMR10"), space, p]
    assert pdf._whole_fractions(pdf._formulas(words), words, [overline._replace(x0=69)]) == [(5, 6)]   # a rule's


def test_overlines_and_a_numerator_read_into_the_line_above_move_with_their_formulas(tmp_path: Path) -> None:
    """The class notes' groups (class-notes-gruppen.md): ``ord(g^s) = n/ggT(n,s)``, whose small numerator pdfminer
    reads into the line above, in the middle of a line of text; ``\\overline{p-1}`` and ``\\overline{(11-k)}``, which
    pdfminer cuts into several formulas at their spaces; and ``\\overline{r}``, whose bar sits right under the line
    above, as near to it as to its own letter. Each fraction and overline moves whole with its sentence, and the
    paragraphs are translated instead of left as they were."""
    src, out = MADE / "class-notes-gruppen.pdf", tmp_path / "out.pdf"
    found = pdf.boxes(src, src.name)
    cyclic = next(b for b in found if b.text.startswith("[label=()]Es gilt ord(G)"))
    remark = next(b for b in found if b.text.startswith("Bemerkung: Z/nZ ist keine Gruppe"))
    isbn = next(b for b in found if "Kodierungstheorie ist die ISBN" in b.text)
    assert "gℓ=e}" in cyclic.text.replace(" ", "") and "=ggTn(n,s)" in cyclic.text.replace(" ", ""), cyclic.text
    assert [pdf.FIXED in b.marked for b in (cyclic, remark, isbn)] == [False] * 3
    translated(src, out, options=Options(source="de", target="en"))
    after = [b.text for b in pdf.boxes(out, out.name)]
    assert [t for t in after if t.startswith(("[LABEL=()]ES GILT", "BEMERKUNG: Z/NZ IST KEINE"))], after
    assert [t for t in after if "KODIERUNGSTHEORIE IST DIE ISBN" in t] and clean(out)


def test_a_numerator_over_a_sums_limit_a_fraction_of_digits_and_the_next_lines_overline_leave_nothing_fixed() -> None:
    """The class notes' series (class-notes-reihen.md): Kummer's ``\\sum_{k=1}^\\infty 1/c_k``, whose numerator
    pdfminer reads as a line of its own and whose bar runs just over the line of the sum's limit; Riemann's
    ``1/2``, digits alone; and the lines under ``\\overline{lim}``'s bar, whose subscripts come near it. None leaves
    its paragraph as it was (:data:`pdf.FIXED`)."""
    src = MADE / "class-notes-reihen.pdf"
    found = pdf.boxes(src, src.name)
    first, kummer = (next(b for b in found if b.text.startswith(s)) for s in ("Kriterium von Kummer", "mit Kn ="))
    limits = next(b for b in found if b.text.startswith("oberer/unterer Grenzwert"))
    riemann = next(b for b in found if b.text.startswith("(σ, t ∈ R) konvergiert absolut"))
    assert [pdf.FIXED in b.marked for b in (first, kummer, limits, riemann)] == [False] * 4
    assert "c1k divergiert" in kummer.text and "Realteil 12 besitzen" in riemann.text, (kummer.text, riemann.text)
    assert first.text.endswith("ck > 0"), first.text                     # (the numerator not read into it)


def test_a_sentence_with_a_formula_is_words_though_the_pdf_draws_no_spaces() -> None:
    """TeX draws no spaces: a box of words and one formula (``Wir betrachten nun reelle Ableitungen: f : [a, b] → R``)
    is a sentence to translate, its words told apart by the gaps between them; a formula with one word beside it
    (``f konkav``) is a formula's."""
    from types import SimpleNamespace

    def chars(text: str) -> list[Any]:                                  # (_f: an f in math italic)
        out, x = [], 0.0
        for math, ch in re.findall(r"(_?)(.)", text):
            if ch != " ":
                out.append(SimpleNamespace(x0=x, x1=x + 5, size=10.0, fontname="CMMI10" if math else "CMR10",
                                           get_text=lambda ch=ch: ch))
            x += 5 if ch != " " else 3
        return out

    assert not pdf.symbolic(chars("Wir betrachten nun reelle Ableitungen: _f"))
    assert pdf.symbolic(chars("_f konkav")) and pdf.symbolic(chars("Wirbetrachtennun _f"))   # (no gap: one word)


def test_a_relation_a_display_sets_after_its_text_joins_that_texts_paragraph_and_a_sums_sign_is_not_its_baseline() -> None:
    """A display's ``⇔`` set a few quads after its text (the class notes' Cauchy criterion), which pdfminer puts in a
    box of its own past the width of the paragraph's box (its last line is short), is put back into the paragraph
    when it lies inside the paragraph's column and last on its line; a formula's piece with more of its line after it,
    and words, are not. A line's baseline is its text's, not that of a big sum's sign, which TeX's font of them
    hangs from a point above it."""
    from types import SimpleNamespace

    def run(text: str, x0: float, y0: float, font: str = "CMR10", size: float = 10.0) -> pdf.Run:
        chars = [SimpleNamespace(x0=x0 + 5 * k, x1=x0 + 5 * k + 5, y0=y0, y1=y0 + size, size=size, fontname=font,
                                 get_text=lambda ch=ch: ch, shown=("F1", ch.encode(), (size, 0, 0, size, x0 + 5 * k,
                                                                                       y0 + 2)))
                 for k, ch in enumerate(text)]
        return pdf.Run(chars, text)

    wide = [run("Sei f stetig auf dem ganzen Intervall und dort", 300, 120)]      # (the column: 300 to 530)
    home = [run("Sei f eine", 300, 100), run("Dann gilt", 300, 88)]             # (it ends at 350)
    iff, tail = [run("\u21d4", 380, 88, "CMSY10")], [run("x", 370, 100, "CMMI10")]
    assert [len(g) for g in pdf.gathered([wide, home, iff])] == [1, 3]          # ⇔ last on its line: gathered
    assert len(pdf.gathered([wide, home, tail, [run("und", 390, 100)]])) == 4           # (more of its line after it)
    assert len(pdf.gathered([wide, home, [run("und", 380, 88)]])) == 3                  # (words: not a formula's)
    assert len(pdf.gathered([home, iff])) == 2                                  # (no column reaches it)
    text = [run(":", 100, 100).chars[0]]                               # (a colon and a sum's sign: "Typ ∑: ∑")
    sign = SimpleNamespace(**{**vars(run("S", 110, 100, "CMEX10").chars[0]), "shown": ("F2", b"P", (10, 0, 0, 10,
                                                                                                      110, 109.5))})
    assert pdf._base(text + [sign]) == 102


def test_a_table_of_contents_is_translated_entry_by_entry_its_pages_kept_flush_right(tmp_path: Path) -> None:
    """A page of the Debian FAQ's contents (faq-contents.md): pdfminer reads its entries as a few boxes of many lines,
    which were joined into one paragraph and translated as prose, leaders and pages lost among the words. Each entry
    is its own paragraph (it ends at a line ending with leaders and a page, or with a page alone where its words left
    no room for dots; a heading's page, which pdfminer set with the entries under it, stays a number); its words
    translated, its leaders filled again up to its page, and its page drawn where it was, flush with the margin."""
    src, out = MADE / "faq-contents.pdf", tmp_path / "out.pdf"
    before = [b for b in pdf.boxes(src, src.name) if pdf.LEADERS.search(b.text)]
    assert len(before) >= 35 and all(b.text.count(" . . .") for b in before)
    assert not [b.text for b in before if len(re.findall(r"\d+\.\d+(?:\.\d+)*\u2003", b.text)) > 1]   # (one each)
    translated(src, out, options=Options(source="de", target="en"))
    def pages(path: Path) -> list[tuple[str, int]]:      # the numbers at the right margin, top to bottom, and where
        words = re.findall(r'<word xMin="[\d.]+" yMin="([\d.]+)" xMax="([\d.]+)" yMax="[\d.]+">(\d+)</word>',
                           subprocess.run(["pdftotext", "-bbox", str(path), "-"], capture_output=True, text=True).stdout)
        return [(page, round(float(x1))) for y, x1, page in sorted(words, key=lambda w: float(w[0])) if float(x1) > 500]

    assert pages(out) == pages(src) and clean(out)          # every page at its place, flush right as it was
    from pdfminer.high_level import extract_text
    text = extract_text(str(out))
    assert re.search(r"WIE INSTALLIERE ICH EIN QUELLPAKET\? ?(\. ){10,}", text), text[:800]


def test_a_centred_title_is_drawn_centred_and_a_paragraph_or_a_numbered_heading_is_not() -> None:
    """A slide's title set centred over two lines (both edges moved, one middle) is a centred box: its translation's
    lines are drawn in the middle of its box, where they were drawn from its left edge. A paragraph whose first line
    is indented, and a heading whose second line hangs under the text after its number, are not centred."""
    from types import SimpleNamespace

    def row(text: str, x0: float, y0: float) -> list[pdf.Run]:
        chars = [SimpleNamespace(x0=x0 + 6 * k, x1=x0 + 6 * k + 6, y0=y0, y1=y0 + 12, size=12.0, fontname="Sans",
                                 get_text=lambda ch=ch: ch, graphicstate=SimpleNamespace(ncolor=0), op=k,
                                 matrix=(12, 0, 0, 12, x0 + 6 * k, y0), shown=("F1", ch.encode(), (12, 0, 0, 12,
                                                                                                  x0 + 6 * k, y0 + 2)))
                 for k, ch in enumerate(text) if ch != " "]
        return [pdf.Run(chars, text)]

    title = pdf._box(0, [row("Die Shell-Eingabeaufforderung", 100, 500), row("(Shell-Prompt)", 145, 485)], False,
                     {}, [])
    # (each as near to centred as it may come: one middle, its edges apart by an em, or under its number's text)
    indented = pdf._box(0, [row("Ein Hund rennt", 112, 500), row("durch den Schneee.", 100, 485)], False, {}, [])
    heading = pdf._box(0, [row("1   Zur Rechnung von", 100, 500), row("Funktionen a", 124, 485)], False, {}, [])
    assert title is not None and title.centred and indented is not None and not indented.centred
    assert heading is not None and not heading.centred
    title.translation = "The shell prompt"
    font = pdf.Font("Sans-Regular")
    x = float(re.findall(r"1 0 0 1 ([\d.]+) [\d.]+ Tm", pdf.drawn(title, font)[0].decode())[0])
    width = font.width("The shell prompt", title.size)
    assert abs(x + width / 2 - (title.rect[0] + title.rect[2]) / 2) < 1, (x, width, title.rect)
    title.centred = False
    assert float(re.findall(r"1 0 0 1 ([\d.]+) [\d.]+ Tm", pdf.drawn(title, font)[0].decode())[0]) == title.rect[0]


def test_a_paragraph_is_left_when_taking_it_out_would_take_out_text_that_cannot_be_drawn_again() -> None:
    """Taking a paragraph's text out takes out what shares its operators, which is drawn again as it was
    (:func:`pdf.again`); where that is a formula that cannot move or a glyph without Unicode, every paragraph joined to
    it through shared operators is left as it is instead."""
    def box(text: str, ops: set[int], marked: str = "") -> pdf.Box:
        return pdf.Box(0, (0, 0, 10, 10), text, 10, 12, (0, 0, 0), ops=frozenset(ops), marked=marked or text)

    a, b, c, d = box("Ein Hund", {1, 2}), box("läuft", {2, 3}), box("x", {3}, f"{pdf.FIXED}x"), box("Haus", {4})
    assert pdf.faithful([a, b, c, d], [a, b, d]) == [d]
    assert pdf.faithful([a, b, box("1.", {3}), d], [a, b, d]) == [a, b, d]
    assert pdf.faithful([a, box("(cid:12)", {1}), d], [a, d]) == [d]
