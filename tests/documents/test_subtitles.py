"""Subtitles (documents/subtitles.py): a cue keeps its lines and its tags, timings and blocks stay, any encoding is
read. pysrt, the library SubRip users script with, reads the output back."""

from __future__ import annotations

from pathlib import Path

import pytest

from . import fidelity
from .helpers import careless_stand_in, corpus, reversed_stand_in, stand_in, translated

pysrt = pytest.importorskip("pysrt", reason="pysrt: pip install aiayn[dev]")


def test_srt_cues_keep_their_lines_tags_and_timings(tmp_path: Path) -> None:
    """Findings: 709 of 709 two-line cues flattened to one line; 79 of 79 tags (<i>, <b>, <font>, {\\an8}) lost.
    Here every two-line cue has two lines, every tag and override comes back (in the reversed translation too, on
    its words), a dialogue cue's lines are translated each on its own, timings and numbers are as they were, and the
    CRLF line ends stay."""
    src = corpus("film.srt", tmp_path)
    report = translated(src, tmp_path / "en.srt")
    assert report.spans == report.kept == 7
    cues = pysrt.open(str(tmp_path / "en.srt"), encoding="utf-8")
    assert [c.text for c in cues] == ["<i>EIN HUND RENNT\nÜBER DIE WIESE.</i>",
                                      "{\\an8}ZWEI <b>KINDER</b> SPIELEN\nIM SAND AM STRAND.",
                                      "- WO WARST DU DENN DIE GANZE ZEIT?\n- ZU HAUSE.",
                                      '<font color="#ffff00">EINE FRAU LIEST.</font>']
    before = pysrt.open(str(src), encoding="utf-8")
    assert [(c.index, str(c.start), str(c.end)) for c in cues] == [(c.index, str(c.start), str(c.end)) for c in before]
    assert (tmp_path / "en.srt").read_bytes().count(b"\r\n") == src.read_bytes().count(b"\r\n")
    translated(src, tmp_path / "rev.srt", reversed_stand_in)
    rev = [c.text for c in pysrt.open(str(tmp_path / "rev.srt"), encoding="utf-8")]
    assert rev[1].startswith("{\\an8}") and "<b>KINDER</b>" in rev[1] and rev[1].count("\n") == 1
    assert rev[0].count("\n") == 1 and rev[0].startswith("<i>") and rev[0].endswith("</i>")


@pytest.mark.parametrize("encoding", ["cp1252", "utf-16"])
def test_srt_in_cp1252_or_utf16_is_read(tmp_path: Path, encoding: str) -> None:
    """Finding: cp1252 and UTF-16 subtitles refused. They are read (the encoding reported) and written in UTF-8."""
    src = tmp_path / "alt.srt"
    src.write_bytes("1\r\n00:00:01,000 --> 00:00:02,000\r\nDer Bär läuft über die Straße.\r\n".encode(encoding))
    report = translated(src, tmp_path / "out.srt")
    assert report.encoding in ((encoding,) if encoding == "utf-16" else ("cp1252", "windows-1252", "iso8859-1",
                                                                         "latin_1", "cp1250"))
    assert (tmp_path / "out.srt").read_text(encoding="utf-8").splitlines()[2] == "DER BÄR LÄUFT ÜBER DIE STRASSE."


def test_webvtt_keeps_its_header_notes_styles_settings_and_voices(tmp_path: Path) -> None:
    src = corpus("captions.vtt", tmp_path)
    translated(src, tmp_path / "en.vtt", stand_in)
    lines = (tmp_path / "en.vtt").read_text(encoding="utf-8").split("\n")
    source = src.read_text(encoding="utf-8").split("\n")
    changed = [k for k, (a, b) in enumerate(zip(lines, source, strict=True)) if a != b]
    assert changed == [11, 12, 15]                                # the cues' text lines, nothing else
    assert lines[11].startswith("<v Anna>") and lines[12].endswith("</v>") and "<c.gelb>KINDER</c>" in lines[15]


DIALOGUE = """\ufeffWEBVTT

1
00:00:01.000 --> 00:00:03.000 align:middle line:84%
- Wo warst du?
- Zu Hause.

2
00:00:04.000 --> 00:00:06.000
-Wer ist da?
-Ich bin es, der Nachbar
von nebenan.

00:00:07.000 --> 00:00:08.000
♪ Ein Lied im Radio ♪
00:00:08.000 --> 00:00:09.500
Wenn der <00:00:08.500><c>Mond</c> <00:00:09.000>scheint
"""


@pytest.mark.parametrize("translate", [careless_stand_in, reversed_stand_in], ids=["careless", "reversed"])
def test_dialogue_dashes_markers_timestamps_timings_and_the_bom_stay(tmp_path: Path, translate: object) -> None:
    """Findings (Netflix's WebVTT, pysrt's dialogue): dialogue dashes at line starts dropped (0/162, 2/156); WebVTT's
    karaoke timestamps dropped (0/5); a cue with no blank line before the next timing line (as yt-dlp writes them)
    turned that timing line into text (4 -> 3); the BOM dropped. Here, even when the model drops a lone mark, every
    dash and music note is where it was (a speaker's second line goes with the first), every timestamp is in its
    cue, every timing line is one, and the file keeps its BOM."""
    src = tmp_path / "d.vtt"
    src.write_text(DIALOGUE, encoding="utf-8")
    translated(src, tmp_path / "out.vtt", translate)
    m = fidelity.subtitles(src, tmp_path / "out.vtt")
    assert m["cues_kept"] == m["cues"] == 4 and m["dashes_kept"] == m["dashes"] == 5, m
    assert m["timestamps_kept"] == m["timestamps"] == 2 and m["bom_kept"], m
    lines = (tmp_path / "out.vtt").read_text(encoding="utf-8-sig").split("\n")
    assert lines[4].startswith("- ") and lines[5].startswith("- ") and lines[9].startswith("-")
    assert not lines[11].startswith("-") and lines[11] and lines[14].startswith("♪ ") and lines[14].endswith(" ♪")
    assert lines[15] == "00:00:08.000 --> 00:00:09.500" and "<00:00:08.500>" in lines[16]
