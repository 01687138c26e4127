"""Strict mode and the real data's fixture, as in tests/ (``harness.pytest_hooks``)."""

from harness.pytest_hooks import (data_dir, pytest_configure, pytest_make_collect_report,  # noqa: F401
                                  pytest_runtest_makereport)
