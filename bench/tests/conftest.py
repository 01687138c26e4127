"""Strict mode and the real data's fixture, as in tests/ (``harness.pytest_hooks``), and the
small corpus bench's own tests build (``harness.corpora``)."""

import pytest

from harness.corpora import make_corpus
from harness.pytest_hooks import (data_dir, pytest_configure, pytest_make_collect_report,  # noqa: F401
                                  pytest_runtest_makereport)


@pytest.fixture
def tiny_corpus():
    return make_corpus()
