"""Percent agreement and Cohen's kappa per annotator pair over items both labelled."""

from __future__ import annotations

import math

import pytest

from annotations.agreement import AGREEMENT_COLUMNS, agreement
from annotations.db import open_store
from conftest import make_corpus

VERSION = "v1"


@pytest.fixture
def store(tmp_path):
    with open_store(f"sqlite:///{tmp_path / 'a.db'}", project="demo") as opened:
        opened.corpora.register(VERSION, make_corpus(n_topics=4, distractors=0))
        yield opened


def label_items(store, annotator: str, labels: list[str]) -> None:
    """Label items (query 1, candidates 2, 3, ...) in order; a None leaves that item unlabelled."""
    for candidate, label in enumerate(labels, start=2):
        if label is not None:
            store.judgments.record(annotator, candidate, label, VERSION, query_qid=1)


def kappa_by_hand(a: list[str], b: list[str]) -> float:
    """Cohen's kappa from its definition: (p_o - p_e) / (1 - p_e)."""
    n = len(a)
    observed = sum(x == y for x, y in zip(a, b)) / n
    expected = sum((a.count(label) / n) * (b.count(label) / n) for label in set(a) | set(b))
    return (observed - expected) / (1 - expected)


def test_agreement_per_pair_over_shared_items(store):
    ann = ["same", "same", "different", "different", "unsure", "same"]
    bob = ["same", "different", "different", "different", "unsure", None]
    cid = [None, None, None, None, None, None, "same"]  # shares no item with anyone
    label_items(store, "ann", ann)
    label_items(store, "bob", bob)
    label_items(store, "cid", cid)
    table = agreement(store)
    assert list(table.columns) == AGREEMENT_COLUMNS
    assert table[["annotator_a", "annotator_b"]].values.tolist() == [["ann", "bob"]]
    row = table.iloc[0]
    shared_a, shared_b = ann[:5], bob[:5]
    assert row["items"] == 5
    assert row["percent"] == pytest.approx(100 * sum(x == y for x, y in zip(shared_a, shared_b)) / 5)
    assert row["cohen_kappa"] == pytest.approx(kappa_by_hand(shared_a, shared_b))


def test_only_current_labels_count(store):
    label_items(store, "ann", ["same", "different"])
    label_items(store, "bob", ["different", "different"])
    store.judgments.record("bob", 2, "same", VERSION, query_qid=1)  # bob changes his mind on item 1
    row = agreement(store).iloc[0]
    assert row["items"] == 2 and row["percent"] == pytest.approx(100.0)


def test_kappa_is_nan_when_undefined_and_the_table_is_empty_without_overlap(store):
    assert agreement(store).empty
    label_items(store, "ann", ["same", "same"])
    label_items(store, "bob", ["same", "same"])
    row = agreement(store).iloc[0]
    assert row["percent"] == pytest.approx(100.0) and math.isnan(row["cohen_kappa"])
    store.judgments.record("cid", 2, "same", VERSION, query_text="how do i learn python fast ?")
    assert len(agreement(store)) == 1  # a typed query is another item than query question 1
