"""Gettext catalogues (documents/catalogs.py): every placeholder back, ``msgfmt -c`` satisfied, machine output marked
fuzzy, obsolete entries and translated ones untouched, the header and plural forms the target language's, any
charset read. The corpus file (files/app.de.po) is a German-source catalogue shaped like bleachbit's, django-allauth's
and xournalpp's."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from aiayn.cli.main import main
from aiayn.documents import catalogs
from aiayn.documents.common import Options
from aiayn.translation import formatstrings, spans

from .helpers import careless_stand_in, corpus, msgfmt, reversed_stand_in, stand_in, translated

toolkit = pytest.importorskip("translate.storage.pypo", reason="translate-toolkit: pip install aiayn[documents]")


def units(path: Path) -> dict[str, object]:
    store = toolkit.pofile.parsefile(str(path))
    return {u.source: u for u in store.units if not u.isheader()}


@pytest.mark.parametrize("translate", [stand_in, reversed_stand_in], ids=["in-order", "reversed"])
def test_every_placeholder_comes_back_and_msgfmt_accepts_the_catalogue(tmp_path: Path, translate: object) -> None:
    """Finding: 0 of 383 placeholders kept, msgfmt -c rejecting the output. Here each of {1}, %(count)s, %d, %1$s,
    %%, {email}, ${prodname}, {USER} and an HTML link comes back exactly as often as in its msgid, even when the
    translation reverses the words (printf's %d and %s then keep their order among themselves), and msgfmt -c
    passes."""
    src = corpus("app.de.po", tmp_path)
    report = translated(src, tmp_path / "en.po", translate, options=Options("de", "en"))
    assert report.spans == report.kept == 19          # (the link: its start and end tags, and a URL)
    msgfmt(tmp_path / "en.po")
    for source, u in units(tmp_path / "en.po").items():
        if u.isobsolete() or not str(u.target):
            continue
        kinds = catalogs.kinds(u, ("printf", "percent", "brace", "dollar", "tags", "url"))   # (by its flags)
        want = sorted(str(source)[s:e] for s, e, _ in spans.find(str(source), kinds) if "%%" != str(source)[s:e])
        got = sorted(str(u.target.strings[0] if u.hasplural() else u.target)[s:e] for s, e, _ in
                     spans.find(str(u.target.strings[0] if u.hasplural() else u.target), kinds))
        assert set(want) <= set(got), (source, u.target)
    out = units(tmp_path / "en.po")
    assert re.search(r"^FEHLER %1\$s IN ZEILE %2\$d$|^ZEILE IN %2\$d %1\$s FEHLER$|%1\$s.*%2\$d|%2\$d.*%1\$s",
                     str(out["Fehler %1$s in Zeile %2$d"].target))
    assert re.fullmatch(r"[^%]*%d[^%]*%s[^%]*100%%[^%]*", str(out["%d Dateien gelöscht, %s frei, 100%% fertig."].target))
    assert re.fullmatch(r"[^%]*%s[^%]*%d[^%]*", str(out["Datei %s hat %d Zeilen"].target))     # (reversed: in order)


def test_machine_output_is_fuzzy_and_the_rest_of_the_catalogue_stays(tmp_path: Path) -> None:
    """Findings: obsolete #~ entries translated, machine output not marked fuzzy, the header keeping Language: de."""
    src = corpus("app.de.po", tmp_path)
    translated(src, tmp_path / "en.po", options=Options("de", "en"))
    text = (tmp_path / "en.po").read_text(encoding="utf-8")
    assert '#~ msgid "Alte Meldung"\n#~ msgstr ""' in text and '#~ msgid "Noch eine alte %s Meldung"' in text
    out = units(tmp_path / "en.po")
    assert out["Speichern"].target == "Save" and out["Speichern"].isfuzzy()            # translated already: kept
    assert out["Abbrechen"].target == "Cancel" and not out["Abbrechen"].isfuzzy()
    new = [u for s, u in out.items() if s not in ("Speichern", "Abbrechen") and not u.isobsolete()]
    assert new and all(u.isfuzzy() for u in new)
    assert out["Datei öffnen"].getcontext() == "menu" and out["Datei öffnen"].target == "DATEI ÖFFNEN"
    assert out["Dateisystem-Fehler: {1}"].getlocations() == ["src/control.cpp:235"]
    assert "Language: en\\n" in text and "X-Generator: aiayn" in text
    assert not re.search(r"PO-Revision-Date: 2024-01-03", text)
    translated(src, tmp_path / "trusted.po", options=Options("de", "en", review=False))
    trusted = units(tmp_path / "trusted.po")
    assert not trusted["Datei öffnen"].isfuzzy() and trusted["Speichern"].isfuzzy()
    msgfmt(tmp_path / "trusted.po")


@pytest.mark.parametrize(("target", "forms"), [("fr", ["(n > 1)", 2]), ("ru", [None, 3]), ("ja", ["0", 1])])
def test_plural_forms_are_the_target_languages(tmp_path: Path, target: str, forms: list[object]) -> None:
    src = corpus("app.de.po", tmp_path)
    translated(src, tmp_path / f"{target}.po", options=Options("de", target))
    text = (tmp_path / f"{target}.po").read_text(encoding="utf-8")
    assert f"nplurals={forms[1]};" in text and (forms[0] is None or f"plural={forms[0]};" in text)
    plural = units(tmp_path / f"{target}.po")["Eine Datei"]
    assert len(plural.target.strings) == forms[1] and all("%d" in s for s in plural.target.strings[-1:])
    msgfmt(tmp_path / f"{target}.po")


def test_a_template_becomes_a_catalogue_msgfmt_accepts(tmp_path: Path) -> None:
    """xgettext's template header (charset=CHARSET, nplurals=INTEGER) replaced by real values."""
    pot = tmp_path / "app.pot"
    pot.write_text('''msgid ""
msgstr ""
"Project-Id-Version: PACKAGE VERSION\\n"
"PO-Revision-Date: YEAR-MO-DA HO:MI+ZONE\\n"
"Language: \\n"
"MIME-Version: 1.0\\n"
"Content-Type: text/plain; charset=CHARSET\\n"
"Content-Transfer-Encoding: 8bit\\n"
"Plural-Forms: nplurals=INTEGER; plural=EXPRESSION;\\n"

#, c-format
msgid "Eine Datei"
msgid_plural "%d Dateien"
msgstr[0] ""
msgstr[1] ""

msgid "Öffnen"
msgstr ""
''', encoding="utf-8")
    translated(pot, tmp_path / "en.pot", options=Options("de", "en"))
    text = (tmp_path / "en.pot").read_text(encoding="utf-8")
    assert "charset=UTF-8" in text and "nplurals=2; plural=(n != 1);" in text and 'msgstr "ÖFFNEN"' in text
    msgfmt(tmp_path / "en.pot")


def test_a_latin1_catalogue_without_a_charset_line_is_read(tmp_path: Path) -> None:
    """Finding: a latin-1 PO without a charset line was refused."""
    po = tmp_path / "old.po"
    po.write_bytes('msgid ""\nmsgstr ""\n"Language: de\\n"\n\nmsgid "Größe ändern"\nmsgstr ""\n\nmsgid "Schließen: %s"\n'
                   'msgstr ""\n'.encode("latin-1"))
    report = translated(po, tmp_path / "out.po", options=Options("de", "en"))
    assert report.encoding in ("iso8859-1", "latin-1", "cp1252", "windows-1252", "iso-8859-1", "cp1250"), report
    out = (tmp_path / "out.po").read_text(encoding="utf-8")
    assert 'msgstr "GRÖSSE ÄNDERN"' in out and "charset=UTF-8" in out and "SCHLIESSEN: %s" in out
    msgfmt(tmp_path / "out.po")


def test_a_strings_line_breaks_and_edges_stay(tmp_path: Path) -> None:
    """msgfmt -c requires a translation to begin and end with a line break where its msgid does."""
    src = corpus("app.de.po", tmp_path)
    translated(src, tmp_path / "en.po", reversed_stand_in)
    out = units(tmp_path / "en.po")
    key = next(k for k in out if str(k).startswith("Der Ordner"))
    assert str(out[key].target).count("\n") == 2 and str(out[key].target).endswith("\n")


def test_placeholders_on_the_command_line_and_through_a_real_model(tmp_path: Path, copy_model: Path) -> None:
    """Finding: `printf 'Die Datei {1} wurde gelöscht.' | aiayn translate` lost {1}. The copy model, as the command
    line runs it: a plain line keeps its {1}, %s and URL; --protect none gives them to the model, which drops them;
    a catalogue keeps every placeholder and passes msgfmt -c."""
    line = "a b {1} c d %s e https://x.org/f g\n"
    run = subprocess.run([sys.executable, "-m", "aiayn", "translate", "--model", str(copy_model), "--device", "cpu"],
                         input=line, capture_output=True, text=True, check=True)
    assert run.stdout.split() == "a b {1} c d %s e https://x.org/f g".split(), run.stdout
    assert "3 of 3 kept" in run.stderr
    bare = subprocess.run([sys.executable, "-m", "aiayn", "translate", "--model", str(copy_model), "--device", "cpu",
                           "--protect", "none"], input=line, capture_output=True, text=True, check=True)
    assert "{1}" not in bare.stdout
    po = tmp_path / "copy.po"
    po.write_text('msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n\n#, c-format\nmsgid "a b %d c d"\n'
                  'msgstr ""\n\nmsgid "e f {name} g h"\nmsgstr ""\n\n#, python-format\nmsgid "i %(n)s j a"\nmsgstr ""\n',
                  encoding="utf-8")
    assert main(["translate", "--model", str(copy_model), "--device", "cpu", "--input", str(po), "--output",
                 str(tmp_path / "out.po"), "--quiet"]) == 0
    out = units(tmp_path / "out.po")
    assert [str(out[k].target).split() for k in ("a b %d c d", "e f {name} g h", "i %(n)s j a")] == \
        [["a", "b", "%d", "c", "d"], ["e", "f", "{name}", "g", "h"], ["i", "%(n)s", "j", "a"]]
    msgfmt(tmp_path / "out.po")


C_CATALOGUE = '''msgid ""
msgstr ""
"Content-Type: text/plain; charset=UTF-8\\n"

#: src/version.c:10
#, c-format
msgid "Version %d.%d des Programms"
msgstr ""

#: src/tr.c:668
#, c-format
msgid "Bereich '%s-%s' ist verkehrt"
msgstr ""

#: src/dd.c:12
#, c-format
msgid "%s: %'d Bytes kopiert"
msgstr ""

#: src/dd.c:30
#, c-format
msgid "überspringe %<PRIuMAX> Bytes und %td Sätze"
msgstr ""

#: src/x.c:3
#, qt-format
msgid "Datei %1 hat %2 Zeilen"
msgstr ""

#: app.py:4
#, python-brace-format
msgid "Hallo {name}, {} neue"
msgstr ""
'''


def test_directives_are_taken_whole_however_they_touch_the_text(tmp_path: Path) -> None:
    """Findings: `%d.%d` came back `%d.%Canadian…`, `%s-%s` as `%s-%Waiting…`, `%'d` lost, `%<PRIuMAX>` lost its %
    and swapped places with `%td`. Each flag's grammar takes each directive whole (%'d, %<PRIuMAX>, %td, %1, {name},
    {}), directives only a few marks apart ("%d.%d", "'%s-%s'" with its quotes) as one, so that a model that drops a
    lone mark cannot split them; every directive comes back, the ordered ones in order, and msgfmt -c --use-fuzzy
    passes."""
    assert [(d.text, d.arg) for d in formatstrings.directives("%s: %'d of %<PRIuMAX> and %td, 100%%", "c-format")] == \
        [("%s", ""), ("%'d", ""), ("%<PRIuMAX>", ""), ("%td", ""), ("%%", None)]
    text = "Version %d.%d of '%s-%s'"
    assert [text[a:b] for a, b, _, _ in spans.protected(text, ("c-format",))] == ["%d.%d", "'%s-%s'"]
    po = tmp_path / "c.po"
    po.write_text(C_CATALOGUE, encoding="utf-8")
    for translate in (careless_stand_in, reversed_stand_in):
        report = translated(po, tmp_path / "out.po", translate, options=Options("de", "en"))
        assert report.left == 0, report.notes
        out = units(tmp_path / "out.po")
        for source, u in out.items():
            for flag in catalogs.formats(u):
                assert not formatstrings.problems(str(source), str(u.target), flag), (source, u.target)
        assert "%d.%d" in str(out["Version %d.%d des Programms"].target)
        assert "'%s-%s'" in str(out["Bereich '%s-%s' ist verkehrt"].target)
        assert re.search(r"%<PRIuMAX>.*%td", str(out["überspringe %<PRIuMAX> Bytes und %td Sätze"].target))
        msgfmt(tmp_path / "out.po", "--use-fuzzy")


def test_an_entry_whose_translation_would_fail_msgfmt_is_left_untranslated_and_named(tmp_path: Path) -> None:
    """Finding: 21 fatal errors under msgfmt -c --use-fuzzy, hidden by every entry being fuzzy: a reviewer who clears
    the flag ships a format string that crashes the program. Here a translation that breaks a directive (as a model
    does) is not written: its entry stays untranslated, the report names it, msgfmt -c --use-fuzzy passes, and the
    command line's summary says so."""
    def breaking(texts: list[str], fmt: str, kinds: tuple[str, ...]) -> list[str]:
        return [t.replace("%d", "%Deutsch").replace("{name}", "{Name}") for t in stand_in(texts, fmt, kinds)]

    po = tmp_path / "c.po"
    po.write_text(C_CATALOGUE, encoding="utf-8")
    report = translated(po, tmp_path / "out.po", breaking, options=Options("de", "en"))
    out = units(tmp_path / "out.po")
    assert str(out["Version %d.%d des Programms"].target) == "" and str(out["Hallo {name}, {} neue"].target) == ""
    assert str(out["Datei %1 hat %2 Zeilen"].target) == "DATEI %1 HAT %2 ZEILEN"
    assert report.left == 2 and any("src/version.c:10 left untranslated: c-format" in n for n in report.notes), \
        report.notes
    msgfmt(tmp_path / "out.po", "--use-fuzzy")


GTK = '''msgid ""
msgstr ""
"Content-Type: text/plain; charset=UTF-8\\n"

msgid "_Datei"
msgstr ""

msgid "Datei _speichern"
msgstr ""

msgid "Ö_ffnen"
msgstr ""

msgid "_Neu"
msgstr ""

msgctxt "keyboard label"
msgid "Page_Up"
msgstr ""

#, c-format
msgid "_Öffne %s"
msgstr ""

msgid "Datei_name"
msgstr ""

msgid "Tom __und__ Jerry"
msgstr ""
'''


@pytest.mark.parametrize("marker", ["_", "&"])
def test_accelerators_stay_on_a_letter_of_the_translation(tmp_path: Path, marker: str) -> None:
    """Finding: GTK's mnemonics (_File) kept 0 of 194. A catalogue whose labels mark their accelerator with _ (GTK)
    or & (KDE) has it taken out before translating and put back on a letter of the translation (a word with the
    same first letter, else the word at the same place), one for one; a doubled marker is the character itself; a
    name of several underscores (G_FILENAME_ENCODING, KP_Page_Up: 3 gtk20 entries left untranslated with the demo
    model) is no accelerator and no word: it comes back whole; msgfmt --check-accelerators agrees."""
    po = tmp_path / "gtk.po"
    names = ('msgctxt "keyboard label"\nmsgid "KP_Page_Up"\nmsgstr ""\n\n#, c-format\n'
             'msgid "Setze G_FILENAME_ENCODING: %s"\nmsgstr ""\n')   # (names of several underscores: not accelerators)
    po.write_text(GTK.replace("_", marker) if marker == "&" else GTK + "\n" + names, encoding="utf-8")
    translated(po, tmp_path / "out.po", reversed_stand_in, options=Options("de", "en"))
    out = units(tmp_path / "out.po")
    got = {str(k): str(u.target) for k, u in out.items()}
    m = marker
    assert got[f"{m}Datei"] == f"{m}DATEI" and got[f"Datei {m}speichern"] == f"{m}SPEICHERN DATEI"
    assert got[f"Ö{m}ffnen"] == f"{m}ÖFFNEN" and got[f"{m}Öffne %s"].count(m) == 1 and "%s" in got[f"{m}Öffne %s"]
    assert all(len(catalogs.accelerators(t, m)) == len(catalogs.accelerators(s, m)) for s, t in got.items()), got
    assert got[f"Tom {m}{m}und{m}{m} Jerry"].count(m * 2) == 2
    if m == "_":
        assert got["KP_Page_Up"] == "KP_Page_Up" and "G_FILENAME_ENCODING" in got["Setze G_FILENAME_ENCODING: %s"]
    msgfmt(tmp_path / "out.po", "--use-fuzzy", f"--check-accelerators={m}")


def test_an_entry_without_a_letter_is_its_own_translation(tmp_path: Path) -> None:
    """Found on coreutils, grep, sed and tar with the demo model: gnulib's quote characters (msgid "`" and "'"), "???"
    and okular's "%1:" came back empty (4 of 10,053 entries silently untranslated). A text with no letter outside its
    placeholders is not given to the model: it is its own translation, marked fuzzy like the rest."""
    po = tmp_path / "q.po"
    po.write_text('msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n\nmsgid "`"\nmsgstr ""\n\n'
                  'msgid "\'"\nmsgstr ""\n\nmsgid "???"\nmsgstr ""\n\n#, kde-format\nmsgid "%1:"\nmsgstr ""\n\n'
                  'msgid "2000"\nmsgstr ""\n', encoding="utf-8")
    translated(po, tmp_path / "out.po", careless_stand_in, options=Options("en", "de"))
    out = units(tmp_path / "out.po")
    assert {str(k): str(u.target) for k, u in out.items()} == {"`": "`", "'": "'", "???": "???", "%1:": "%1:",
                                                               "2000": "2000"}
    assert all(u.isfuzzy() for u in out.values())
    msgfmt(tmp_path / "out.po", "--use-fuzzy")
