"""Plain text (.txt): each line translated (a line may hold a paragraph), blank lines and line ends kept; the file
read in the encoding its byte-order mark names, else UTF-8, else the one charset-normalizer finds (encoding.py), and
written in UTF-8 (with a byte-order mark if it had a UTF-8 one)."""

from __future__ import annotations

from pathlib import Path

from .common import Options, Texts
from .encoding import decode


def read(src: Path, texts: Texts, declared: str | None = None) -> str:
    """A text file's text (encoding.py: ``declared``, what the format says), the encoding reported."""
    text, texts.report.encoding = decode(texts.read(src), texts.name, declared)
    return text


def translate(src: Path, dst: Path, texts: Texts, options: Options) -> None:
    text = read(src, texts)
    bom = "\ufeff" if texts.report.encoding == "utf-8-sig" else ""
    end = "\r\n" if "\r\n" in text else "\n"
    lines = text.replace("\r\n", "\n").split("\n")
    todo = [k for k, line in enumerate(lines) if line.strip()]
    for k, line in zip(todo, texts([lines[k] for k in todo]), strict=True):
        lines[k] = line
    dst.write_bytes((bom + end.join(lines)).encode("utf-8"))
