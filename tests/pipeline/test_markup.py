"""HTML through translation (markup.py): well-formed output with every tag kept, over random fragments (property-based)
and broken ones; tags placed by the alignment; placeholders and verbatim elements unchanged; block structure kept;
and the real thing through the Python API, `aiayn translate --format html`, aiayn's API and LibreTranslate's."""

from __future__ import annotations

import collections
import re
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiayn import Translator
from aiayn.cli.main import main
from aiayn.translation.htmltree import VOID
from aiayn.translation.markup import join, split

from ..helpers import cli_error


def translate_html(fragments: list[str], translate: Callable[[list[str]], list[tuple[str, str, str]]]) -> list[str]:
    """markup.py's two halves around a translation: each fragment translated by ``translate(lines)``, which gives
    (translation, word alignment, each source word's links to its own best target word) of each segment's line."""
    parts, lines = split(fragments)
    return join(parts, translate(lines))


class _Strict(HTMLParser):
    """Every element closed, in order; the tags seen."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.tags: collections.Counter[str] = collections.Counter()
        self.text = ""

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        self.tags[tag] += 1
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: Any) -> None:
        self.tags[tag] += 1

    def handle_endtag(self, tag: str) -> None:
        assert self.stack and self.stack[-1] == tag, f"</{tag}> closes {self.stack}"
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.text += data

    def read(self, fragment: str) -> _Strict:
        """``fragment`` read whole: every element it opens closed (a broken input's tags are still counted)."""
        self.feed(fragment)
        self.close()
        return self


def strict(fragment: str) -> _Strict:
    p = _Strict().read(fragment)
    assert not p.stack, f"left open: {p.stack}"
    return p


def identity(lines: list[str]) -> list[tuple[str, str, str]]:
    """A 'translation' that is the line itself, each word aligned with itself."""
    return [(x, " ".join(f"{i}-{i}" for i in range(len(x.split()))), "") for x in lines]


def reverse(lines: list[str]) -> list[tuple[str, str, str]]:
    """The words in reverse order, aligned accordingly; the last source word unaligned, found the other way."""
    out = []
    for x in lines:
        n = len(x.split())
        links = " ".join(f"{i}-{n - 1 - i}" for i in range(n - 1))
        out.append((" ".join(reversed(x.split())), links, f"{n - 1}-0" if n else ""))
    return out


def test_tags_go_around_the_aligned_words() -> None:
    frag = '<p>Ein <b>roter</b> Ball, <a href="/x?a=1&amp;b=2">hier</a>.</p><ul><li>eins <i>zwei</i></li></ul>'
    # words are whitespace-separated: a tag inside one ("hier" of "hier.") covers the whole word, but the
    # punctuation after it in the source stays after it
    assert translate_html([frag], identity) == [frag]
    got = translate_html(["eins <b>zwei</b> <i>drei vier</i>"], reverse)[0]
    assert got == "<i>vier drei</i> <b>zwei</b> eins"
    assert translate_html(["a <b>b</b> c"], lambda ls: [("x y z", "0-0 2-2", "1-1")])[0] == "x <b>y</b> z"


def test_placeholders_and_verbatim_elements_come_out_unchanged() -> None:
    frag = "Hallo {name}, du hast %s neue <code>a &lt; b</code> Nachrichten {{ n }} %(x)s"
    seen: list[str] = []

    def spy(lines: list[str]) -> list[tuple[str, str, str]]:
        seen.extend(lines)
        return identity(lines)

    out = translate_html([frag], spy)[0]
    assert seen == ["Hallo, du hast neue Nachrichten"]                   # the model never sees them
    for kept in ("{name}", "%s", "<code>a &lt; b</code>", "{{ n }}", "%(x)s"):
        assert kept in out, out
    assert translate_html(["<pre>  keep\n  this </pre><script>if (a < b) {}</script>"], identity) == \
        ["<pre>  keep\n  this </pre><script>if (a < b) {}</script>"]          # script text: as it was, unescaped


@pytest.mark.parametrize("broken, repaired", [
    ("Hallo <b>Welt", "Hallo <b>Welt</b>"),
    ("<p>eins <i>zwei</p> drei", "<p>eins <i>zwei</i></p> drei"),
    ("a </b> b", "a b"),
    ("<div>x <img src=a.png alt='q\"'> y</div></span>", '<div>x <img src="a.png" alt="q&quot;"> y</div>'),
    ("<b><i>a</b></i> <!-- c --> 5 &lt; 6", "<b><i>a</i></b> <!-- c --> 5 &lt; 6"),
])
def test_broken_html_is_repaired_and_well_formed(broken: str, repaired: str) -> None:
    out = translate_html([broken], identity)[0]
    assert out == repaired
    strict(out)


WORDS = st.sampled_from(["ein", "Hund", "läuft", "über", "die", "Wiese", "{name}", "%s", "5 &lt; 6", "Ä"])
INLINE = st.sampled_from(["b", "i", "a", "span", "em", "u"])


@st.composite
def fragments(draw: Any, depth: int = 0) -> str:
    parts = []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["text", "text", "inline", "void", "block"] if depth < 3 else ["text"]))
        if kind == "text":
            parts.append(" ".join(draw(st.lists(WORDS, min_size=1, max_size=4))))
        elif kind == "inline":
            tag = draw(INLINE)
            parts.append(f'<{tag} class="c{depth}">{draw(fragments(depth + 1))}</{tag}>')
        elif kind == "void":
            parts.append('<img src="x.png">' if draw(st.booleans()) else "<br>")
        else:
            tag = draw(st.sampled_from(["p", "div", "li"]))
            parts.append(f"<{tag}>{draw(fragments(depth + 1))}</{tag}>")
    return " ".join(parts)


@settings(max_examples=150, deadline=None)
@given(frag=fragments(), order=st.sampled_from([identity, reverse]), chop=st.booleans())
def test_any_fragment_comes_out_well_formed_with_every_tag(frag: str, order: Any, chop: bool) -> None:
    """Random fragments, translated word for word or reversed, optionally with an end tag cut off (broken HTML):
    the output is well-formed, keeps every tag of the (repaired) input, and its text is the translation's."""
    if chop and "</" in frag:
        frag = frag[: frag.rindex("</")]
    out = translate_html([frag], order)[0]
    got, given_ = strict(out), _Strict().read(frag)
    assert got.tags == given_.tags, (frag, out)
    for kept in ("{name}", "%s"):
        assert out.count(kept) == frag.count(kept), (frag, out)
    plain = " ".join(re.sub(r"\{name\}|%s", " ", given_.text).split())
    if order is identity:
        assert " ".join(re.sub(r"\{name\}|%s", " ", got.text).split()) == plain


def test_a_real_model_keeps_the_markup(copier: Translator, copy_model: Path, write: Any, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    frags = ["a <b>b</b> c <i>d e</i>", "<p>j i h g</p><p><a href='#'>h</a> g f e</p>", "", "a b c d"]
    assert copier.translate(["a b c d e", "j i h g", "h g f e", "a b c d"]) == ["a b c d e", "j i h g", "h g f e",
                                                                               "a b c d"]      # it copies these
    out = copier.translate_html(frags)
    assert out == ["a <b>b</b> c <i>d e</i>", '<p>j i h g</p><p><a href="#">h</a> g f e</p>', "", "a b c d"]
    src, dst = write("in.html", "\n".join(frags) + "\n"), tmp_path / "out.html"
    assert main(["translate", "--model", str(copy_model), "--device", "cpu", "--format", "html",
                 "--input", str(src), "--output", str(dst), "--quiet"]) == 0
    assert dst.read_text(encoding="utf-8").split("\n")[:-1] == out
    assert main(["translate", "--model", str(copy_model), "--device", "cpu", "--format", "html",
                 "--alignments", "--input", str(src), "--quiet"]) != 0
    assert "--format html gives one translation per line" in cli_error(capsys.readouterr().err, "translate")


def test_a_menu_keeps_its_separators_and_no_link_comes_back_empty() -> None:
    """Findings of issue 67: 16-18 links emptied per page of the Apache manual (a menu of links the model translates
    into fewer words than it has links), its " | " separators dropped. The model is not given the separators, they
    come back where they were, and a link whose words the translation has none for keeps its own."""
    frag = '<p><a href="/a">Module</a> | <a href="/b">Direktiven</a> | <a href="/c">Glossar</a></p>'
    seen: list[str] = []

    def short(lines: list[str]) -> list[tuple[str, str, str]]:         # one word for the whole menu
        seen.extend(lines)
        return [("Modules", "0-0", "") for _ in lines]

    out = translate_html([frag], short)[0]
    assert seen == ["Module Direktiven Glossar"]
    assert out == '<p><a href="/a">Modules</a> | <a href="/b">Direktiven</a> | <a href="/c">Glossar</a></p>'


# (moved from the hardening tests: a guard issue 51's audit broke without a test failing)
def test_translate_no_elements_are_kept_out_of_the_text() -> None:
    seen: list[str] = []

    def upper(lines: list[str]) -> list[tuple[str, str, str]]:
        seen.extend(lines)
        return [(x.upper(), " ".join(f"{i}-{i}" for i in range(len(x.split()))), "") for x in lines]

    out = translate_html(['<p>Der Hund <span translate="no">Bello</span> läuft.</p>'], upper)[0]
    assert '<span translate="no">Bello</span>' in out and "BELLO" not in out, out
    assert all("Bello" not in line for line in seen), seen
