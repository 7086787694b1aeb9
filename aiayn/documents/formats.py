"""The formats aiayn translates, and :func:`translate_document`, the one entrance the command line (``aiayn translate
--input FILE --output FILE``) and LibreTranslate's ``POST /translate_file`` both call.

Each :class:`Format` names its extensions, the module function that reads and writes it, the kinds of protected span
its texts hold (spans.py: taken out before decoding, put back on their aligned words), and what its bytes must look
like, checked before anything is parsed (a .docx that is not a zip archive, a .txt that is a PDF, are refused by
name). A new format is one module with its ``translate(src, dst, texts, options)`` and one line of :data:`FORMATS`.

What every format keeps (its module says how): the text is translated where it stands, every protected span and
inline tag comes back, whatever is not text (styles, images, timings, ids, comments, declarations) comes out as it went
in, and a damaged file is a :class:`~.common.DocumentError` naming the file and the part, never a traceback.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..translation import spans
from . import catalogs, epub, markdown, office, opendocument, pdf, plain, subtitles, web, xliff
from .common import DocumentError, Limits, Options, Report, Texts, Translate
from .encoding import refuse_binary

Reader = Callable[[Path, Path, Texts, Options], None]


@dataclass(frozen=True)
class Format:
    """One format: its name, extensions, its module's ``translate``, the protected spans of its texts, what its
    bytes must be ("zip", "xml", "pdf" or "text"), and what it is read with (for the docs)."""

    name: str
    extensions: tuple[str, ...]
    translate: Reader
    spans: tuple[str, ...]
    container: str
    library: str


_TEXT = spans.DEFAULT
FORMATS = (
    Format("txt", (".txt",), plain.translate, _TEXT, "text", "Python"),
    Format("html", (".html", ".htm"), web.translate_html, _TEXT, "text", "markup.py"),
    Format("xhtml", (".xhtml",), web.translate_xhtml, _TEXT, "xml", "expat (xmltext.py)"),
    Format("markdown", (".md", ".markdown"), markdown.translate, _TEXT, "text", "markdown-it-py"),
    Format("srt", (".srt",), subtitles.translate, (*_TEXT, "tags", "ass"), "text", "Python"),
    Format("vtt", (".vtt",), subtitles.translate, (*_TEXT, "tags"), "text", "Python"),
    Format("po", (".po", ".pot"), catalogs.translate, (*_TEXT, "tags"), "text", "translate-toolkit"),
    Format("xliff", (".xlf", ".xliff", ".sdlxliff", ".mqxliff", ".mxliff"), xliff.translate, _TEXT, "xml",
           "expat (xmltext.py)"),
    Format("docx", (".docx",), office.translate_docx, _TEXT, "zip", "lxml"),
    Format("pptx", (".pptx",), office.translate_pptx, _TEXT, "zip", "lxml"),
    Format("opendocument", (".odt", ".odp"), opendocument.translate, _TEXT, "zip", "expat (xmltext.py)"),
    Format("epub", (".epub",), epub.translate, _TEXT, "zip", "expat (xmltext.py)"),
    Format("pdf", (".pdf",), pdf.translate, _TEXT, "pdf", "pdfminer.six, pikepdf, fontTools"),
)
EXTENSIONS = tuple(ext for f in FORMATS for ext in f.extensions)


def find(path: Path) -> Format:
    """The format of ``path`` by its extension; DocumentError naming the file otherwise."""
    ext = path.suffix.lower()
    for f in FORMATS:
        if ext in f.extensions:
            return f
    raise DocumentError(f"{path.name}: {ext or 'no extension'} is not a format aiayn translates "
                        f"({', '.join(EXTENSIONS)})")


def check_content(path: Path, fmt: Format, name: str | None = None) -> None:
    """DocumentError unless ``path``'s first bytes are what its format's are (a zip archive, XML, text): a file
    renamed to another format's extension is refused before it is parsed."""
    name = name or path.name
    with open(path, "rb") as f:
        head = f.read(4096)
    if fmt.container == "zip":
        if not head.startswith(b"PK\x03\x04"):
            refuse_binary(head, name)
            raise DocumentError(f"{name} is not a {fmt.name} file: a {fmt.name} is a zip archive, and this is not one")
    elif fmt.container == "pdf":
        if b"%PDF-" not in head[:1024]:
            what = "it is a zip archive" if head.startswith(b"PK\x03\x04") else "it does not begin with %PDF-"
            raise DocumentError(f"{name} is not a PDF file: {what}")
    elif fmt.container == "xml":
        refuse_binary(head, name)
        stripped = head.lstrip(b"\xef\xbb\xbf").lstrip()
        if not (stripped.startswith(b"<") or head[:2] in (b"\xff\xfe", b"\xfe\xff")):
            raise DocumentError(f"{name} is not a {fmt.name} file: it is not XML")
    else:
        refuse_binary(head, name)


class _Raised(Exception):
    """What the translation itself raised, carried through a format's code untouched."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def translate_document(src: Path, dst: Path, translate: Translate, limits: Limits | None = None,
                       options: Options | None = None, name: str | None = None) -> Report:
    """``src`` translated into ``dst``, in its own format (:func:`find`); ``name``: what to call it in errors (the
    upload's name). What ``translate`` raises is raised as it is; anything wrong with the file, as a DocumentError
    naming it (and ``dst`` removed)."""
    fmt = find(src)
    name = name or src.name
    limits, options = limits or Limits(), options or Options()
    check_content(src, fmt, name)

    def translating(texts: list[str], kind: str, kinds: tuple[str, ...]) -> list[str]:
        try:
            return translate(texts, kind, kinds)
        except Exception as e:
            raise _Raised(e) from e

    texts = Texts(translating, limits, name, kinds=fmt.spans)
    texts.report.format = fmt.name
    try:
        fmt.translate(src, dst, texts, options)
        return texts.report
    except BaseException as e:
        dst.unlink(missing_ok=True)
        if isinstance(e, _Raised):
            raise e.error from None
        if isinstance(e, (DocumentError, ImportError)):      # (an optional part missing: the CLI names its extra)
            raise
        if isinstance(e, (OSError, UnicodeError)):
            raise DocumentError(f"{name}: {e}") from None
        if not isinstance(e, Exception):
            raise
        raise DocumentError(f"{name} cannot be read as {fmt.name}: {type(e).__name__}: {e}") from None
