"""Shared fixtures (prepared Multi30k and copy-task data dirs and the trained models tests/fixtures/trained.py keeps,
made once per session; every child process killed when the session ends), and the rule that under CI (``CI`` set, as
.ci/run does) no test may skip: a skip there is a failure naming its reason (tests/project/test_conftest.py). What
tests share that is not a fixture is in tests/helpers.py; each part's own fixtures are in its folder's conftest.py."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from filelock import FileLock

from aiayn.data.corpora import fetch
from aiayn.data.datadir import DataDir
from aiayn.data.prepare import PrepareOptions, prepare
from tests.fixtures.trained import POSITION, kept, prepare_copy, prepare_three, train
from tests.helpers import _CHILDREN

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
        # its threads as many as its cores: PyTorch counted them before, and OpenMP's default in a library loaded later
        # (CTranslate2's) counts the machine's; threads spinning on one core for one another made the searches' tests
        # ten times slower, and a CTranslate2 decoding of 300 tokens take 96 s instead of 0.3
        torch.set_num_threads(len(mine))
        os.environ["OMP_NUM_THREADS"] = str(len(mine))


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
    mine, threads = os.sched_getaffinity(0), torch.get_num_threads()
    os.sched_setaffinity(0, ALL_CORES)      # built on every core, as without workers: the same model
    torch.set_num_threads(len(ALL_CORES))
    try:
        yield
    finally:
        os.sched_setaffinity(0, mine)
        torch.set_num_threads(threads)


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
    return DataDir(built_once(tmp_path_factory, "copy-data", prepare_copy) / "copy")


def _trained(name: str, data: Path, run: Path, fresh: bool) -> None:
    """Model ``name`` of tests/fixtures/trained.py into ``run``: the one kept there where it was made from ``data`` and
    the recipe as they are now, unless ``fresh`` (the tests marked ci), else trained here."""
    if fresh or not kept(name, data, run):
        train(name, data, run)


@pytest.fixture(scope="session")
def copy_model(copy_dir: DataDir, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run dir of aiayn/configs/copy.yaml on the copy task, as tests/fixtures/trained.py keeps it: it copies >= 99%
    of held-out strings (tests/train/test_train.py), so its translations differ from line to line and the right one is
    known (the input). Its training time is in ``copy_model / "seconds"``."""
    return built_once(tmp_path_factory, "runs", lambda out: _trained("copy", copy_dir.path, out / "copy", False)) / "copy"


@pytest.fixture(scope="session")
def fresh_copy_model(copy_dir: DataDir, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``copy_model`` trained here and now (about 40 s on 2 cores): what the tests marked ci check the recipe by."""
    build = lambda out: _trained("copy", copy_dir.path, out / "copy", True)  # noqa: E731
    return built_once(tmp_path_factory, "fresh-runs", build) / "copy"


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


def _three_ways_run(tmp_path_factory: pytest.TempPathFactory, name: str, fresh: bool = False) -> Path:
    """Model ``name`` of tests/fixtures/trained.py (``three-target`` or ``three-source``): a multilingual model of
    tests/helpers.py's three_ways_corpus, whose files are in the run's parent folder."""
    def build(out: Path) -> None:
        _trained(name, prepare_three(out, POSITION[name]), out / "run", fresh)

    return built_once(tmp_path_factory, f"{name}{'-fresh' if fresh else ''}", build) / "run"


@pytest.fixture(scope="session")
def three_ways(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tag on the target side (prepare's default: the decoder's first token), 600 updates: it translates each
    trained direction (>= 90 % of lines exactly)."""
    return _three_ways_run(tmp_path_factory, "three-target")


@pytest.fixture(scope="session")
def fresh_three_ways(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``three_ways`` trained here and now (about 40 s on 2 cores): what the tests marked ci check the recipe by."""
    return _three_ways_run(tmp_path_factory, "three-target", fresh=True)


@pytest.fixture(scope="session")
def three_ways_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tag on the source, 150 updates only: too few to translate, enough for the tag to choose the target's
    letters (capitals for up), which is what its tests look at."""
    return _three_ways_run(tmp_path_factory, "three-source")
