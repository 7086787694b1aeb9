"""Plain text, encodings and the content check (documents/plain.py, encoding.py, formats.py), and the protected
spans themselves (spans.py): what a text is read as, what is refused before it is parsed, and that every span comes
back whatever the translation does to the words around it."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiayn.cli.main import main
from aiayn.documents.common import DocumentError
from aiayn.translation import formatstrings, spans

from .helpers import reversed_stand_in, stand_in, translated


def test_text_files_in_any_encoding(tmp_path: Path) -> None:
    """Each line translated, blank lines and CRLF line ends kept; UTF-16 (its BOM), cp1252 (charset-normalizer) and
    UTF-8 with a BOM read, and written in UTF-8 (the BOM kept where it was UTF-8's)."""
    for encoding, data in (("utf-16", "Ein Hund.\r\n\r\nDer Bär {1}.\r\n".encode("utf-16")),
                           ("cp1252", "Ein Hund.\r\n\r\nDer Bär {1} für Öl und Süßes.\r\n".encode("cp1252")),
                           ("utf-8-sig", "\ufeffEin Hund.\n\nDer Bär {1}.\n".encode())):
        src = tmp_path / f"{encoding}.txt"
        src.write_bytes(data)
        report = translated(src, tmp_path / f"out-{encoding}.txt")
        out = (tmp_path / f"out-{encoding}.txt").read_bytes()
        assert report.encoding in (encoding, "windows-1252", "iso8859-1", "cp1250") and report.kept == report.spans == 1
        assert out.decode("utf-8").lstrip("\ufeff").split("\r\n" if "\r\n" in data.decode(encoding) else "\n")[:3] == \
            ["EIN HUND.", "", data.decode(encoding).lstrip("\ufeff").splitlines()[2].upper().replace("{1}", "{1}")]
        assert out.startswith(b"\xef\xbb\xbf") == (encoding == "utf-8-sig")


def test_a_file_is_refused_before_parsing_when_it_is_not_its_format(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Findings: the command line translated a .docx renamed .pdf, or a UTF-16 .txt, as text lines, with exit 0. Now a
    zip renamed .pdf, or a PDF given as lines, is refused by name (exit 2), a UTF-16 .txt is translated as text, and a
    document whose bytes are not its format's (a .docx that is not a zip, an .xlf that is not XML) is refused before
    parsing."""
    pdf = tmp_path / "bericht.pdf"
    with zipfile.ZipFile(pdf, "w") as z:
        z.writestr("word/document.xml", "<w:document/>")
    assert main(["translate", "--model", "unused", "--input", str(pdf)]) == 2
    assert "bericht.pdf is not a PDF file: it is a zip archive" in capsys.readouterr().err
    for name, data, words in (("a.docx", b"%PDF-1.4 ...", "a.docx is not text: it is a PDF"),
                              ("b.docx", b"plain words", "b.docx is not a docx file: a docx is a zip archive"),
                              ("c.xlf", b"msgid \"x\"", "c.xlf is not a xliff file: it is not XML"),
                              ("d.po", b"\x00\x01\x02binary", "d.po is not text: it holds NUL bytes")):
        (tmp_path / name).write_bytes(data)
        with pytest.raises(DocumentError, match=words):
            translated(tmp_path / name, tmp_path / ("out-" + name))
    with pytest.raises(DocumentError, match=r"\.rtf is not a format"):
        translated(tmp_path / "a.rtf", tmp_path / "b.rtf")


def test_a_utf16_text_file_through_the_command_line(tmp_path: Path, copy_model: Path) -> None:
    src = tmp_path / "in.txt"
    src.write_bytes("a b c d\r\ne f g h\r\n".encode("utf-16"))
    run = subprocess.run([sys.executable, "-m", "aiayn", "translate", "--model", str(copy_model), "--device", "cpu",
                          "--input", str(src)], capture_output=True, text=True, check=True)
    assert run.stdout.split("\n")[:2] == ["a b c d", "e f g h"]


SPAN = st.sampled_from(["{1}", "{name}", "%s", "%d", "%(count)s", "%1$s", "${prodname}", "$USER", "%count%",
                        "{{ user }}", "https://example.org/a?b=1", "a.b@example.org", "{}", "%%"])
WORD = st.sampled_from(["Hund", "rennt", "über", "die", "Wiese", "(", ")", '"', ",", ".", "und"])


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.lists(st.tuples(WORD, SPAN, st.sampled_from(["", " "])), min_size=1, max_size=8))
def test_every_protected_span_comes_back_whatever_the_words_do(parts: list[tuple[str, str, str]]) -> None:
    """Property: a text of words and placeholders (glued to a mark before them or not), translated in order or
    reversed: every placeholder is in the translation as often as in the text, and those whose order is their
    meaning (%s, %d, {}) in the same order among themselves."""
    text = " ".join(w + (sep if not w.isalpha() else " ") + s for w, s, sep in parts)   # glued to marks only
    kinds = (*spans.DEFAULT, "c-format")
    for translate in (stand_in, reversed_stand_in):
        out = translate([text], "text", kinds)[0]
        kept, total = spans.kept(text, out, kinds)
        assert kept == total, (text, out)
        ordered = [text[s:e] for s, e, k in spans.find(text, kinds) if spans.ordered(k, text[s:e])]
        assert [out[s:e] for s, e, k in spans.find(out, kinds) if spans.ordered(k, out[s:e])] == ordered, (text, out)


def test_spans_find_what_each_kind_names() -> None:
    text = "Noch %(count)s Tage, %d Dateien, 100%ig, {count, plural, one {# Datei} other {# Dateien}} {{ name }} " \
           "${x} $HOME %name% <b>fett</b> {\\an8} https://x.org/a. an a.b@c.de"
    found = [text[s:e] for s, e, _ in spans.find(text, [k for k in spans.KINDS if k not in formatstrings.GRAMMARS])]
    assert found == ["%(count)s", "%d", "{count, plural, one {# Datei} other {# Dateien}}", "{{ name }}", "${x}",
                     "$HOME", "%name%", "<b>", "</b>", "{\\an8}", "https://x.org/a", "a.b@c.de"]
    line = "100%ig und %s"
    assert [line[s:e] for s, e, _ in spans.find(line, ("c-format",))] == ["%i", "%s"]
    with pytest.raises(ValueError, match="protected span kind 'nope'"):
        spans.check(["nope"])
