"""One request's translation, the same for every front end: prepare, decode, finish.

``aiayn translate``, aiayn's HTTP API, LibreTranslate's API and the Python API (Translator.translate_html,
``translate_aligned``) each map their own wire format onto a :class:`Request`, and its answer back out of
:class:`Translation` s. Everything between is here, once:

- **prepare** (:func:`prepare`): the request checked against what the engine can do (engine.require) and against HTML's
  rule (markup.refuse_others, in the front end's own words: :attr:`Request.names`); HTML fragments cut into the
  segments that are translated (markup.split); the one rule for nbest and beam (config.beam_for_nbest); the settings
  resolved by the engine (its ``settings``: what it fixed when loaded); a glossary merged with the constraints
  (constraints.Glossary.added_to) and made into what the search keeps; and each line encoded **once**.
- **decode** (:func:`decode`; in the server, the batcher given the same ids): each line's hypotheses by engine.plan
  (blank lines are not decoded; keep_plain).
- **finish** (:func:`finish`): the text of each hypothesis, its word alignment when asked, the markup put back, and
  the n-best shape: per input, its ``nbest`` translations (HTML: one per fragment).

A new request feature is a field of :class:`Request` and the code in one of the three steps that uses it; each front
end maps its own field onto it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .config import DecodeConfig, beam_for_nbest
from .engine import Engine, require

if TYPE_CHECKING:
    from .constraints import Constraints, Glossary
    from .markup import Fragment
    from .search import Hypothesis

FORMATS = ("text", "html")
# the words aiayn's API uses for the options HTML refuses; the CLI and LibreTranslate's API give their own
NAMES = {"nbest": "nbest", "alignments": "alignments", "constraints": "constraints", "glossary": "glossary",
         "format": "format html", "unit": "fragment"}


@dataclass(frozen=True)
class Request:
    """What a front end asks for."""

    texts: Sequence[str]                                # lines of text (format html: HTML fragments)
    options: Mapping[str, Any] = field(default_factory=dict)    # DecodeConfig fields to override (None: not given)
    constraints: Sequence[Sequence[str] | None] | None = None   # per text, target phrases its translation contains
    glossary: Glossary | None = None                    # its terms found in a text add their targets to its phrases
    alignments: bool = False                            # each translation's word alignment too
    format: str = "text"
    names: Mapping[str, str] = field(default_factory=lambda: NAMES)  # the front end's words, for HTML's refusals


@dataclass(frozen=True)
class Translation:
    """One translation of one input: its text, the score its search ranked it by, its word alignment if asked."""

    text: str
    score: float = 0.0
    alignment: str | None = None


@dataclass
class Prepared:
    """A request made ready for an engine: the settings, and the lines decoded with their ids and constraints."""

    request: Request
    decode: DecodeConfig
    lines: list[str]                                    # what is decoded: the texts, or the fragments' segments
    ids: list[list[int]]                                # each line's source ids, encoded once
    cons: list[Constraints | None] | None
    parts: list[Fragment] | None = None                 # format html: the fragments, to put the markup back

    @property
    def aligns(self) -> bool:
        """Whether :func:`finish` runs the model again (word alignments; HTML places its tags by them)."""
        return bool(self.lines) and (self.request.alignments or self.parts is not None)


def prepare(engine: Engine, request: Request) -> Prepared:
    """The request checked and encoded (the module's docstring). Raises engine.Unsupported for what the engine cannot
    do, markup.MarkupError for HTML that cannot be taken apart, ValueError naming any other option refused."""
    r, names = request, {**NAMES, **request.names}     # (a front end names only the options it has)
    options = {k: v for k, v in r.options.items() if v is not None}
    nbest = options.get("nbest") or 1
    if r.format not in FORMATS:
        raise ValueError(f"format {r.format!r}: expected one of {', '.join(FORMATS)}")
    cons_asked = r.constraints is not None
    parts, lines = None, list(r.texts)
    if r.format == "html":
        from .markup import refuse_others, split

        asked = (("nbest", nbest > 1), ("alignments", r.alignments), ("constraints", cons_asked),
                 ("glossary", bool(r.glossary)))
        refuse_others({names[k]: on for k, on in asked if k in r.names}, names["format"], names["unit"])
        require(engine, "html")
        parts, lines = split(lines)
    if r.alignments:
        require(engine, "alignments")
    if cons_asked or r.glossary:
        require(engine, "constraints")
    decode = engine.settings(**beam_for_nbest(options, engine.decode.beam))
    return Prepared(r, decode, lines, engine.encode(lines), _constraints(engine, r, lines, decode), parts)


def _constraints(engine: Engine, r: Request, lines: list[str], decode: DecodeConfig) -> list[Constraints | None] | None:
    """Each line's constraints: its phrases and the targets of the glossary's terms it contains; None without any."""
    if r.constraints is None and not r.glossary:
        return None
    if r.constraints is not None and len(r.constraints) != len(lines):
        raise ValueError(f"constraints has {len(r.constraints)} entries for {len(lines)} lines of text")
    per_line = [list(p or []) for p in r.constraints] if r.constraints is not None else [[] for _ in lines]
    if r.glossary:
        per_line = [r.glossary.added_to(p, line) for p, line in zip(per_line, lines, strict=True)]
    return engine.constraints(lines, per_line, decode)


def decode(engine: Engine, prepared: Prepared, stop: Callable[[], bool] | None = None) -> list[list[Hypothesis]]:
    """Each prepared line's hypotheses, from the engine itself (the server's batchers decode the same ids)."""
    return engine.hypotheses(prepared.ids, prepared.decode, prepared.cons, stop)


def finish(engine: Engine, prepared: Prepared, hyps: list[list[Hypothesis]]) -> list[list[Translation]]:
    """Per input text, its translations: ``nbest`` of them (format html: one, its markup put back)."""
    p = prepared
    if p.parts is not None:
        from .markup import join

        best = [hs[0].tokens for hs in hyps]
        placed = zip(engine.detokenize(best), engine.alignments(p.lines, best, ids=p.ids),
                     engine.alignments(p.lines, best, source=True, ids=p.ids), strict=True) if p.lines else []
        return [[Translation(t)] for t in join(p.parts, list(placed))]     # (no text: nothing to align)
    flat = [(line, x, h) for line, x, hs in zip(p.lines, p.ids, hyps, strict=True) for h in hs]
    texts = engine.detokenize([h.tokens for _, _, h in flat])
    links: list[str | None] = [None] * len(flat)
    if p.request.alignments:
        links = list(engine.alignments([line for line, _, _ in flat], [h.tokens for _, _, h in flat],
                                       ids=[x for _, x, _ in flat]))
    rows = iter(Translation(t, h.score, a) for t, (_, _, h), a in zip(texts, flat, links, strict=True))
    return [[next(rows) for _ in hs] for hs in hyps]


def translate(engine: Engine, request: Request) -> list[list[Translation]]:
    """The request's translations, decoded by ``engine`` in this thread."""
    prepared = prepare(engine, request)
    return finish(engine, prepared, decode(engine, prepared))


Decoder = Callable[[list[list[int]], DecodeConfig, "list[Constraints | None] | None"],
                   Awaitable[list[list["Hypothesis"]]]]


async def translate_async(engine: Engine, prepared: Prepared, decoder: Decoder) -> list[list[Translation]]:
    """A prepared request's translations, its lines decoded by ``decoder`` (a server's batcher: ``Batcher.translate``),
    the model's other work (word alignments) off the event loop."""
    hyps = await decoder(prepared.ids, prepared.decode, prepared.cons)
    if not prepared.aligns:
        return finish(engine, prepared, hyps)
    return await asyncio.get_running_loop().run_in_executor(None, finish, engine, prepared, hyps)
