"""Gettext catalogues (.po, .pot), read and written with translate-toolkit, as Weblate and Pootle do: each entry
without a translation gets one, and the catalogue stays one that ``msgfmt -c`` accepts.

- **Placeholders first**: an entry's flags say which it holds (``c-format``, ``python-format``, ``qt-format`` …:
  printf directives wherever they stand; ``no-c-format``: none); every entry's brace, ``%name%``, ``$name`` and tag
  spans are protected too (spans.py), so a program never loads a translation that lost one. A string's line breaks,
  and the spaces at its edges, stay where they were (each line is translated on its own).
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
from .common import DocumentError, Options, Texts, confidence, needs_review
from .encoding import decode

# the flags that say a string's printf directives are meant as such (gettext's *-format flags)
PRINTF_FLAGS = {"c-format", "objc-format", "python-format", "php-format", "perl-format", "sh-format",
                "gcc-internal-format", "gfc-internal-format", "qt-format", "qt-plural-format", "kde-format",
                "boost-format", "awk-format", "object-pascal-format", "smalltalk-format", "lua-format",
                "java-printf-format", "ruby-format", "tcl-format", "perl-brace-format"}


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


def kinds(unit: Any, base: tuple[str, ...]) -> tuple[str, ...]:
    """The protected spans of one entry's strings, by its flags (the module's docstring)."""
    flags = {f.strip() for line in unit.typecomments for f in line.lstrip("#,").split(",")}
    out = list(base)
    if flags & PRINTF_FLAGS:
        out.append("c-format")
    if any(f.startswith("no-") and f[3:] in PRINTF_FLAGS for f in flags) or "no-c-format" in flags:
        out = [k for k in out if k not in ("printf", "c-format")]
    return tuple(out)


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
    asks: list[tuple[int, str, tuple[str, ...]]] = []                  # (unit, text, kinds)
    strings: list[list[str]] = []                                       # per unit, its source strings
    for k, u in enumerate(todo):
        mine = [str(s) for s in u.source.strings] if u.hasplural() else [str(u.source)]
        strings.append(mine)
        for s in mine:
            asks += [(k, core, kinds(u, texts.kinds)) for _, core, _ in _lines(s) if core]
    done_asks = _translate_grouped(texts, asks)
    sure: dict[int, list[float | None]] = {}
    for (k, _, _), text in zip(asks, done_asks, strict=True):
        sure.setdefault(k, []).append(confidence(text))
    out = iter(done_asks)
    for k, u in enumerate(todo):
        done = [_put_back(s, out) for s in strings[k]]
        if u.hasplural():
            singular, plural = done[0], done[-1]
            u.target = multistring([plural] if n == 1 else [singular, *[plural] * (n - 1)])
        else:
            u.target = done[0]
        known = [c for c in sure.get(k, []) if c is not None]
        if needs_review(options, min(known) if known else None):
            u.markfuzzy(True)
    if todo:
        _header(store, options, forms if not translated_plural else None)
    dst.write_bytes(bytes(store))


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
