"""One request's translation, the same for every front end: prepare, decode, finish.

``aiayn translate``, aiayn's HTTP API, LibreTranslate's API and the Python API (Translator.translate_html,
``translate_aligned``) each map their own wire format onto a :class:`Request`, and its answer back out of
:class:`Translation` s. Everything between is here, once:

- **prepare** (:func:`prepare`): the request checked against what the engine can do (engine.require) and against HTML's
  rule (markup.refuse_others, in the front end's own words: :attr:`Request.names`); HTML fragments cut into the
  segments that are translated (markup.split); protected spans (spans.py: placeholders, URLs, the inline tags of a
  format that has them) taken out of a plain text, which then goes through markup as a fragment does, so that they
  are put back on their aligned words; the one rule for nbest and beam (config.beam_for_nbest); the settings
  resolved by the engine (its ``settings``: what it fixed when loaded); each text (or segment) cut into its
  sentences, and a sentence too long for the model into its clauses (spans.py; the request's ``sentences``,
  ``sentence_tokens``); a glossary merged with the constraints (constraints.Glossary.added_to) and made into
  what the search keeps; and each sentence encoded **once**.
- **decode** (:func:`steps`): the decoding calls a request needs, as a generator its caller drives: all of a
  request's sentences in one call (each engine's own plan: blank lines, keep_plain), then the sentences that
  degenerated (pipeline.py), then those the length guard cut. The command line and the Python API drive it with
  the engine in their thread (:func:`decode`), the server awaiting its batcher (serving.models.decoded): one
  copy of the steps, and nothing here calls up into either.
- **finish** (:func:`finish`): the text of each hypothesis, its word alignment when asked, the sentences joined back
  as the input was written (their alignments made one), the markup put back, and the n-best shape: per input, its
  ``nbest`` translations (HTML: one per fragment); a protected text written back as text, with how many of its spans
  it kept.

A new request feature is a field of :class:`Request` and the code in one of the three steps that uses it; each front
end maps its own field onto it.

**Repair (:func:`repaired`).** Output that never degenerates: each sentence's translation checked, and a flagged one
decoded again.

Small and undertrained models fail in three recurring ways, and each has a setting that prevents it:

- **a repetition loop** ("salad salad salad …"): a run of 1-4 target tokens repeated :data:`LOOP` times in a row,
  where the source has no such run. Decoded again never repeating a trigram (``no_repeat_ngram=3``).
- **an untranslated copy**: the translation is its source, word for word (3 words or more), from a model whose
  training data rarely copies (``Norms.copies`` under 1%; a model trained to copy is never flagged). Decoded again
  with twice the beam, and no repeated trigram.
- **a length out of line with the training data**: target/source tokens outside the ratios of its training pairs
  (``Norms.ratio``: their 0.1st and 99.9th percentiles, with a token's slack; sources of ``Norms.MIN_TOKENS`` tokens
  or more). Too short (half translated): decoded again with ``min_len`` at the shortest ratio; too long: with the
  length rule at the longest.

The translation kept is the one with the lesser failure (none; a length; a copy; a loop), and of two alike the better-
scoring (length-normalised log-probability); a sentence is counted repaired when its failure got lesser. Decoding is
deterministic, so the same input always gives the same output. How many sentences were flagged and repaired, by kind,
is counted in the request's counts (``repair.<kind>.flagged``, ``.repaired``: pipeline.Translated): ``aiayn evaluate
--json`` reports them, and ``/metrics`` as ``aiayn_repair_sentences_total``. Sentences are always checked and counted;
they are decoded again with the request's ``repair`` (``--repair``, ``"repair": true`` in a request), which is off by
default: a repair changes what a model says, so that aiayn's engine and CTranslate2 (whose no-repeat rule is its own)
no longer give the same text, and on the demo model it moved BLEU by 0.01-0.04
(benchmarks/results/repair/repair-20261127-0319.json). pipeline.py drives it, for every engine.
"""

from __future__ import annotations

import functools
import math
import re
import typing
from collections import Counter
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field, fields
from typing import TYPE_CHECKING, Any, NamedTuple

from .. import config
from ..config import DecodeConfig, Norms, beam_for_nbest, setting
from ..decoding.hypotheses import features, of_text
from ..engines.base import Engine, one_line, require
from . import spans
from .spans import Pieces

if TYPE_CHECKING:
    from ..decoding.constraints import Constraints, Glossary
    from ..decoding.hypotheses import Hypothesis
    from .markup import Fragment

FORMATS = ("text", "html")
# the words aiayn's API uses for the options HTML refuses; the CLI and LibreTranslate's API give their own
NAMES = {"nbest": "nbest", "alignments": "alignments", "constraints": "constraints", "glossary": "glossary",
         "format": "format html", "unit": "fragment"}


@dataclass(frozen=True)
class Request:
    """What a front end asks for: texts, the decoding settings it overrides, its constraints, and its **options**,
    each in one place, here: every field made with config.setting is an option, and its type, default, help, bounds
    and the engine capability it needs (``needs``) make ``aiayn translate``'s flag (cli.common.add_request_flags),
    a field of aiayn's API (api.request_models) and of LibreTranslate's (api.OPTIONS). A new option is
    its field and the step below that reads it (CONTRIBUTING.md)."""

    texts: Sequence[str]                                # lines of text (format html: HTML fragments)
    _: KW_ONLY
    # DecodeConfig fields to override (None: not given), each checked when the request is made (config.overrides)
    decode: Mapping[str, Any] = field(default_factory=dict)
    constraints: Sequence[Sequence[str] | None] | None = None   # per text, target phrases its translation contains
    glossary: Glossary | None = None                    # its terms found in a text add their targets to its phrases
    names: Mapping[str, str] = field(default_factory=lambda: NAMES)  # the front end's words, for HTML's refusals
    format: str = setting("text", "text, or html: each text is an HTML fragment, translated with its markup kept (tags "
                          "placed by the word alignment; placeholders such as {name} and %s kept: "
                          "docs/terminology.md)", parse=lambda text: _format(text))
    alignments: bool = setting(False, "each translation's word alignment too: 'i-j' links, source word i to target "
                               "word j, from 0 (from the encoder-decoder attention)", needs="alignments")
    protect: tuple[str, ...] = setting(spans.DEFAULT, "the kinds of protected span taken out of a text before "
                                       "translating and put back on the aligned words (of "
                                       f"{', '.join(k for k in spans.KINDS if not k.endswith('-format'))}, or a "
                                       "gettext format flag's grammar: c-format, python-format, qt-format ...; "
                                       f"none: off; default {','.join(spans.DEFAULT)}); a plain text is protected "
                                       "where its translation is one line, without alignments or constraints, and the "
                                       "engine aligns", parse=spans.parse)
    sentences: bool = setting(True, "cut each text into its sentences (spans.py: sentencex), translate each, and "
                              "join them back as the text was written (false: each line is one sentence)")
    sentence_tokens: int = setting(0, "a sentence longer than this many source tokens is cut at its clauses before "
                                   "translation, never truncated (0 = the longest source sentence the model was "
                                   "trained on, as its run records it)", ge=0)
    repair: bool = setting(False, "decode again a sentence whose translation loops, copies its source or has a "
                           "length out of line with the training data, with settings against that failure, and keep "
                           "the better (pipeline.py; off: such sentences are only counted)")
    runon: bool = setting(True, "with sentences: cut a sentence where a word that opens sentences in the training "
                          "data (German Ein, Zwei, Die; English A, The) stands capitalized inside it: text run on "
                          "without its full stops (spans.cut_runon); and one translated too short for its source "
                          "at its likeliest starter, the parts kept if surer (guarded)")

    def __post_init__(self) -> None:
        for name, hint in option_hints().items():      # each option's type and bounds, named when wrong
            value = getattr(self, name)
            ok = isinstance(value, bool) if hint is bool else isinstance(value, int) and not isinstance(value, bool) \
                if hint is int else True
            if not ok:
                raise ValueError(f"{name}={value!r}: expected {hint.__name__}")
        config.check_bounds(self)
        object.__setattr__(self, "decode", config.overrides(DecodeConfig, self.decode))
        _format(self.format)
        object.__setattr__(self, "protect", spans.check(self.protect))

    @classmethod
    def of(cls, texts: Sequence[str], **settings: Any) -> Request:
        """A request from keywords of both kinds (the Python API's): its own fields by name, every other one a
        DecodeConfig setting to override."""
        own = {f.name for f in fields(cls)} - {"texts", "decode"}
        return cls(texts, decode={k: v for k, v in settings.items() if k not in own},
                   **{k: v for k, v in settings.items() if k in own})


def _format(name: str) -> str:
    if name not in FORMATS:
        raise ValueError(f"format {name!r}: expected one of {', '.join(FORMATS)}")
    return name


@functools.cache
def option_hints() -> dict[str, Any]:
    """Each option of :class:`Request` (its fields made with config.setting) and its type."""
    hints = typing.get_type_hints(Request, localns={"Constraints": Any, "Glossary": Any})
    return {f.name: hints[f.name] for f in fields(Request) if "help" in f.metadata}


@dataclass(frozen=True)
class Translation:
    """One translation of one input: its text, the score its search ranked it by, its word alignment if asked."""

    text: str
    score: float = 0.0
    alignment: str | None = None
    spans: tuple[int, int] = (0, 0)                     # (kept, total): the input's protected spans it holds
    confidence: float | None = None                     # in [0, 1], its least sure sentence's (hypotheses.py)


class Translated(NamedTuple):
    """A request's answer: per input text, its translations; and what happened on the way, counted (sentences flagged
    and repaired by kind, ``repair.<kind>.flagged`` / ``.repaired``; the length guard's ``guard.cut`` / ``.kept``;
    protected spans ``spans.kept`` / ``.lost``; a route's ``fallback.sent`` / ``.kept``). A front end reports them,
    the server adds them up per model for /metrics."""

    translations: list[list[Translation]]
    counts: Counter[str]


@dataclass
class Prepared:
    """A request made ready for an engine: the settings, and the sentences decoded with their ids and constraints."""

    request: Request
    decode: DecodeConfig
    pieces: list[Pieces]                                # per text (format html: per segment), where its sentences are
    lines: list[str]                                    # what is decoded: every text's sentences, in order
    ids: list[list[int]]                                # each sentence's source ids, encoded once
    cons: list[Constraints | None] | None
    # format html, or protected spans: per text its fragment (None: a plain text, translated as it is), to put the
    # markup back; and per text, a protected plain text's (leading space, trailing space, codes: spans.to_html)
    parts: list[Fragment | None] | None = None
    coded: list[tuple[str, str, list[spans.Open | spans.Empty]] | None] | None = None
    linked: list[bool] = field(default_factory=list)   # per sentence: whether finish needs its word alignment
    counts: Counter[str] = field(default_factory=Counter)   # what happened to it (Translated.counts)

    @property
    def aligns(self) -> bool:
        """Whether :func:`finish` runs the model again (word alignments; markup places its tags by them)."""
        return any(self.linked)


def prepare(engine: Engine, request: Request) -> Prepared:
    """The request checked and encoded (the module's docstring). Raises engine.Unsupported for what the engine cannot
    do, htmltree.MarkupError for HTML that cannot be taken apart, ValueError naming any other option refused."""
    r, names = request, {**NAMES, **request.names}     # (a front end names only the options it has)
    options = {k: v for k, v in r.decode.items() if v is not None}
    nbest = options.get("nbest") or 1
    cons_asked = r.constraints is not None
    kinds = spans.check(r.protect)
    parts: list[Fragment | None] | None = None
    coded, texts, tagged = None, list(r.texts), [False] * len(r.texts)
    if r.format == "html":
        from .markup import refuse_others

        asked = (("nbest", nbest > 1), ("alignments", r.alignments), ("constraints", cons_asked),
                 ("glossary", bool(r.glossary)))
        refuse_others({names[k]: on for k, on in asked if k in r.names}, names["format"], names["unit"])
        require(engine, "html")
        parts, texts, tagged = _fragments(texts, texts, tuple(k for k in kinds if k != "tags"))
    elif kinds and nbest == 1 and not (r.alignments or cons_asked or r.glossary) and engine.capabilities.alignments:
        coded = [_code(t, kinds) for t in texts]
        if any(coded):
            parts, texts, tagged = _fragments(texts, [c and c[0] for c in coded], ())
    for f in fields(Request):                           # what an option asked for needs of the engine
        if f.metadata.get("needs") and getattr(r, f.name):
            require(engine, f.metadata["needs"])
    if cons_asked or r.glossary:
        require(engine, "constraints")
    if r.constraints is not None and len(r.constraints) != len(texts):
        raise ValueError(f"constraints has {len(r.constraints)} entries for {len(texts)} lines of text")
    decode = engine.settings(**beam_for_nbest(options, engine.decode.beam))
    pieces, ids = _sentences(engine, r, texts, decode)
    lines = [x for p in pieces for x in p.sentences]
    linked = [r.alignments or on for p, on in zip(pieces, tagged, strict=True) for _ in p.spans]
    return Prepared(r, decode, pieces, lines, ids, _constraints(engine, r, pieces, lines, decode), parts,
                    [c[1] if c else None for c in coded] if coded else None, linked)


def _code(text: str, kinds: tuple[str, ...]) -> tuple[str, tuple[str, str, list[spans.Open | spans.Empty]]] | None:
    """A plain text with protected spans as an HTML fragment (spans.to_html; its edges' spaces apart), and what
    puts it back; None for a text without any."""
    core = text.strip()
    pieces = spans.code(core, kinds)
    if pieces is None:
        return None
    fragment, codes = spans.to_html(pieces)
    return fragment, (text[:len(text) - len(text.lstrip())], text[len(text.rstrip()):], codes)


def _fragments(texts: list[str], html: Sequence[str | None],
               kinds: tuple[str, ...]) -> tuple[list[Fragment | None], list[str], list[bool]]:
    """Each text given as HTML (``html``: a fragment, or None for a plain text) cut into its segments (markup.Fragment,
    ``kinds``: the protected spans of its text); what is translated (each fragment's segments, each plain text); and
    whether each of those has tags to place (its word alignment is needed)."""
    from .markup import Fragment

    parts: list[Fragment | None] = []
    lines, tagged = [], []
    for text, fragment in zip(texts, html, strict=True):
        part = None if fragment is None else Fragment(fragment, kinds)
        parts.append(part)
        lines += [text] if part is None else part.lines
        tagged += [False] if part is None else [bool(seg.tags) for seg in part.todo]
    return parts, lines, tagged


def _sentences(engine: Engine, r: Request, texts: list[str], decode: DecodeConfig) -> tuple[list[Pieces], list[list[int]]]:
    """Each text's sentences (a text with constraints of its own stays whole: its phrases are the whole text's),
    those too long cut at their clauses, and every sentence's ids (encoded once; a cut sentence's parts again)."""
    lang = engine.languages[0] if engine.languages else None
    pieces = [spans.split(t, lang) if r.sentences and not (r.constraints and r.constraints[i])
              else spans.whole(t) for i, t in enumerate(texts)]
    if r.sentences and r.runon and engine.norms.openers:
        openers = frozenset(engine.norms.openers)
        pieces = [p if r.constraints and r.constraints[i] else spans.cut_runon(p, openers)
                  for i, p in enumerate(pieces)]
    ids = engine.encode([x for p in pieces for x in p.sentences])
    limit = r.sentence_tokens or engine.norms.longest_src or 0
    if not (r.sentences and limit and any(len(x) > limit for x in ids)):
        return pieces, ids
    out: list[list[int]] = []
    for i, p in enumerate(pieces):
        mine, ids = ids[:len(p.spans)], ids[len(p.spans):]
        if any(len(x) > limit for x in mine) and not (r.constraints and r.constraints[i]):
            pieces[i] = p = spans.cut_long(p, lambda text: len(engine.encode([text])[0]) > limit)
            mine = engine.encode(p.sentences)
        out.extend(mine)
    return pieces, out


def _constraints(engine: Engine, r: Request, pieces: list[Pieces], lines: list[str],
                 decode: DecodeConfig) -> list[Constraints | None] | None:
    """Each sentence's constraints: its text's phrases (such a text is one sentence) and the targets of the
    glossary's terms it contains; None without any."""
    if r.constraints is None and not r.glossary:
        return None
    given = r.constraints or [None] * len(pieces)
    per_line = [list(phrases or []) for p, phrases in zip(pieces, given, strict=True) for _ in p.spans]
    if r.glossary:
        per_line = [r.glossary.added_to(p, line) for p, line in zip(per_line, lines, strict=True)]
    return engine.constraints(lines, per_line, decode)


Steps = Generator["Call", "list[list[Hypothesis]]", "list[list[Hypothesis]]"]


def steps(engine: Engine, prepared: Prepared) -> Steps:
    """A prepared request's decoding as the calls to make, each ``(ids, settings, constraints)``, sent back their
    hypotheses (an engine's ``hypotheses``, or a batcher's ``translate``): its sentences, those that degenerated
    decoded again (:func:`repairs`), then those the length guard cut (:func:`guarded`). Returns each sentence's
    hypotheses."""
    p = prepared
    hyps = yield p.ids, p.decode, p.cons
    hyps = yield from repairs(engine, p, hyps)
    return (yield from guarded(engine, p, hyps))


def decode(engine: Engine, prepared: Prepared, stop: Callable[[], bool] | None = None) -> list[list[Hypothesis]]:
    """Each prepared sentence's hypotheses, :func:`steps` driven with the engine in this thread (``stop``: as the
    engine's ``hypotheses`` takes it)."""
    plan = steps(engine, prepared)
    try:
        call = next(plan)
        while True:
            call = plan.send(engine.hypotheses(*call, stop))
    except StopIteration as done:
        return done.value


def repairs(engine: Engine, prepared: Prepared, hyps: list[list[Hypothesis]]) -> Generator[
        Call, list[list[Hypothesis]], list[list[Hypothesis]]]:
    """pipeline.repaired for a prepared request's sentences: the calls to make again, and then their hypotheses."""
    p = prepared
    return repaired(p.lines, p.ids, p.cons, hyps, p.decode, engine.norms, engine.detokenize, p.request.repair,
                    p.counts)


def guarded(engine: Engine, prepared: Prepared, hyps: list[list[Hypothesis]]) -> Generator[
        Call, list[list[Hypothesis]], list[list[Hypothesis]]]:
    """The length guard, a plan as repairs is: a sentence translated shorter than ``norms.short`` (the 5th percentile
    of the training data's length ratio) times its source, at least 2 x Norms.MIN_TOKENS long, may be run-on text whose
    boundary neither the splitter nor an opener found, and the model dropped part of it. It is cut before its likeliest
    starter (spans.best_cut), the two parts translated, and they are kept where they are surer than the whole
    (their confidences' mean, weighted by their source tokens): ``prepared`` then has two sentences where it had one.
    Only with the request's ``runon``, for plain text (no HTML, constraints, n-best or sampling); counted in
    ``prepared.counts`` (``guard.cut``, ``guard.kept``)."""
    p, norms, d, r = prepared, engine.norms, prepared.decode, prepared.request
    if not (r.sentences and r.runon and norms.short and norms.starters) or p.cons is not None or p.parts is not None \
            or d.nbest > 1 or d.sampling:
        return hyps
    starters = dict(norms.starters)
    todo = [(j, at) for j, (line, x, hs) in enumerate(zip(p.lines, p.ids, hyps, strict=True))
            if hs and len(x) >= 2 * Norms.MIN_TOKENS and len(hs[0].tokens) < norms.short * len(x)
            and (at := spans.best_cut(line, starters)) is not None]
    if not todo:
        return hyps
    parts = [s for j, at in todo for s in (p.lines[j][:at].rstrip(), p.lines[j][at:].lstrip())]
    ids = engine.encode(parts)
    new = yield ids, d, None
    whole = confidences(engine, [(p.lines[j], p.ids[j]) for j, _ in todo], [hyps[j][0] for j, _ in todo],
                        engine.detokenize([hyps[j][0].tokens for j, _ in todo]))
    sure = confidences(engine, list(zip(parts, ids, strict=True)), [hs[0] for hs in new],
                       engine.detokenize([hs[0].tokens for hs in new]))
    p.counts["guard.cut"] += len(todo)
    for k in reversed(range(len(todo))):                 # (from the last: a cut moves the sentences after it)
        (j, at), (a, b), (na, nb) = todo[k], sure[2 * k:2 * k + 2], (len(ids[2 * k]), len(ids[2 * k + 1]))
        if (a * na + b * nb) / max(1, na + nb) > whole[k]:
            _cut_sentence(p, j, at, ids[2 * k:2 * k + 2])
            hyps[j:j + 1] = new[2 * k:2 * k + 2]
            p.counts["guard.kept"] += 1
    return hyps


def _cut_sentence(p: Prepared, j: int, at: int, ids: list[list[int]]) -> None:
    """Sentence ``j`` of a prepared request made two, cut at character ``at`` of it (guarded)."""
    first = 0
    for i, piece in enumerate(p.pieces):
        if j < first + len(piece.spans):
            a, b = piece.spans[j - first]
            line = p.lines[j]
            left, right = line[:at].rstrip(), line[at:].lstrip()
            start = a + len(line) - len(right)
            spans = (*piece.spans[:j - first], (a, a + len(left)), (start, b), *piece.spans[j - first + 1:])
            p.pieces[i] = Pieces(piece.text, spans)
            p.lines[j:j + 1], p.ids[j:j + 1], p.linked[j:j + 1] = [left, right], ids, [p.linked[j]] * 2
            return
        first += len(piece.spans)


def finish(engine: Engine, prepared: Prepared, hyps: list[list[Hypothesis]]) -> list[list[Translation]]:
    """Per input text, its translations: ``nbest`` of them (format html: one, its markup put back)."""
    p = prepared
    flat = [(line, x, h) for line, x, hs in zip(p.lines, p.ids, hyps, strict=True) for h in hs]
    texts = engine.detokenize([h.tokens for _, _, h in flat])
    sure = confidences(engine, [(line, x) for line, x, _ in flat], [h for _, _, h in flat], texts)
    links: list[str | None] = [None] * len(flat)
    back: list[str | None] = [None] * len(flat)
    if p.aligns:
        need = [k for k, on in enumerate(on for on, hs in zip(p.linked, hyps, strict=True) for _ in hs) if on]
        # (each hypothesis's attention, where its engine returned it while decoding: no second pass)
        args = ([flat[k][0] for k in need], [flat[k][2].tokens for k in need])
        ids, attention = [flat[k][1] for k in need], [flat[k][2].attention for k in need]
        for k, link in zip(need, engine.alignments(*args, ids=ids, attention=attention), strict=True):
            links[k] = link
        if p.parts is not None:                          # markup places a tag by the other way where this has none
            for k, link in zip(need, engine.alignments(*args, True, ids, attention), strict=True):
                back[k] = link
    rows = iter(zip(texts, (h for _, _, h in flat), links, back, sure, strict=True))
    per_line = [[next(rows) for _ in hs] for hs in hyps]
    target = engine.languages[1] if engine.languages else None
    joined, at = [], 0
    for piece in p.pieces:
        mine, at = per_line[at:at + len(piece.spans)], at + len(piece.spans)
        joined.append(_joined(piece, mine, target, max(1, p.decode.nbest), p.request.alignments))
    return [t for t, _ in joined] if p.parts is None else _rendered(p, joined)


def _rendered(p: Prepared, joined: list[tuple[list[Translation], str]]) -> list[list[Translation]]:
    """Each text's translation with its markup put back (markup.Fragment.render; a protected plain text read back as
    text: spans.from_html), and how many of its protected spans it holds (counted: ``spans.kept``, ``spans.lost``)."""
    assert p.parts is not None
    out, rows = [], iter(joined)
    for k, (text, part) in enumerate(zip(p.request.texts, p.parts, strict=True)):
        if part is None:
            out.append(next(rows)[0])
            continue
        mine = [next(rows) for _ in part.lines]
        rendered = part.render([(t[0].text, t[0].alignment or "", b) for t, b in mine])
        sure = of_text([t[0].confidence for t, _ in mine])
        coded = p.coded[k] if p.coded is not None else None
        if coded is not None:
            lead, trail, codes = coded
            rendered = lead + spans.text(spans.from_html(rendered, codes)).strip() + trail
        kinds = tuple(x for x in p.request.protect if p.request.format == "text" or x != "tags")
        kept = spans.kept(text, rendered, kinds)
        p.counts["spans.kept"] += kept[0]
        p.counts["spans.lost"] += kept[1] - kept[0]
        out.append([Translation(rendered, sum(t[0].score for t, _ in mine), spans=kept, confidence=sure)])
    return out


# a sentence's text, hypothesis, links, links back, confidence
Row = tuple[str, "Hypothesis", "str | None", "str | None", float]


def confidences(engine: Engine, sources: Sequence[tuple[str, Sequence[int]]], hyps: Sequence[Hypothesis],
                outputs: Sequence[str]) -> list[float]:
    """Each hypothesis' confidence (hypotheses.py) by the engine's calibration, for its (source sentence, its ids)
    and its text."""
    return engine.calibration(feature_rows(engine, sources, hyps, outputs))


def feature_rows(engine: Engine, sources: Sequence[tuple[str, Sequence[int]]], hyps: Sequence[Hypothesis],
                 outputs: Sequence[str]) -> list[list[float]]:
    """hypotheses.features of each hypothesis (what :func:`confidences` and ``aiayn calibrate`` read)."""

    unk, norms = engine.cfg.unk_id, engine.norms
    return [features(x, h, norms, flag(line, x, text, h.tokens, norms), unk)
            for (line, x), h, text in zip(sources, hyps, outputs, strict=True)]


def _joined(piece: Pieces, rows: list[list[Row]], target: str | None, nbest: int,
            aligned: bool) -> tuple[list[Translation], str]:
    """One text's translations from its sentences' (the k-th of each joined into its k-th), and the first's links
    back (format html)."""
    if not rows:                                         # a blank text (its line breaks kept)
        return [Translation(spans.join(piece, [], target)[0], 0.0, "" if aligned else None,
                            confidence=1.0)] * nbest, ""
    if len(rows) == 1 and piece.spans[0] == (0, len(piece.text)):     # one sentence, all of the text: as it came
        return [Translation(t, h.score, a, confidence=c) for t, h, a, _, c in rows[0]], rows[0][0][3] or ""
    out, back = [], ""
    for k in range(len(rows[0])):
        mine = [r[min(k, len(r) - 1)] for r in rows]
        outs = [t for t, _, _, _, _ in mine]
        text, starts = spans.join(piece, outs, target)
        link = None if mine[0][2] is None else spans.merge_links(piece, outs, text, starts, [r[2] or "" for r in mine])
        if k == 0 and mine[0][3] is not None:
            back = spans.merge_links(piece, outs, text, starts, [r[3] or "" for r in mine])
        out.append(Translation(text, sum(h.score for _, h, _, _, _ in mine), link,
                               confidence=of_text([c for _, _, _, _, c in mine])))
    return out, back


def translate(engine: Engine, request: Request) -> Translated:
    """The request's translations, decoded by ``engine`` in this thread."""
    prepared = prepare(engine, request)
    return Translated(finish(engine, prepared, decode(engine, prepared)), prepared.counts)


def one_line_each(out: list[list[Translation]]) -> list[str]:
    """Each input's best translation as one line (a line break it kept: a space), as a line-based caller writes it."""
    return [one_line(re.sub(r"\s*\n\s*", "\n", t[0].text).strip()) for t in out]


# --- Repair: each sentence's translation checked, and a flagged one decoded again ----------------------------------

LOOP = 4                  # times a run of tokens is repeated in a row for a loop
COPIES = 0.01             # training data copying more often than this: copies are not flagged
KINDS = ("loop", "copy", "short", "long")

Call = tuple[list[list[int]], DecodeConfig, "list[Constraints | None] | None"]


def _loops(tokens: Sequence[int]) -> bool:
    """Whether some run of 1-4 tokens is repeated :data:`LOOP` times in a row: for some n, (LOOP - 1) x n tokens in a
    row each equal to the one n before it (one pass per n)."""
    for n in range(1, 5):
        same = 0
        for i in range(n, len(tokens)):
            same = same + 1 if tokens[i] == tokens[i - n] else 0
            if same >= (LOOP - 1) * n:
                return True
    return False


def flag(source: str, src_ids: Sequence[int], output: str, tokens: Sequence[int], norms: Norms) -> str | None:
    """The kind of failure a translation shows (one of :data:`KINDS`), or None."""
    if not tokens:
        return "short" if len(src_ids) >= Norms.MIN_TOKENS and norms.ratio else None
    if _loops(tokens) and not _loops(src_ids):
        return "loop"
    words = source.split()
    if norms.copies < COPIES and len(words) >= 3 and output.split() == words:
        return "copy"
    if norms.ratio and len(src_ids) >= Norms.MIN_TOKENS:           # (a token's slack either way)
        if len(tokens) + 1 < norms.ratio[0] * len(src_ids):
            return "short"
        if len(tokens) - 1 > norms.ratio[1] * len(src_ids):
            return "long"
    return None


SEVERITY = {None: 0, "short": 1, "long": 1, "copy": 2, "loop": 3}


def settings(kind: str, decode: DecodeConfig, n_src: int, norms: Norms) -> DecodeConfig:
    """The settings that prevent ``kind`` for a source of ``n_src`` tokens."""
    if kind == "loop":
        return decode.replace(no_repeat_ngram=3)
    if kind == "copy":
        return decode.replace(beam=max(4, 2 * decode.beam), no_repeat_ngram=3)
    assert norms.ratio is not None
    if kind == "short":
        return decode.replace(min_len=max(decode.min_len, math.ceil(norms.ratio[0] * n_src)))
    return decode.replace(max_len_a=norms.ratio[1], max_len_b=1)


def repaired(texts: Sequence[str], ids: Sequence[Sequence[int]], cons: Sequence[Constraints | None] | None,
             hyps: list[list[Hypothesis]], decode: DecodeConfig, norms: Norms,
             detokenize: Callable[[list[list[int]]], list[str]], repair: bool, counts: Counter[str]) -> Generator[
                 Call, list[list[Hypothesis]], list[list[Hypothesis]]]:
    """The sentences' hypotheses with those flagged decoded again (the module's docstring): a plan, as engine.plan, that
    yields the calls to make (ids, settings, constraints) and is sent their hypotheses. ``detokenize``: ids -> text;
    ``repair``: the request's option (off: the flagged are only counted, in ``counts``)."""
    if decode.sampling or not hyps:
        return hyps
    outputs = detokenize([hs[0].tokens if hs else [] for hs in hyps])
    flags = [flag(t, x, o, hs[0].tokens if hs else [], norms) if x else None
             for t, x, o, hs in zip(texts, ids, outputs, hyps, strict=True)]
    groups: dict[DecodeConfig, list[int]] = {}
    for i, kind in enumerate(flags):
        if kind is not None:
            counts[f"repair.{kind}.flagged"] += 1
            if repair:
                groups.setdefault(settings(kind, decode, len(ids[i]), norms), []).append(i)
    for again, rows in groups.items():
        new = yield [list(ids[i]) for i in rows], again, None if cons is None else [cons[i] for i in rows]
        redone = detokenize([hs[0].tokens if hs else [] for hs in new])
        for i, hs, text in zip(rows, new, redone, strict=True):
            kind, was = flag(texts[i], ids[i], text, hs[0].tokens if hs else [], norms), SEVERITY[flags[i]]
            if hs and (SEVERITY[kind] < was or SEVERITY[kind] == was and hs[0].score > hyps[i][0].score):
                hyps[i] = hs
                counts[f"repair.{flags[i]}.repaired"] += SEVERITY[kind] < was
    return hyps
