"""A request's route: what translates it, written once for every door.

A route is its **legs**, translating one after another through the languages between them (a pivot: de→en by one
model, then en→fr by the next), and its **fallback**, a second route for the texts the legs are unsure of (a stronger
model: the teacher behind a student, a bigger beam), whose translations are kept where they are surer. A route is
chosen once per request: by ``aiayn translate --model A --model B --fallback C``, by the Python API
(translator.Translator), by the server for a request's language pair (serving/models.py: ``Models.route``).

What a leg is, is the door's: an engine (the command line, the Python API) or a served model with its batcher (the
server). A leg may itself be a route with a fallback of its own (the server's pivot through a model that has one). The
steps are one plan, :meth:`Route.plan`, a generator that yields ``(leg, request)`` for each translation to make and is
sent its :class:`pipeline.Translated`; the command line drives it in its thread (:meth:`Route.follow`), the server
awaits each leg on the event loop as it drives the plan itself (serving/models.py: ``Models.translate``, so that
nothing below the server calls back up into it): the same steps, no second copy. What happened (the
sentences repaired, the texts sent to the fallback and those it bettered) comes back with the translations, counted
(``Translated.counts``), never kept in the module.

**Language codes (:func:`canonical`).** Language codes as aiayn's server and its packages name them: LibreTranslate's
ISO 639-1 codes, lower case, with its
aliases (``zh-Hans`` is ``zh``, ``zh-Hant`` is ``zt``, ``pt-BR`` is ``pb``), and their English names.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Generator, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any, Generic, TypeVar

from ..config import DecodeConfig
from .pipeline import NAMES, Request, Translated, Translation, translate

Leg = TypeVar("Leg")
Plan = Generator[tuple[Leg, Request], Translated, Translated]

# the decoding settings a fallback keeps (with every option of the request): how a text's sentences are bounded
# and given, not how they are searched (the fallback decodes with its own run's settings)
PER_TEXT = tuple(f.name for f in fields(DecodeConfig) if f.metadata.get("per_sentence"))


@dataclass(frozen=True, eq=False)
class Route(Generic[Leg]):
    """The legs that translate a request in turn, and the fallback for the texts they are less sure of than
    ``min_confidence`` (the module's docstring). ``via``: the languages between the legs, where known (the server
    answers with them); ``name``: what the server counts its requests under ("de-en", "de-en-fr")."""

    legs: tuple[Leg | Route[Leg], ...]
    fallback: Route[Leg] | None = None
    min_confidence: float = 0.5
    via: tuple[str, ...] = ()
    name: str = ""

    def __post_init__(self) -> None:
        if not self.legs:
            raise ValueError("a route needs at least one model")

    def plan(self, request: Request) -> Generator[tuple[Leg, Request], Translated, Translated]:
        """The steps: each leg asked in turn (:func:`asked_of`), then the unsure texts asked of the fallback
        (:func:`only`) and its surer translations kept (:func:`kept_surer`)."""
        out, counts = yield from self._through(request)
        low = unsure(out, self.min_confidence) if self.fallback is not None else []
        if self.fallback is not None and low:
            again, more = yield from self.fallback.plan(only(request, low))
            counts = counts + more
            counts["fallback.sent"] += len(low)
            counts["fallback.kept"] += kept_surer(out, low, again)
        return Translated(out, counts)

    def _through(self, request: Request) -> Generator[tuple[Leg, Request], Translated, Translated]:
        counts: Counter[str] = Counter()
        out: list[list[Translation]] = []
        for i, leg in enumerate(self.legs):
            asked = request if i == len(self.legs) - 1 else asked_of(request)
            if i:
                asked = replace(asked, texts=[ts[0].text for ts in out])
            if isinstance(leg, Route):
                out, more = yield from leg.plan(asked)
            else:
                out, more = yield leg, asked
            counts += more
        return Translated(out, counts)

    def checks(self, request: Request) -> list[tuple[Leg, Request]]:
        """What each leg and the fallback are asked of ``request`` with its texts left out: what a door prepares
        before any work (pipeline.prepare refuses by name what an engine cannot do), so that a refusal of the last
        leg, or of the fallback, comes before the first has translated anything."""
        empty = replace(request, texts=[], constraints=[] if request.constraints else None)
        out: list[tuple[Leg, Request]] = []
        for i, leg in enumerate(self.legs):
            asked = empty if i == len(self.legs) - 1 else asked_of(empty)
            out += leg.checks(asked) if isinstance(leg, Route) else [(leg, asked)]
        return out + (self.fallback.checks(only(empty, [])) if self.fallback is not None else [])

    def follow(self, request: Request) -> Translated:
        """The request's translations, each step made by pipeline.translate in this thread (legs that are engines;
        the server, whose legs are its models, drives :meth:`plan` itself, awaiting its batchers)."""
        plan = self.plan(request)
        try:
            leg, asked = next(plan)
            while True:
                leg, asked = plan.send(translate(leg, asked))  # type: ignore[arg-type]
        except StopIteration as done:
            return done.value

    def members(self, fallbacks: bool = True) -> list[Leg]:
        """Every leg it translates with, a leg's own route's included, and (``fallbacks``) its fallbacks'."""
        out = [x for leg in self.legs for x in (leg.members(fallbacks) if isinstance(leg, Route) else [leg])]
        return out + (self.fallback.members() if fallbacks and self.fallback is not None else [])

    def first(self) -> Leg:
        """The leg that reads the request's source text."""
        leg = self.legs[0]
        return leg.first() if isinstance(leg, Route) else leg

    def last(self) -> Leg:
        """The leg that writes its target text."""
        leg = self.legs[-1]
        return leg.last() if isinstance(leg, Route) else leg


def asked_of(request: Request) -> Request:
    """What each leg but the last is asked (the last is asked ``request`` itself, its texts the previous one's
    translations): the texts in the request's format, with its decoding settings, for their best translation only.
    Constraints are the target's, so only the last keeps them; word alignments and a glossary, which tie the source to
    the target, are refused, naming the option in the front end's words."""
    names = {**NAMES, **request.names}
    asked = [names[k] for k, on in (("alignments", request.alignments), ("glossary", bool(request.glossary))) if on]
    if asked:
        raise ValueError(f"{' and '.join(asked)} need a model that translates directly, not through a pivot language")
    return replace(request, decode={**request.decode, "nbest": 1}, constraints=None)


def unsure(out: list[list[Translation]], min_confidence: float) -> list[int]:
    """The inputs whose (best) translation is less sure than ``min_confidence``."""
    return [i for i, ts in enumerate(out) if ts and ts[0].confidence is not None and ts[0].confidence < min_confidence]


def only(request: Request, which: Sequence[int]) -> Request:
    """The request for a fallback: some of its texts only (their constraints with them), its options, and of its
    decoding settings those that say how a text is bounded and given (:data:`PER_TEXT`)."""
    cons = request.constraints
    kept = {k: v for k, v in request.decode.items() if k in PER_TEXT}
    return replace(request, texts=[request.texts[i] for i in which], decode=kept,
                   constraints=None if cons is None else [cons[i] for i in which])


def kept_surer(out: list[list[Translation]], low: Sequence[int], again: list[list[Translation]]) -> int:
    """The fallback's translations ``again`` of the inputs ``low`` put in ``out`` where they are surer; how many."""
    kept = 0
    for i, ts in zip(low, again, strict=True):
        if (ts[0].confidence or 0.0) > (out[i][0].confidence or 0.0):
            out[i] = ts
            kept += 1
    return kept


def languages(route: Route[Any]) -> tuple[str, str] | None:
    """A route of engines: its first one's source and its last one's target, where both are recorded."""
    first, last = route.first().languages, route.last().languages
    return (first[0], last[1]) if first and last else None


def with_fallback(route: Route[Leg], back: Leg, min_confidence: float) -> Route[Leg]:
    """``route`` (of engines) with ``back`` as the fallback of what translates its language pair, the server's rule
    (serving/models.py: a fallback serves the model of its pair): the whole route where the pairs are the same (or
    one records none), else each leg of that pair (a pivot through a model that has a stronger one); ValueError
    naming the pairs where nothing does."""
    mine, whole = getattr(back, "languages", None), languages(route)
    if mine is None or whole is None or tuple(mine) == whole:
        return replace(route, fallback=Route((back,)), min_confidence=min_confidence)
    legs = tuple(Route((leg,), Route((back,)), min_confidence) if getattr(leg, "languages", None) == mine else leg
                 for leg in route.legs)
    if all(a is b for a, b in zip(legs, route.legs, strict=True)):
        raise ValueError(f"the fallback translates {'-'.join(mine)}: neither the route's pair ({'-'.join(whole)}) nor "
                         "one of its models'")
    return replace(route, legs=legs)


# --- Language codes and names --------------------------------------------------------------------------------------

# English names of the languages LibreTranslate serves (its /languages answers with them), and a few more.
LANGUAGES = {
    "ar": "Arabic", "az": "Azerbaijani", "bg": "Bulgarian", "bn": "Bengali", "ca": "Catalan", "cs": "Czech",
    "da": "Danish", "de": "German", "el": "Greek", "en": "English", "eo": "Esperanto", "es": "Spanish",
    "et": "Estonian", "eu": "Basque", "fa": "Persian", "fi": "Finnish", "fr": "French", "ga": "Irish",
    "gl": "Galician", "he": "Hebrew", "hi": "Hindi", "hu": "Hungarian", "id": "Indonesian", "it": "Italian",
    "ja": "Japanese", "ko": "Korean", "lt": "Lithuanian", "lv": "Latvian", "ms": "Malay", "nb": "Norwegian",
    "nl": "Dutch", "pb": "Portuguese (Brazil)", "pl": "Polish", "pt": "Portuguese", "ro": "Romanian", "ru": "Russian",
    "sk": "Slovak", "sl": "Slovenian", "sq": "Albanian", "sr": "Serbian", "sv": "Swedish", "th": "Thai",
    "tl": "Tagalog", "tr": "Turkish", "uk": "Ukrainian", "ur": "Urdu", "vi": "Vietnamese", "zh": "Chinese",
    "zt": "Chinese (traditional)",
}
ALIASES = {"zh-hans": "zh", "zh-cn": "zh", "zh-hant": "zt", "zh-tw": "zt", "pt-br": "pb"}


# ISO 639-3 (and 639-2/B) codes as OPUS-MT's multilingual models name their targets (>>fra<<), to ISO 639-1
THREE = {
    "ara": "ar", "aze": "az", "bul": "bg", "ben": "bn", "cat": "ca", "ces": "cs", "cze": "cs", "dan": "da",
    "deu": "de", "ger": "de", "ell": "el", "gre": "el", "eng": "en", "epo": "eo", "spa": "es", "est": "et",
    "eus": "eu", "baq": "eu", "fas": "fa", "per": "fa", "fin": "fi", "fra": "fr", "fre": "fr", "gle": "ga",
    "glg": "gl", "heb": "he", "hin": "hi", "hun": "hu", "ind": "id", "ita": "it", "jpn": "ja", "kor": "ko",
    "lit": "lt", "lav": "lv", "msa": "ms", "may": "ms", "nob": "nb", "nld": "nl", "dut": "nl", "pol": "pl",
    "por": "pt", "ron": "ro", "rum": "ro", "rus": "ru", "slk": "sk", "slo": "sk", "slv": "sl", "sqi": "sq",
    "alb": "sq", "srp": "sr", "swe": "sv", "tha": "th", "tgl": "tl", "tur": "tr", "ukr": "uk", "urd": "ur",
    "vie": "vi", "zho": "zh", "chi": "zh", "cmn": "zh",
}


def from_tag_code(code: str) -> str:
    """A language code as a model's target tag spells it (``fra``, ``por_Latn``, ``pt_br``) as aiayn names it
    (``fr``, ``pt``, ``pb``): ISO 639-1 where known, else as it is."""
    base = code.split("_")[0].lower()
    return canonical(code.replace("_", "-")) if canonical(code.replace("_", "-")) in LANGUAGES else THREE.get(base,
    base)


def canonical(code: str) -> str:
    """A language code as the server compares it: lower case, aliases resolved."""
    code = code.strip().lower()
    return ALIASES.get(code, code)


def language_name(code: str) -> str:
    return LANGUAGES.get(code, code)
