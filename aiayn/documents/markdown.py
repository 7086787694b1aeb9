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

from ..translation import spans
from ..translation.htmltree import VOID
from .common import Options, Texts, balance
from .plain import read

_LINK_END = re.compile(r"\](?:\((?:[^()\\]|\\.|\((?:[^()\\]|\\.)*\))*\)|\[(?:[^\]\\]|\\.)*\])?")
_TAG = re.compile(r"<(/?)([A-Za-z][\w-]*)[^>]*?(/?)>")
_LINE_START = re.compile(r"^(?:[-+*>#=|]|\d+[.)]$|\d+[.)]\s)")
# what starts a block when a paragraph's first line starts with it: a list item, a quote, a heading
_BLOCK_START = re.compile(r"^(?:[-+*](?:\s|$)|>|#{1,6}(?:\s|$)|\d{1,9}[.)](?:\s|$))")


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
    links: list[int] = []                             # where each open link's [ stands
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
            links.append(r.pos)
            r.open("link", r.take("["))
        elif t.type == "link_close":
            start, label_end = links.pop(), r.pos
            end = r.take_re(_LINK_END)
            if end in ("]", "][]"):                 # a shortcut or collapsed reference: named by its text,
                end = "][" + r.c[start + 1:label_end] + "]"  # which the translation changes: a full one
            r.close("link", end)
        elif t.type == "image":
            r.pieces.append(spans.Empty(_image(r)))
        elif t.type == "code_inline":
            r.pieces.append(spans.Empty(r.take_re(re.compile(re.escape(t.markup) + r".*?(?<!`)" + re.escape(t.markup)
                                                             + r"(?!`)", re.S))))
        elif t.type == "html_inline" and re.fullmatch(r"<br\s*/?>", t.content, re.I):
            r.breaks.append(r.take(t.content))          # (a line break, as a hard break is: not glue between words)
            r.pieces.append("\n")
        elif t.type == "html_inline":
            _html(r, r.take(t.content))
        else:
            raise _Mismatch(t.type)
    if r.pos != len(r.c) or any(not kind.startswith("html:") for kind, _ in r.opened):
        raise _Mismatch("end")                        # (an HTML tag left open: _merged makes it an empty code)
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
    if m and not m.group(1) and not m.group(3) and m.group(2).lower() not in VOID:
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


# a space inside a code (a link's title, an image's alt text) while a block's lines are balanced: no line ends there
_NBSP = "\ue000"


def written(pieces: list[spans.Piece], breaks: list[str] = (), unbroken: bool = False) -> str:  # type: ignore[assignment]
    """Pieces written back as Markdown: codes as they were (``unbroken``: their spaces :data:`_NBSP`, for _put),
    text escaped, a line break its hard break's mark."""
    def code(p: spans.Piece) -> str:
        raw = spans.text([p])
        return raw.replace(" ", _NBSP).replace("\n", _NBSP) if unbroken else raw

    text = "".join(_escape(p) if isinstance(p, str) else code(p) for p in pieces)
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
    blocks, cells, html_blocks = _blocks(md.parse("\n".join(lines[front:])), front, texts)
    asked = [p for _, _, p, _ in blocks] + [c for row in cells.values() for c in row]
    out = iter(texts.coded(asked, (*texts.kinds, "tags")))
    dropped: set[int] = set()
    for first, content, source, breaks in blocks:
        done = _unnested(next(out))
        if done != source:                                 # (one with no words stays as it was written)
            dropped |= _put(lines, first, content, written(done, breaks, unbroken=True))
    dropped |= _put_html(lines, html_blocks, texts)
    for line, row in cells.items():
        lines[line] = _row(lines[line], [written(next(out)).replace("|", "\\|") for _ in row])
    dst.write_bytes(end.join(x.replace("\n", end) for k, x in enumerate(lines) if k not in dropped).encode("utf-8"))


Blocks = list[tuple[int, str, list[spans.Piece], list[str]]]  # (first line, source, pieces, hard breaks' marks)


def _blocks(tokens: list[Any], front: int, texts: Texts) -> tuple[Blocks, dict[int, list[list[spans.Piece]]],
                                                                   list[tuple[int, int, str]]]:
    """What a file's tokens give to translate: its blocks of inline text, its table rows' cells (by line, each
    cell's pieces; an empty one kept in its place) and its HTML blocks that hold text (first line, end line,
    source)."""
    blocks: Blocks = []
    cells: dict[int, list[list[spans.Piece]]] = {}
    html_blocks: list[tuple[int, int, str]] = []
    for k, t in enumerate(tokens):
        if t.type == "html_block" and t.map is not None and re.sub(r"<[^>]*>", "", t.content).strip():
            html_blocks.append((t.map[0] + front, t.map[1] + front, t.content))
        if t.type != "inline" or t.map is None:
            continue
        first, content, children = t.map[0] + front, t.content, t.children or []
        cell = tokens[k - 1].type in ("th_open", "td_open")
        alert = _ALERT.match(content) if k > 1 and tokens[k - 2].type == "blockquote_open" else None
        if alert:                                          # GitHub's > [!NOTE]: its own line, kept as it is
            first, content = first + 1, content[alert.end():]
            children = children[next((j + 1 for j, c in enumerate(children) if c.type == "softbreak"),
                                     len(children)):]
        try:
            mine, breaks = pieces(content, children) if content.strip() else ([""], [])
        except _Mismatch as e:                             # (never seen in 80 READMEs: kept as it was, and said)
            texts.report.notes.append(f"line {first + 1}: its inline markup could not be read back ({e}): kept as "
                                      "it was")
            continue
        if cell:
            cells.setdefault(first, []).append(mine)
        elif content.strip():
            blocks.append((first, content, mine, breaks))
    return blocks, cells, html_blocks


def _put_html(lines: list[str], html_blocks: list[tuple[int, int, str]], texts: Texts) -> set[int]:
    """The HTML blocks translated through markup.py (each balanced: _balanced) and written over their lines, each
    line with its container's prefix; returns the lines they no longer need."""
    dropped: set[int] = set()
    balanced = [_balanced(b) for _, _, b in html_blocks]
    done_html = texts.html([before + b for (before, _), (_, _, b) in zip(balanced, html_blocks, strict=True)])
    for (first, last, block), (before, after), page in zip(html_blocks, balanced, done_html, strict=True):
        page = page.rstrip("\n")
        if not (page.startswith(before) and page.endswith(after)):
            continue                                       # (markup.py moved what is not this block's: kept)
        new = page[len(before):len(page) - len(after)].rstrip("\n").split("\n")
        prefixes = [_prefix(lines[first + j], part) for j, part in enumerate(block.rstrip("\n").split("\n"))]
        lines[first] = "\n".join(prefixes[min(j, len(prefixes) - 1)] + line if line else line
                                 for j, line in enumerate(new))     # (one line may now hold several: joined at the end)
        dropped |= set(range(first + 1, last))
    return dropped


def _row(line: str, new: list[str]) -> str:
    """A table row with its cells' texts replaced by ``new``, each cell's padding and the pipes as they were."""
    parts = re.split(r"(?<!\\)\|", line)
    inner = [k for k in range(len(parts)) if not (k in (0, len(parts) - 1) and not parts[k].strip())]
    if len(inner) != len(new):                             # (a row markdown-it reads otherwise: as one cell each)
        return ("| " if line.lstrip().startswith("|") else "") + " | ".join(new)
    for k, text in zip(inner, new, strict=True):
        cell = parts[k]
        if text.strip():
            parts[k] = cell[:len(cell) - len(cell.lstrip())] + text + cell[len(cell.rstrip()):] if cell.strip() \
                else f" {text} "
    return "|".join(parts)


def _is_link(p: spans.Piece) -> bool:
    """Whether a piece is a link: an inline one's opening ``[``, an autolink (``<https://…>``)."""
    return isinstance(p, spans.Open) and p.value[0] == "[" or isinstance(p, spans.Empty) and isinstance(p.value, str) \
        and _AUTOLINK.fullmatch(p.value) is not None


def _unnested(pieces: list[spans.Piece]) -> list[spans.Piece]:
    """A block's translated pieces with no link inside another (CommonMark reads neither then): a link the word
    alignment put inside another's text moved to just after it."""
    out: list[spans.Piece] = []
    moved: list[spans.Piece] = []
    depth = inner = 0                                  # links open in ``out``; in the one being moved
    for p in pieces:
        opens = isinstance(p, spans.Open) and _is_link(p)
        closes = isinstance(p, spans.Close) and _is_link(p.open)
        if inner or depth and (opens or isinstance(p, spans.Empty) and _is_link(p)):
            moved += [" ", p] if moved and not inner else [p]
            inner += opens - closes
            continue
        out.append(p)
        depth += opens - closes
        if depth == 0 and moved:
            out += [" ", *moved]
            moved = []
    return out + ([" ", *moved] if moved else [])


def _prefix(line: str, part: str) -> str:
    """What a line of a container (a quote's ``> ``, a list item's indent) holds before its block's ``part``."""
    at = line.find(part) if part else len(line)
    return line[:at] if at >= 0 else line[:len(line) - len(line.lstrip(" >"))]


_AUTOLINK = re.compile(r"<[A-Za-z][\w+.-]{1,31}:[^\s<>]*>")
# GitHub's alerts: a quote whose first line is one of these markers
_ALERT = re.compile(r"\[!(?:NOTE|TIP|IMPORTANT|WARNING|CAUTION)\][ \t]*(?:\n|$)", re.I)


def _balanced(block: str) -> tuple[str, str]:
    """An HTML block of a Markdown file is a piece of a larger tree (``<details>`` opened in one block, closed in a
    later one): what to put before it so that the end tags it holds of elements opened earlier have their start,
    and the end tags markup.py will add after it for the elements it leaves open, both taken off again."""
    open_: list[str] = []
    strays: list[str] = []
    for m in re.finditer(r"<!--.*?-->|<(/?)([A-Za-z][\w-]*)\b(?:[^>\"']|\"[^\"]*\"|'[^']*')*?(/?)>", block, re.S):
        name = (m.group(2) or "").lower()
        if not name or name in VOID or m.group(3):
            continue
        if not m.group(1):
            open_.append(name)
        elif name in open_:
            while open_.pop() != name:
                pass
        else:
            strays.append(name)
    return "".join(f"<{n}>" for n in reversed(strays)), "".join(f"</{n}>" for n in reversed(open_))


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
    if new and _BLOCK_START.match(new[0]) and not _BLOCK_START.match(content):  # ("- x" would start a list)
        new[0] = re.sub(r"^(\d+)([.)])", r"\1\\\2", new[0]) if new[0][:1].isdigit() else "\\" + new[0]
    for k, (prefix, _) in enumerate(where[:len(new)]):
        lines[first + k] = prefix + new[k].replace(_NBSP, " ") + (where[-1][1] if k == len(new) - 1 else "")
    return set(range(first + len(new), first + len(where)))
