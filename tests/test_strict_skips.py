"""The strict mode of tests/conftest.py: with QPR_TEST_STRICT=1 (what `bash .ci/run` sets) every
way a test can skip is a failure that says why and what to provide; unset, tests skip as usual.
Each case runs pytest on a small test file in a subprocess with the project's conftest."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

CONFTEST = Path(__file__).with_name("conftest.py")
ROOT = CONFTEST.parents[1]

SKIPPING_TESTS = """
import pytest

@pytest.fixture
def widget():
    pytest.skip("no widget here (install the widget extra)")

def test_skips_in_its_body():
    pytest.skip("no database (set DATABASE_URL)")

@pytest.mark.skipif(True, reason="no browser (apt-get install chromium)")
def test_skipped_by_a_mark():
    pass

def test_skipped_by_its_fixture(widget):
    pass

@pytest.mark.xfail(reason="a known bug", strict=True)
def test_an_expected_failure():
    assert False

def test_that_runs():
    pass
"""

NEEDS_A_PACKAGE = """
import pytest

pytest.importorskip("no_such_package_qpr")

def test_never_collected():
    pass
"""


@pytest.fixture
def with_conftest(pytester, monkeypatch):
    """A pytest project holding the real conftest, run where this checkout's packages import (the
    conftest may import them)."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    pytester.makeconftest(CONFTEST.read_text())
    return pytester


@pytest.fixture
def project(with_conftest):
    """``with_conftest`` with ``SKIPPING_TESTS`` and a module skipped whole at import."""
    with_conftest.makepyfile(test_skipping=SKIPPING_TESTS, test_needs_a_package=NEEDS_A_PACKAGE)
    return with_conftest


def test_unset_lets_tests_skip(project, monkeypatch):
    monkeypatch.delenv("QPR_TEST_STRICT", raising=False)
    result = project.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, skipped=4, xfailed=1)


def test_strict_turns_every_skip_into_a_failure_that_says_what_is_missing(project, monkeypatch):
    monkeypatch.setenv("QPR_TEST_STRICT", "1")
    result = project.runpytest_subprocess("-p", "no:cacheprovider", "--continue-on-collection-errors")
    result.assert_outcomes(passed=1, failed=1, errors=3, xfailed=1)
    assert result.ret != 0
    output = result.stdout.str()
    for reason in ("no database (set DATABASE_URL)", "no browser (apt-get install chromium)",
                   "no widget here (install the widget extra)", "could not import 'no_such_package_qpr'"):
        assert reason in output
    # Counted above the short summary, which repeats each message in full only where pytest sees CI
    # (the CI variable) and cuts it to the terminal's width elsewhere.
    reports = output.split("short test summary info")[0]
    assert reports.count("QPR_TEST_STRICT=1 counts a skipped test as a failure") == 4


def test_strict_fails_a_run_whose_only_test_is_skipped_at_collection(with_conftest, monkeypatch):
    with_conftest.makepyfile(test_alone=NEEDS_A_PACKAGE)
    monkeypatch.setenv("QPR_TEST_STRICT", "1")
    result = with_conftest.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret != 0 and "could not import 'no_such_package_qpr'" in result.stdout.str()


def test_a_value_other_than_0_or_1_is_a_usage_error(project, monkeypatch):
    monkeypatch.setenv("QPR_TEST_STRICT", "yes")
    result = project.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "QPR_TEST_STRICT='yes': set it to 1" in result.stderr.str()


CUDA_TESTS = """
import pytest
from conftest import CUDA_SKIP

@pytest.mark.needs_cuda
def test_on_a_gpu():
    pytest.skip(CUDA_SKIP)

@pytest.mark.needs_cuda
def test_marked_but_skips_for_another_reason():
    pytest.skip("no database (set DATABASE_URL)")

def test_unmarked_with_the_cuda_reason():
    pytest.skip(CUDA_SKIP)
"""


def test_strict_lets_only_a_needs_cuda_test_skip_for_want_of_a_gpu(with_conftest, monkeypatch):
    import torch

    with_conftest.makepyfile(test_cuda=CUDA_TESTS)
    monkeypatch.setenv("QPR_TEST_STRICT", "1")
    result = with_conftest.runpytest_subprocess("-p", "no:cacheprovider")
    # With a GPU present, a needs_cuda test that skips fails like any other.
    result.assert_outcomes(skipped=0, failed=3) if torch.cuda.is_available() else result.assert_outcomes(skipped=1, failed=2)
