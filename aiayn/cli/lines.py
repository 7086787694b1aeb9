"""Input lines for ``aiayn translate``: a file or stdin read as UTF-8 lines (a bad byte named by its line), counted
for the progress bar.
"""

from __future__ import annotations

import logging
import os
import select
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

log = logging.getLogger("aiayn")


class Lines:
    """The lines of a binary stream (a file, or stdin), decoded as UTF-8 (bad bytes replaced, with one warning),
    without their line ends; split on "\\n" only. ``more_ready`` tells the translation stream whether more
    can be read without waiting."""

    def __init__(self, f: BinaryIO) -> None:
        self.f, self.warned = f, False
        try:
            self.regular = stat.S_ISREG(os.fstat(f.fileno()).st_mode)
        except (OSError, ValueError, AttributeError):
            self.regular = True

    def __iter__(self) -> Iterator[str]:
        for raw in self.f:
            line = raw.decode("utf-8", errors="replace")
            if "\ufffd" in line and not self.warned and "\ufffd" not in raw.decode("utf-8", errors="ignore"):
                log.warning("the input has invalid UTF-8; the bad bytes were replaced with U+FFFD")
                self.warned = True
            yield line.rstrip("\n").rstrip("\r")

    def more_ready(self) -> bool:
        if self.regular:
            return True
        try:
            return bool(select.select([self.f], [], [], 0)[0])
        except (OSError, ValueError):
            return True


def count_lines(path: Path) -> int:
    n, last = 0, b"\n"
    with open(path, "rb") as f:
        while block := f.read(1 << 22):
            n += block.count(b"\n")
            last = block[-1:]
    return n + (last != b"\n")


def open_input(path: Path) -> BinaryIO:
    """An input file of lines (_check_input: text); one in UTF-16 or UTF-32 (its byte-order mark says so) read as
    UTF-8."""
    import codecs
    import io

    from ..documents.encoding import bom

    f = open(path, "rb")  # noqa: SIM115 - the caller closes it
    marked = bom(f.peek(4)[:4])
    if marked in ("utf-16", "utf-32"):
        text = io.TextIOWrapper(f, encoding=marked, newline="")
        return io.BytesIO(text.read().encode("utf-8"))
    if marked == "utf-8-sig":
        f.read(len(codecs.BOM_UTF8))
    return f
