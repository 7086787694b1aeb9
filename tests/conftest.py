"""Shared fixtures (prepared Multi30k and copy-task data dirs and a model trained on the copy task, built once per
session; every child process killed when the session ends), and the rule that under CI (``CI`` set, as .ci/run does)
no test may skip: a skip there is a failure naming its reason (tests/project/test_conftest.py). What tests share that
is not a fixture is in tests/helpers.py; each part's own fixtures are in its folder's conftest.py."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aiayn.corpora import fetch
from aiayn.data import DataDir
from aiayn.prepare import PrepareOptions, prepare
from tests.helpers import _CHILDREN, three_ways_corpus

# Reasons a test may still skip under CI: hardware a CI machine does not have.
MAY_SKIP_IN_CI = ("CUDA", "GPU")


def _strict(report: Any) -> Any:
    if os.environ.get("CI") and report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        if not any(word in reason for word in MAY_SKIP_IN_CI):
            report.outcome = "failed"
            report.longrepr = f"skipped under CI, where every test must run (install what it needs): {reason}"
    return report


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[Any]:
    return _strict((yield))


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Iterator[Any]:
    return _strict((yield))


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


@pytest.fixture(scope="session")
def copy_model(copy_dir: DataDir, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run dir trained on the copy task with aiayn/configs/copy.yaml (about 40 s on 2 cores): it copies >= 99% of
    held-out strings (tests/train/test_train.py), so its translations differ from line to line and the right one is known
    (the input). Its training time is in ``copy_model / "seconds"``."""
    from aiayn.cli.main import main
    from aiayn.recipes import RECIPES

    run = tmp_path_factory.mktemp("runs") / "copy"
    t0 = time.perf_counter()
    assert main(["train", "--data", str(copy_dir.path), "--out", str(run), "--config", str(RECIPES / "copy.yaml"),
                 "--set", "tensorboard=false"]) == 0
    (run / "seconds").write_text(f"{time.perf_counter() - t0:.1f}\n")
    return run


@pytest.fixture()
def write(tmp_path: Path):  # type: ignore[no-untyped-def]
    """write("name", "line1\\nline2\\n") -> path under tmp_path (bytes are written as they are)."""

    def _write(name: str, content: str | bytes) -> Path:
        p = tmp_path / name
        p.write_bytes(content if isinstance(content, bytes) else content.encode())
        return p

    return _write


@pytest.fixture(scope="session", autouse=True)
def _no_child_left_behind() -> Iterator[None]:
    yield
    for proc in _CHILDREN:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def three_ways(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A multilingual model of tests/helpers.py's three_ways_corpus (about a minute on 2 cores), trained on the four
    directions to and from ``fw`` (nx-up and up-nx are zero-shot) with the copy task's recipe."""
    from aiayn.cli.main import main
    from aiayn.recipes import RECIPES

    c = three_ways_corpus(tmp_path_factory.mktemp("three"), {"train": 6000, "valid": 60, "test": 100})
    run = c / "run"
    assert main(["prepare", "--train", str(c / "train"), "--valid", str(c / "valid"), "--langs", "fw,nx,up",
                 "--directions", "fw", "--vocab-size", "284", "--out", str(c / "data")]) == 0
    assert main(["train", "--data", str(c / "data"), "--out", str(run), "--config", str(RECIPES / "copy.yaml"),
                 "--set", "tensorboard=false", "max_steps=600", "valid_every_steps=300"]) == 0
    return run
