"""The models one server serves, told apart by their language pair (``aiayn serve --model RUN_A --model RUN_B``).

A request names the pair it wants (``source`` and ``target``; either may be left out where only one model fits it) and
is routed to that model; an unknown pair is a 400 naming the pairs that exist. Language codes are compared as
LibreTranslate compares them: ISO 639-1 codes, lower case, with its aliases (``zh-Hans`` is ``zh``, ``zh-Hant`` is
``zt``, ``pt-BR`` is ``pb``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ..engine import Engine, Unsupported
from ..guards import ServiceError, cut
from ..interop import ct2
from ..pipeline import Prepared, Request, Translation, prepare, translate_async
from ..rundir import RunDir
from ..runtime import resolve_workers
from .batcher import Batcher, Limits, ModelMetrics, WholeBatcher

if TYPE_CHECKING:
    from ..translate import Translator

# English names of the languages LibreTranslate serves (its /languages answers with them), and a few more.
NAMES = {
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


def canonical(code: str) -> str:
    """A language code as the server compares it: lower case, aliases resolved."""
    code = code.strip().lower()
    return ALIASES.get(code, code)


def language_name(code: str) -> str:
    return NAMES.get(code, code)


@dataclass(eq=False)
class Served:
    """One model of the server: its Translator, its language pair (None where the run records none) and what /info
    says of it; ``batcher`` is its decoding threads while the server runs."""

    name: str                                   # "de-en", or the run dir's name when it records no languages
    translator: Engine
    pair: tuple[str, str] | None
    info: dict[str, Any] = field(default_factory=dict)
    batcher: Batcher | WholeBatcher | None = None
    settings: dict[str, Any] = field(default_factory=dict)   # the decoding settings it was loaded with

    @classmethod
    def load(cls, path: str | Path, engine: str = "torch", **decode: Any) -> Served:
        run, ckpt = RunDir.locate(path)
        langs = run.languages()
        pair = (canonical(langs[0]), canonical(langs[1])) if langs else None
        t = ct2.load(path, engine, **decode)
        return cls(f"{pair[0]}-{pair[1]}" if pair else run.path.name, t, pair,
                   {"run": str(run.path), "checkpoint": str(ckpt), "engine": t.engine},
                   settings=dict(decode))

    def start(self, limits: Limits, metrics: ModelMetrics) -> None:
        """Its decoders: on a CPU, aiayn's engine in worker processes taking whole batches (``limits.processes``,
        the default) or threads with step-level batching; on a GPU, a thread; CTranslate2's translators, whole
        batches."""
        t = self.translator
        if t.capabilities.processes and limits.processes and t.device.type == "cpu":
            from .processes import ProcessTranslator

            workers = resolve_workers(limits.workers, t.device)
            # the model is the workers' alone from here: this process keeps its tokenizer and settings
            self.translator = ProcessTranslator(self.info["checkpoint"], t, workers, self.settings)
            self.batcher = WholeBatcher(self.translator, limits, metrics)
        elif not t.capabilities.stepwise:
            self.batcher = WholeBatcher(t, limits, metrics)
        else:                                               # stepwise: aiayn's own engine, its model in this process
            self.batcher = Batcher(cast("Translator", t), limits, metrics)

    def prepare(self, status: int, request: Callable[[], Request]) -> Prepared:
        """The ``request`` a front end makes, prepared for this model's engine (pipeline.prepare); what is refused, as
        a ServiceError: HTML that cannot be taken apart and what the engine cannot serve (engine.Unsupported) a 400,
        any other option ``status`` (aiayn's API: 422; LibreTranslate's: 400)."""
        from ..markup import MarkupError

        try:
            return prepare(self.translator, request())
        except MarkupError as e:
            raise ServiceError(400, f"Invalid request: {e}") from None
        except Unsupported:
            raise
        except ValueError as e:
            raise ServiceError(status, f"Invalid request: {e}" if status == 400 else str(e)) from None

    async def translate(self, prepared: Prepared) -> list[list[Translation]]:
        """A prepared request's translations, its lines decoded by the batcher beside every other request's."""
        assert self.batcher is not None, "the server has not started"
        return await translate_async(self.translator, prepared, self.batcher.translate)

    def memory_bytes(self) -> int:
        """The bytes of the model's weights and buffers, as loaded (int8 layers count their packed weights; on
        CTranslate2, its model file)."""
        return self.translator.memory_bytes()

    def describe(self) -> dict[str, Any]:
        """This model in /info."""
        t = self.translator
        model, parameters = t.model_info()
        return {"name": self.name, "source": self.pair[0] if self.pair else None,
                "target": self.pair[1] if self.pair else None, "model": model, "parameters": parameters,
                "memory_bytes": self.memory_bytes(), "precision": t.precision, "device": str(t.device), **self.info}


def run_dirs(paths: list[str | Path]) -> list[Path]:
    """The run dirs (or checkpoints) given; a directory that is neither stands for the run dirs directly inside it."""
    found: list[Path] = []
    for p in map(Path, paths):
        try:
            RunDir.locate(p)
            found.append(p)
        except FileNotFoundError:
            inside = sorted(d for d in p.iterdir() if RunDir(d).config_file.is_file()) if p.is_dir() else []
            if not inside:
                raise
            found += inside
    return found


class Models:
    """The served models, routed by language pair (the module's docstring says how)."""

    def __init__(self, served: list[Served]) -> None:
        if not served:
            raise ValueError("no model to serve")
        names = [s.name for s in served]
        for n in names:
            if names.count(n) > 1:
                raise ValueError(f"two models for {n}: serve one model per language pair")
        if len(served) > 1 and any(s.pair is None for s in served):
            unnamed = next(s.info.get("run", s.name) for s in served if s.pair is None)
            raise ValueError(f"{unnamed} records no languages (its data dir's manifest has none): with several models "
                             "each must have its language pair")
        self.served = served

    @classmethod
    def load(cls, paths: list[str | Path], engine: str = "torch", **decode: Any) -> Models:
        return cls([Served.load(p, engine, **decode) for p in run_dirs(paths)])

    def __iter__(self) -> Any:
        return iter(self.served)

    def __len__(self) -> int:
        return len(self.served)

    def pairs(self) -> str:
        return ", ".join(s.name for s in self.served)

    def route(self, source: str | None, target: str | None) -> Served:
        """The model translating ``source`` into ``target`` (either may be None where one model fits the other);
        ServiceError(400) naming the pairs that exist otherwise."""
        src, tgt = (canonical(c) if c else None for c in (source, target))
        if len(self.served) == 1 and self.served[0].pair is None:
            return self.served[0]
        fits = [s for s in self.served if s.pair and src in (None, s.pair[0]) and tgt in (None, s.pair[1])]
        if len(fits) == 1:
            return fits[0]
        if not fits:
            known = {lang for s in self.served if s.pair for lang in s.pair}
            for code in (src, tgt):
                if code is not None and code not in known:
                    raise ServiceError(400, f"{cut(code)} is not supported (models loaded: {self.pairs()})")
            raise ServiceError(400, f"no model translates {src or 'any language'} into {tgt or 'any language'} "
                                    f"(models loaded: {self.pairs()})")
        raise ServiceError(400, f"several models are loaded ({self.pairs()}): name the source and target languages")

    def languages(self) -> list[dict[str, Any]]:
        """Every language of the loaded pairs, LibreTranslate's /languages shape: ``{"code", "name", "targets"}``."""
        codes = sorted({lang for s in self.served if s.pair for lang in s.pair})
        targets = {c: sorted(s.pair[1] for s in self.served if s.pair and s.pair[0] == c) for c in codes}
        return [{"code": c, "name": language_name(c), "targets": targets[c]} for c in codes]

    def sources(self) -> list[str]:
        return sorted({s.pair[0] for s in self.served if s.pair})
