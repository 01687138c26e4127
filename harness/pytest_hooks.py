"""What both test trees (tests/ and bench/tests/) take into their conftest.py: strict mode, where a
skipped test fails (``QPR_TEST_STRICT=1``, set by ``bash .ci/run``), the real data's folder, and
each pytest-xdist worker's share of the cores."""

from __future__ import annotations

import os
from pathlib import Path

import faiss
import pytest
import torch


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """``QPR_DATA_DIR`` (default ../shared/data); tests that need it skip when it is absent."""
    path = Path(os.environ.get("QPR_DATA_DIR", Path(__file__).resolve().parents[1] / ".." / "shared" / "data"))
    if not (path / "quora-lite" / "split.tsv").is_file():
        pytest.skip(f"real data not found at {path} (set QPR_DATA_DIR); CI always has it")
    return path


# -- strict mode: a skipped test is a failure (QPR_TEST_STRICT=1, set by bash .ci/run) ----------

STRICT = pytest.StashKey[bool]()
STRICT_HELP = (
    "QPR_TEST_STRICT=1 counts a skipped test as a failure, so that a green run means every test ran. "
    "Provide what the reason above names: `bash .ci/run` installs the dev extra (pip install -e '.[dev]'), "
    "Chromium and PostgreSQL (QPR_TEST_POSTGRES_URL) and expects the real data at QPR_DATA_DIR "
    "(default ../shared/data); or leave QPR_TEST_STRICT unset for a local run that may skip."
)


def strict_mode() -> bool:
    """Whether QPR_TEST_STRICT asks for skips to fail: "1" yes; unset, "" or "0" no; anything
    else is a usage error (a typo must not quietly let tests skip)."""
    value = os.environ.get("QPR_TEST_STRICT", "")
    if value not in ("", "0", "1"):
        raise pytest.UsageError(
            f"QPR_TEST_STRICT={value!r}: set it to 1 (a skipped test fails) or 0, or leave it unset")
    return value == "1"


def pytest_configure(config):
    config.stash[STRICT] = strict_mode()
    share_the_cores()


def share_the_cores() -> None:
    """Under pytest-xdist, a worker and the apps and training processes it starts use only its
    share of the cores. Each OpenMP runtime (torch's, FAISS's) otherwise starts a thread per core
    in every worker, and threads that spin waiting for each other on an oversubscribed machine
    made a 3-second training take minutes."""
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if not workers:
        return
    threads = max(1, (os.cpu_count() or 1) // int(workers))
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(threads)  # what child processes read
    torch.set_num_threads(threads)
    faiss.omp_set_num_threads(threads)


def fail_skip(report) -> None:
    """Turn the skipped ``report`` into a failure whose text says why it skipped and how to
    provide what was missing."""
    # A skip's longrepr is (file, line, "Skipped: reason").
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    report.outcome = "failed"
    report.longrepr = f"{reason}\n{STRICT_HELP}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A test skipped by a mark, a fixture or its body fails in strict mode; an expected failure
    (xfail) is reported as a skip too, but it ran, so it stays as it is."""
    report = yield
    if item.config.stash[STRICT] and report.skipped and not hasattr(report, "wasxfail") and not cuda_skip(item, report):
        fail_skip(report)
    return report


# The one documented exception to strict mode (issue 40): a test marked ``needs_cuda`` runs where a
# CUDA GPU is present and may skip, with exactly this reason, where none is (CI runs on CPUs).
CUDA_SKIP = "needs a CUDA GPU (none here); runs where one is present"


def cuda_skip(item, report) -> bool:
    """Whether ``report`` is the allowed skip of a ``needs_cuda`` test on a machine without CUDA."""
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    return (item.get_closest_marker("needs_cuda") is not None and not torch.cuda.is_available()
            and reason == f"Skipped: {CUDA_SKIP}")


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
    """A module skipped whole at import (``pytest.importorskip`` at its top) fails in strict mode."""
    report = yield
    if collector.config.stash[STRICT] and report.skipped:
        fail_skip(report)
    return report
