"""The pipeline's tests' own fixtures: the copy model as a Translator, and served (each module its own server)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from aiayn import Translator

from ..helpers import Server


@pytest.fixture(scope="module")
def copier(copy_model: Path) -> Translator:
    """The session's copy model in this process (it copies its input: the right translation is known)."""
    return Translator.load(copy_model, "torch", device="cpu")


@pytest.fixture(scope="module")
def server(copy_model: Path) -> Iterator[Server]:
    """``aiayn serve`` on the copy model, its decoding in threads (a module that serves another model names its own)."""
    s = Server("--no-processes", model=copy_model)
    yield s
    assert s.stop() == 0
