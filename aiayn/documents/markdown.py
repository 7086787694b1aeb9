"""Markdown (.md, .markdown), parsed with markdown-it-py (CommonMark, with tables and strikethrough): each paragraph,
heading, list item, quote and table cell translated where it stands, and everything else left byte for byte.

A block's inline markdown is read back to its source: each emphasis, link and inline HTML tag is a paired code
(its opening and closing markup as written: ``**``, ``[`` and ``](url "title")`` or ``][ref]``), each image, code
span, autolink and hard line break an empty one (spans.py), so they come back on the words aligned with theirs,
written exactly as they were: reference-style links and images keep their references, and the reference definitions,
front matter, code blocks and blank lines are not touched; an HTML block with text goes through markup.py as a page
does (its tags, attributes and comments kept). A paragraph written on several lines is
translated as one text and written back on as many lines (common.balance), each with its container's prefix
(``> ``, a list item's indent), no line starting as a list item or a heading would.
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

from .. import spans
from .common import Options, Texts, balance
from .plain import read

_LINK_END = re.compile(r"\](?:\((?:[^()\\]|\\.|\((?:[^()\\]|\\.)*\))*\)|\[(?:[^\]\\]|\\.)*\])?")
_TAG = re.compile(r"<(/?)([A-Za-z][\w-]*)[^>]*?(/?)>")
_LINE_START = re.compile(r"^(?:[-+*>#=|]|\d+[.)]$|\d+[.)]\s)")


class _Mismatch(Exception):
    """The inline tokens could not be found in the source (then the block goes as plain text)."""


class _Reader:
    """Inline markdown's pieces (the module's docstring), read from its source ``content`` and its tokens."""

    def __init__(self, content: str) -> None:
        self.c, self.pos = content, 0
        self.pieces: list[spans.Piece] = []
        self.opened: list[tuple[str, spans.Open]] = []
        self.breaks: list[str] = []                   # each hard line break's mark, in order

    def take(self, raw: str) -> str:
        if not self.c.startswith(raw, self.pos):
            raise _Mismatch(raw)
        self.pos += len(raw)
        return raw

    def take_re(self, pattern: re.Pattern[str]) -> str:
        m = pattern.match(self.c, self.pos)
        if m is None:
            raise _Mismatch(pattern.pattern)
        self.pos = m.end()
        return m.group(0)

    def text(self, text: str) -> None:
        """A text token: its characters found in the source (backslash escapes and entities allowed)."""
        for ch in text:
            c = self.c
            if c.startswith("\\" + ch, self.pos) and not ch.isalnum():
                self.pos += 2
            elif c.startswith("&", self.pos) and (m := re.match(r"&(?:#\d+|#[xX][0-9a-fA-F]+|\w+);", c[self.pos:])) \
                    and html.unescape(m.group(0)) == ch:
                self.pos += len(m.group(0))
            elif c.startswith(ch, self.pos):
                self.pos += 1
            else:
                raise _Mismatch(ch)
        self.pieces.append(text)

    def open(self, kind: str, raw: str) -> None:
        o = spans.Open([raw, ""])
        self.opened.append((kind, o))
        self.pieces.append(o)

    def close(self, kind: str, raw: str) -> None:
        if not self.opened or self.opened[-1][0] != kind:
            raise _Mismatch(kind)
        _, o = self.opened.pop()
        o.value[1] = raw
        self.pieces.append(spans.Close(o))


def pieces(content: str, children: list[Any]) -> tuple[list[spans.Piece], list[str]]:
    """The pieces of one inline token (its source ``content``, its ``children``), and the marks of its hard line
    breaks ("\\n" in the pieces); _Mismatch if they do not match."""
    r = _Reader(content)
    skip = False
    for t in children:
        if skip:                                      # an autolink's text and end: in its raw markup
            skip = t.type != "link_close"
            continue
        if t.type == "text":
            r.text(t.content)
        elif t.type == "softbreak":
            r.take_re(re.compile(r"[ \t]*\n[ \t]*"))
            r.pieces.append(" ")
        elif t.type == "hardbreak":                   # a line of its own (markup.py: <br>), its mark kept
            r.breaks.append(r.take_re(re.compile(r"(?: {2,}|\\)\n[ \t]*")))
            r.pieces.append("\n")
        elif t.type.endswith("_open") and t.type != "link_open":
            r.open(t.type[:-5], r.take(t.markup))
        elif t.type.endswith("_close") and t.type != "link_close":
            r.close(t.type[:-6], r.take(t.markup))
        elif t.type == "link_open" and t.markup in ("autolink", "linkify"):
            r.pieces.append(spans.Empty(r.take_re(re.compile(r"<[^>\s]*>" if t.markup == "autolink" else r"\S+"))))
            skip = True
        elif t.type == "link_open":
            r.open("link", r.take("["))
        elif t.type == "link_close":
            r.close("link", r.take_re(_LINK_END))
        elif t.type == "image":
            r.pieces.append(spans.Empty(_image(r)))
        elif t.type == "code_inline":
            r.pieces.append(spans.Empty(r.take_re(re.compile(re.escape(t.markup) + r".*?(?<!`)" + re.escape(t.markup)
                                                             + r"(?!`)", re.S))))
        elif t.type == "html_inline":
            _html(r, r.take(t.content))
        else:
            raise _Mismatch(t.type)
    if r.pos != len(r.c) or r.opened:
        raise _Mismatch("end")
    return _merged(r.pieces), r.breaks


def _image(r: _Reader) -> str:
    start = r.pos
    r.take("![")
    depth = 1
    while depth and r.pos < len(r.c):
        ch = r.c[r.pos]
        depth += (ch == "[") - (ch == "]") if r.c[r.pos - 1] != "\\" else 0
        r.pos += 1 if depth else 0
    r.take_re(_LINK_END)
    return r.c[start:r.pos]


def _html(r: _Reader, raw: str) -> None:
    """An inline HTML tag: paired with its end tag where that follows, else an empty code."""
    m = _TAG.fullmatch(raw)
    if m and not m.group(1) and not m.group(3):
        r.open("html:" + m.group(2).lower(), raw)
    elif m and m.group(1) and r.opened and r.opened[-1][0] == "html:" + m.group(2).lower():
        r.close("html:" + m.group(2).lower(), raw)
    else:
        r.pieces.append(spans.Empty(raw))


def _merged(pieces: list[spans.Piece]) -> list[spans.Piece]:
    out: list[spans.Piece] = []
    for p in pieces:
        if isinstance(p, str) and out and isinstance(out[-1], str):
            out[-1] += p
        else:
            out.append(p)
    for k, p in enumerate(out):                      # an HTML tag opened and never closed: an empty code
        if isinstance(p, spans.Open) and p.value[1] == "":
            out[k] = spans.Empty(p.value[0])
    return out


def _escape(text: str) -> str:
    """Translated text as Markdown that reads back as the same text."""
    return re.sub(r"([\\`*\[\]<]|(?<!\w)_|_(?!\w))", r"\\\1", text)


def written(pieces: list[spans.Piece], breaks: list[str] = ()) -> str:  # type: ignore[assignment]
    """Pieces written back as Markdown: codes as they were, text escaped, a line break its hard break's mark."""
    text = "".join(_escape(p) if isinstance(p, str) else spans.text([p]) for p in pieces)
    marks = iter(breaks)
    return re.sub(r" *\n *", lambda m: next(marks, "  \n").rstrip(" \t"), text)


def translate(src: Path, dst: Path, texts: Texts, options: Options) -> None:
    from markdown_it import MarkdownIt

    text = read(src, texts)
    end = "\r\n" if "\r\n" in text else "\n"
    lines = text.replace("\r\n", "\n").split("\n")
    front = 0                                              # a YAML front matter: kept as it is
    if lines and lines[0].strip() == "---":
        front = next((k + 1 for k in range(1, len(lines)) if lines[k].strip() in ("---", "...")), 0)
    md = MarkdownIt("commonmark").enable(["table", "strikethrough"])
    tokens = md.parse("\n".join(lines[front:]))
    blocks: list[tuple[int, str, list[spans.Piece], list[str]]] = []  # (first line, source, pieces, breaks)
    cells: dict[int, list[list[spans.Piece]]] = {}        # a table row's line -> its cells' pieces
    html_blocks: list[tuple[int, int, str]] = []          # (first line, end line, the block): through markup.py
    for k, t in enumerate(tokens):
        if t.type == "html_block" and t.map is not None and re.sub(r"<[^>]*>", "", t.content).strip():
            html_blocks.append((t.map[0] + front, t.map[1] + front, t.content))
        if t.type != "inline" or t.map is None or not t.content.strip():
            continue
        try:
            mine, breaks = pieces(t.content, t.children or [])
        except _Mismatch:
            mine, breaks = [t.content.replace("\n", " ")], []       # (its markup protected as tags)
        if tokens[k - 1].type in ("th_open", "td_open"):
            cells.setdefault(t.map[0] + front, []).append(mine)
        else:
            blocks.append((t.map[0] + front, t.content, mine, breaks))
    asked = [p for _, _, p, _ in blocks] + [c for row in cells.values() for c in row]
    out = iter(texts.coded(asked, (*texts.kinds, "tags")))
    dropped: set[int] = set()
    for first, content, _, breaks in blocks:
        dropped |= _put(lines, first, content, written(next(out), breaks))
    for (first, last, _), done in zip(html_blocks, texts.html([b for _, _, b in html_blocks]), strict=True):
        new = done.rstrip("\n").split("\n")
        lines[first] = "\n".join(new)                     # (one line may now hold several: joined at the end)
        dropped |= set(range(first + 1, last))
    for line, row in cells.items():
        new = [written(next(out)).replace("|", "\\|") for _ in row]
        lead = lines[line][:len(lines[line]) - len(lines[line].lstrip())]
        edge = lines[line].strip()
        lines[line] = lead + ("| " if edge.startswith("|") else "") + " | ".join(new) + (" |" if edge.endswith("|") else "")
    dst.write_bytes(end.join(x.replace("\n", end) for k, x in enumerate(lines) if k not in dropped).encode("utf-8"))


def _put(lines: list[str], first: int, content: str, translation: str) -> set[int]:
    """A block's translation written over its source lines (from ``first``), each keeping its prefix, the last its
    suffix (a heading's closing #s): between two hard line breaks as many lines as the source had there, of balanced
    width. Returns the lines left over (fewer words than lines), to drop."""
    source = content.split("\n")
    where = []
    for k, part in enumerate(source):
        line = lines[first + k]
        at = line.find(part) if part else len(line)
        if at < 0:
            m = re.match(r"\s*(?:>\s?)*\s*(?:[-+*]\s+|\d+[.)]\s+)?(?:#{1,6}\s+)?", line)
            at = len(m.group(0)) if m else 0
        where.append((line[:at], line[at + len(part):] if k == len(source) - 1 else ""))
    counts = [1]                                           # source lines between hard breaks
    for part in source[:-1]:
        if re.search(r"( {2,}|\\)$", part):
            counts.append(1)
        else:
            counts[-1] += 1
    groups = translation.split("\n")
    if len(groups) != len(counts):
        groups, counts = [" ".join(groups)], [len(source)]
    new: list[str] = []
    for group, n in zip(groups, counts, strict=True):
        mark = re.search(r"( {2,}|\\)$", group) if group is not groups[-1] else None
        body = group[:mark.start()] if mark else group
        words = body.split()
        mine = [" ".join(ws) for ws in balance(words, [len(w) for w in words], n, lambda w: not _LINE_START.match(w))]
        mine = mine or [""]
        mine[-1] += mark.group(0) if mark else ""
        new += mine
    for k, (prefix, _) in enumerate(where[:len(new)]):
        lines[first + k] = prefix + new[k] + (where[-1][1] if k == len(new) - 1 else "")
    return set(range(first + len(new), first + len(where)))
