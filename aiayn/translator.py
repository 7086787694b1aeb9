"""The Python API: ``Translator.load(run).translate(lines)``. A Translator is the request pipeline (pipeline.py) along
a route (route.py: one engine, engines in a pivot, a fallback), so that a script translates exactly as ``aiayn
translate`` and the server do."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from .engines.auto import load
from .engines.base import Engine
from .translation.pipeline import Request, Translated, Translation, one_line_each
from .translation.route import Route, languages, with_fallback


class Translator:
    """Text in, text out, through the pipeline (pipeline.py) along a route of engines (engines/; route.py).
    ``Translator.load(run)`` loads one on the engine the command line uses by default (``auto``: CTranslate2 where it
    is installed, aiayn's own engine for what it cannot do); ``Translator(engine)`` takes an engine already loaded.
    What it decodes with is its ``engine`` (its route's last: ``t.engine.model``, ``t.engine.decode``)."""

    def __init__(self, route: Route[Engine] | Engine) -> None:
        self.route: Route[Engine] = route if isinstance(route, Route) else Route((route,))

    @classmethod
    def load(cls, path: str | Path | Sequence[str | Path], engine: str = "auto", processes: bool = False,
             source: str | None = None, target: str | None = None, fallback: str | Path | None = None,
             min_confidence: float = 0.5, **settings: Any) -> Translator:
        """The engine ``engine`` names (engines.auto.ENGINES) on run dir (or checkpoint) ``path`` — several: a
        pivot, each in turn, as ``aiayn translate --model A --model B`` —, with the run's decoding settings and
        ``settings`` (DecodeConfig fields) over them; ``processes``: aiayn's engine in worker processes where
        engines.auto.decode_processes says so (as ``aiayn translate``). ``source`` and ``target``: the direction of a
        multilingual run (multilingual.for_direction; a bilingual run is checked against them). ``fallback``: a run
        whose translations replace those less sure than ``min_confidence``, where surer (``--fallback``)."""
        from .data.multilingual import for_direction

        paths = [path] if isinstance(path, (str, Path)) else list(path)
        engines: list[Engine] = []
        try:
            for p in paths:
                engines.append(load(p, engine, processes, **settings))
            if len(engines) == 1:
                engines[0] = for_direction(engines[0], source, target)
            route: Route[Engine] = Route(tuple(engines))
            if fallback is not None:
                engines.append(load(fallback, engine, processes))
                route = with_fallback(route, engines[-1], min_confidence)
            return cls(route)
        except ValueError:
            for e in engines:
                e.close()
            raise

    @property
    def engine(self) -> Engine:
        """The engine that writes its translations (its route's last; one model: its only one)."""
        return self.route.last()

    @property
    def languages(self) -> tuple[str, str] | None:
        """Its first engine's source and its last one's target, where both are recorded."""
        return languages(self.route)

    def translate(self, lines: Sequence[str], **overrides: Any) -> list[str]:
        """One translation per input line, in order, each one line (each line split into its sentences, unless
        ``sentences=False``). Overrides: ``beam`` (1 = greedy), ``lenpen``, any other DecodeConfig field, a request's
        options (pipeline.Request: ``sentences``, ``repair``, ...), ``constraints``."""
        return one_line_each([[t] for t in self.translations(lines, **overrides)])

    def translations(self, lines: Sequence[str], **overrides: Any) -> list[Translation]:
        """As :meth:`translate`, each line's best :class:`Translation` (its text, score and confidence)."""
        return [t[0] for t in self.request(Request.of(lines, **{**overrides, "nbest": 1})).translations]

    def translate_aligned(self, lines: Sequence[str], **overrides: Any) -> list[tuple[str, str]]:
        """Each line's translation and its word alignment (``i-j`` links, source word i to target word j)."""
        out = self.request(Request.of(lines, **{**overrides, "nbest": 1, "alignments": True})).translations
        return [(t[0].text, t[0].alignment or "") for t in out]

    def translate_html(self, fragments: Sequence[str], **overrides: Any) -> list[str]:
        """Each HTML fragment translated, its markup put back on the aligned words (markup.py)."""
        return [t[0].text for t in self.request(Request.of(fragments, **overrides, format="html")).translations]

    def request(self, request: Request) -> Translated:
        """A whole :class:`pipeline.Request` answered along the route: per text its translations, and the counts of
        what happened (pipeline.Translated)."""
        return self.route.follow(request)

    def close(self) -> None:
        """Let its engines go (worker processes end)."""
        for e in self.route.members():
            e.close()

    def __enter__(self) -> Translator:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

