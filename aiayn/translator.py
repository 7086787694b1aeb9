"""The Python API: ``Translator.load(run).translate(lines)``. A Translator is the request pipeline (pipeline.py) over
one engine (engines/), so that a script translates exactly as ``aiayn translate`` and the server do."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .chains import translations
from .engines.auto import load
from .engines.base import Engine
from .pipeline import Request, Translation, one_line_each, translate


class Translator:
    """The Python API: text in, text out, through the pipeline (pipeline.py) over any engine (engines/: aiayn's own in this
    process by default). ``Translator.load(run)`` loads one; every other attribute is its engine's (``t.model``,
    ``t.vocab``, ``t.decode``, ``t.settings(...)``)."""

    def __init__(self, engine: Engine) -> None:
        object.__setattr__(self, "engine_", engine)

    @classmethod
    def load(cls, path: str | Path, engine: str = "torch", processes: bool = False, source: str | None = None,
             target: str | None = None, **settings: Any) -> Translator:
        """The engine ``engine`` names (engines.auto.ENGINES) on run dir (or checkpoint) ``path``, with the run's
        decoding settings and ``settings`` (DecodeConfig fields) over them; ``processes``: aiayn's engine in worker
        processes where engines.auto.decode_processes says so (as ``aiayn translate``). ``source`` and ``target``:
        the direction of a multilingual run (multilingual.for_direction; a bilingual run is checked against them)."""
        from .multilingual import for_direction

        loaded = load(path, engine, processes, **settings)
        try:
            return cls(for_direction(loaded, source, target))
        except ValueError:
            loaded.close()
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["engine_"], name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self.engine_, name, value)              # (its calibration, say: the engine's)

    def __delattr__(self, name: str) -> None:
        delattr(self.engine_, name)

    def translate(self, lines: Sequence[str], **overrides: Any) -> list[str]:
        """One translation per input line, in order, each one line (each line split into its sentences, unless
        ``sentences=False``). Overrides: ``beam`` (1 = greedy), ``lenpen``, any other DecodeConfig field, a request's
        options (pipeline.Request: ``sentences``, ``repair``, ...), ``constraints``."""
        return one_line_each([[t] for t in self.translations(lines, **overrides)])

    def translations(self, lines: Sequence[str], **overrides: Any) -> list[Translation]:
        """As :meth:`translate`, each line's best :class:`Translation` (its text, score and confidence)."""
        return translations(self.engine_, lines, **overrides)

    def translate_aligned(self, lines: Sequence[str], **overrides: Any) -> list[tuple[str, str]]:
        """Each line's translation and its word alignment (``i-j`` links, source word i to target word j)."""
        out = translate(self.engine_, Request.of(lines, **{**overrides, "nbest": 1, "alignments": True}))
        return [(t[0].text, t[0].alignment or "") for t in out]

    def translate_html(self, fragments: Sequence[str], **overrides: Any) -> list[str]:
        """Each HTML fragment translated, its markup put back on the aligned words (markup.py)."""
        return [t[0].text for t in translate(self.engine_, Request.of(fragments, **overrides, format="html"))]
