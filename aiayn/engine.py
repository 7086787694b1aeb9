"""What every decoding engine is to the code that drives it, and what each can do.

The engines: aiayn's own (translate.Translator), CTranslate2 (ct2.CTranslate2Translator) and aiayn's in worker
processes (processes.ProcessTranslator). Code outside them asks an engine what it can do (its :class:`Capabilities`),
never which class it is, and a request an engine cannot serve is refused by name here (:func:`require`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch

    from .config import DecodeConfig
    from .constraints import Constraints
    from .search import Hypothesis
    from .tokenizer import Vocab


@dataclass(frozen=True)
class Capabilities:
    """What an engine can do beyond translating lines."""

    constraints: bool = False   # lexical constraints and glossaries (constrained beam search: constraints.py)
    alignments: bool = False    # word alignments from its attention (align.py), and so HTML with its markup placed
    attention: bool = False     # every attention map of a translation (model.attention_maps: the page)
    stepwise: bool = False      # its searches run step by step in this process (search.BeamSearch), so a server can
    #                             batch at the decoding step (batcher.Batcher); else it decodes whole batches


# what each capability lets a request ask for, in the words of the refusal
FEATURES = {"constraints": "constraints (a glossary)", "alignments": "alignments", "html": "html format",
            "attention": "attention maps"}


class Unsupported(ValueError):
    """A request for something the engine cannot do (a 400 from the server, an error from the CLI)."""


def require(engine: Engine, feature: str) -> None:
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


class Engine(Protocol):
    """The interface of an engine (the module's docstring names them)."""

    engine: str                   # "torch" or "ctranslate2", as --engine names it
    capabilities: Capabilities
    vocab: Vocab
    decode: DecodeConfig          # the settings it was loaded with
    device: torch.device
    precision: str
    workers: int                  # batches it decodes side by side

    def settings(self, decode: DecodeConfig | None = None, **overrides: object) -> DecodeConfig: ...

    def encode(self, lines: Sequence[str]) -> list[list[int]]:
        """Each line's source token ids (no EOS; a blank line: none): a served line is encoded once, here."""
        ...

    def hypotheses(self, ids: Sequence[Sequence[int]], decode: DecodeConfig,
                   cons: Sequence[Constraints | None] | None,
                   stop: Callable[[], bool] | None = None) -> list[list[Hypothesis]]:
        """``decode.nbest`` hypotheses of each encoded line (no ids: empty ones), with each line's constraints
        (None: none; only an engine capable of them is given any); search.Stopped once ``stop()`` is true."""
        ...

    def detokenize(self, token_lists: list[list[int]]) -> list[str]: ...

    def memory_bytes(self) -> int:
        """The bytes of its weights as loaded."""
        ...

    def model_info(self) -> tuple[dict[str, Any], int]:
        """Its model's settings (config.ModelConfig as a dict) and its number of parameters."""
        ...

    def close(self) -> None: ...
