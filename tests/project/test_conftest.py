"""The suite's own rule (tests/conftest.py): under CI (``CI`` set, as .ci/run sets it) a skipped test is a failure
naming its reason, except for hardware a CI machine lacks (a GPU); elsewhere a skip stays a skip. Run on a real inner
pytest session with the suite's conftest."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from ..helpers import wait_for

pytest_plugins = ["pytester"]

SKIPPING = '''
import pytest

def test_needs_a_tool():
    pytest.skip("no frobnicator here")

def test_needs_a_gpu():
    pytest.skip("no CUDA GPU on this machine")

@pytest.mark.skipif(True, reason="no chromium")
def test_marked():
    pass

def test_runs():
    pass
'''


@pytest.fixture()
def inner(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest((Path(__file__).parents[1] / "conftest.py").read_text(encoding="utf-8"))
    pytester.makepyfile(test_skipping=SKIPPING, test_missing_module='import pytest\npytest.importorskip("no_such_mod")\n')
    return pytester


@pytest.mark.parametrize("value", ["1", "true"])
def test_under_ci_a_skip_is_a_failure_naming_its_reason(inner: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                                         value: str) -> None:
    monkeypatch.setenv("CI", value)               # .ci/run sets 1; CI services set true
    result = inner.runpytest("-p", "no:cacheprovider", "--continue-on-collection-errors")
    # a skip in the test: a failure; in a skipif mark (setup) or of a module that cannot import: an error
    result.assert_outcomes(passed=1, failed=1, skipped=1, errors=2)
    out = result.stdout.str()
    for reason in ("no frobnicator here", "no chromium", "could not import 'no_such_mod'"):
        assert re.search(rf"skipped under CI, where every test must run \(install what it needs\): .*{reason}", out)


def test_elsewhere_a_skip_is_a_skip(inner: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    inner.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1, skipped=4)


HANGING = '''
import sys, time
from tests.helpers import spawn, wait_for

def test_hangs(tmp_path_factory):
    child = spawn([sys.executable, "-c", "import time; time.sleep(600)"])
    with open("child.pid", "w") as f:
        f.write(str(child.pid))
    time.sleep(600)

def test_waits_for_what_never_happens():
    wait_for(lambda: False, "a metric that was renamed", timeout=0.5)
'''


def _gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (a zombie waiting for its parent to reap it counts as ended)."""
    try:
        return "zombie" in Path(f"/proc/{pid}/status").read_text().lower()
    except OSError:
        return True


def test_a_hanging_test_fails_by_its_timeout_and_leaves_no_process(pytester: pytest.Pytester,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """pytest-timeout ends a test that hangs, and the processes it started (helpers.spawn) end with the suite; a
    wait for something that never happens fails with what it waited for."""
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parents[2]))        # (its suite imports tests.helpers)
    pytester.makeconftest((Path(__file__).parents[1] / "conftest.py").read_text(encoding="utf-8"))
    pytester.makepyfile(test_hanging=HANGING)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--timeout", "1", timeout=120)
    result.assert_outcomes(failed=2)
    assert "Timeout (>1.0s)" in result.stdout.str() and "waited 0.5 s for a metric that was renamed" in result.stdout.str()
    pid = int((pytester.path / "child.pid").read_text())
    assert _gone(pid), "the hanging test's child process outlived the suite"


def test_a_killed_suite_leaves_no_process(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """Even when the suite itself is killed (kill -9: no fixture, no finally runs), its children die with it."""
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parents[2]))
    pytester.makeconftest((Path(__file__).parents[1] / "conftest.py").read_text(encoding="utf-8"))
    pytester.makepyfile(test_hanging=HANGING)
    suite = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-k", "hangs"],
                             cwd=pytester.path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: (pytester.path / "child.pid").is_file() and (pytester.path / "child.pid").read_text() != "",
                 "the suite to start its child", timeout=60)
        pid = int((pytester.path / "child.pid").read_text())
        assert not _gone(pid)
        suite.kill()
        suite.wait(timeout=60)
        wait_for(lambda: _gone(pid), "the child of a killed suite to end", timeout=10)
    finally:
        suite.kill()
