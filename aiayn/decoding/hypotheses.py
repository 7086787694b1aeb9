"""What a search gives for each line, and how it is stopped: the types every engine and the searches share
(search.py, engines/), in a module that imports nothing, so that an engine without PyTorch (CTranslate2, aiayn's
worker processes) shares them without importing the searches."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


class Stopped(Exception):
    """A search given ``stop`` found it true between two steps (``aiayn serve``: every request of the batch timed out
    or went away), and stopped without results."""


Stop = Callable[[], bool]


@dataclass
class Hypothesis:
    """One translation of a line, as every engine gives it."""

    tokens: list[int]      # without BOS and EOS
    score: float           # log-probability / length penalty (what beam search ranks by)
    logprob: float         # sum of token log-probabilities, EOS included
    # the runner-up's (score, tokens), where the search kept one beside it (beam search, both engines): how torn
    # the search was (confidence.features)
    runner_up: tuple[float, list[int]] | None = None
    # its encoder-decoder attention where the engine returned it while decoding (CTranslate2's return_attention, the
    # layer and heads its word alignments read): a row per token of ``tokens``, a column per source piece and EOS;
    # its word alignment is read from it without decoding the line again (engine.alignments); its first row None
    # where the search returns that row wrong (CTranslate2's beam search), filled in when first asked. Not compared.
    attention: Any = field(default=None, compare=False, repr=False)


def max_length(n_src_tokens: int, a: float, b: int, max_positions: int) -> int:
    """The longest output (tokens before EOS) allowed for a source sentence of ``n_src_tokens`` tokens (EOS not
    counted): floor(a * n + b), at least 1, and within the model's positions. The length rule of every engine
    aiayn drives (search.py, CTranslate2 through engines/ctranslate2.py, transformers through export.py)."""
    return max(1, min(max_positions - 1, math.floor(a * n_src_tokens + b)))
