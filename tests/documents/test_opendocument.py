"""OpenDocument (documents/opendocument.py): paragraphs translated wherever they are (tables, frames, slides, notes,
comments, headers), spans and links on their words, spaces (``text:s``) kept, every byte around the text and every
other entry of the archive as it was; a damaged part refused by name, nothing printed. odfpy reads the output."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from aiayn.cli.main import main
from aiayn.documents.common import DocumentError

from .helpers import reversed_stand_in, stand_in, translated

odf = pytest.importorskip("odf", reason="odfpy: pip install aiayn[dev]")


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
    from odf import draw, opendocument, style, teletype, text

    src = _odt(tmp_path)
    assert translated(src, tmp_path / "b.odt").texts == 3
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
    assert translated(tmp_path / "a.odp", tmp_path / "b.odp").texts == 1
    slide = opendocument.load(str(tmp_path / "b.odp")).presentation.getElementsByType(draw.Frame)[0]
    assert teletype.extractText(slide.getElementsByType(text.P)[0]) == "B C" and slide.getAttribute("width") == "10cm"

    out = tmp_path / "c.odt"
    assert main(["translate", "--model", str(copy_model), "--engine", "torch", "--device", "cpu", "--input", str(src),
                 "--output", str(out), "--quiet"]) == 0
    p = opendocument.load(str(out)).text.getElementsByType(text.P)[0]
    assert teletype.extractText(p).split() == "c d e f g h i".split()   # the copy model: its translation is its input
    assert [teletype.extractText(s).strip() for s in p.getElementsByType(text.Span)] == ["e f"]


def _rich(tmp_path: Path) -> Path:
    """A text document with what real ones hold: runs of spaces (text:s) at a paragraph's start and inside it, a
    footnote and a comment inside a sentence, a frame with a text box, a bookmark, a page-number field, a header."""
    from odf import draw, office, opendocument, style, text
    from odf.element import Element

    doc = opendocument.OpenDocumentText()
    p = text.P()
    p.addElement(text.S(c=4))
    p.addText("Ein Hund")
    note = text.Note(id="n1", noteclass="footnote")
    note.addElement(text.NoteCitation(text="1"))
    body = text.NoteBody()
    body.addElement(text.P(text="Eine Fußnote."))
    note.addElement(body)
    p.addElement(note)
    p.addText(" rennt")
    p.addElement(text.S(c=2))
    p.addText("über die Wiese.")
    doc.text.addElement(p)
    q = text.P(text="Zwei Kinder ")
    comment = office.Annotation()
    comment.addElement(text.P(text="Ein Kommentar."))
    q.addElement(comment)
    q.addText("spielen im Sand.")
    q.addElement(text.Bookmark(name="b"))
    doc.text.addElement(q)
    frame = draw.Frame(width="5cm", height="2cm", anchortype="paragraph")
    box = draw.TextBox()
    box.addElement(text.P(text="Text im Rahmen."))
    frame.addElement(box)
    r = text.P(text="Vor dem Rahmen ")
    r.addElement(frame)
    doc.text.addElement(r)
    layout = style.PageLayout(name="L")
    doc.automaticstyles.addElement(layout)
    master = style.MasterPage(name="Standard", pagelayoutname=layout)
    header = style.Header()
    h = text.P(text="Seite ")
    h.addElement(text.PageNumber(selectpage="current", text="1"))
    header.addElement(h)
    master.addElement(header)
    doc.masterstyles.addElement(master)
    _ = Element
    path = tmp_path / "rich.odt"
    doc.save(str(path))
    return path


@pytest.mark.parametrize("translate", [stand_in, reversed_stand_in], ids=["in-order", "reversed"])
def test_odt_spaces_notes_comments_frames_and_headers(tmp_path: Path, translate: object) -> None:
    """Finding: runs of spaces (text:s) lost. Here a paragraph's leading text:s stays first and the one inside stays
    (moving with its words); the footnote's, the comment's and the frame's paragraphs are translated, each inside the
    paragraph it was in; the page-number field and the bookmark stay; the header is translated; every entry of the
    archive but content.xml and styles.xml is byte for byte the same."""
    from odf import opendocument, teletype, text

    src = _rich(tmp_path)
    translated(src, tmp_path / "out.odt", translate)
    doc = opendocument.load(str(tmp_path / "out.odt"))
    first = doc.text.getElementsByType(text.P)[0]
    assert first.childNodes[0].qname[1] == "s" and first.childNodes[0].getAttribute("c") == "4"
    assert len([c for c in first.childNodes if c.nodeType == c.ELEMENT_NODE and c.qname[1] == "s"]) == 2
    notes = first.getElementsByType(text.Note)
    assert len(notes) == 1 and teletype.extractText(notes[0].getElementsByType(text.NoteBody)[0]).split() in (
        ["EINE", "FUSSNOTE."], ["FUSSNOTE.", "EINE"])
    words = " ".join(teletype.extractText(c) if c.nodeType == c.ELEMENT_NODE and c.qname[1] not in ("note", "s")
                     else c.data if c.nodeType == c.TEXT_NODE else "" for c in first.childNodes).split()
    assert sorted(words) == sorted("EIN HUND RENNT ÜBER DIE WIESE.".split())
    second = doc.text.getElementsByType(text.P)
    texts = [teletype.extractText(p) for p in second]
    assert any("KOMMENTAR." in t for t in texts) and any("RAHMEN." in t for t in texts)
    with zipfile.ZipFile(tmp_path / "out.odt") as z:
        styles = z.read("styles.xml").decode()
        assert "SEITE" in styles and "<text:page-number" in styles and ">1</text:page-number>" in styles
        content = z.read("content.xml").decode()
        assert '<text:bookmark text:name="b"/>' in content
    with zipfile.ZipFile(src) as a, zipfile.ZipFile(tmp_path / "out.odt") as b:
        assert a.namelist() == b.namelist()
        for name in a.namelist():
            if name not in ("content.xml", "styles.xml"):
                assert a.read(name) == b.read(name), name


def test_a_damaged_odt_is_refused_by_name_and_prints_nothing(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """Finding: an ODT whose content.xml was cut in half answered 200 with half its paragraphs, and odfpy printed the
    whole content.xml to stdout. Here it is a DocumentError naming the part and the line, and nothing is printed."""
    src = _rich(tmp_path)
    with zipfile.ZipFile(src) as a, zipfile.ZipFile(tmp_path / "cut.odt", "w") as b:
        for info in a.infolist():
            data = a.read(info)
            b.writestr(info, data[: len(data) // 2] if info.filename == "content.xml" else data)
    with pytest.raises(DocumentError, match=r"cut\.odt: content\.xml is not well-formed XML: line \d+, column \d+"):
        translated(tmp_path / "cut.odt", tmp_path / "out.odt")
    out, err = capfd.readouterr()
    assert out == "" and err == "" and not (tmp_path / "out.odt").exists()
