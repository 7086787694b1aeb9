"""XLIFF 1.2 and 2.0 (documents/xliff.py): inline tags back in place, machine output marked for review and never
approved, every byte outside the new targets as it was, and the output valid against OASIS's schemas. The corpus
files are shaped like Angular's (1.2, ``<x/>`` interpolations) and Symfony's (2.0) catalogues."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from aiayn.documents.common import Options

from .helpers import corpus, no_worse, reversed_stand_in, translated, valid, well_formed, xliff_schema

X12 = "{urn:oasis:names:tc:xliff:document:1.2}"
X20 = "{urn:oasis:names:tc:xliff:document:2.0}"


def _targets(path: Path, ns: str, holder: str) -> dict[str, object]:
    root = well_formed(path.read_bytes())
    found = {}
    for unit in root.iter(ns + holder):
        target = unit.find(ns + "target")
        if target is not None:
            found[unit.get("id") or unit.getparent().get("id")] = target
    return found


def test_xliff12_inline_tags_states_and_bytes(tmp_path: Path) -> None:
    """Findings: 10 of 10 inline tags dropped; every new target state="translated" and its unit approved="yes"; the
    whole file re-indented. Here: every <x/>, <g> and <ph> is in its target, in the order the (reversed) translation
    put its words; new targets need review; a unit already translated, one marked translate="no" and everything
    else byte for byte as it was (the output minus its new targets is the input); valid against XLIFF 1.2."""
    from lxml import etree

    src = corpus("angular.xlf", tmp_path)
    report = translated(src, tmp_path / "en.xlf", reversed_stand_in, options=Options("de", "en"))
    assert report.spans == report.kept == 8            # 4 <x/>, a <g>, 2 <ph> and {0}
    out = (tmp_path / "en.xlf").read_text(encoding="utf-8")
    stripped = re.sub(r"\n *<target state=\"needs-review-translation\" state-qualifier=\"leveraged-mt\">.*?</target>",
                      "", out)
    assert stripped == re.sub(r"\n *<target/>", "", src.read_text(encoding="utf-8")).replace(    # (it filled that one)
        'original="ng2.template"', 'original="ng2.template" target-language="en"')
    targets = _targets(tmp_path / "en.xlf", X12, "trans-unit")
    assert set(targets) == {"introductionHeader", "greeting", "bold", "link", "done", "ph"}
    greeting = etree.tostring(targets["greeting"], encoding="unicode")
    assert greeting.count("<x ") == 2 and 'equiv-text="{{ user.name }}"' in greeting
    assert [x.get("id") for x in targets["bold"].iter(X12 + "x")] == ["START_BOLD_TEXT", "CLOSE_BOLD_TEXT"]
    assert targets["link"].find(X12 + "g").text == "ANLEITUNG"
    assert [p.text for p in targets["ph"].iter(X12 + "ph")] == ["<kbd>", "</kbd>"] and "{0}" in "".join(
        targets["ph"].itertext())
    assert targets["done"].text == "Done" and targets["done"].get("state") == "final"
    assert "approved" not in out.replace('approved="yes">\n        <source>Fertig', "")
    assert all(t.get("state") == "needs-review-translation" for k, t in targets.items() if k != "done")
    valid(xliff_schema("1.2"), tmp_path / "en.xlf")


def test_xliff12_with_nothing_to_translate_is_byte_identical(tmp_path: Path) -> None:
    src = tmp_path / "done.xlf"
    src.write_bytes(b"<?xml version='1.0' encoding='utf-8'?>\n<!-- a comment -->\n<xliff version=\"1.2\" "
                    b"xmlns=\"urn:oasis:names:tc:xliff:document:1.2\">\n\t<file source-language='de' "
                    b"target-language='en' datatype='plaintext' original='x'><body>\n\t\t<trans-unit id='a'>"
                    b"<source>Ja</source><target>Yes</target></trans-unit>\n\t</body></file>\n</xliff>\n")
    translated(src, tmp_path / "out.xlf")
    assert (tmp_path / "out.xlf").read_bytes() == src.read_bytes()


def test_xliff20_is_translated_and_valid(tmp_path: Path) -> None:
    """Finding: XLIFF 2.0 refused (3 of 3 Symfony files). Here each segment without a target gets one, after its
    source, with its <pc> and <ph/>; the segment is state="initial" (or "translated" when trusted); trgLang is
    written; an ignorable, a translated segment and the notes stay; valid against XLIFF 2.0."""
    src = corpus("symfony.xlf", tmp_path)
    translated(src, tmp_path / "en.xlf", options=Options("de", "en"))
    root = well_formed((tmp_path / "en.xlf").read_bytes())
    assert root.get("trgLang") == "en"
    segments = list(root.iter(X20 + "segment"))
    assert [s.get("state") for s in segments] == ["initial", "initial", "initial", "initial", "final"]
    targets = [s.find(X20 + "target") for s in segments]
    assert targets[0].text == "WILLKOMMEN ZURÜCK, %name%!"
    assert targets[1].find(X20 + "pc").text == "ERFOLGREICH" and targets[1].find(X20 + "pc").get("dataRefStart") == "d1"
    assert targets[2].find(X20 + "ph").get("dataRef") == "d3"
    assert targets[4].text == "Cancel"
    assert root.find(f"{X20}file/{X20}unit/{X20}ignorable/{X20}target") is None
    valid(xliff_schema("2.0"), tmp_path / "en.xlf")
    translated(src, tmp_path / "trusted.xlf", options=Options("de", "en", review=False))
    assert {s.get("state") for s in well_formed((tmp_path / "trusted.xlf").read_bytes()).iter(X20 + "segment")} == \
        {"translated", "final"}


def test_xliff_in_another_encoding_keeps_it(tmp_path: Path) -> None:
    """A file declared ISO-8859-1 stays ISO-8859-1: its new text is written in it (a character it cannot hold as a
    reference)."""
    src = tmp_path / "latin.xlf"
    src.write_bytes('<?xml version="1.0" encoding="ISO-8859-1"?>\n<xliff version="1.2" xmlns="urn:oasis:names:tc:'
                    'xliff:document:1.2"><file source-language="de" datatype="plaintext" original="x"><body>'
                    '<trans-unit id="a"><source>Größe</source></trans-unit></body></file></xliff>'.encode("latin-1"))
    translated(src, tmp_path / "out.xlf", lambda texts, fmt, kinds: ["Größe → size"] * len(texts))
    data = (tmp_path / "out.xlf").read_bytes()
    assert "Größe &#8594; size".encode("latin-1") in data
    assert well_formed(data).find(f"{X12}file/{X12}body/{X12}trans-unit/{X12}target").text == "Größe → size"


SDL = """<?xml version="1.0" encoding="utf-8"?>
<xliff xmlns:sdl="http://sdl.com/FileTypes/SdlXliff/1.0" xmlns="urn:oasis:names:tc:xliff:document:1.2" version="1.2" \
sdl:version="1.0">
  <file original="bericht.docx" datatype="x-sdlfilterframework2" source-language="de-DE" target-language="en-US">
    <body>
      <trans-unit id="a1">
        <source><g id="1">Ein Hund rennt.</g> Zwei Kinder spielen.</source>
        <seg-source><g id="1"><mrk mtype="seg" mid="1">Ein Hund rennt.</mrk></g> <mrk mtype="seg" mid="2">Zwei \
Kinder <g id="2">spielen</g>.</mrk></seg-source>
        <target><g id="1"><mrk mtype="seg" mid="1"/></g> <mrk mtype="seg" mid="2"></mrk></target>
        <sdl:seg-defs><sdl:seg id="1"/><sdl:seg id="2" conf="Draft"/></sdl:seg-defs>
      </trans-unit>
      <trans-unit id="a2">
        <source>Gesperrt.</source>
        <seg-source><mrk mtype="seg" mid="3">Gesperrt.</mrk></seg-source>
        <target><mrk mtype="seg" mid="3"/></target>
        <sdl:seg-defs><sdl:seg id="3" locked="true"/></sdl:seg-defs>
      </trans-unit>
      <trans-unit id="a3">
        <source>Schon fertig. Und neu.</source>
        <seg-source><mrk mtype="seg" mid="4">Schon fertig.</mrk> <mrk mtype="seg" mid="5">Und <x id="5"/>neu.</mrk>\
</seg-source>
        <target><mrk mtype="seg" mid="4">Done already.</mrk> <mrk mtype="seg" mid="5"/></target>
        <sdl:seg-defs><sdl:seg id="4" conf="Translated"/><sdl:seg id="5"/></sdl:seg-defs>
      </trans-unit>
      <trans-unit id="a4">
        <source>Ohne Ziel.</source>
        <seg-source><mrk mtype="seg" mid="6">Ohne <x id="6"/>Ziel.</mrk></seg-source>
      </trans-unit>
    </body>
  </file>
</xliff>
"""


def test_sdlxliff_segments_are_translated_in_their_markers(tmp_path: Path) -> None:
    """Finding: an SDLXLIFF file (Trados's empty <mrk mtype="seg"/> targets) came back byte-identical, "0 texts
    translated", exit 0. Here each empty target marker holds its segment's translation (its inline codes too), a
    translated or locked segment stays, a unit without a target gets one that mirrors its seg-source, Trados's
    record of each new segment says it is a machine draft, and the output is valid XLIFF 1.2."""
    src = tmp_path / "bericht.sdlxliff"
    src.write_text(SDL, encoding="utf-8")
    report = translated(src, tmp_path / "out.sdlxliff", reversed_stand_in, options=Options("de", "en"))
    assert report.texts == 4 and not report.notes
    root = well_formed((tmp_path / "out.sdlxliff").read_bytes())
    units = {u.get("id"): u for u in root.iter(X12 + "trans-unit")}
    segs = {m.get("mid"): "".join(m.itertext()) for u in units.values() for t in u.iter(X12 + "target")
            for m in t.iter(X12 + "mrk")}
    assert segs == {"1": "RENNT. HUND EIN", "2": "SPIELEN. KINDER ZWEI", "3": "", "4": "Done already.",
                    "5": "NEU. UND", "6": "ZIEL. OHNE"}
    assert units["a1"].find(f"{X12}target/{X12}g/{X12}mrk") is not None
    assert [x.get("id") for x in units["a4"].iter(X12 + "x")] == ["6", "6"]
    sdl = "{http://sdl.com/FileTypes/SdlXliff/1.0}"
    confs = {s.get("id"): (s.get("conf"), s.get("origin")) for s in root.iter(sdl + "seg")}
    assert confs == {"1": ("Draft", "mt"), "2": ("Draft", "mt"), "3": (None, None), "4": ("Translated", None),
                     "5": ("Draft", "mt")}
    no_worse(xliff_schema("1.2"), src, tmp_path / "out.sdlxliff")


def test_xliff20_translate_is_inherited_the_nearest_wins(tmp_path: Path) -> None:
    """Finding: a translate="yes" group inside a translate="no" file was ignored (0/3 segments)."""
    src = tmp_path / "in.xlf"
    src.write_text('<xliff xmlns="urn:oasis:names:tc:xliff:document:2.0" version="2.0" srcLang="de">'
                   '<file id="f" translate="no"><unit id="u0"><segment><source>Nein.</source></segment></unit>'
                   '<group id="g" translate="yes"><unit id="u1"><segment><source>Eins.</source></segment></unit>'
                   '<unit id="u2"><segment><source>Zwei.</source></segment></unit><unit id="u3" translate="no">'
                   '<segment><source>Drei.</source></segment></unit></group></file></xliff>', encoding="utf-8")
    translated(src, tmp_path / "out.xlf", options=Options("de", "en"))
    root = well_formed((tmp_path / "out.xlf").read_bytes())
    got = {u.get("id"): "".join(u.find(f"{X20}segment/{X20}target").itertext()) if u.find(
        f"{X20}segment/{X20}target") is not None else None for u in root.iter(X20 + "unit")}
    assert got == {"u0": None, "u1": "EINS.", "u2": "ZWEI.", "u3": None}


def test_a_file_with_nothing_to_translate_says_why_and_exits_non_zero(tmp_path: Path, copy_model: Path) -> None:
    """Finding: a file where nothing was translated answered "0 texts translated" and exit 0. Here the command
    line warns why (every unit has a target, or is translate="no", or is locked) and exits 1; memoQ's .mqxliff and
    Trados's .sdlxliff are read as XLIFF."""
    src = tmp_path / "done.mqxliff"
    src.write_text('<xliff xmlns="urn:oasis:names:tc:xliff:document:1.2" xmlns:mq="MQXliff" version="1.2"><file '
                   'source-language="de" datatype="plaintext" original="x"><body><trans-unit id="1" '
                   'mq:status="ManuallyConfirmed"><source>Ja</source><target>Yes</target></trans-unit><trans-unit '
                   'id="2" translate="no"><source>Nein</source></trans-unit></body></file></xliff>', encoding="utf-8")
    run = subprocess.run([sys.executable, "-m", "aiayn", "translate", "--model", str(copy_model), "--device", "cpu",
                          "--input", str(src), "--output", str(tmp_path / "out.mqxliff")], capture_output=True,
                         text=True)
    assert run.returncode == 1, run.stderr
    assert "no unit to translate: of its units, 1 has a target already, 1 translate=no" in run.stderr
    assert "nothing was translated" in run.stderr
