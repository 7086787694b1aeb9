"""Documents (documents.py): a real file of each format, made with that format's own library, translated and opened
again with the same library: the same structure, every text translated, nothing else changed. A stand-in translation
(upper case, HTML tags kept) shows what moved; the copy model, through `aiayn translate`, shows inline formatting
landing on the words aligned with its own."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from aiayn.cli import main
from aiayn.documents.common import DocumentError
from aiayn.documents.formats import translate_document

from .test_serve import Server, _copy_lines

docx = pytest.importorskip("docx", reason="python-docx: pip install aiayn[documents]")
pysrt = pytest.importorskip("pysrt", reason="pysrt: pip install aiayn[documents]")
toolkit = pytest.importorskip("translate.storage.factory", reason="translate-toolkit: pip install aiayn[documents]")


def translate_file(src: Path, dst: Path, translate: Any) -> int:
    return translate_document(src, dst, lambda texts, fmt, kinds: translate(texts, fmt)).texts


def upper(texts: list[str], fmt: str) -> list[str]:
    """A stand-in translation: the text in upper case (HTML: outside its tags), so that every translated text shows."""
    if fmt == "text":
        return [t.upper() for t in texts]
    return [re.sub(r"(^|>)([^<]*)", lambda m: m.group(1) + m.group(2).upper(), t) for t in texts]


def test_txt_html_and_srt(tmp_path: Path) -> None:
    src = tmp_path / "a.txt"
    src.write_text("Ein Hund. Zwei Katzen.\n\nDrei Vögel\n")
    translate_file(src, tmp_path / "b.txt", upper)
    assert (tmp_path / "b.txt").read_text() == "EIN HUND. ZWEI KATZEN.\n\nDREI VÖGEL\n"
    page = tmp_path / "a.html"
    page.write_text('<!DOCTYPE html>\n<html><head><title>Titel</title><style>p {color: red}</style></head>'
                    '<body><p>Ein <b>Hund</b>.</p><pre>code()</pre></body></html>')
    translate_file(page, tmp_path / "b.html", upper)
    out = (tmp_path / "b.html").read_text()
    assert out.startswith("<!DOCTYPE html>\n<html><head><title>TITEL</title>") and "<p>EIN <b>HUND</b>.</p>" in out
    subs = pysrt.SubRipFile([pysrt.SubRipItem(1, start="00:00:01,000", end="00:00:02,500", text="Ein Hund\nläuft."),
                             pysrt.SubRipItem(2, start="00:00:03,000", end="00:00:04,000", text="Zwei Katzen.")])
    subs.save(str(tmp_path / "a.srt"), encoding="utf-8")
    translate_file(tmp_path / "a.srt", tmp_path / "b.srt", upper)
    back = pysrt.open(str(tmp_path / "b.srt"), encoding="utf-8")
    assert [(c.index, str(c.start), str(c.end), c.text) for c in back] == \
        [(1, "00:00:01,000", "00:00:02,500", "EIN HUND LÄUFT."), (2, "00:00:03,000", "00:00:04,000", "ZWEI KATZEN.")]


def test_po_and_xliff_keep_everything_but_the_missing_translations(tmp_path: Path) -> None:
    po = tmp_path / "de.po"
    po.write_text('''# A catalogue
msgid ""
msgstr ""
"Content-Type: text/plain; charset=UTF-8\\n"
"Plural-Forms: nplurals=2; plural=(n != 1);\\n"

#: app.py:1
msgctxt "menu"
msgid "Open file"
msgstr ""

#, fuzzy
msgid "Save"
msgstr "Sichern"

msgid "One dog"
msgid_plural "%d dogs"
msgstr[0] ""
msgstr[1] ""
''', encoding="utf-8")
    translate_file(po, tmp_path / "fr.po", upper)
    from translate.storage import factory

    store = factory.getobject(str(tmp_path / "fr.po"))
    units = {u.source: u for u in store.units if not u.isheader()}
    assert units["Open file"].target == "OPEN FILE" and units["Open file"].getcontext() == "menu"
    assert units["Open file"].getlocations() == ["app.py:1"]
    assert units["Save"].target == "Sichern" and units["Save"].isfuzzy()               # translated already: kept
    assert [str(s) for s in units["One dog"].target.strings] == ["ONE DOG", "%D DOGS"]
    assert "Plural-Forms: nplurals=2" in (tmp_path / "fr.po").read_text()
    xlf = tmp_path / "a.xlf"
    xlf.write_text('''<?xml version="1.0" encoding="UTF-8"?>
<xliff version="1.2" xmlns="urn:oasis:names:tc:xliff:document:1.2">
  <file original="app" source-language="en" target-language="fr" datatype="plaintext"><body>
    <trans-unit id="greeting"><source>Good morning</source></trans-unit>
    <trans-unit id="done"><source>Done</source><target>Fini</target></trans-unit>
  </body></file></xliff>
''', encoding="utf-8")
    translate_file(xlf, tmp_path / "b.xlf", upper)
    units = {u.getid().split("\x04")[-1]: u for u in factory.getobject(str(tmp_path / "b.xlf")).units}
    assert units["greeting"].target == "GOOD MORNING" and units["done"].target == "Fini"


def _word(tmp_path: Path, many: int = 0) -> Path:
    d = docx.Document()
    d.add_heading("Ein Bericht", level=1)
    p = d.add_paragraph("a b ")
    p.add_run("c d").bold = True
    p.add_run(" e f")
    table = d.add_table(rows=1, cols=2)
    table.cell(0, 0).text = "g h"
    table.cell(0, 1).paragraphs[0].add_run("i j").italic = True
    d.sections[0].header.paragraphs[0].text = "a j"
    d.add_paragraph("")
    for k in range(many):
        d.add_paragraph(f"{'abcdefghij'[k % 10]} b c")
    path = tmp_path / "a.docx"
    d.save(str(path))
    return path


def test_docx_keeps_its_structure_and_runs(tmp_path: Path) -> None:
    translate_file(_word(tmp_path, many=600), tmp_path / "b.docx", upper)
    d = docx.Document(str(tmp_path / "b.docx"))
    assert [p.text for p in d.paragraphs[:3]] == ["EIN BERICHT", "A B C D E F", ""]
    assert [p.text for p in d.paragraphs[3:]] == [f"{'ABCDEFGHIJ'[k % 10]} B C" for k in range(600)]   # every one
    assert d.paragraphs[0].style.name == "Heading 1"
    assert [(r.text, bool(r.bold)) for r in d.paragraphs[1].runs] == [("A B ", False), ("C D", True), (" E F", False)]
    assert [c.text for c in d.tables[0].rows[0].cells] == ["G H", "I J"]
    assert d.tables[0].cell(0, 1).paragraphs[0].runs[0].italic
    assert d.sections[0].header.paragraphs[0].text == "A J"


def test_line_breaks_and_tabs_stay_between_their_texts(tmp_path: Path) -> None:
    """A Word paragraph with a line break inside a run, a tab between runs and a bold word on its second line, a
    slide's paragraph with a line break, and an odt paragraph like the Word one: each line translated on its own, the
    breaks and the tab where they were. A bookmark inside a sentence does not cut it, and a Word run holding where the
    page last broke beside its text is text still."""
    pptx = pytest.importorskip("pptx", reason="python-pptx: pip install aiayn[documents]")
    d = docx.Document()
    p = d.add_paragraph()
    p.add_run("a b").add_break()                                  # <w:r><w:t>a b</w:t><w:br/></w:r>
    p.add_run("c ")
    p.add_run("d").bold = True
    p.add_run("\te f")                                            # python-docx writes the tab as <w:tab/>
    hint = d.add_paragraph().add_run("g h")._r                    # where Word last broke the page: still text
    hint.insert(0, hint.makeelement(docx.oxml.ns.qn("w:lastRenderedPageBreak"), {}))
    d.save(str(tmp_path / "a.docx"))
    asked: list[str] = []

    def record(texts: list[str], fmt: str) -> list[str]:
        asked.extend(texts)
        return upper(texts, fmt)

    translate_file(tmp_path / "a.docx", tmp_path / "b.docx", record)
    assert sorted(asked) == ["a b", 'c <span class="r1">d</span>', "e f", "g h"]
    out = docx.Document(str(tmp_path / "b.docx")).paragraphs[0]
    assert out.text == "A B\nC D\tE F"
    assert docx.Document(str(tmp_path / "b.docx")).paragraphs[1].text == "G H"
    assert [(r.text, bool(r.bold)) for r in out.runs if r.text.strip("\n\t")] == \
        [("A B", False), ("C ", False), ("D", True), ("E F", False)]

    deck = pptx.Presentation()
    box = deck.slides.add_slide(deck.slide_layouts[6]).shapes.add_textbox(0, 0, 100, 100).text_frame.paragraphs[0]
    box.add_run().text = "a b"
    box.add_line_break()
    box.add_run().text = "c d"
    deck.save(str(tmp_path / "a.pptx"))
    translate_file(tmp_path / "a.pptx", tmp_path / "b.pptx", upper)
    shape = pptx.Presentation(str(tmp_path / "b.pptx")).slides[0].shapes[0]
    assert shape.text_frame.paragraphs[0].text == "A B\x0bC D"          # python-pptx reads <a:br/> as a vertical tab

    pytest.importorskip("odf", reason="odfpy: pip install aiayn[documents]")
    from odf import opendocument, style, text

    doc = opendocument.OpenDocumentText()
    bold = style.Style(name="B", family="text")
    bold.addElement(style.TextProperties(fontweight="bold"))
    doc.automaticstyles.addElement(bold)
    para = text.P(text="a b")
    para.addElement(text.LineBreak())
    para.addText("c ")
    para.addElement(text.Span(stylename=bold, text="d"))
    para.addElement(text.Tab())
    para.addText("e ")
    para.addElement(text.Bookmark(name="x"))                      # inside a sentence: it does not cut it
    para.addText("f")
    doc.text.addElement(para)
    doc.save(str(tmp_path / "a.odt"))
    asked.clear()
    translate_file(tmp_path / "a.odt", tmp_path / "b.odt", record)
    assert sorted(asked) == ["a b", 'c <span class="r1">d</span>', "e f"]
    para = opendocument.load(str(tmp_path / "b.odt")).text.getElementsByType(text.P)[0]
    assert [(c.qname[1] if c.nodeType == c.ELEMENT_NODE else "", str(c) if c.nodeType == c.ELEMENT_NODE else c.data)
            for c in para.childNodes] == [("", "A B"), ("line-break", ""), ("", "C "), ("span", "D"), ("tab", ""),
                                          ("", "E F"), ("bookmark", "")]


def _deck(tmp_path: Path) -> tuple[Path, Any]:
    """A presentation (python-pptx): a title and content slide with a bold run and a link, a text box, a table and
    speaker notes, then a blank slide. -> its path, and the presentation."""
    pptx = pytest.importorskip("pptx", reason="python-pptx: pip install aiayn[documents]")
    from pptx.util import Inches

    deck = pptx.Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[1])                       # title and content
    slide.shapes.title.text = "a b"
    body = slide.placeholders[1].text_frame.paragraphs[0]
    body.add_run().text = "c d "
    bold = body.add_run()
    bold.text, bold.font.bold = "e f", True
    link = body.add_run()
    link.text = " g h"
    link.hyperlink.address = "https://example.org/"
    box = slide.shapes.add_textbox(Inches(1), Inches(5), Inches(3), Inches(1))
    box.text_frame.text = "i j"
    table = slide.shapes.add_table(1, 2, Inches(1), Inches(6), Inches(4), Inches(1)).table
    table.cell(0, 0).text, table.cell(0, 1).text = "a c", ""
    slide.notes_slide.notes_text_frame.text = "b d"
    deck.slides.add_slide(deck.slide_layouts[6])                               # blank
    src = tmp_path / "a.pptx"
    deck.save(str(src))
    return src, deck


def test_pptx_keeps_its_slides_shapes_and_runs(tmp_path: Path, copy_model: Path) -> None:
    """Every slide's text boxes, tables and speaker notes translated, each run keeping its formatting and a link its
    address; the layout's placeholders, the shapes' sizes and the slide count unchanged. Through the command line on
    the copy model, bold lands on its own words."""
    pptx = pytest.importorskip("pptx", reason="python-pptx: pip install aiayn[documents]")
    from pptx.util import Inches

    src, deck = _deck(tmp_path)

    assert translate_file(src, tmp_path / "b.pptx", upper) == 5           # paragraphs with text
    out = pptx.Presentation(str(tmp_path / "b.pptx"))
    s = out.slides[0]
    assert len(out.slides) == 2 and s.shapes.title.text == "A B"
    runs = s.placeholders[1].text_frame.paragraphs[0].runs
    assert [(r.text, bool(r.font.bold), r.hyperlink.address) for r in runs] == [
        ("C D ", False, None), ("E F", True, None), (" G H", False, "https://example.org/")]
    assert s.shapes[2].text_frame.text == "I J" and s.shapes[2].width == Inches(3)
    cells = s.shapes[3].table.rows[0].cells
    assert [c.text for c in cells] == ["A C", ""] and s.notes_slide.notes_text_frame.text == "B D"
    assert out.slide_layouts[1].placeholders[0].text_frame.text == deck.slide_layouts[1].placeholders[0].text_frame.text

    assert main(["translate", "--model", str(copy_model), "--engine", "torch", "--device", "cpu", "--input", str(src),
                 "--output", str(tmp_path / "c.pptx"), "--quiet"]) == 0
    p = pptx.Presentation(str(tmp_path / "c.pptx")).slides[0].placeholders[1].text_frame.paragraphs[0]
    assert p.text.split() == "c d e f g h".split()                      # the copy model: its translation is its input
    assert [r.text.strip() for r in p.runs if r.font.bold] == ["e f"]


def _book(tmp_path: Path) -> Path:
    """An EPUB (EbookLib): two chapters, a heading, bold, a line break and an entity, a stylesheet, navigation."""
    epub = pytest.importorskip("ebooklib.epub", reason="EbookLib: pip install aiayn[documents]")
    book = epub.EpubBook()
    book.set_identifier("id-1")
    book.set_title("Ein Buch")
    book.set_language("de")
    css = epub.EpubItem(uid="style", file_name="style.css", media_type="text/css", content=b"p { margin: 0 }")
    chapters = []
    for k, body in enumerate(["<h1>a b</h1><p>c d <b>e f</b> g<br/>h i</p>", "<p>j a &amp; b</p>"]):
        c = epub.EpubHtml(title=f"Kapitel {k}", file_name=f"c{k}.xhtml", lang="de")
        c.content = body
        c.add_item(css)
        book.add_item(c)
        chapters.append(c)
    book.add_item(css)
    book.toc = chapters
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = ["nav", *chapters]
    src = tmp_path / "a.epub"
    epub.write_epub(str(src), book)
    return src


def test_epub_chapters_are_translated_as_xhtml(tmp_path: Path) -> None:
    """Each chapter's body translated as HTML and written back as XHTML (an XML parser reads it: <br/> closed), its
    inline tags kept; the book's metadata, navigation and styles unchanged."""
    epub = pytest.importorskip("ebooklib.epub", reason="EbookLib: pip install aiayn[documents]")
    from lxml import etree

    src = _book(tmp_path)

    assert translate_file(src, tmp_path / "b.epub", upper) == 2
    out = epub.read_epub(str(tmp_path / "b.epub"), {"ignore_ncx": True})
    assert out.get_metadata("DC", "title")[0][0] == "Ein Buch"
    docs = {i.get_name(): etree.fromstring(i.get_content()) for i in out.get_items() if i.get_name() in ("c0.xhtml",
                                                                                                       "c1.xhtml")}
    ns = {"x": "http://www.w3.org/1999/xhtml"}
    body = docs["c0.xhtml"].find("x:body", ns)
    assert body.find("x:h1", ns).text == "A B"
    p = body.find("x:p", ns)
    assert " ".join(p.itertext()).split() == "C D E F G H I".split() and p.find("x:b", ns).text == "E F"
    assert p.find("x:br", ns) is not None
    assert "".join(docs["c1.xhtml"].find("x:body", ns).itertext()).strip() == "J A & B"
    assert out.get_item_with_id("style").get_content() == b"p { margin: 0 }"


MARKDOWN = """---
title: Ein Bericht
---
# Ein *Titel* #

Ein Mann fährt
über eine [Brücke](https://x.org "t") mit \\*Sternen\\*.

- Zwei **Kinder** spielen
- im `Sand` ![Bild](b.png)

> Ein Zitat

| Tier | Farbe |
|---|---|
| Hund | braun |

Unterstrichen
=============

```
code bleibt
```

<div>HTML bleibt</div>
"""


def test_markdown_keeps_its_blocks_front_matter_code_and_inline_marks(tmp_path: Path) -> None:
    """Each paragraph, heading, list item, quote and table cell translated on its line in its container, emphasis,
    links, images and code spans kept (markdown-it renders the output as it rendered the input, upper-cased), an
    escaped star still escaped; the front matter, the code block and the HTML block unchanged."""
    from markdown_it import MarkdownIt

    src = tmp_path / "a.md"
    src.write_text(MARKDOWN)
    assert translate_file(src, tmp_path / "b.md", upper) == 10
    out = (tmp_path / "b.md").read_text()
    assert out.splitlines()[:3] == MARKDOWN.splitlines()[:3] and out.endswith("<div>HTML bleibt</div>\n")
    assert "# EIN *TITEL* #" in out and "- ZWEI **KINDER** SPIELEN" in out and "> EIN ZITAT" in out
    assert "EIN MANN FÄHRT ÜBER EINE [BRÜCKE](https://x.org \"t\") MIT \\*STERNEN\\*." in out
    assert "| HUND | BRAUN |" in out and "```\ncode bleibt\n```" in out and "UNTERSTRICHEN\n=====" in out
    md = MarkdownIt("commonmark").enable("table")

    def upper_text(h: str) -> str:                     # the input's HTML with its text upper-cased, as upper() does
        return re.sub(r"(^|>)([^<]*)", lambda m: m.group(1) + m.group(2).upper(), h)

    body = MARKDOWN.split("---\n", 2)[2]
    want = upper_text(md.render(body)).replace("CODE BLEIBT", "code bleibt").replace("HTML BLEIBT", "HTML bleibt")
    got = md.render(out.split("---\n", 2)[2]).replace("\n", " ")
    assert " ".join(got.split()) == " ".join(want.replace("\n", " ").split())


def _odt(tmp_path: Path) -> Path:
    from odf import opendocument, style, table, text

    doc = opendocument.OpenDocumentText()
    bold = style.Style(name="B", family="text")
    bold.addElement(style.TextProperties(fontweight="bold"))
    doc.automaticstyles.addElement(bold)
    doc.text.addElement(text.H(outlinelevel=1, text="a b"))
    p = text.P(text="c d ")
    p.addElement(text.Span(stylename=bold, text="e f"))
    p.addText(" g ")
    p.addElement(text.A(href="https://example.org/", text="h i"))
    p.addElement(text.LineBreak())
    doc.text.addElement(p)
    t = table.Table(name="T")
    row = table.TableRow()
    cell = table.TableCell()
    cell.addElement(text.P(text="j a"))
    row.addElement(cell)
    t.addElement(row)
    doc.text.addElement(t)
    doc.text.addElement(text.P(text=""))
    path = tmp_path / "a.odt"
    doc.save(str(path))
    return path


def test_odt_and_odp_keep_their_structure_spans_and_links(tmp_path: Path, copy_model: Path) -> None:
    """Headings, paragraphs and table cells translated; a bold span and a link keep their style and address; a line
    break keeps its place after the text; a slide's text box translated. Through the command line on the copy model,
    bold lands on its own words."""
    pytest.importorskip("odf", reason="odfpy: pip install aiayn[documents]")
    from odf import draw, opendocument, style, teletype, text

    src = _odt(tmp_path)
    assert translate_file(src, tmp_path / "b.odt", upper) == 3
    doc = opendocument.load(str(tmp_path / "b.odt"))
    h, p, cell, empty = (doc.text.getElementsByType(text.H) + doc.text.getElementsByType(text.P))
    assert teletype.extractText(h) == "A B" and teletype.extractText(cell) == "J A"
    assert teletype.extractText(empty) == ""
    kids = [(c.qname[1] if c.nodeType == c.ELEMENT_NODE else "", teletype.extractText(c)
             if c.nodeType == c.ELEMENT_NODE else c.data) for c in p.childNodes]
    assert kids == [("", "C D "), ("span", "E F"), ("", " G "), ("a", "H I"), ("line-break", "")]
    span = p.getElementsByType(text.Span)[0]
    assert teletype.extractText(span) == "E F" and span.getAttribute("stylename") == "B"
    assert p.getElementsByType(text.A)[0].getAttribute("href") == "https://example.org/"

    deck = opendocument.OpenDocumentPresentation()
    layout = style.PageLayout(name="L")
    deck.automaticstyles.addElement(layout)
    master = style.MasterPage(name="M", pagelayoutname=layout)
    deck.masterstyles.addElement(master)
    page = draw.Page(masterpagename=master)
    frame = draw.Frame(width="10cm", height="2cm", x="1cm", y="1cm")
    box = draw.TextBox()
    box.addElement(text.P(text="b c"))
    frame.addElement(box)
    page.addElement(frame)
    deck.presentation.addElement(page)
    deck.save(str(tmp_path / "a.odp"))
    assert translate_file(tmp_path / "a.odp", tmp_path / "b.odp", upper) == 1
    slide = opendocument.load(str(tmp_path / "b.odp")).presentation.getElementsByType(draw.Frame)[0]
    assert teletype.extractText(slide.getElementsByType(text.P)[0]) == "B C" and slide.getAttribute("width") == "10cm"

    out = tmp_path / "c.odt"
    assert main(["translate", "--model", str(copy_model), "--engine", "torch", "--device", "cpu", "--input", str(src),
                 "--output", str(out), "--quiet"]) == 0
    p = opendocument.load(str(out)).text.getElementsByType(text.P)[0]
    assert teletype.extractText(p).split() == "c d e f g h i".split()   # the copy model: its translation is its input
    assert [teletype.extractText(s).strip() for s in p.getElementsByType(text.Span)] == ["e f"]


def test_text_outside_the_spans_keeps_the_main_look_even_when_a_marked_run_is_longest(tmp_path: Path) -> None:
    """The text of a paragraph's main look (the most text: here plain, in two runs) comes back in that look, though its
    longest single run is bold: in docx and in odt alike."""
    from odf import opendocument, style, teletype, text

    d = docx.Document()
    p = d.add_paragraph("a b ")
    p.add_run("c d e").bold = True
    p.add_run(" f g")
    d.save(str(tmp_path / "a.docx"))
    translate_file(tmp_path / "a.docx", tmp_path / "b.docx", upper)
    assert [(r.text, bool(r.bold)) for r in docx.Document(str(tmp_path / "b.docx")).paragraphs[0].runs] == [
        ("A B ", False), ("C D E", True), (" F G", False)]
    doc = opendocument.OpenDocumentText()
    bold = style.Style(name="B", family="text")
    bold.addElement(style.TextProperties(fontweight="bold"))
    doc.automaticstyles.addElement(bold)
    q = text.P(text="a b ")
    q.addElement(text.Span(stylename=bold, text="c d e"))
    q.addText(" f g")
    doc.text.addElement(q)
    doc.save(str(tmp_path / "a.odt"))
    translate_file(tmp_path / "a.odt", tmp_path / "b.odt", upper)
    q = opendocument.load(str(tmp_path / "b.odt")).text.getElementsByType(text.P)[0]
    assert [teletype.extractText(s) for s in q.getElementsByType(text.Span)] == ["C D E"]
    assert teletype.extractText(q) == "A B C D E F G"


def test_a_document_through_the_command_line_keeps_bold_on_its_words(tmp_path: Path, copy_model: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    src = _word(tmp_path)
    out = tmp_path / "out.docx"
    assert main(["translate", "--model", str(copy_model), "--engine", "torch", "--device", "cpu", "--input", str(src),
                 "--output", str(out), "--quiet"]) == 0
    p = docx.Document(str(out)).paragraphs[1]
    assert p.text.split() == "a b c d e f".split()                     # the copy model: its translation is its input
    assert [r.text.strip() for r in p.runs if r.bold] == ["c d"]       # bold on the words aligned with its own
    assert main(["translate", "--model", str(copy_model), "--input", str(src), "--output", str(tmp_path / "x.txt")]) == 2
    assert "a.docx: a document is written to a file of its own format: give --output NAME.docx" in \
        capsys.readouterr().err


def test_a_damaged_or_unknown_file_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "broken.docx"
    bad.write_bytes(b"not a zip")
    with pytest.raises(DocumentError, match="broken.docx cannot be read as docx"):
        translate_file(bad, tmp_path / "out.docx", upper)
    with pytest.raises(DocumentError, match=r"\.rtf is not a format"):
        translate_file(tmp_path / "a.rtf", tmp_path / "b.rtf", upper)


def _multipart(fields: dict[str, str], name: str, content: bytes) -> tuple[bytes, dict[str, str]]:
    boundary = "aiayn-test-boundary"
    parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
             for k, v in fields.items()]
    parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n'
                 "Content-Type: application/octet-stream\r\n\r\n".encode() + content + b"\r\n")
    return b"".join(parts) + f"--{boundary}--\r\n".encode(), {"Content-Type": f"multipart/form-data; boundary={boundary}"}


@pytest.fixture(scope="module")
def server(copy_model: Path) -> Iterator[Server]:
    s = Server("--no-processes", "--workers", "1", "--max-body-bytes", str(4 << 20), model=copy_model)
    yield s
    assert s.stop() == 0
    assert "Traceback" not in s.output(), s.output()[-3000:]


def test_translate_file_answers_a_url_to_the_translated_document(server: Server, tmp_path: Path,
                                                                 copy_model: Path) -> None:
    src = _word(tmp_path)
    assert main(["translate", "--model", str(copy_model), "--engine", "torch", "--device", "cpu", "--input", str(src),
                 "--output", str(tmp_path / "cli.docx"), "--quiet"]) == 0
    body, headers = _multipart({"source": "in", "target": "out"}, "Bericht (1).docx", src.read_bytes())
    status, _, answer = server.request("POST", "/translate_file", body, headers)
    assert status == 200 and re.fullmatch(r"http://127\.0\.0\.1:\d+/download_file/[0-9a-f]{32}\.Bericht__1_\.docx",
                                          answer["translatedFileUrl"]), answer
    status, got_headers, data = server.request("GET", answer["translatedFileUrl"].split(str(server.port), 1)[1])
    assert status == 200 and 'filename="Bericht__1_.docx"' in got_headers["content-disposition"]
    (tmp_path / "served.docx").write_bytes(data)
    served, cli = (docx.Document(str(tmp_path / n)) for n in ("served.docx", "cli.docx"))
    assert [[(r.text, r.bold) for r in p.runs] for p in served.paragraphs] == \
        [[(r.text, r.bold) for r in p.runs] for p in cli.paragraphs]
    for fields, name, words in (({"source": "in", "target": "out"}, "a.rtf", ".rtf is not a format"),
                                ({"source": "in", "target": "out"}, "b.docx", "b.docx cannot be read as docx"),
                                ({"source": "auto", "target": "out"}, "a.txt", "name the file's source language"),
                                ({"target": "out"}, "a.txt", "missing source parameter")):
        body, headers = _multipart(fields, name, b"not a document")
        status, _, answer = server.request("POST", "/translate_file", body, headers)
        assert status == 400 and words in answer["error"], answer
    assert server.request("GET", "/download_file/" + "0" * 32 + ".a.docx")[0] == 404
    assert server.request("GET", "/download_file/..%2Fsecret")[0] == 404


def _texts(path: Path) -> Any:
    """What a document says, read with its format's own library (to compare two translations of it)."""
    ext = path.suffix
    if ext == ".pptx":
        import pptx

        return [[r.text for r in p.runs] for slide in pptx.Presentation(str(path)).slides for shape in slide.shapes
                if shape.has_text_frame for p in shape.text_frame.paragraphs]
    if ext == ".odt":
        from odf import opendocument, teletype, text

        body = opendocument.load(str(path)).text
        return [teletype.extractText(p) for kind in (text.H, text.P) for p in body.getElementsByType(kind)]
    if ext == ".epub":
        from ebooklib import ITEM_DOCUMENT, epub

        return sorted(i.get_content() for i in epub.read_epub(str(path), {"ignore_ncx": True}).get_items_of_type(
            ITEM_DOCUMENT))
    return path.read_text(encoding="utf-8")


@pytest.mark.parametrize("ext", [".pptx", ".odt", ".epub", ".md"])
def test_every_format_through_translate_file_as_through_the_command_line(server: Server, tmp_path: Path,
                                                                       copy_model: Path, ext: str) -> None:
    """LibreTranslate's /translate_file takes each format the command line does and answers the same document (read
    back with the format's own library)."""
    src = {".pptx": lambda: _deck(tmp_path)[0], ".odt": lambda: _odt(tmp_path), ".epub": lambda: _book(tmp_path),
           ".md": lambda: (tmp_path / "a.md", (tmp_path / "a.md").write_text(MARKDOWN))[0]}[ext]()
    assert main(["translate", "--model", str(copy_model), "--engine", "torch", "--device", "cpu", "--input", str(src),
                 "--output", str(tmp_path / f"cli{ext}"), "--quiet"]) == 0
    body, headers = _multipart({"source": "in", "target": "out"}, f"a{ext}", src.read_bytes())
    status, _, answer = server.request("POST", "/translate_file", body, headers)
    assert status == 200, answer
    status, _, data = server.request("GET", answer["translatedFileUrl"].split(str(server.port), 1)[1])
    assert status == 200
    (tmp_path / f"served{ext}").write_bytes(data)
    assert _texts(tmp_path / f"served{ext}") == _texts(tmp_path / f"cli{ext}")     # (the copy model: its input)


def test_a_long_document_does_not_hold_up_translate(server: Server) -> None:
    """A request sent while a 2,000-line file is being translated is answered before the file is."""
    lines = "\n".join(_copy_lines(2000, seed=11)).encode()
    body, headers = _multipart({"source": "in", "target": "out"}, "long.txt", lines)
    done: dict[str, float] = {}
    with ThreadPoolExecutor(1) as pool:
        upload = pool.submit(lambda: (server.request("POST", "/translate_file", body, headers, timeout=600),
                                      done.setdefault("file", time.monotonic())))
        time.sleep(1.0)                                                   # the file is being translated
        status, _, answer = server.post("/translate", {"text": ["a b c"]})
        done["request"] = time.monotonic()
        (status_file, _, answer_file), _ = upload.result()
    assert status == 200 and status_file == 200, (answer, answer_file)
    assert done["request"] < done["file"]
