"""The store that export tests judge in: the synthetic corpus registered under ``VERSION`` in a
SQLite database of the test's own (``tests/test_annotations_export.py`` and
``tests/test_hub_exports.py`` import these fixtures; conftest's ``db_url`` runs on both
backends, which the export tests do not need)."""

from __future__ import annotations

import pandas as pd
import pytest

from annotations.db import open_store
from conftest import make_corpus

VERSION = "v1"


@pytest.fixture
def corpus():
    return make_corpus()


@pytest.fixture
def db_url(tmp_path):
    return f"sqlite:///{tmp_path / 'annotations.db'}"


@pytest.fixture
def store(db_url, corpus):
    with open_store(db_url, project="demo") as opened:
        opened.corpora.register(VERSION, corpus)
        yield opened


def first_qids(corpus: pd.DataFrame, split: str) -> list[int]:
    """The first question of each cluster of ``split``, in cluster order."""
    rows = corpus[(corpus["split"] == split) & corpus["cluster"].notna()]
    return rows.groupby("cluster", sort=True)["qid"].first().tolist()
