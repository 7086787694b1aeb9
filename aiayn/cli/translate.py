"""``aiayn translate``: lines (stdin, a file) or a document through the pipeline, on one engine or a chain, with a
fallback; each parsing and printing only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from .common import add_decode_flags, add_processes_flag, add_request_flags, command, given, unit
from .lines import Lines, count_lines, open_input

log = logging.getLogger("aiayn")


def cmd_translate(a: argparse.Namespace) -> int:
    """Translate line by line, each line cut into its sentences (a paragraph per line is fine; --no-sentences: each
    line one sentence). N lines in, N lines out, in order. With --nbest N > 1, N lines per input line:
    'line<TAB>score<TAB>text'. With --alignments, each text is followed by ' ||| ' and its word alignment."""

    settings, a.request = given(a, "decode"), given(a, "request")
    nbest = settings.pop("nbest", None) or 1           # per request: a beam not given grows to it (pipeline.prepare)
    names = {"nbest": "--nbest", "alignments": "--alignments", "glossary": "--glossary", "constraints": "--constraints",
             "format": "--format html", "unit": "line"}
    glossary = None
    if a.glossary:
        from ..decoding.constraints import Glossary

        glossary = Glossary.load(a.glossary)
    _check_input(a)
    with loaded(a, settings) as engines, _fallback(a) as fallback:
        return _translate(a, engines, settings, nbest, names, glossary, fallback)


def _check_input(a: argparse.Namespace) -> None:
    """An --input file refused by name, before any model is loaded, where its bytes are not what it is read as (a
    document's format, or text: documents/formats.py)."""
    if a.input is None:
        return
    from ..documents.encoding import refuse_binary
    from ..documents.formats import EXTENSIONS, check_content, find

    if a.input.suffix.lower() in EXTENSIONS[1:] and a.request.get("format", "text") == "text":
        check_content(a.input, find(a.input))
    else:
        with open(a.input, "rb") as f:
            refuse_binary(f.read(4096), a.input.name)


@contextlib.contextmanager
def loaded(a: argparse.Namespace, settings: dict[str, Any]) -> Iterator[list[Any]]:
    """The engine of each --model (more than one: a pivot, each in turn), closed at the end (worker processes end)."""
    from ..data.multilingual import for_direction
    from ..engines.auto import load

    engines: list[Any] = []
    if len(a.model) == 1:
        _check_direction(a.model[0], a.source, a.target)
    try:
        for m in a.model:
            engines.append(load(m, a.engine, processes=a.processes, **settings))
        if len(engines) == 1:
            engines[0] = for_direction(engines[0], a.source, a.target)
        elif a.source or a.target or any(e.multilingual is not None for e in engines):
            raise ValueError("--source/--target and a multilingual model: give one --model (a multilingual model "
                             "translates every direction it knows itself)")
        yield engines
    finally:
        for engine in engines:
            engine.close()


def _check_direction(model: Path, source: str | None, target: str | None) -> None:
    """A run's direction checked from its description, before its engine starts (its worker processes take seconds):
    a direction it does not translate is refused at once. Other models are checked once loaded."""
    from ..data.multilingual import check_direction
    from ..rundir import RunDir

    try:
        run = RunDir.locate(model)[0]
    except FileNotFoundError:
        return
    check_direction(run.languages(), run.multilingual(), source, target)


@contextlib.contextmanager
def _fallback(a: argparse.Namespace) -> Iterator[list[Any]]:
    """--fallback RUN's engine (with its run's own settings), closed at the end; none without it."""
    from ..engines.auto import load

    engine = load(a.fallback, a.engine, processes=a.processes) if a.fallback else None
    try:
        yield [engine] if engine is not None else []
    finally:
        if engine is not None:
            engine.close()


def _translate(a: argparse.Namespace, engines: list[Any], settings: dict[str, Any], nbest: int, names: dict[str, str],
               glossary: Any, fallback: list[Any]) -> int:
    """cmd_translate's work, once its engines are loaded: along one route (route.py: the --model engines in turn, the
    --fallback engine for the lines they are unsure of)."""
    import threading
    from collections import Counter

    from ..documents.formats import EXTENSIONS
    from ..translation.pipeline import Request, prepare
    from ..translation.route import Route, with_fallback

    route: Route[Any] = Route(tuple(engines))
    if fallback:
        route = with_fallback(route, fallback[0], a.min_confidence)
    counts: Counter[str] = Counter()                        # what happened to every line (pipeline.Translated)
    lock = threading.Lock()                                 # (stream's chunks are translated on several threads)

    def translate_through(request: Request) -> Any:
        done = route.follow(request)
        with lock:
            counts.update(done.counts)
        return done.translations

    def request(lines: list[str], constraints: list[list[str]] | None = None) -> Request:
        return Request(lines, decode={**settings, "nbest": nbest}, constraints=constraints, glossary=glossary,
                       names=names, **a.request)

    for engine, asked in route.checks(request([], [] if a.constraints else None)):    # what it refuses: before any
        prepare(engine, asked)                                                          # line is read
    if a.input and a.input.suffix.lower() in EXTENSIONS[1:] and a.request.get("format", "text") == "text":  # a document
        languages = (engines[0].languages or (None, None))[0], (engines[-1].languages or (None, None))[1]
        from ..documents.common import Scored

        return _translate_document(a, nbest, languages, lambda texts, fmt, kinds: [
            Scored(t[0].text, t[0].confidence) for t in translate_through(
                replace(request(texts), format=fmt, protect=kinds))])
    if a.constraints:                                       # (line, phrases) pairs
        run = lambda chunk: translate_through(request([x for x, _ in chunk], [c for _, c in chunk]))  # noqa: E731
    else:
        run = lambda chunk: translate_through(request(chunk))  # noqa: E731
    kept, total = _translate_lines(a, run, nbest, min(e.calls_at_once for e in engines))
    if total:
        log.info("protected spans (placeholders, URLs, tags): %d of %d kept", kept, total)
    if fallback:
        _said_fallback(counts, a.min_confidence)
    return 0


def _translate_lines(a: argparse.Namespace, run: Callable[[list[Any]], Any], nbest: int,
                     in_flight: int) -> tuple[int, int]:
    """--input (or stdin) to --output (or stdout) line by line, in chunks (stream.py), with a progress bar; the
    protected spans the translations kept, of how many."""
    from tqdm import tqdm

    from ..translation.stream import stream

    inp = open_input(a.input) if a.input else sys.stdin.buffer
    out = open(a.output, "w", encoding="utf-8") if a.output else sys.stdout  # noqa: SIM115
    show = not a.quiet and sys.stderr.isatty() and (a.input is not None or not sys.stdin.isatty())
    bar = tqdm(total=count_lines(a.input) if a.input else None, unit=" lines", disable=not show, file=sys.stderr,
               dynamic_ncols=True)
    flush = out.flush if not a.output else (lambda: None)   # a pipe gets each line at once; a file is buffered
    kept = [0, 0]                                           # protected spans: kept, total
    try:
        lines: Any = Lines(inp)
        if a.constraints:
            lines = _Constrained(lines, a.constraints)
        for i, translations in enumerate(stream(lines, run, in_flight=in_flight)):
            kept[0], kept[1] = kept[0] + translations[0].spans[0], kept[1] + translations[0].spans[1]
            _write(out, i, translations, a.scores, nbest)
            bar.update()
            flush()        # each line as soon as it and every earlier one are done
    finally:
        bar.close()
        if a.input:
            inp.close()
        if a.output:
            out.close()
    return kept[0], kept[1]


def _write(out: Any, i: int, translations: list[Any], scores: bool, nbest: int) -> None:
    """Line ``i``'s translations as asked: JSON with its confidence (--scores), ``i<TAB>score<TAB>text`` per
    hypothesis (--nbest), or the text; a word alignment after ``|||``."""
    for t in translations:
        text = t.text if t.alignment is None else f"{t.text} ||| {t.alignment}"
        out.write(_scored(i, t, text) if scores else f"{i}\t{t.score:.4f}\t{text}\n" if nbest > 1 else text + "\n")


def _said_fallback(counts: dict[str, int], min_confidence: float) -> None:
    sent = counts.get("fallback.sent", 0)
    log.info("--fallback: %d line%s under confidence %g translated again, %d bettered", sent, "" if sent == 1 else "s",
             min_confidence, counts.get("fallback.kept", 0))


def _scored(line: int, t: Any, text: str) -> str:
    """--scores: one JSON object per translation (its input line, text, score and confidence)."""
    conf = None if t.confidence is None else round(t.confidence, 4)
    return json.dumps({"line": line, "text": text, "score": round(t.score, 4), "confidence": conf},
                      ensure_ascii=False) + "\n"


def _translate_document(a: argparse.Namespace, nbest: int, languages: tuple[str | None, str | None],
                        translate: Callable[[list[str], str, tuple[str, ...]], list[str]]) -> int:
    """--input FILE --output FILE of a document format (documents/), with a progress bar over its texts."""
    from tqdm import tqdm

    from ..documents.common import DocumentError, Options
    from ..documents.formats import find, translate_document

    if a.output is None or find(a.output) != find(a.input):
        raise DocumentError(f"{a.input.name}: a document is written to a file of its own format: give --output "
                            f"NAME{a.input.suffix}")
    if nbest > 1 or a.request.get("alignments") or a.constraints:
        raise DocumentError(f"{a.input.name}: a document takes none of --nbest, --alignments, --constraints")
    bar = tqdm(total=0, unit=" texts", disable=a.quiet or not sys.stderr.isatty(), file=sys.stderr, dynamic_ncols=True)

    def chunked(texts: list[str], fmt: str, kinds: tuple[str, ...]) -> list[str]:
        bar.total += len(texts)
        out: list[str] = []
        for i in range(0, len(texts), 32):                  # the bar moves as the document goes
            out += translate(texts[i:i + 32], fmt, kinds)
            bar.update(len(texts[i:i + 32]))
        return out

    try:
        report = translate_document(a.input, a.output, chunked,
                                    options=Options(languages[0], languages[1], review=not a.no_fuzzy,
                                                    min_confidence=a.min_confidence, bilingual=a.bilingual,
                                                    font=a.font))
    finally:
        bar.close()
    n = report.texts
    log.info("%s: %d text%s translated into %s%s; protected spans (placeholders, inline tags): %d of %d kept",
             a.input.name, n, "" if n == 1 else "s", a.output,
             f" (read as {report.encoding})" if report.encoding not in (None, "utf-8", "ascii") else "",
             report.kept, report.spans)
    for note in report.notes[:20]:
        log.warning("%s: %s", a.input.name, note)
    if len(report.notes) > 20:
        log.warning("%s: and %d more", a.input.name, len(report.notes) - 20)
    if report.nothing:
        log.error("%s: nothing was translated%s", a.input.name,
                  "" if report.notes else ": it holds no text to translate")
        return 1
    return 0


def add_translate(sub: argparse._SubParsersAction) -> None:
    p = command(sub, cmd_translate)
    add_decode_flags(p)
    add_request_flags(p)
    p.add_argument("--source", metavar="LANG", help="the source language: with a multilingual model, the direction "
                   "is --source and --target (docs/multilingual.md); a bilingual model checks that it is its own")
    p.add_argument("--target", metavar="LANG", help="the target language (see --source)")
    p.add_argument("--input", type=Path, help="input file (default: stdin)")
    p.add_argument("--output", type=Path, help="output file (default: stdout)")
    p.add_argument("--quiet", action="store_true", help="no progress bar (it shows on a terminal only anyway)")
    p.add_argument("--glossary", type=Path, metavar="TSV",
                   help="'source term<TAB>target term' lines: a line containing a term is translated with its target "
                        "term (lexically constrained beam search; the matching rules: docs/terminology.md)")
    p.add_argument("--constraints", type=Path, metavar="JSONL",
                   help="one JSON list of target phrases per input line (or null): each translation contains them")
    p.add_argument("--scores", action="store_true",
                   help="one JSON object per translation: {line, text, score, confidence}; confidence in [0, 1] is "
                        "the calibrated probability that it is acceptable (aiayn calibrate; docs/confidence.md)")
    p.add_argument("--no-fuzzy", action="store_true",
                   help="documents: trust the machine translations (a PO entry is not marked fuzzy, an XLIFF target is "
                        "'translated', not 'needs-review-translation') but those less sure than --min-confidence")
    p.add_argument("--bilingual", action="store_true",
                   help="a PDF: a bilingual edition, each original page followed by its translation (facing pages)")
    p.add_argument("--font", type=Path, metavar="TTF",
                   help="a PDF: a TrueType font (.ttf, .ttc) for the characters the bundled fonts lack (another "
                        "script); otherwise one installed is found with fontconfig")
    p.add_argument("--fallback", type=Path, metavar="RUN",
                   help="a stronger model (the teacher behind a student, or the same run, the first decoded with "
                        "--beam 1) that translates again each line less sure than --min-confidence; its translation "
                        "is kept where it is surer. It decodes with its run's settings")
    p.add_argument("--min-confidence", type=unit, default=0.5, metavar="X",
                   help="a translation less sure than X (in [0, 1]: docs/confidence.md) is translated again by "
                        "--fallback, and in a document with --no-fuzzy marked for review all the same (default "
                        "%(default)s)")
    add_processes_flag(p)


class _Constrained:
    """Input lines paired with their constraints: a list of target phrases from --constraints, one JSON list or null
    per input line, in step with the input (the pipeline adds the --glossary terms a line contains)."""

    def __init__(self, lines: Lines, path: Path) -> None:
        self.lines, self.path = lines, path

    def __iter__(self) -> Iterator[tuple[str, list[str]]]:
        with open(self.path, encoding="utf-8") as f:
            for n, line in enumerate(self.lines, 1):
                yield line, self._read(f, n)
            if f.readline().strip():
                raise ValueError(f"{self.path}: more lines than the input; one JSON list (or null) per input line")

    def _read(self, f: Any, n: int) -> list[str]:
        raw = f.readline()
        if not raw:
            raise ValueError(f"{self.path}: {n - 1} lines, but the input has more; one JSON list (or null) per "
                             f"input line")
        try:
            value = json.loads(raw) if raw.strip() else None
        except json.JSONDecodeError as e:
            raise ValueError(f"{self.path}:{n}: not JSON ({e.msg}); expected a list of target phrases or null") from None
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(p, str) and p.strip() for p in value):
            raise ValueError(f"{self.path}:{n}: expected a list of non-empty strings (target phrases) or null, got "
                             f"{raw.strip()[:80]}")
        return value

    def more_ready(self) -> bool:
        return self.lines.more_ready()
