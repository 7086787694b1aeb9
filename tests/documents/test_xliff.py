"""XLIFF 1.2 and 2.0 (documents/xliff.py): inline tags back in place, machine output marked for review and never
approved, every byte outside the new targets as it was, and the output valid against OASIS's schemas. The corpus
files are shaped like Angular's (1.2, ``<x/>`` interpolations) and Symfony's (2.0) catalogues."""

from __future__ import annotations

import re
from pathlib import Path

from aiayn.documents.common import Options

from .helpers import corpus, reversed_stand_in, translated, valid, well_formed, xliff_schema

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
