"""aiayn: the Transformer of "Attention Is All You Need" as tested, fast, deployable software.

The names below are imported when first used (PEP 562), so that what needs no PyTorch — the command line on
CTranslate2, the tokenizer, the configuration — starts without importing it (``import torch`` alone takes 1-4 s).
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .config import DecodeConfig, ModelConfig, RunConfig, TrainConfig
    from .model import Transformer, make_model
    from .rundir import RunDir
    from .runtime import configure
    from .translator import Translator

__version__ = "0.1.0"

# each public name: the module it comes from
_HOMES = {"ModelConfig": "config", "TrainConfig": "config", "DecodeConfig": "config", "RunConfig": "config",
          "Transformer": "model", "make_model": "model", "Translator": "translator", "RunDir": "rundir",
          "configure": "runtime"}

__all__ = ["ModelConfig", "TrainConfig", "DecodeConfig", "RunConfig", "Transformer", "make_model", "Translator",
           "RunDir", "configure", "__version__"]


def __getattr__(name: str) -> Any:
    """A public name, or a module of the package (``aiayn.model``), imported now."""
    if name in _HOMES:
        value = getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)
        globals()[name] = value
        return value
    if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'aiayn' has no attribute {name!r}")
