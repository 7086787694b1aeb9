"""Engines in a chain: a pivot (each model in turn, ``aiayn translate --model A --model B``, a server's pivots) and a
fallback (the sentences a first engine is unsure of handed to a second, kept where it is surer).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields, replace
from typing import Any

from .config import DecodeConfig
from .engines.base import Engine
from .pipeline import NAMES, Request, Translation, one_line_each, translate


def leg(request: Request) -> Request:
    """What each engine of a pivot but the last is asked (the last is asked ``request`` itself, its texts the previous
    one's translations): the texts in the request's format, with its decoding settings, for their best translation
    only. Constraints are the target's, so only the last keeps them; word alignments and a glossary, which tie the
    source to the target, are refused, naming the option in the front end's words."""
    names = {**NAMES, **request.names}
    asked = [names[k] for k, on in (("alignments", request.alignments), ("glossary", bool(request.glossary))) if on]
    if asked:
        raise ValueError(f"{' and '.join(asked)} need a model that translates directly, not through a pivot language")
    return replace(request, decode={**request.decode, "nbest": 1}, constraints=None)


def translate_through(engines: Sequence[Engine], request: Request) -> list[list[Translation]]:
    """The request translated by each engine in turn: a pivot (de→en by one, en→fr by the next), each engine but the
    last asked its :func:`leg`. One engine: :func:`translate`."""
    for engine in engines[:-1]:
        request = replace(request, texts=[ts[0].text for ts in translate(engine, leg(request))])
    return translate(engines[-1], request)


# the decoding settings a fallback keeps (with every option of the request): how a text's sentences are bounded
# and given, not how they are searched
PER_TEXT = tuple(f.name for f in fields(DecodeConfig) if f.metadata.get("per_sentence"))


# texts sent on to a fallback model in this process (translate_with_fallback), and those whose translation it bettered
FALLBACK = {"sent": 0, "kept": 0}


def translate_with_fallback(engines: Sequence[Engine], fallback: Sequence[Engine], request: Request,
                            min_confidence: float) -> list[list[Translation]]:
    """The request translated by ``engines`` (:func:`translate_through`), and each text less sure than
    ``min_confidence`` translated again by ``fallback`` (a stronger model: the teacher behind a student, a bigger
    beam), whose translations are kept where they are surer. The first stays the fast one; the second sees only the
    texts that need it. No ``fallback``: the first's alone."""
    out = translate_through(engines, request)
    low = unsure(out, min_confidence)
    if fallback and low:
        kept_surer(out, low, translate_through(fallback, only(request, low)))
    return out


def unsure(out: list[list[Translation]], min_confidence: float) -> list[int]:
    """The inputs whose (best) translation is less sure than ``min_confidence``."""
    return [i for i, ts in enumerate(out) if ts and ts[0].confidence is not None and ts[0].confidence < min_confidence]


def only(request: Request, which: Sequence[int]) -> Request:
    """The request for a fallback model: some of its texts only (their constraints with them), its options, and of its
    decoding settings those that say how a text is bounded and given (:data:`PER_TEXT`): the fallback decodes with its
    run's settings."""
    cons = request.constraints
    kept = {k: v for k, v in request.decode.items() if k in PER_TEXT}
    return replace(request, texts=[request.texts[i] for i in which], decode=kept,
                   constraints=None if cons is None else [cons[i] for i in which])


def kept_surer(out: list[list[Translation]], low: Sequence[int], again: list[list[Translation]]) -> None:
    """The fallback's translations ``again`` of the inputs ``low`` put in ``out`` where they are surer (counted)."""
    FALLBACK["sent"] += len(low)
    for i, ts in zip(low, again, strict=True):
        if (ts[0].confidence or 0.0) > (out[i][0].confidence or 0.0):
            out[i] = ts
            FALLBACK["kept"] += 1


class Pivot:
    """Engines in a chain, translating as one (``aiayn translate --model A --model B``, ``evaluate`` too):
    :func:`translate_through`. ``languages``: the first one's source and the last one's target, where recorded."""

    def __init__(self, engines: Sequence[Engine]) -> None:
        self.engines = list(engines)
        first, last = self.engines[0].languages, self.engines[-1].languages
        self.languages = (first[0], last[1]) if first and last else None
        self.engine = " → ".join(e.engine for e in self.engines)

    def translate(self, lines: Sequence[str], **overrides: Any) -> list[str]:
        """As translator.Translator.translate, through every engine in turn."""
        return one_line_each([[t] for t in self.translations(lines, **overrides)])

    def translations(self, lines: Sequence[str], **overrides: Any) -> list[Translation]:
        """As :func:`translations`, through every engine in turn (the confidence: the last one's)."""
        return [t[0] for t in translate_through(self.engines, Request.of(lines, **{**overrides, "nbest": 1}))]


def translations(engine: Engine | Pivot, lines: Sequence[str], **overrides: Any) -> list[Translation]:
    """Each line's best :class:`Translation` (its text, score and confidence) by ``engine`` (or engines in a chain),
    each line split into its sentences unless ``sentences=False``; ``overrides``: pipeline.Request's fields (its options,
    ``constraints``: per line, target phrases its translation contains) and DecodeConfig's."""
    if isinstance(engine, Pivot):
        return engine.translations(lines, **overrides)
    return [t[0] for t in translate(engine, Request.of(lines, **{**overrides, "nbest": 1}))]
