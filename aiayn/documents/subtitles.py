"""Subtitles: SubRip (.srt) and WebVTT (.vtt). Each cue's text is translated as one text (a line break inside a cue
does not end a sentence) and written back on as many lines as it had, re-wrapped to balance their widths, never
inside a tag; a cue whose every line starts with a dash (two speakers) is translated line by line. Numbers, timings,
cue settings, WebVTT's header, NOTE, STYLE and REGION blocks, blank lines and line ends come out as they went in.
Inline tags (``<i>``, ``<b>``, ``<font color=…>``, WebVTT's ``<c.x>``, ``<v Name>``) and SubStation overrides
(``{\\an8}``) are protected spans: put back on their aligned words. The file is read in the encoding its byte-order
mark names, else UTF-8, else charset-normalizer's guess (a cp1252 or UTF-16 subtitle), and written in UTF-8."""

from __future__ import annotations

import re
from pathlib import Path

from .common import Options, Texts, balance
from .plain import read

_TIMING = re.compile(r"-->")
_HIDDEN = re.compile(r"<[^>]*>|\{\\[^}]*\}")          # what takes no width on screen: tags and overrides


def cues(lines: list[str]) -> list[tuple[int, int]]:
    """Each cue's text lines ``[start, end)``: the lines after a timing line up to a blank line."""
    found, k = [], 0
    while k < len(lines):
        if _TIMING.search(lines[k]) and not lines[k].startswith(("NOTE", "STYLE", "REGION")):
            start = k = k + 1
            while k < len(lines) and lines[k].strip():
                k += 1
            if k > start:
                found.append((start, k))
        else:
            k += 1
    return found


def wrap(text: str, n: int) -> list[str]:
    """``text`` on ``n`` lines (common.balance: the widest as narrow as it can be), broken at spaces outside tags;
    tags and overrides take no width."""
    words = _words(text)
    return [" ".join(line) for line in balance(words, [len(_HIDDEN.sub("", w)) for w in words], n)]


def _words(text: str) -> list[str]:
    """``text``'s words: split at spaces that are not inside a tag or an override."""
    out, at, depth = [], 0, 0
    for k, c in enumerate(text):
        depth += (c in "<{") - (c in ">}")
        if c == " " and depth <= 0:
            if text[at:k]:
                out.append(text[at:k])
            at = k + 1
    if text[at:]:
        out.append(text[at:])
    return out


def translate(src: Path, dst: Path, texts: Texts, options: Options) -> None:
    text = read(src, texts)
    end = "\r\n" if "\r\n" in text else "\n"
    lines = text.replace("\r\n", "\n").split("\n")
    jobs: list[tuple[list[int], int]] = []                     # (the lines it replaces, how many lines it is written on)
    asks: list[str] = []
    for start, stop in cues(lines):
        mine = lines[start:stop]
        if len(mine) > 1 and all(line.lstrip().startswith("-") for line in mine):
            for k in range(start, stop):                       # two speakers: each line its own
                jobs.append(([k], 1))
                asks.append(lines[k])
        else:
            jobs.append((list(range(start, stop)), stop - start))
            asks.append(" ".join(line.strip() for line in mine))
    out = texts(asks)
    dropped: set[int] = set()
    for (where, n), translation in zip(jobs, out, strict=True):
        if not translation.strip():                            # (a blank line would end the cue)
            continue
        new = wrap(" ".join(translation.split()), n) if n > 1 else [translation]
        for k, line in zip(where, new, strict=False):
            lines[k] = line
        dropped.update(where[len(new):])                       # fewer words than lines
    dst.write_bytes(end.join(line for k, line in enumerate(lines) if k not in dropped).encode("utf-8"))
