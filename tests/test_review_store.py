"""Store methods of the review workflow (migration 0004): adjudications, comments, guidelines,
and task distribution with overlap (annotations.assign). SQLite always; PostgreSQL when
QPR_TEST_POSTGRES_URL is set (fixtures of test_annotations_store)."""

from __future__ import annotations

import pandas as pd
import pytest

from annotations.assign import assign, overlap_setting
from annotations.errors import AnnotationError
from test_annotations_store import VERSION, corpus, store  # noqa: F401  (fixtures)


def test_adjudications_keep_history_and_show_the_newest_per_target(store):
    first = store.review.adjudicate("rev", "different", item="qid:1:2")
    store.review.adjudicate("rev", "apply", cluster_a="b", cluster_b="a", note="checked")
    latest = store.review.adjudicate("boss", "same", item="qid:1:2")
    everything = store.review.adjudications(current_only=False)
    assert list(everything["id"])[0] == first and len(everything) == 3
    current = store.review.adjudications()
    item = current[current["kind"] == "item"]
    assert list(item["id"]) == [latest] and item.iloc[0]["decision"] == "same" and item.iloc[0]["reviewer"] == "boss"
    pair = current[current["kind"] == "cluster_pair"].iloc[0]
    assert (pair["cluster_a"], pair["cluster_b"], pair["note"]) == ("a", "b", "checked")  # stored sorted


@pytest.mark.parametrize("kwargs, message", [
    ({"decision": "maybe", "item": "qid:1:2"}, "decision must be one of"),
    ({"decision": "same", "item": "1:2"}, "qid:<query qid>:<candidate qid>"),
    ({"decision": "apply", "cluster_a": "a", "cluster_b": "a"}, "two different clusters"),
    ({"decision": "reject", "cluster_a": "a"}, "two different clusters"),
])
def test_bad_adjudications_are_refused_and_write_nothing(store, kwargs, message):
    with pytest.raises(AnnotationError, match=message):
        store.review.adjudicate("rev", **kwargs)
    assert store.review.adjudications(current_only=False).empty


def test_comments_attach_to_own_judgments_only(store):
    mine = store.judgments.record("ann", 2, "same", VERSION, query_qid=1)
    store.review.comment("ann", mine, "first thought")
    store.review.comment("ann", mine, "  on reflection: same topic  ")
    assert store.review.comments().to_dict() == {mine: "on reflection: same topic"}
    with pytest.raises(AnnotationError, match="not one of other's judgments"):
        store.review.comment("other", mine, "not mine")
    with pytest.raises(AnnotationError, match="comment is empty"):
        store.review.comment("ann", mine, "   ")


def test_guidelines_newest_version_is_in_force(store):
    assert store.review.guidelines() is None
    store.review.set_guidelines("lead", "Same: one answer fits both.", "a | a'", "a | b")
    store.review.set_guidelines("lead2", "Same: the same answer fits both.", "x | x'")
    shown = store.review.guidelines()
    assert (shown["text"], shown["same_examples"], shown["different_examples"], shown["editor"]) == (
        "Same: the same answer fits both.", "x | x'", "", "lead2")
    with pytest.raises(AnnotationError, match="guidelines are empty"):
        store.review.set_guidelines("lead", "  ")


def queue_of(pairs):
    return pd.DataFrame({"query_qid": pd.array([q for q, _ in pairs], dtype="Int64"), "query_text": pd.NA,
                         "candidate_qid": [c for _, c in pairs]})


def test_overlap_leaves_out_items_labelled_by_enough_others_in_either_order(store):
    queue = queue_of([(1, 2), (1, 3), (1, 4)])
    store.judgments.record("alice", 1, "same", VERSION, query_qid=2)  # the pair (1, 2), judged the other way round
    store.judgments.record("bob", 3, "different", VERSION, query_qid=1)
    assert set(assign(store, queue, "carol", overlap=2)["candidate_qid"]) == {2, 3, 4}
    assert set(assign(store, queue, "carol", overlap=1)["candidate_qid"]) == {4}
    assert set(assign(store, queue, "alice", overlap=1)["candidate_qid"]) == {2, 4}  # own labels never hide an item


def test_overlap_one_gives_two_fresh_annotators_different_first_items(store):
    store.judgments.record("alice", 10, "unsure", VERSION, query_qid=11)
    store.judgments.record("bob", 12, "unsure", VERSION, query_qid=13)
    queue = queue_of([(1, c) for c in range(2, 9)])
    firsts = {who: assign(store, queue, who, overlap=1) for who in ("alice", "bob")}
    # every item stays available to both (nothing is judged yet), but each gets its own share first
    assert all(len(f) == len(queue) for f in firsts.values())
    share = {who: f.iloc[0]["candidate_qid"] for who, f in firsts.items()}
    assert share["alice"] != share["bob"]


def test_overlap_setting_reads_the_environment(monkeypatch):
    monkeypatch.delenv("QPR_OVERLAP", raising=False)
    assert overlap_setting() is None
    monkeypatch.setenv("QPR_OVERLAP", "2")
    assert overlap_setting() == 2
    monkeypatch.setenv("QPR_OVERLAP", "zero")
    with pytest.raises(AnnotationError, match="QPR_OVERLAP must be a positive whole number"):
        overlap_setting()
