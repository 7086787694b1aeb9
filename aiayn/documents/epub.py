"""EPUB (.epub): every content document the package lists (its XHTML chapters, not the navigation document)
translated as XHTML is (web.py: its title and body, every other byte kept); every other entry of the archive
(the package document, the navigation, stylesheets, fonts, images) copied as it was, byte for byte, in its order and
compression (``mimetype`` first and stored, as readers require). The package is found as readers find it:
``META-INF/container.xml`` names its package document, whose manifest names the chapters."""

from __future__ import annotations

import posixpath
from pathlib import Path
from urllib.parse import unquote

from . import xmltext
from .archive import Archive
from .common import DocumentError, Options, Texts
from .web import xhtml_segments

CONTAINER = "META-INF/container.xml"


def chapters(archive: Archive, name: str) -> list[str]:
    """The archive's names of the package's XHTML content documents, in manifest order (the navigation left out)."""
    if not archive.has(CONTAINER):
        raise DocumentError(f"{name} is not an EPUB: it has no {CONTAINER}")
    container = xmltext.Document(archive.read(CONTAINER), f"{name}: {CONTAINER}")
    rootfile = next((el.attrs.get("full-path") for el in container.root.iter() if el.local == "rootfile"), None)
    if not rootfile or not archive.has(rootfile):
        raise DocumentError(f"{name}: {CONTAINER} names no package document the archive holds ({rootfile})")
    package = xmltext.Document(archive.read(rootfile), f"{name}: {rootfile}")
    base = posixpath.dirname(rootfile)
    found = []
    for el in package.root.iter():
        props = el.attrs.get("properties", "").split()
        if el.local == "item" and el.attrs.get("media-type") == "application/xhtml+xml" and "nav" not in props:
            href = unquote(posixpath.normpath(posixpath.join(base, el.attrs.get("href", "").split("#")[0])))
            if not archive.has(href):
                raise DocumentError(f"{name}: the package lists {href}, which the archive does not hold")
            found.append(href)
    return found


def translate(src: Path, dst: Path, texts: Texts, options: Options) -> None:
    with Archive(src, texts.limits, texts.name) as archive:
        docs = {part: xmltext.Document(archive.read(part), f"{texts.name}: {part}")
                for part in chapters(archive, texts.name)}
        archive.write(dst, xmltext.translate({part: (doc, xhtml_segments(doc)) for part, doc in docs.items()},
                                             texts.coded))
