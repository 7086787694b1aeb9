"""aiayn: the Transformer of "Attention Is All You Need" as tested, fast, deployable software."""

from .config import DecodeConfig, ModelConfig, RunConfig, TrainConfig
from .model import Transformer, make_model
from .rundir import RunDir
from .runtime import configure
from .translate import Translator

__version__ = "0.1.0"

__all__ = ["ModelConfig", "TrainConfig", "DecodeConfig", "RunConfig", "Transformer", "make_model", "Translator",
           "RunDir", "configure", "__version__"]
