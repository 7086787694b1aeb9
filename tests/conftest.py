"""Shared fixtures (prepared Multi30k and copy-task data dirs and a model trained on the copy task, built once per
session), helpers (child processes that cannot outlive the suite, waits with a deadline), and the rule that under CI
(``CI`` set, as .ci/run does) no test may skip: a skip there is a failure naming its reason (tests/test_conftest.py)."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from aiayn.corpora import fetch
from aiayn.data import DataDir
from aiayn.prepare import PrepareOptions, prepare

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
    held-out strings (tests/test_train.py), so its translations differ from line to line and the right one is known
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


def cli_error(err: str, command: str) -> str:
    """What a failed ``aiayn COMMAND`` printed on stderr, checked to be one line, ``aiayn COMMAND: error: ...``, the
    last thing it printed, with no traceback anywhere; returns the message."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines, "nothing on stderr"
    prefix = f"aiayn {command}: "
    errors = [line for line in lines if line.startswith(prefix)]
    assert len(errors) == 1 and lines[-1] == errors[0], f"expected one line '{prefix}...' last on stderr:\n{err}"
    assert "Traceback" not in err and 'File "' not in err
    return errors[0][len(prefix):]


def train_steps(run: Path) -> list[int]:
    """The steps of the training records in a run's metrics.jsonl, in the order they were written (a resumed run
    continues the list; a run that silently started again from step 0 would repeat its first steps)."""
    import json

    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [r["step"] for r in records if "loss" in r]


def relabeled(run: Path, out: Path, src: str, tgt: str) -> Path:
    """A copy of the run dir ``run`` at ``out``, recorded as trained on ``src``->``tgt`` data (a run's languages are
    its data.json's): the copy model standing for a language pair."""
    shutil.copytree(run, out)
    info = json.loads((out / "data.json").read_text())
    (out / "data.json").write_text(json.dumps({**info, "src": src, "tgt": tgt}))
    return out


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the OS picks it)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 60, every: float = 0.01) -> None:
    """Poll ``condition`` until it holds; after ``timeout`` seconds fail the test, saying what did not happen."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"waited {timeout:g} s for {what}")
        time.sleep(every)


_CHILDREN: list[subprocess.Popen[bytes]] = []


def workers_of(pid: int) -> list[int]:
    """The decoding worker processes a process started, from any of its threads (spawned: their command line runs
    spawn_main)."""
    children = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            children += (task / "children").read_text().split()
        except OSError:                 # a thread that has ended
            continue
    out = []
    for child in children:
        try:
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if "spawn_main" in cmdline and "resource_tracker" not in cmdline:
            out.append(int(child))
    return out


def _die_with_parent() -> None:                                  # runs in the child, between fork and exec
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG (Linux): killed if we die


def spawn(cmd: list[str], **kw: Any) -> subprocess.Popen[bytes]:
    """A child process that cannot outlive the suite: on Linux it is killed when the test process dies (even by
    SIGKILL), and whatever is still running when the session ends is killed then. Start it from the main thread
    (the kernel ties it to the thread that started it)."""
    if os.uname().sysname == "Linux":
        kw.setdefault("preexec_fn", _die_with_parent)
    proc = subprocess.Popen(cmd, **kw)
    _CHILDREN.append(proc)
    return proc


@pytest.fixture(scope="session", autouse=True)
def _no_child_left_behind() -> Iterator[None]:
    yield
    for proc in _CHILDREN:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def chrome() -> tuple[str, str] | None:
    """(Chromium, chromedriver) where both are installed (`make browser`), else None."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


def open_chrome() -> Any:
    """A headless Chromium driven by selenium, with the flags that keep it off the network (quit it when done)."""
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    found = chrome()
    assert found is not None, "no Chromium + chromedriver: `make browser` installs them"
    opts = Options()
    opts.binary_location = found[0]
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync"):
        opts.add_argument(arg)
    return webdriver.Chrome(service=Service(found[1]), options=opts)
