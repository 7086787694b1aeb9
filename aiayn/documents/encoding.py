"""Which encoding a text file is in, and whether it is text at all.

The order: a byte-order mark (UTF-8, UTF-16, UTF-32), then what the format declares (a PO header's charset, an XML
declaration, an HTML ``meta``), then UTF-8, then charset-normalizer's best guess (a latin-1 PO without a charset line,
a cp1252 subtitle); the encoding used is reported. Translations are written in UTF-8, and a declaration saying
otherwise is rewritten to say so (the format's own module does that).
"""

from __future__ import annotations

import codecs

from .common import DocumentError

BOMS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"), (codecs.BOM_UTF8, "utf-8-sig"),
        (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))
# what a file that is not text starts with, and what it then is
MAGIC = ((b"PK\x03\x04", "a zip archive (a docx, pptx, odt or epub?)"), (b"%PDF", "a PDF"),
         (b"\x89PNG", "a PNG image"), (b"\xff\xd8\xff", "a JPEG image"), (b"GIF8", "a GIF image"),
         (b"\xd0\xcf\x11\xe0", "an old Office document (.doc, .xls, .ppt)"), (b"\x1f\x8b", "a gzip archive"),
         (b"{\\rtf", "an RTF document"))


def bom(data: bytes) -> str | None:
    """The encoding a byte-order mark says, or None."""
    return next((name for mark, name in BOMS if data.startswith(mark)), None)


def refuse_binary(data: bytes, name: str) -> None:
    """DocumentError naming ``name`` unless ``data`` (its first KiB is enough) can be text: what it looks like."""
    for magic, what in MAGIC:
        if data.startswith(magic):
            raise DocumentError(f"{name} is not text: it is {what}")
    if bom(data) is None and b"\x00" in data[:4096]:
        raise DocumentError(f"{name} is not text: it holds NUL bytes and no byte-order mark says UTF-16 or UTF-32")


def decode(data: bytes, name: str, declared: str | None = None) -> tuple[str, str]:
    """(text, encoding) of a text file's bytes, by the rules of the module's docstring; DocumentError naming the file
    where no encoding reads it."""
    refuse_binary(data, name)
    marked = bom(data)
    if marked:
        return _strict(data, marked, name, "its byte-order mark"), marked
    if declared:
        try:
            codecs.lookup(declared)
        except LookupError:
            raise DocumentError(f"{name} declares the encoding {declared!r}, which Python does not know") from None
        return _strict(data, declared, name, "its declaration"), codecs.lookup(declared).name
    try:
        return data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        pass
    from charset_normalizer import from_bytes

    best = from_bytes(data).best()
    if best is None or best.encoding is None:
        raise DocumentError(f"{name} is not UTF-8, and its encoding cannot be told: save it as UTF-8")
    return str(best), best.encoding


def _strict(data: bytes, encoding: str, name: str, why: str) -> str:
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise DocumentError(f"{name}: line {line} is not {encoding}, the encoding {why} names") from None
