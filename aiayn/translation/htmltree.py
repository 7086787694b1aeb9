"""HTML as markup.py reads it: a fragment parsed into an element tree (repaired: an element left open is closed where
its parent closes, an end tag with no open element dropped, nesting past MAX_DEPTH refused) and written back
well-formed; which elements are blocks, void, verbatim, or raw text.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from html.parser import HTMLParser

BLOCK = {"address", "article", "aside", "blockquote", "body", "br", "caption", "dd", "details", "dialog", "div",
         "dl", "dt", "fieldset", "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6",
         "head", "header", "hr", "html", "li", "main", "nav", "ol", "p", "section", "summary", "table", "tbody",
         "td", "tfoot", "th", "thead", "title", "tr", "ul"}


VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


VERBATIM = {"script", "style", "pre", "code", "textarea", "ruby"}   # (ruby: its base, its reading and
# its fallback parentheses belong together: kept as they are, placed as a word, as epubcheck wants them whole)


RAW_TEXT = {"script", "style"}       # elements whose text HTML does not escape: written back as it was read


MAX_DEPTH = 200                      # elements open at once, at most


RAW = "#markup"                      # the tag of markup kept as it is (a placeholder, a comment)


@dataclass(eq=False)
class Node:
    """An element (``tag`` None: the fragment's root) and its children: text (str) and elements."""

    tag: str | None
    attrs: list[tuple[str, str | None]] = field(default_factory=list)
    children: list[Node | str] = field(default_factory=list)

    def verbatim(self) -> bool:
        return self.tag in VERBATIM or any(k == "translate" and v == "no" for k, v in self.attrs)


class MarkupError(ValueError):
    """A fragment that cannot be taken apart (nested too deep)."""


class _Builder(HTMLParser):
    """The element tree of a fragment, repaired as the module's docstring says."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node(None)
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, attrs)
        self.stack[-1].children.append(node)
        if tag not in VOID:
            if len(self.stack) > MAX_DEPTH:
                raise MarkupError(f"HTML nested more than {MAX_DEPTH} elements deep")
            self.stack.append(node)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack[-1].children.append(Node(tag, attrs))

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self.stack) - 1, 0, -1):           # close it, and whatever was left open inside it
            if self.stack[i].tag == tag:
                del self.stack[i:]
                return                                        # an end tag nothing opened: dropped

    def handle_data(self, data: str) -> None:
        self.stack[-1].children.append(data)

    def _raw(self, markup: str) -> None:
        self.stack[-1].children.append(Node(RAW, [("", markup)]))

    def handle_comment(self, data: str) -> None:
        self._raw(f"<!--{data}-->")

    def handle_decl(self, decl: str) -> None:
        self._raw(f"<!{decl}>")

    def handle_pi(self, data: str) -> None:
        self._raw(f"<?{data}>")

    def unknown_decl(self, data: str) -> None:
        self._raw(f"<![{data}]>")


def parse(fragment: str) -> Node:
    """The element tree of ``fragment`` (repaired: the module's docstring)."""
    b = _Builder()
    b.feed(fragment)
    b.close()
    return b.root


def open_tag(node: Node) -> str:
    if node.tag == RAW:
        return str(node.attrs[0][1])
    attrs = "".join(f" {k}" if v is None else f' {k}="{html.escape(v, quote=True)}"' for k, v in node.attrs)
    return f"<{node.tag}{attrs}>"


def close_tag(node: Node) -> str:
    return "" if node.tag in VOID or node.tag == RAW else f"</{node.tag}>"


def serialize(node: Node | str) -> str:
    """Well-formed HTML of a (sub)tree, as parsed."""
    if isinstance(node, str):
        return html.escape(node, quote=False)
    if node.tag in RAW_TEXT:
        inner = "".join(c if isinstance(c, str) else serialize(c) for c in node.children)
    else:
        inner = "".join(serialize(c) for c in node.children)
    return inner if node.tag is None else open_tag(node) + inner + close_tag(node)
