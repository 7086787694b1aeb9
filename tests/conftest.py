"""Shared fixtures (prepared Multi30k and copy-task data dirs and a model trained on the copy task, built once per
session; every child process killed when the session ends), and the rule that under CI (``CI`` set, as .ci/run does)
no test may skip: a skip there is a failure naming its reason (tests/project/test_conftest.py). What tests share that
is not a fixture is in tests/helpers.py; each part's own fixtures are in its folder's conftest.py."""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock

from aiayn.data.corpora import fetch
from aiayn.data.datadir import DataDir
from aiayn.data.prepare import PrepareOptions, prepare
from tests.helpers import _CHILDREN, three_ways_corpus

ALL_CORES = os.sched_getaffinity(0) if hasattr(os, "sched_setaffinity") else set()


def _own_cores() -> None:
    """Under pytest-xdist, each worker (and every process it starts: servers, engines' workers) keeps to its share of
    the cores, so that two workers' PyTorch threads do not crowd the same cores (twice the threads there are cores
    made the suite slower, not faster)."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER"), os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if worker is None or count is None or not hasattr(os, "sched_setaffinity"):
        return
    cores = sorted(ALL_CORES)
    mine = cores[int(worker.removeprefix("gw")) % len(cores)::int(count)]
    if int(count) <= len(cores) and mine:
        os.sched_setaffinity(0, mine)


_own_cores()

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


@contextlib.contextmanager
def every_core() -> Iterator[None]:
    """This worker on every core for a while (where the system lets a process choose its cores)."""
    if not ALL_CORES:
        yield
        return
    mine = os.sched_getaffinity(0)
    os.sched_setaffinity(0, ALL_CORES)      # built on every core, as without workers: the same model
    try:
        yield
    finally:
        os.sched_setaffinity(0, mine)


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]) -> Path:
    """Folder ``name`` made by ``build(folder)`` once per test run. Under pytest-xdist (make test runs a worker per
    core) the first worker to ask builds it under a lock, on every core (:func:`_own_cores`), so that a trained model is
    the one a run without workers trains, and the others wait for it; each worker then gets its own copy, so that what
    one test writes into it (a calibration, a conversion) is not seen by another worker's tests."""
    mine = tmp_path_factory.mktemp(name)
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        build(mine)
        return mine
    shared = tmp_path_factory.getbasetemp().parent / f"shared-{name}"      # the run's folder, above each worker's
    with FileLock(f"{shared}.lock"):
        if not (shared / ".built").is_file():
            shutil.rmtree(shared, ignore_errors=True)
            shared.mkdir()
            with every_core():
                build(shared)
            (shared / ".built").touch()
    shutil.copytree(shared, mine, dirs_exist_ok=True, symlinks=True)
    return mine


@pytest.fixture(scope="session")
def multi30k_dir(tmp_path_factory: pytest.TempPathFactory) -> DataDir:
    def build(out: Path) -> None:
        sources = fetch("multi30k", "de", "en", out / "cache")
        prepare(sources, out / "multi30k", PrepareOptions(src="de", tgt="en", vocab_size=8000))

    return DataDir(built_once(tmp_path_factory, "multi30k", build) / "multi30k")


@pytest.fixture(scope="session")
def copy_dir(tmp_path_factory: pytest.TempPathFactory) -> DataDir:
    """The seeds' copy task, prepared once per session (training, fault and data-parallel tests)."""
    def build(out: Path) -> None:
        prepare(fetch("copy", "in", "out", out / "cache"), out / "copy", PrepareOptions(src="in", tgt="out", vocab_size=281))

    return DataDir(built_once(tmp_path_factory, "copy-data", build) / "copy")


@pytest.fixture(scope="session")
def copy_model(copy_dir: DataDir, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run dir trained on the copy task with aiayn/configs/copy.yaml (about 40 s on 2 cores): it copies >= 99% of
    held-out strings (tests/train/test_train.py), so its translations differ from line to line and the right one is known
    (the input). Its training time is in ``copy_model / "seconds"``."""
    from aiayn.cli.main import main
    from aiayn.training.recipes import RECIPES

    def build(out: Path) -> None:
        t0 = time.perf_counter()
        assert main(["train", "--data", str(copy_dir.path), "--out", str(out / "copy"), "--config",
                     str(RECIPES / "copy.yaml"), "--set", "tensorboard=false"]) == 0
        (out / "copy" / "seconds").write_text(f"{time.perf_counter() - t0:.1f}\n")

    return built_once(tmp_path_factory, "runs", build) / "copy"


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


def _three_ways_run(tmp_path_factory: pytest.TempPathFactory, position: str, steps: int) -> Path:
    """A multilingual model of tests/helpers.py's three_ways_corpus, trained for ``steps`` updates on the four
    directions to and from ``fw`` (nx-up and up-nx are zero-shot) with the copy task's recipe, its tag on the
    ``position`` side."""
    from aiayn.cli.main import main
    from aiayn.training.recipes import RECIPES

    def build(out: Path) -> None:
        c = three_ways_corpus(out, {"train": 6000, "valid": 60, "test": 100})
        assert main(["prepare", "--train", str(c / "train"), "--valid", str(c / "valid"), "--langs", "fw,nx,up",
                     "--directions", "fw", "--tag-position", position, "--vocab-size", "284", "--out",
                     str(c / "data")]) == 0
        assert main(["train", "--data", str(c / "data"), "--out", str(c / "run"), "--config",
                     str(RECIPES / "copy.yaml"), "--set", "tensorboard=false", f"max_steps={steps}",
                     f"valid_every_steps={steps // 2}", f"save_every_steps={min(100, steps // 3)}"]) == 0

    return built_once(tmp_path_factory, f"three-{position}", build) / "run"


@pytest.fixture(scope="session")
def three_ways(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """:func:`_three_ways_run` with the tag on the target side (prepare's default: the decoder's first token), 600
    updates (about 40 s on 2 cores): it translates each trained direction (>= 90 % of lines exactly)."""
    return _three_ways_run(tmp_path_factory, "target", 600)


@pytest.fixture(scope="session")
def three_ways_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """:func:`_three_ways_run` with the tag on the source, 150 updates only (about 12 s): too few to translate, enough
    for the tag to choose the target's letters (capitals for up), which is what its tests look at. A model that
    translates is ``three_ways``: one trained model per session, not two, keeps make test short."""
    return _three_ways_run(tmp_path_factory, "source", 150)
