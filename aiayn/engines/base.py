"""What every decoding engine is to the code that drives it, and what each can do.

The engines: aiayn's own (torch.TorchEngine), CTranslate2 (ctranslate2.CTranslate2Engine) and aiayn's in worker
processes (processes.ProcessEngine); auto.ENGINES names each for ``--engine``. A new engine is a module with a
subclass of :class:`EngineBase` (its constructor and ``decode_lines``) and its line in that table. Code outside
them asks an engine what it can do (its :class:`Capabilities`), never which class it is, and a request an engine
cannot serve is refused by name here (:func:`require`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, cast

from ..config import Multilingual, Norms
from ..decoding.hypotheses import Hypothesis

if TYPE_CHECKING:
    from ..config import DecodeConfig, ModelConfig
    from ..data.tokenizer import Vocab
    from ..decoding.constraints import Constraints
    from ..decoding.hypotheses import Calibration
    from ..rundir import RunDir


class Device(Protocol):
    """Where an engine decodes: a torch.device, or where no PyTorch is imported (CTranslate2, aiayn's worker
    processes) runtime.DeviceName; ``str()`` of either names it as ``--device`` does."""

    @property
    def type(self) -> str: ...            # "cpu", "cuda" or "mps"


def decode_batches(ids: Sequence[Sequence[int]], max_positions: int, decode: DecodeConfig) -> list[list[int]]:
    """How aiayn's engine cuts lines into batches, in one place for the engines that must cut them alike (in this
    process, translate.translate_ids; across worker processes, processes.ProcessEngine): the lines' indices sorted
    by their source length as the encoder takes it (cut to ``max_positions`` - 1 tokens, then EOS), cut so that each
    batch's line count x its longest line <= ``decode.batch_tokens`` / ``decode.beam``."""
    lengths = [min(len(x), max_positions - 1) + 1 for x in ids]
    budget = max(1, decode.batch_tokens // max(1, decode.beam))
    out: list[list[int]] = []
    cur: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: lengths[i]):
        if cur and (len(cur) + 1) * lengths[i] > budget:
            out.append(cur)
            cur = []
        cur.append(i)
    if cur:
        out.append(cur)
    return out


@dataclass(frozen=True)
class Capabilities:
    """What an engine can do beyond translating lines."""

    constraints: bool = False   # lexical constraints and glossaries (constrained beam search: constraints.py)
    alignments: bool = False    # word alignments from its attention (align.py), and so HTML with its markup placed
    attention: bool = False     # every attention map of a translation (model.attention_maps: the page)
    stepwise: bool = False      # its searches run step by step in this process (search.BeamSearch), so a server can
    #                             batch at the decoding step (batcher.Batcher); else it decodes whole batches
    processes: bool = False     # its model can be loaded in worker processes (processes.ProcessEngine)


# what each capability lets a request ask for, in the words of the refusal
FEATURES = {"constraints": "constraints (a glossary)", "alignments": "alignments", "html": "html format",
            "attention": "attention maps"}


class Unsupported(ValueError):
    """A request for something the engine cannot do (a 400 from the server, an error from the CLI)."""


def require(engine: Engine | EngineBase, feature: str) -> None:
    """Unsupported naming ``feature`` (a key of :data:`FEATURES`) unless ``engine`` can do it."""
    capability = "alignments" if feature == "html" else feature
    if not getattr(engine.capabilities, capability):
        raise Unsupported(f"{FEATURES[feature]} need aiayn's own engine (the {engine.engine} engine cannot): use "
                          "--engine torch")


def with_fixed(loaded: DecodeConfig, decode: DecodeConfig | None, overrides: dict[str, Any],
               fixed: Sequence[str] = ("device", "precision")) -> DecodeConfig:
    """The settings ``decode`` (default: ``loaded``, those an engine was loaded with) with ``overrides`` (None values
    ignored), refused by name where they change a field ``fixed`` when the engine was loaded (its device, its
    precision; CTranslate2's threads too)."""
    decode = (decode or loaded).replace(**overrides)
    for name in fixed:
        if getattr(decode, name) != getattr(loaded, name):
            raise ValueError(f"{name}={getattr(decode, name)!r}: an engine's {name} is set when it is made (here "
                             f"{getattr(loaded, name)!r}); load it again with {name}=...")
    return decode


# one decoding call of a plan: the source ids of some lines and their constraints (None: none)
Call = tuple[list[list[int]], "list[Constraints | None] | None"]
Plan = Generator[Call, "list[list[Hypothesis]]", "list[list[Hypothesis]]"]


def plan(ids: Sequence[Sequence[int]], decode: DecodeConfig, cons: Sequence[Constraints | None] | None) -> Plan:
    """Which lines are decoded, and how: one rule for every engine and the server's batchers, driven by
    :func:`hypotheses` (a call at a time) or serving.batcher.planned (a call awaited). It yields the calls to
    make and is sent their hypotheses; it returns each line's ``decode.nbest`` hypotheses.

    - A blank line (no source token) is not decoded: it gets ``nbest`` empty hypotheses, so n-best output stays
      rectangular, and a request of blank lines makes no call at all.
    - With constraints and ``decode.keep_plain``, every line is decoded plainly first, and only the lines whose
      translations lack one of their phrases (constraints.unmet) are decoded again with them.
    """

    out: list[list[Hypothesis]] = [[Hypothesis([], 0.0, 0.0)] * max(1, decode.nbest) for _ in ids]
    todo = [i for i, x in enumerate(ids) if len(x)]
    if not todo:
        return out
    lines, mine = [list(ids[i]) for i in todo], None if cons is None else [cons[i] for i in todo]
    if mine is not None and all(c is None for c in mine):
        mine = None
    hyps = yield lines, (None if mine is not None and decode.keep_plain else mine)
    if mine is not None and decode.keep_plain:
        from ..decoding.constraints import unmet

        redo = unmet([[h.tokens for h in hs] for hs in hyps], mine)
        again = (yield [lines[j] for j in redo], [mine[j] for j in redo]) if redo else []
        for j, h in zip(redo, again, strict=True):
            hyps[j] = h
    for i, h in zip(todo, hyps, strict=True):
        out[i] = h
    return out


def one_line(text: str) -> str:
    """A translation is one line: line breaks a decoder produced become spaces (N lines in, N lines out)."""
    return text.replace("\n", " ").replace("\r", " ")


def encode(vocab: Vocab, lines: Sequence[str]) -> list[list[int]]:
    """Each line's source token ids (no EOS); a blank line has none (SentencePiece may give it a piece)."""
    return [ids if line.strip() else [] for line, ids in zip(lines, vocab.src.encode(list(lines)), strict=True)]


def detokenize(vocab: Vocab, token_lists: list[list[int]]) -> list[str]:
    """Target ids -> text, one line each (:func:`one_line`)."""
    return [one_line(t) for t in vocab.tgt.decode(token_lists)]


class Search(Protocol):
    """A stepwise search (search.BeamSearch) as a server drives it: sentences admitted between steps through their
    engine's ``admit``, dropped when their request is gone, and answered as each is done."""

    keys: list[Any]           # each row's key (None: a row that left)

    @property
    def active(self) -> int: ...

    def drop(self, keys: set[Any]) -> None: ...

    def step(self) -> list[tuple[Any, list[Hypothesis]]]: ...


class Engine(Protocol):
    """The interface of an engine as its callers use it (the module's docstring names the engines). An engine writes
    few of it: its constructor (what it decodes with, and :class:`About` its run) and ``decode_lines``; EngineBase
    writes the rest once, and refuses by name what its :class:`Capabilities` do not declare (``constraints``,
    ``alignments``, ``attention``; ``search`` and ``admit``, the stepwise search a server's batcher drives), which an
    engine that can do it overrides.
    """

    engine: str                   # "torch" or "ctranslate2", as --engine names it
    capabilities: Capabilities
    vocab: Vocab
    cfg: ModelConfig              # its model's
    decode: DecodeConfig          # the settings it was loaded with
    precision: str
    workers: int                  # batches it decodes side by side
    calls_at_once: int            # calls a caller may make side by side to advantage (stream.stream)
    languages: tuple[str, str] | None   # (source, target) of its model's training data, where recorded
    multilingual: Multilingual | None   # a model of many directions (its tags: multilingual.py), else None
    norms: Norms                  # what its training data shows of its sentences, where recorded (data.Norms)
    calibration: Calibration      # its features -> a confidence (hypotheses.py): the run's, else the package's

    @property
    def device(self) -> Device:
        """Where it decodes."""
        ...

    def settings(self, decode: DecodeConfig | None = None, **overrides: object) -> DecodeConfig: ...

    def encode(self, lines: Sequence[str]) -> list[list[int]]:
        """Each line's source token ids (no EOS; a blank line: none): a served line is encoded once, here."""
        ...

    def decode_lines(self, ids: list[list[int]], decode: DecodeConfig, cons: list[Constraints | None] | None,
                     stop: Callable[[], bool] | None = None, first: int | None = None) -> list[list[Hypothesis]]:
        """``decode.nbest`` hypotheses of each encoded line (none blank), searched with each line's constraints (None:
        none; only an engine capable of them is given any) as given: the calls of a :func:`plan`; hypotheses.Stopped
        once ``stop()`` is true (an engine that cannot stop mid-call may ignore it). ``first``: the token every
        output starts with, forced and left out of the hypotheses (a target-side language tag, multilingual.py)."""
        ...

    def hypotheses(self, ids: Sequence[Sequence[int]], decode: DecodeConfig,
                   cons: Sequence[Constraints | None] | None,
                   stop: Callable[[], bool] | None = None, first: int | None = None) -> list[list[Hypothesis]]:
        """Each line's hypotheses by the :func:`plan`, its calls made by :meth:`decode_lines` (:func:`hypotheses`;
        ``first`` as decode_lines')."""
        ...

    def detokenize(self, token_lists: list[list[int]]) -> list[str]: ...

    def constraints(self, lines: Sequence[str], phrases: Sequence[Sequence[str] | None] | None,
                    decode: DecodeConfig) -> list[Constraints | None] | None:
        """Each line's target phrases as its search keeps them (capability ``constraints``)."""
        ...

    def alignments(self, lines: Sequence[str], outputs: Sequence[Sequence[int]], source: bool = False,
                   ids: Sequence[Sequence[int]] | None = None, attention: Sequence[Any] | None = None) -> list[str]:
        """Each line's word alignment with its translation's tokens (capability ``alignments``; ``ids``: the lines'
        source ids, when they are at hand; ``attention``: each output's Hypothesis.attention, which spares an engine
        that returned it decoding the line again; None where it did not)."""
        ...

    def attention(self, line: str, **overrides: Any) -> dict[str, Any]:
        """A line's translation with every attention map (capability ``attention``)."""
        ...

    def search(self, decode: DecodeConfig) -> Search:
        """A stepwise search with ``decode``'s settings, empty (capability ``stepwise``)."""
        ...

    def admit(self, search: Search, ids: list[list[int]], keys: list[Any], decode: DecodeConfig,
              cons: list[Constraints | None] | None, first: int | None = None) -> None:
        """Encoded lines (none blank) join ``search`` between two of its steps, named by ``keys`` in its results
        (capability ``stepwise``; ``first`` as :meth:`decode_lines`')."""
        ...

    def memory_bytes(self) -> int:
        """The bytes of its weights as loaded."""
        ...

    def model_info(self) -> tuple[dict[str, Any], int]:
        """Its model's settings (config.ModelConfig as a dict) and its number of parameters."""
        ...

    def close(self) -> None: ...


def hypotheses(engine: Engine, ids: Sequence[Sequence[int]], decode: DecodeConfig,
               cons: Sequence[Constraints | None] | None,
               stop: Callable[[], bool] | None = None, first: int | None = None) -> list[list[Hypothesis]]:
    """Each encoded line's ``decode.nbest`` hypotheses from ``engine``, by the :func:`plan` (what every engine's
    ``hypotheses`` is), its calls made by the engine's ``decode_lines``."""
    steps = plan(ids, decode, cons)
    try:
        call = next(steps)
        while True:
            # (``first`` only when there is one: an engine that never forces a token need not take it)
            call = steps.send(engine.decode_lines(call[0], decode, call[1], stop, **({} if first is None else
                                                                                       {"first": first})))
    except StopIteration as done:
        return done.value


@dataclass(frozen=True)
class About:
    """What a run knows of its text, given to an engine when it is made (its loader reads it: :meth:`of_run`): the
    languages of its training data, their length norms and sentence openers (config.Norms), its calibration of
    confidence (hypotheses.py; None: the package's) and, for a model of many directions, its tags
    (config.Multilingual)."""

    languages: tuple[str, str] | None = None
    norms: Norms = Norms()
    calibration: Calibration | None = None
    multilingual: Multilingual | None = None

    @classmethod
    def of_run(cls, run: RunDir) -> About:
        """What run dir ``run`` records."""
        from ..decoding.hypotheses import for_run

        return cls(run.languages(), run.norms(), for_run(run.path), run.multilingual())


class EngineBase(ABC):
    """What every engine does with text, made of its one primitive, ``decode_lines`` (engine.Engine says what it
    does), and of what its constructor sets: ``vocab``, ``cfg``, ``decode`` (the settings it was loaded with),
    ``device``, ``precision``, ``workers``, and :class:`About` (given to :meth:`__init__`). What an engine cannot do
    (its :class:`Capabilities`) is refused here by name (:func:`require`); an engine that can overrides it."""

    engine: str
    capabilities = Capabilities()
    vocab: Vocab
    cfg: ModelConfig
    decode: DecodeConfig
    precision: str
    workers: int
    calls_at_once: int = 1                            # calls a caller may make side by side to advantage (stream)
    # (:class:`About`'s, for an engine that does not call :meth:`__init__`: none known)
    languages: tuple[str, str] | None = None
    norms: Norms = Norms()
    multilingual: Multilingual | None = None
    _calibration: Calibration | None = None

    def __init__(self, about: About | None = None) -> None:
        about = about or About()
        self.languages, self.norms, self.multilingual = about.languages, about.norms, about.multilingual
        self._calibration = about.calibration

    @abstractmethod
    def decode_lines(self, ids: list[list[int]], decode: DecodeConfig, cons: list[Constraints | None] | None,
                     stop: Callable[[], bool] | None = None, first: int | None = None) -> list[list[Hypothesis]]:
        """engine.Engine's."""

    def settings(self, decode: DecodeConfig | None = None, **overrides: object) -> DecodeConfig:
        """engine.Engine's: ``decode`` (default: those it was loaded with) with ``overrides``, its device and precision
        fixed (:func:`with_fixed`)."""
        return with_fixed(self.decode, decode, overrides)

    def constraints(self, lines: Sequence[str], phrases: Sequence[Sequence[str] | None] | None,
                    decode: DecodeConfig) -> list[Constraints | None] | None:
        """engine.Engine's: None without phrases; engine.Unsupported with any, unless it can keep them."""
        if phrases is not None:
            require(self, "constraints")
        return None

    def alignments(self, lines: Sequence[str], outputs: Sequence[Sequence[int]], source: bool = False,
                   ids: Sequence[Sequence[int]] | None = None, attention: Sequence[Any] | None = None) -> list[str]:
        """engine.Engine's (capability ``alignments``)."""
        require(self, "alignments")
        return []

    def attention(self, line: str, **overrides: Any) -> dict[str, Any]:
        """engine.Engine's (capability ``attention``)."""
        require(self, "attention")
        return {}

    def memory_bytes(self) -> int:
        """engine.Engine's: 0 for an engine that holds no weights of its own."""
        return 0

    def model_info(self) -> tuple[dict[str, Any], int]:
        """engine.Engine's: its model's settings, and 0 parameters where it does not know them."""
        return self.cfg.to_dict(), 0

    def close(self) -> None:
        """engine.Engine's: nothing to release."""
        return None

    def encode(self, lines: Sequence[str]) -> list[list[int]]:
        """Each line's source token ids (no EOS; a blank line: none): a served line is encoded once, here."""
        return encode(self.vocab, lines)

    def detokenize(self, token_lists: list[list[int]]) -> list[str]:
        return detokenize(self.vocab, token_lists)

    def hypotheses(self, ids: Sequence[Sequence[int]], decode: DecodeConfig,
                   cons: Sequence[Constraints | None] | None,
                   stop: Callable[[], bool] | None = None, first: int | None = None) -> list[list[Hypothesis]]:
        """Each line's hypotheses by engine.plan, its calls made by ``decode_lines``."""
        return hypotheses(cast("Engine", self), ids, decode, cons, stop, first)

    def translate_hypotheses(self, lines: Sequence[str], decode: DecodeConfig | None = None,
                             constraints: Sequence[Sequence[str] | None] | None = None,
                             **overrides: object) -> list[list[Hypothesis]]:
        """``decode.nbest`` hypotheses of each line, each line one sentence as given (no splitting: the pipeline
        splits), in order. ``constraints``: per line, target phrases its translation must contain (constraints.py;
        an engine that can keep them)."""
        decode = self.settings(decode, **overrides)
        return self.hypotheses(self.encode(lines), decode, self.constraints(lines, constraints, decode))

    def search(self, decode: DecodeConfig) -> Search:
        """engine.Engine's; only an engine that is ``stepwise`` has searches."""
        raise Unsupported(f"the {getattr(self, 'engine', '?')} engine decodes whole batches, not step by step")

    def admit(self, search: Search, ids: list[list[int]], keys: list[Any], decode: DecodeConfig,
              cons: list[Constraints | None] | None, first: int | None = None) -> None:
        """engine.Engine's (see :meth:`search`)."""
        raise Unsupported(f"the {getattr(self, 'engine', '?')} engine decodes whole batches, not step by step")

    @property
    def calibration(self) -> Calibration:
        """Its calibration of confidence (hypotheses.py): set by its loader (the run's), else the package's."""
        if self._calibration is None:
            from ..decoding.hypotheses import for_run

            self._calibration = for_run(None)
        return self._calibration

    @calibration.setter
    def calibration(self, value: Calibration) -> None:
        self._calibration = value
