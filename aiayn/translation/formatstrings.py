"""Format strings as the tools that read them see them: each gettext ``*-format`` flag's grammar, its directives
found whole, and a translation checked as ``msgfmt -c`` checks it.

A catalogue entry flagged ``c-format`` is handed to ``printf`` by its program: a directive that loses a character
(``%d.%d`` -> ``%d.%Canadian``), gains one or changes its order is undefined behaviour, a crash at best. So a
directive is taken out as one token however it touches the text around it (spans.py protects it), and a
translation is written only if its directives are the source's (:func:`problems`), as gettext's ``msgfmt -c``
requires; a catalogue's writer (documents/catalogs.py) leaves an entry that fails untranslated.

The grammars (gettext's manual, "The Format String" of each language), one regular expression each, tried at every
character that can start a directive (:data:`STARTS`):

- ``c-format`` (and ``objc-format``'s ``%@``): ``%[n$][flags '-+ #0I][width|*|*m$][.prec|.*|.*m$][size hh h l ll L q
  j z Z t]conversion``, and the ``<inttypes.h>`` macros as xgettext writes them (``%<PRIuMAX>``, ``%08<PRIx64>``);
- ``python-format``: ``%[(name)][flags][width|*][.prec|*][h l L]conversion``; ``python-brace-format``: ``{}``,
  ``{0}``, ``{name.attr[key]!r:>10}``, ``{{`` and ``}}`` literal;
- ``qt-format`` and ``kde-format`` ``%1``..``%99`` (Qt's ``%L1`` too), ``qt-plural-format`` ``%n``; ``boost-format``
  ``%1%``, ``%|1$s|`` and printf's; ``csharp-format`` and ``java-format`` ``{0}``, ``{0,number}``; ``sh-format``
  ``$name``, ``${name}``; ``perl-brace-format`` ``{name}``; ``ruby-format`` ``%{name}``, ``%<name>d``;
  ``php-format``, ``perl-format``, ``java-printf-format``, ``javascript-format``, ``lua-format``, ``tcl-format``,
  ``awk-format``, ``gcc-internal-format`` (with ``%<``, ``%>``, ``%q``), ``object-pascal-format`` (``%0:s``),
  ``smalltalk-format`` and ``ycp-format`` (``%1``).

A directive *consumes* an argument unless it is a literal (``%%``, ``{{``); it is *ordered* when the argument it
consumes is the next one (``%s``, ``{}``), so that only the numbered and named ones (``%1$s``, ``%(name)s``, ``%1``,
``{0}``) may change places in a translation.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

# <inttypes.h>'s printf macros, as xgettext writes "%" PRIuMAX: %<PRIuMAX>
PRI = r"<PRI[diouxX](?:8|16|32|64|LEAST(?:8|16|32|64)|FAST(?:8|16|32|64)|MAX|PTR)>"
_C_ARG = r"(?:\*(?:[1-9]\d*\$)?|\d+)"
_C = (rf"%(?P<num>[1-9]\d*\$)?[-+ #0'I]*{_C_ARG}?(?:\.{_C_ARG}?)?"
      rf"(?:(?:hh|h|ll|l|L|q|j|z|Z|t)?[diouxXeEfFgGaAcCsSpnm]|{PRI})")
_PY = r"%(?P<num>\([^()]*\))?[-+ #0]*(?:\d+|\*)?(?:\.(?:\d+|\*)?)?[hlL]?[diouxXeEfFgGcrsa]"
_BRACE = r"\{(?P<num>[^{}!:\[.]*)(?:\.[A-Za-z_]\w*|\[[^\[\]{}]*\])*(?:![rsa])?(?::(?:[^{}]|\{[^{}]*\})*)?\}"
_PHP = r"%(?P<num>[1-9]\d*\$)?(?:[-+ 0]|'.)*\d*(?:\.\d+)?[bcdeEfFgGosuxX]"
_PERL = r"%(?P<num>[1-9]\d*\$)?[-+ #0]*v?(?:\d+|\*(?:[1-9]\d*\$)?)?(?:\.(?:\d+|\*(?:[1-9]\d*\$)?)?)?" \
        r"(?:hh|h|ll|l|q|L|V|j|z|t)?[csduoxXeEfgGbBpniDUOF]"
_JAVA_PRINTF = (r"%(?P<num>[1-9]\d*\$|<)?[-#+ 0,(]*\d*(?:\.\d+)?"
                r"(?:[tT][HIklMSLNpzZsQBbhAaCYyjmdeRTrDFc]|[bBhHsScCdoxXeEfgGaA])")
_QT = r"%(?P<num>L?[1-9]\d?)"

# flag -> (literals: what reads as a directive but is text, the grammar); every flag gettext knows that names a
# format of directives a program reads
GRAMMARS: dict[str, tuple[str, str]] = {
    "c-format": (r"%%", _C),
    "objc-format": (r"%%", _C + r"|%(?P<num2>[1-9]\d*\$)?@"),
    "gcc-internal-format": (r"%%|%<|%>|%'", r"%(?P<num>[1-9]\d*\$)?[-+ #0q]*(?:\d+|\*)?(?:\.(?:\d+|\*))?"
                                            r"(?:ll|l|w|h|z|t)?[diouxXcsspmDEFKTVHJ]"),
    "gfc-internal-format": (r"%%", r"%(?P<num>[1-9]\d*\$)?(?:l)?[dicsLC]"),
    "python-format": (r"%%", _PY),
    "python-brace-format": (r"\{\{|\}\}", _BRACE),
    "perl-format": (r"%%", _PERL),
    "perl-brace-format": (r"\{\{|\}\}", r"\{(?P<num>[A-Za-z_]\w*)\}"),
    "php-format": (r"%%", _PHP),
    "sh-format": (r"\$\$", r"\$(?:\{(?P<num>[A-Za-z_]\w*)\}|(?P<num2>[A-Za-z_]\w*))"),
    "qt-format": (r"%%", _QT),
    "qt-plural-format": (r"%%", _QT + r"|%L?n"),
    "kde-format": (r"%%", _QT),
    "kde-kuit-format": (r"%%", _QT),
    "boost-format": (r"%%", r"%(?P<num>[1-9]\d*)%|%\|[^|]*\||" + _C.replace("<num>", "<num2>")),
    "csharp-format": (r"\{\{|\}\}", r"\{(?P<num>\d+)(?:,\s*-?\d+)?(?::[^{}]*)?\}"),
    "java-format": (r"'\{'", r"\{(?P<num>\d+)(?:,\s*\w+(?:,[^{}]*)?)?\}"),
    "java-printf-format": (r"%%|%n", _JAVA_PRINTF),
    "javascript-format": (r"%%", r"%(?P<num>[1-9]\d*\$)?[-+ #0]*\d*(?:\.\d+)?[bcdoxXeEfFgGjsi]"),
    "lua-format": (r"%%", r"%[-+ #0]*\d*(?:\.\d+)?[cdiouxXeEfgGqs]"),
    "tcl-format": (r"%%", r"%(?P<num>[1-9]\d*\$)?[-+ #0]*(?:\d+|\*)?(?:\.(?:\d+|\*))?(?:h|l)?[diouxXcsfeEgG]"),
    "awk-format": (r"%%", r"%[-+ #0]*(?:\d+|\*)?(?:\.(?:\d+|\*))?[diouxXcseEfgG]"),
    "object-pascal-format": (r"%%", r"%(?:(?P<num>\d+|\*):)?-?(?:\d+|\*)?(?:\.(?:\d+|\*))?[dDuUeEfFgGnNmMsSpPxX]"),
    "ruby-format": (r"%%", r"%\{(?P<num>[A-Za-z_]\w*)\}|%<(?P<num2>[A-Za-z_]\w*)>[-+ #0]*\d*(?:\.\d+)?[a-zA-Z]|"
                           + _C.replace("<num>", "<num3>")),
    "smalltalk-format": (r"%%", r"%(?P<num>[1-9]\d?)"),
    "ycp-format": (r"%%", r"%(?P<num>[1-9])"),
}
# the characters that start a directive, per flag (a string with none of them has none)
STARTS = {flag: "{}" if flag in ("python-brace-format", "perl-brace-format", "csharp-format") else
          "{" if flag == "java-format" else "$" if flag == "sh-format" else "%" for flag in GRAMMARS}
_COMPILED = {flag: (re.compile(lit), re.compile(gram)) for flag, (lit, gram) in GRAMMARS.items()}
# a lone start character that the format reads as text, not as a broken directive: Qt's, KDE's and Smalltalk's %
# before anything but a digit, sh's $ before anything but a name, a brace that holds no argument in Perl and Java
_LENIENT = {"qt-format", "qt-plural-format", "kde-format", "kde-kuit-format", "smalltalk-format", "ycp-format",
            "sh-format", "perl-brace-format", "java-format", "boost-format"}


@dataclass(frozen=True)
class Directive:
    """One directive of a format string: where it stands, as written, and the argument it takes (``arg``: its
    number or name as written, "" for the next one; None for a literal such as ``%%``)."""

    start: int
    end: int
    text: str
    arg: str | None

    @property
    def ordered(self) -> bool:
        """Whether its argument is the next one, so that its place among the ordered ones is its meaning."""
        return self.arg == ""


class FormatError(ValueError):
    """A string that its format's reader would not accept (a ``%`` that starts no directive in a C string)."""


def flags() -> tuple[str, ...]:
    """Every format flag whose grammar is known."""
    return tuple(GRAMMARS)


def directives(text: str, flag: str, strict: bool = False) -> list[Directive]:
    """``text``'s directives under ``flag``'s grammar, in order, literals (``%%``) included. ``strict``: a start
    character that starts no directive (a lone ``%`` in a C string) raises :class:`FormatError`, as the format's
    reader would refuse it; otherwise it is text."""
    literal, grammar = _COMPILED[flag]
    starts = STARTS[flag]
    out: list[Directive] = []
    at = 0
    while at < len(text):
        k = min((i for i in (text.find(c, at) for c in starts) if i >= 0), default=-1)
        if k < 0:
            break
        m = literal.match(text, k)
        if m and m.end() > k:
            out.append(Directive(k, m.end(), m.group(0), None))
            at = m.end()
            continue
        m = grammar.match(text, k)
        if m:
            groups = m.groupdict()
            num = next((v for k, v in groups.items() if k.startswith("num") and v), "")
            out.append(Directive(k, m.end(), m.group(0), num.strip("$()") if num else ""))
            at = m.end()
            continue
        if strict and flag not in _LENIENT:
            raise FormatError(f"{text[k:k + 12]!r} at character {k + 1} is not a {flag} directive")
        at = k + 1
    return out


def problems(source: str, target: str, flag: str) -> list[str]:
    """What ``msgfmt -c`` (and a program reading the string) would find wrong with ``target`` as the translation of
    ``source`` under ``flag``, in words; none when it takes the same arguments the same way: every directive of the
    source exactly as often, the ordered ones (``%s``, ``{}``) in the source's order, no directive of its own, and
    no start character that starts none (a lone ``%``)."""
    try:
        theirs = directives(target, flag, strict=True)
    except FormatError as e:
        return [f"the translation is not a valid {flag} string: {e}"]
    mine = directives(source, flag)
    want = Counter(d.text for d in mine if d.arg is not None)
    got = Counter(d.text for d in theirs if d.arg is not None)
    out = []
    if want - got:
        out.append(f"{', '.join(sorted(want - got))} lost")
    if got - want:
        out.append(f"{', '.join(sorted(got - want))} added")
    if not out and [d.text for d in mine if d.ordered] != [d.text for d in theirs if d.ordered]:
        out.append("the directives that take the next argument (" +
                   ", ".join(d.text for d in mine if d.ordered) + ") are not in their order")
    if not out and _mixed(theirs, flag) and not _mixed(mine, flag):
        out.append("numbered and unnumbered directives mixed")
    literals = Counter(d.text for d in mine if d.arg is None)
    if not out and literals - Counter(d.text for d in theirs if d.arg is None):
        out.append(f"{', '.join(sorted(literals - Counter(d.text for d in theirs if d.arg is None)))} lost")
    return out


def _mixed(found: list[Directive], flag: str) -> bool:
    """Whether directives that take the next argument stand beside numbered ones (``%s`` and ``%1$s``; ``{}`` and
    ``{0}``, where ``{}`` and ``{name}`` may stand together), which the format's reader refuses."""
    return any(d.ordered for d in found) and any(
        d.arg and (d.arg.isdigit() or flag != "python-brace-format") for d in found)
