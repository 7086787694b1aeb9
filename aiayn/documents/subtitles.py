"""Subtitles: SubRip (.srt) and WebVTT (.vtt). Each cue's text is translated as one text (a line break inside a cue
does not end a sentence) and written back on as many lines as it had, re-wrapped to balance their widths, never
inside a tag. A cue with a line that starts with a dialogue dash (two speakers: ``- Wo warst du?`` / ``- Zu Hause.``)
or another cue-line marker (``>>``, ``♪``) is translated line by line, each marker kept out of the text and put back
where it stood, as Subtitle Edit does. A timing line is one wherever it stands (a cue that runs into the next timing
line with no blank line between, as yt-dlp writes them, ends there). Numbers, timings, cue settings, WebVTT's header,
NOTE, STYLE and REGION blocks, blank lines, line ends and a byte-order mark come out as they went in. Inline tags
(``<i>``, ``<b>``, ``<font color=…>``, WebVTT's ``<c.x>``, ``<v Name>`` and its karaoke timestamps
``<00:00:17.500>``) and SubStation overrides (``{\\an8}``) are protected spans: put back on their aligned words. The
file is read in the encoding its byte-order mark names, else UTF-8, else charset-normalizer's guess (a cp1252 or
UTF-16 subtitle), and written in UTF-8."""

from __future__ import annotations

import re
from pathlib import Path

from .common import Options, Texts, balance
from .plain import read

_TIME = r"(?:\d+:)?\d{1,2}:\d{2}[,.]\d{1,3}"
_TIMING = re.compile(rf"^\s*{_TIME}\s*-->\s*{_TIME}")     # a cue's timing line (its settings may follow)
_HIDDEN = re.compile(r"<[^>]*>|\{\\[^}]*\}")          # what takes no width on screen: tags and overrides
# what starts a cue's line and is not its words: a dialogue dash (ASCII, en or em), a caption's speaker change (>>),
# music notes; and what ends one (music notes)
_LEAD = re.compile(r"^\s*(?:[-‐–—]+|>>|[♪♫#]+)(?:\s+|(?=[^\W\d]|<|\{|[¿¡\"'„“(]))")
_TRAIL = re.compile(r"\s+[♪♫#]+\s*$")


def cues(lines: list[str]) -> list[tuple[int, int]]:
    """Each cue's text lines ``[start, end)``: the lines after a timing line up to a blank line, the next timing line
    or a SubRip cue number right before one."""
    found, k = [], 0
    while k < len(lines):
        if _TIMING.match(lines[k]) and not lines[k].startswith(("NOTE", "STYLE", "REGION")):
            start = k = k + 1
            while k < len(lines) and lines[k].strip() and not _TIMING.match(lines[k]) and not (
                    lines[k].strip().isdigit() and k + 1 < len(lines) and _TIMING.match(lines[k + 1])):
                k += 1
            if k > start:
                found.append((start, k))
        else:
            k += 1
    return found


def markers(line: str) -> tuple[str, str, str]:
    """(what starts the line and is not its words, its words, what ends it): ``- Wo?`` is ("- ", "Wo?", "")."""
    lead = _LEAD.match(line)
    head = lead.group(0) if lead else line[:len(line) - len(line.lstrip())]
    tail = _TRAIL.search(line[len(head):])
    end = tail.group(0) if tail else ""
    return head, line[len(head):len(line) - len(end)], end


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


def _speakers(lines: list[tuple[str, str, str]]) -> list[list[int]]:
    """A cue's lines (:func:`markers`) by speaker: a line that starts with a marker starts one, a line without one
    goes on with the one before (the first speaker's line may have none)."""
    groups: list[list[int]] = []
    for k, (head, _, _) in enumerate(lines):
        if head.strip() or not groups or lines[groups[-1][-1]][2]:
            groups.append([k])
        else:
            groups[-1].append(k)
    return groups


def translate(src: Path, dst: Path, texts: Texts, options: Options) -> None:
    text = read(src, texts)
    bom = "\ufeff" if texts.report.encoding in ("utf-8-sig", "utf-16", "utf-32") else ""
    end = "\r\n" if "\r\n" in text else "\n"
    lines = text.replace("\r\n", "\n").split("\n")
    jobs: list[tuple[list[int], int, str, str]] = []      # (the lines it replaces, on how many lines, its markers)
    asks: list[str] = []
    for start, stop in cues(lines):
        mine = [markers(line) for line in lines[start:stop]]
        if any(head.strip() or tail for head, _, tail in mine):
            for group in _speakers(mine):                      # speakers, songs: each on its lines, markers kept
                words = " ".join(mine[k][1].strip() for k in group)
                if words:
                    jobs.append(([start + k for k in group], len(group), mine[group[0]][0], mine[group[-1]][2]))
                    asks.append(words)
        else:
            jobs.append((list(range(start, stop)), stop - start, "", ""))
            asks.append(" ".join(line.strip() for line in lines[start:stop]))
    out = texts(asks)
    dropped: set[int] = set()
    for (where, n, head, tail), translation in zip(jobs, out, strict=True):
        if not translation.strip():                            # (a blank line would end the cue)
            continue
        new = wrap(" ".join(translation.split()), n) if n > 1 else [translation.strip()]
        for j, (k, line) in enumerate(zip(where, new, strict=False)):
            lines[k] = (head if j == 0 else "") + line + (tail if j == len(new) - 1 else "")
        dropped.update(where[len(new):])                       # fewer words than lines
    body = end.join(line for k, line in enumerate(lines) if k not in dropped)
    dst.write_bytes((bom + body).encode("utf-8"))
