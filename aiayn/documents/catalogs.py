"""Gettext catalogues (.po, .pot), read and written with translate-toolkit, as Weblate and Pootle do: each entry
without a translation gets one, and the catalogue stays one that ``msgfmt -c --use-fuzzy`` accepts.

- **Placeholders as their tools read them**: an entry's ``*-format`` flags say which directives it holds
  (``c-format``, ``python-format``, ``python-brace-format``, ``qt-format``, ``kde-format`` …: formatstrings.py's
  grammars, ``%'d``, ``%<PRIuMAX>`` and ``%1$s`` whole; ``no-c-format``: none); every entry's brace, ``%name%``,
  ``$name`` and tag spans are protected too (spans.py). A string's line breaks, and the spaces at its edges, stay
  where they were (each line is translated on its own).
- **Accelerators**: a catalogue whose labels mark their mnemonic with ``_`` (GTK: ``_File``) or ``&`` (KDE, Qt:
  ``&File``) has it taken out before translating and put back on a letter of the translation (a word that starts
  with the same letter, else the word at the same place), one marker for one, as pofilter's ``accelerators`` check
  and Weblate's expect.
- **Checked as msgfmt checks**: each translation is checked against its entry's flags (formatstrings.problems:
  every directive back, the ordered ones in order, nothing added), its line breaks at the ends and its accelerators;
  one that fails is not written: its entry stays untranslated and is named in the report (Report.notes), so no
  reviewer can clear a ``fuzzy`` flag on a string that would crash its program.
- **Machine output is marked**: each new translation is ``fuzzy`` (``Options.review`` off: trusted), and the
  header says who made it and for which language: ``Language``, ``PO-Revision-Date``, ``X-Generator``; a
  template's ``charset=CHARSET`` becomes UTF-8.
- **Plural forms** are the target language's (translate-toolkit's table of gettext's ``Plural-Forms``): as many
  ``msgstr[n]`` as it has, the singular's translation first, and the header's ``Plural-Forms`` set to match where no
  plural entry was translated before.
- **Untouched**: entries already translated (fuzzy ones too), obsolete ``#~`` entries, comments, locations, contexts,
  the order. The file is read in the charset its header names (one without: UTF-8, else charset-normalizer's
  guess, the latin-1 catalogue of an old project) and written in UTF-8.
"""

from __future__ import annotations

import datetime
import io
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .. import __version__
from ..translation import formatstrings, spans
from .common import DocumentError, Options, Texts, confidence, needs_review, scored_like
from .encoding import decode


def _charset(data: bytes) -> str | None:
    m = re.search(rb"charset=([A-Za-z0-9._-]+)", data[:8192])
    name = m.group(1).decode("ascii") if m else None
    return None if name in (None, "CHARSET") else name


def _utf8(data: bytes, texts: Texts) -> bytes:
    """The catalogue as UTF-8 bytes, its header's charset saying so (encoding.py reads it)."""
    text, texts.report.encoding = decode(data, texts.name, _charset(data))
    if re.search(r"charset=[A-Za-z0-9._-]+", text[:8192]):
        text = re.sub(r"charset=[A-Za-z0-9._-]+", "charset=UTF-8", text, count=1)
    return text.encode("utf-8")


def flags(unit: Any) -> set[str]:
    """An entry's flags (``#, fuzzy, c-format``)."""
    return {f.strip() for line in unit.typecomments for f in line.lstrip("#,").split(",") if f.strip()}


def formats(unit: Any) -> list[str]:
    """The formats an entry's strings are read in (its ``*-format`` flags whose grammar is known), which msgfmt -c
    checks; ``possible-*-format`` ones are protected (:func:`kinds`) but not checked, as msgfmt does not."""
    return sorted(f for f in flags(unit) if f in formatstrings.GRAMMARS)


def kinds(unit: Any, base: tuple[str, ...]) -> tuple[str, ...]:
    """The protected spans of one entry's strings, by its flags (the module's docstring): its formats' directives in
    place of plain text's printf guess."""
    mine = flags(unit)
    read = sorted({f.removeprefix("possible-") for f in mine} & set(formatstrings.GRAMMARS))
    out = [k for k in base if not (k == "printf" and (read or any(f.startswith("no-") and f.endswith("-format")
                                                                    for f in mine)))]
    return tuple(out + [f for f in read if f not in out])


def _empty(unit: Any) -> bool:
    target = unit.target
    strings = target.strings if hasattr(target, "strings") else [target]
    return not any(str(s or "").strip() for s in strings)


def plural_forms(code: str | None) -> tuple[int, str] | None:
    """(nplurals, plural expression) of a language (gettext's table, as translate-toolkit has it), or None."""
    from translate.lang import data

    for key in (code, (code or "").replace("-", "_"), (code or "").split("-")[0].split("_")[0]):
        if key and key in data.languages:
            _, n, expression = data.languages[key]
            return n, expression
    return None


def _lines(text: str) -> list[tuple[str, str, str]]:
    """A string's lines, each as (its leading space, its text, its trailing space and line break)."""
    out = []
    for line in re.split(r"(?<=\n)", text):
        core = line.strip()
        lead = line[:len(line) - len(line.lstrip())]
        out.append((lead, core, line[len(lead) + len(core):]))
    return out


def translate(src: Path, dst: Path, texts: Texts, options: Options) -> None:
    from translate.misc.multistring import multistring
    from translate.storage import pypo

    try:
        store = pypo.pofile(io.BytesIO(_utf8(texts.read(src), texts)))
    except (ValueError, SyntaxError) as e:
        raise DocumentError(f"{texts.name} is not a readable PO file: {e}") from None
    todo = [u for u in store.units if not u.isheader() and not u.isobsolete() and u.source and _empty(u)]
    forms = plural_forms(options.target)
    translated_plural = any(u.hasplural() and not _empty(u) for u in store.units if not u.isheader())
    n = forms[0] if forms else _header_plurals(store)
    marker = accelerator_marker([str(u.source) for u in todo])
    asks: list[tuple[int, str, tuple[str, ...]]] = []                  # (unit, text, kinds)
    marks: list[tuple[str, float] | None] = []                         # per ask, its accelerator (letter, place)
    strings: list[list[str]] = []                                       # per unit, its source strings
    for k, u in enumerate(todo):
        mine = [str(s) for s in u.source.strings] if u.hasplural() else [str(u.source)]
        strings.append(mine)
        protect = (*kinds(u, texts.kinds), "identifier") if marker == "_" else kinds(u, texts.kinds)
        for s in mine:
            for _, core, _ in _lines(s):
                if core:
                    bare, mark = unmark(core, marker, protect)
                    asks.append((k, bare, protect))
                    marks.append(mark)
    done_asks = [text if mark is None else scored_like(text, remark(text, mark, marker or "", kinds_))
                 for text, mark, (_, _, kinds_) in zip(_translate_grouped(texts, asks), marks, asks, strict=True)]
    sure: dict[int, list[float | None]] = {}
    for (k, _, _), text in zip(asks, done_asks, strict=True):
        sure.setdefault(k, []).append(confidence(text))
    out = iter(done_asks)
    for k, u in enumerate(todo):
        done = [_put_back(s, out) for s in strings[k]]
        pairs = list(zip(strings[k], done, strict=True))
        if u.hasplural():
            pairs = [pairs[-1]] if n == 1 else [pairs[0], *[pairs[-1]] * (n - 1)]
        wrong = problems(u, pairs, marker)
        if wrong:
            texts.report.notes.append(f"{_where(u)} left untranslated: {'; '.join(wrong)}")
            texts.report.left += 1
            continue
        u.target = multistring([t for _, t in pairs]) if u.hasplural() else pairs[0][1]
        known = [c for c in sure.get(k, []) if c is not None]
        if needs_review(options, min(known) if known else None):
            u.markfuzzy(True)
    if not todo:
        texts.report.notes.append("every entry has a translation already (fuzzy ones too)")
    if texts.report.left < len(todo):
        _header(store, options, forms if not translated_plural else None)
    dst.write_bytes(bytes(store))


def problems(unit: Any, pairs: list[tuple[str, str]], marker: str | None) -> list[str]:
    """What msgfmt -c (and pofilter's accelerators check) would find wrong with an entry's translations, each
    (source string, its translation): every format flag's directives (formatstrings.problems), a line break that one
    begins or ends with and the other not, the accelerators."""
    out: list[str] = []
    for source, target in pairs:
        for flag in formats(unit):
            out += [f"{flag}: {p}" for p in formatstrings.problems(source, target, flag)]
        for edge, name in ((str.startswith, "begins"), (str.endswith, "ends")):
            if edge(source, "\n") != edge(target, "\n"):
                out.append(f"the msgid {name} with a line break and the translation does not, or the other way")
        if marker and len(accelerators(source, marker)) != len(accelerators(target, marker)):
            out.append(f"accelerator '{marker}': {len(accelerators(source, marker))} in the source, "
                       f"{len(accelerators(target, marker))} in the translation")
    return list(dict.fromkeys(out))


def _where(unit: Any) -> str:
    """An entry as a reviewer finds it: its first location, else its msgid's start."""
    locations = unit.getlocations()
    return locations[0] if locations else repr(str(unit.source)[:40])


# --- accelerators ---------------------------------------------------------------------------------------------------

# a marker that starts a word ("_File", "Save _As", "&New Tab"): three such labels make a catalogue one that marks
# its accelerators with it (a marker inside a word, "Page_Up", "ai_flags", is as likely a name)
_LEADING = {m: re.compile(r"(?:^|(?<=[\s(\[\"'/]))" + re.escape(m) + r"[^\W_]") for m in ("_", "&")}


def accelerator_marker(sources: list[str]) -> str | None:
    """The marker a catalogue's labels put before their accelerator, "_" (GTK) or "&" (KDE, Qt), by how many
    labels start a word with it (three at least); None for a catalogue without."""
    counts = {m: sum(1 for s in sources if len(s) <= 100 and pattern.search(s)) for m, pattern in _LEADING.items()}
    best = max(counts, key=lambda m: counts[m])
    return best if counts[best] >= 3 else None


def accelerators(text: str, marker: str, kinds: tuple[str, ...] = spans.DEFAULT) -> list[int]:
    """Where ``marker`` marks an accelerator in ``text``: before a letter or digit, not doubled (``__``, ``&&``: the
    character itself), not an entity (``&amp;``) and not inside a protected span (a URL's ``&``, a name's ``_``:
    ``G_FILENAME_ENCODING``, spans.IDENTIFIER)."""
    taken = spans.find(text, (*kinds, "url", *(("identifier",) if marker == "_" else ())))
    out, at = [], 0
    while (i := text.find(marker, at)) >= 0:
        after = text[i + 1:i + 2]
        at = i + 2 if after == marker else i + 1
        if after.isalnum() and after != marker and not any(s <= i < e for s, e, _ in taken) and not (
                marker == "&" and re.match(r"&#?\w+;", text[i:])):
            out.append(i)
    return out


def unmark(text: str, marker: str | None, kinds: tuple[str, ...]) -> tuple[str, tuple[str, float] | None]:
    """``text`` without its one accelerator marker (the model never saw one), and what :func:`remark` needs to put
    it back: the letter it marked and the place of its word among the words (0 first, 1 last); a text with none, or
    more than one, as it is."""
    found = accelerators(text, marker, kinds) if marker else []
    if len(found) != 1:
        return text, None
    i = found[0]
    words = len(text.split())
    place = len(text[:i].split()) if text[i - 1:i].isspace() or i == 0 else len(text[:i].split()) - 1
    return text[:i] + text[i + 1:], (text[i + 1].lower(), place / max(1, words - 1))


def remark(text: str, mark: tuple[str, float], marker: str, kinds: tuple[str, ...]) -> str:
    """A translation with the accelerator marker put back (:func:`unmark`): before the first word that starts with
    the letter it marked, else before the first letter of the word at the same place; a translation with no letter
    outside its protected spans stays without (and fails the check)."""
    if not marker:
        return text
    letter, place = mark
    taken = spans.find(text, (*kinds, "url"))
    starts = [m.start() + len(m.group(1)) for m in re.finditer(r"(?:^|(?<=\s))(\W*)[^\W_]", text)
              if not any(s <= m.start() + len(m.group(1)) < e for s, e, _ in taken)]
    if not starts:
        return text
    same = [i for i in starts if text[i].lower() == letter]
    i = same[0] if same else starts[round(place * (len(starts) - 1))]
    return text[:i] + marker + text[i:]


def _translate_grouped(texts: Texts, asks: list[tuple[int, str, tuple[str, ...]]]) -> list[str]:
    """Each ask's translation, one call per set of protected kinds (so each text has its own)."""
    out = [""] * len(asks)
    for group in dict.fromkeys(kinds for _, _, kinds in asks):
        which = [i for i, (_, _, kinds) in enumerate(asks) if kinds == group]
        for i, text in zip(which, texts([asks[i][1] for i in which], group), strict=True):
            out[i] = text
    return out


def _put_back(source: str, out: Iterator[str]) -> str:
    """A source string's translation: its lines' (the next of ``out`` each), their edges as they were."""
    return "".join(lead + (next(out) if core else "") + trail for lead, core, trail in _lines(source))


def _header_plurals(store: Any) -> int:
    found = re.search(r"nplurals\s*=\s*(\d+)", str(store.header().target if store.header() else ""))
    return max(1, int(found.group(1))) if found else 2


def _header(store: Any, options: Options, forms: tuple[int, str] | None) -> None:
    """The header made to say who translated, when, into which language (and its plural forms)."""
    if store.header() is None:
        store.init_headers(charset="UTF-8", encoding="8bit")
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M+0000")
    fields: dict[str, str] = {"PO_Revision_Date": now, "X_Generator": f"aiayn {__version__}"}
    if options.target:
        fields["Language"] = options.target
    header = str(store.header().target)
    if "Content-Type" not in header or "charset=CHARSET" in header:
        fields["Content_Type"] = "text/plain; charset=UTF-8"
    if "Content-Transfer-Encoding" not in header or "ENCODING" in header:
        fields["Content_Transfer_Encoding"] = "8bit"
    store.updateheader(add=True, **fields)
    if forms is not None:
        store.updateheaderplural(*forms)
    elif "INTEGER" in header or "Plural-Forms" not in header:
        store.updateheaderplural(2, "(n != 1)")
