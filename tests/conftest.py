"""Shared fixtures: prepared Multi30k and copy-task data dirs, built once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from aiayn.corpora import fetch
from aiayn.data import DataDir, PrepareOptions, prepare


@pytest.fixture(scope="session")
def multi30k_dir(tmp_path_factory: pytest.TempPathFactory) -> DataDir:
    out = tmp_path_factory.mktemp("data") / "multi30k"
    sources = fetch("multi30k", "de", "en", tmp_path_factory.mktemp("cache"))
    prepare(sources, out, PrepareOptions(src="de", tgt="en", vocab_size=8000))
    return DataDir(out)


@pytest.fixture(scope="session")
def copy_dir(tmp_path_factory: pytest.TempPathFactory) -> DataDir:
    """The seeds' copy task, prepared once per session (training, fault and data-parallel tests)."""
    out = tmp_path_factory.mktemp("data") / "copy"
    prepare(fetch("copy", "in", "out", tmp_path_factory.mktemp("cache")), out,
            PrepareOptions(src="in", tgt="out", vocab_size=281))
    return DataDir(out)


@pytest.fixture()
def write(tmp_path: Path):  # type: ignore[no-untyped-def]
    """write("name", "line1\\nline2\\n") -> path under tmp_path (bytes are written as they are)."""

    def _write(name: str, content: str | bytes) -> Path:
        p = tmp_path / name
        p.write_bytes(content if isinstance(content, bytes) else content.encode())
        return p

    return _write
