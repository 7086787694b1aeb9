"""The suite's own rule (tests/conftest.py): under CI (``CI`` set, as .ci/run sets it) a skipped test is a failure
naming its reason, except for hardware a CI machine lacks (a GPU); elsewhere a skip stays a skip. Run on a real inner
pytest session with the suite's conftest."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

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
    pytester.makeconftest((Path(__file__).parent / "conftest.py").read_text(encoding="utf-8"))
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
