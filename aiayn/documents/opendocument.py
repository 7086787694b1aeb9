"""OpenDocument text and presentations (.odt, .odp): ``content.xml``'s body and ``styles.xml``'s master pages
(headers, footers) translated in place (xmltext.py: every other byte of those parts, and every other entry of the
archive, kept as it was).

Every paragraph and heading is translated, wherever it is: in tables, lists, frames and text boxes, slides and their
notes, footnotes and endnotes, comments. A line break or a tab cuts a paragraph into lines, each translated on its
own. Spans and links are paired codes, on the words aligned with their own; a note, a frame or a comment inside a
paragraph an empty code, moved with the words aligned with it (its own paragraphs translated too); ``text:s`` (runs of
spaces) kept, at a paragraph's edges where they were; fields (page numbers, dates, a note's citation) untouched.
A damaged part is refused by name (expat's line and column), never half-translated.
"""

from __future__ import annotations

from pathlib import Path

from . import xmltext
from .archive import Archive
from .common import DocumentError, Options, Texts

TEXT = "{urn:oasis:names:tc:opendocument:xmlns:text:1.0}"
OFFICE = "{urn:oasis:names:tc:opendocument:xmlns:office:1.0}"
_FIELDS = {"note-citation", "sequence", "page-number", "page-count", "date", "time", "bookmark-ref", "reference-ref",
           "sequence-ref", "note-ref", "author-name", "author-initials", "file-name", "chapter", "title", "subject",
           "template-name", "sheet-name", "word-count", "character-count", "paragraph-count", "tracked-changes"}
_FOREIGN = ("{http://purl.org/dc/elements/1.1/}", "{urn:oasis:names:tc:opendocument:xmlns:meta:1.0}")
RULES = xmltext.Rules(
    block=lambda el: el.name in (TEXT + "p", TEXT + "h", TEXT + "line-break", TEXT + "tab"),
    skip=lambda el: el.name.startswith(TEXT) and el.local in _FIELDS or el.name.startswith(_FOREIGN),
    space=lambda el: el.name == TEXT + "s")
ROOTS = {"content.xml": OFFICE + "body", "styles.xml": OFFICE + "master-styles"}


def translate(src: Path, dst: Path, texts: Texts, options: Options) -> None:
    with Archive(src, texts.limits, texts.name) as archive:
        if not archive.has("content.xml"):
            raise DocumentError(f"{texts.name} is not an OpenDocument file: it has no content.xml")
        docs = {part: xmltext.Document(archive.read(part), f"{texts.name}: {part}") for part in ROOTS
                if archive.has(part)}
        found = {part: (doc, xmltext.segments(doc, [el for el in doc.root.iter() if el.name == ROOTS[part]], RULES))
                 for part, doc in docs.items()}
        archive.write(dst, xmltext.translate(found, texts.coded))
