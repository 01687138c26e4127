"""Corrected clusters from judgments: chains, cannot-link conflicts, the disagreement rule."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from annotations.db import open_store
from annotations.merge import corrected_clusters

VERSION = "v1"


def hand_corpus() -> pd.DataFrame:
    """Clusters A (qids 1-3, train), B (4-5, train), C (6-7, test), D (8-9, val); 10-12 in none."""
    rows = [
        (1, "how do i learn python ?", "A", "train"), (2, "best way to learn python ?", "A", "train"),
        (3, "python for beginners ?", "A", "train"), (4, "how to study python ?", "B", "train"),
        (5, "python study tips ?", "B", "train"), (6, "how do i learn java ?", "C", "test"),
        (7, "java for beginners ?", "C", "test"), (8, "how to cook rice ?", "D", "val"),
        (9, "rice cooking tips ?", "D", "val"), (10, "learning python fast ?", None, "none"),
        (11, "what is a lucky number ?", None, "none"), (12, "which numbers are lucky ?", None, "none"),
    ]
    corpus = pd.DataFrame(rows, columns=["qid", "question", "cluster", "split"])
    return corpus.astype({"qid": "int64", "cluster": "string"})


@pytest.fixture
def store(tmp_path):
    with open_store(f"sqlite:///{tmp_path / 'a.db'}") as opened:
        opened.register_corpus(VERSION, hand_corpus())
        yield opened


def judge(store, annotator: str, query: int, candidate: int, label: str) -> int:
    return store.record(annotator, candidate, label, VERSION, query_qid=query)


def cluster_of(result, qid: int):
    value = result.corpus.set_index("qid").loc[qid, "cluster"]
    return None if pd.isna(value) else value


def test_a_chain_of_same_judgments_joins_all_its_clusters(store):
    ab = judge(store, "ann", 1, 4, "same")
    bc = judge(store, "ann", 5, 6, "same")
    result = corrected_clusters(store, hand_corpus())
    assert {cluster_of(result, q) for q in range(1, 8)} == {"A"}  # A is the largest, so its label wins
    assert {cluster_of(result, q) for q in (8, 9)} == {"D"}
    assert sorted(map(tuple, result.merges[["cluster_a", "cluster_b"]].values)) == [("A", "B"), ("B", "C")]
    assert sorted(i for ids in result.merges["judgment_ids"] for i in ids) == [ab, bc]
    assert result.conflicts.empty and result.judgment_ids == [ab, bc]
    # every question keeps its split: C's test questions do not move into training
    pd.testing.assert_series_equal(result.corpus["split"], hand_corpus()["split"])
    assert result.corpus[["qid", "question"]].equals(hand_corpus()[["qid", "question"]])


@pytest.mark.parametrize("stronger", ["AB", "BC"])
def test_a_merge_that_would_join_clusters_judged_different_is_skipped_and_reported(store, stronger):
    judge(store, "ann", 1, 4, "same")
    judge(store, "ann", 5, 6, "same")
    extra = (2, 5) if stronger == "AB" else (4, 7)  # a second "same" item makes one merge stronger
    judge(store, "ann", *extra, "same")
    different = judge(store, "ann", 3, 7, "different")  # A and C are different
    result = corrected_clusters(store, hand_corpus())
    assert cluster_of(result, 1) != cluster_of(result, 6)
    weaker = ("B", "C") if stronger == "AB" else ("A", "B")
    assert len(result.merges) == 1 and tuple(result.merges.iloc[0][["cluster_a", "cluster_b"]]) == tuple(sorted(stronger))
    conflict = result.conflicts.iloc[0]
    assert len(result.conflicts) == 1 and conflict["kind"] == "cannot_link"
    assert (conflict["cluster_a"], conflict["cluster_b"]) == weaker and different in conflict["judgment_ids"]
    assert "A and C" in conflict["reason"] or "C and A" in conflict["reason"]


def test_same_and_different_evidence_between_two_clusters_is_a_conflict_not_a_merge(store):
    same = judge(store, "ann", 1, 4, "same")
    different = judge(store, "ann", 2, 5, "different")
    result = corrected_clusters(store, hand_corpus())
    assert result.merges.empty and cluster_of(result, 1) == "A" and cluster_of(result, 4) == "B"
    assert result.conflicts[["kind", "cluster_a", "cluster_b"]].values.tolist() == [["mixed", "A", "B"]]
    assert result.conflicts.iloc[0]["judgment_ids"] == [same, different]


def test_disagreement_rule_majority_wins_ties_stay_apart_unsure_is_ignored(store):
    for annotator, label in [("ann", "same"), ("bob", "same"), ("cid", "different")]:
        judge(store, annotator, 1, 4, label)  # 2:1 -> same
    tie = [judge(store, "ann", 1, 6, "same"), judge(store, "bob", 1, 6, "different")]  # 1:1 -> tie
    for annotator, label in [("ann", "same"), ("bob", "unsure"), ("cid", "unsure")]:
        judge(store, annotator, 2, 8, label)  # 1:0 -> same
    judge(store, "ann", 3, 9, "unsure")  # nothing to decide
    result = corrected_clusters(store, hand_corpus())
    assert cluster_of(result, 4) == cluster_of(result, 8) == "A"
    assert cluster_of(result, 6) == "C"
    assert result.conflicts[["kind", "cluster_a", "cluster_b"]].values.tolist() == [["tie", "A", "C"]]
    assert result.conflicts.iloc[0]["judgment_ids"] == tie
    assert "1:1" in result.conflicts.iloc[0]["reason"]


def test_only_current_labels_count(store):
    judge(store, "ann", 1, 4, "same")
    judge(store, "ann", 1, 4, "different")  # changed their mind
    assert corrected_clusters(store, hand_corpus()).merges.empty
    store.undo_last("ann")  # back to "same"
    assert cluster_of(corrected_clusters(store, hand_corpus()), 4) == "A"


def test_different_inside_one_cluster_is_reported_and_nothing_is_split(store):
    inside = judge(store, "ann", 1, 3, "different")
    result = corrected_clusters(store, hand_corpus())
    assert result.conflicts[["kind", "cluster_a", "cluster_b", "judgment_ids"]].values.tolist() == [
        ["within_cluster", "A", "A", [inside]]
    ]
    assert result.corpus["cluster"].equals(hand_corpus()["cluster"])


def test_unclustered_questions_join_a_cluster_or_form_a_new_one_and_take_a_split(store):
    judge(store, "ann", 10, 4, "same")
    judge(store, "ann", 11, 12, "same")
    result = corrected_clusters(store, hand_corpus())
    row = result.corpus.set_index("qid")
    assert row.loc[10, "cluster"] == "B" and row.loc[10, "split"] == "train"
    assert row.loc[11, "cluster"] == row.loc[12, "cluster"] == "new-11"
    assert set(row.loc[[11, 12], "split"]) == {"train"}
    assert sorted(map(tuple, result.merges[["cluster_a", "cluster_b"]].values)) == [("B", "qid:10"), ("qid:11", "qid:12")]


def test_free_text_queries_and_judgments_on_other_texts_are_not_used(store):
    store.record("ann", 4, "same", VERSION, query_text="how can i learn python")
    renamed = hand_corpus().assign(question=lambda f: f["question"].where(f["qid"] != 4, "how to study java ?"))
    store.register_corpus("v2", renamed)
    store.record("ann", 4, "same", "v2", query_qid=1)  # about a different question 4
    result = corrected_clusters(store, hand_corpus())
    assert result.merges.empty and result.judgment_ids == []
    assert len(corrected_clusters(store, renamed).merges) == 1


@pytest.mark.parametrize("seed", range(4))
def test_random_judgments_never_join_clusters_a_majority_judged_different(tmp_path, seed):
    """Invariants on random judgments by three annotators, checked against votes counted here."""
    rng = np.random.default_rng(seed)
    n_clusters, size = 10, 3
    corpus = pd.DataFrame({
        "qid": np.arange(1, n_clusters * size + 1, dtype="int64"),
        "question": [f"question number {i}" for i in range(1, n_clusters * size + 1)],
        "cluster": pd.array([f"k{i // size}" for i in range(n_clusters * size)], dtype="string"),
        "split": "train",
    })
    votes: dict[tuple[int, int], list[str]] = {}
    with open_store(f"sqlite:///{tmp_path / 'r.db'}") as store:
        store.register_corpus(VERSION, corpus)
        for _ in range(40):
            query, candidate = (int(q) for q in rng.choice(corpus["qid"], size=2, replace=False))
            for annotator in ("ann", "bob", "cid"):
                if rng.random() < 0.6:
                    label = str(rng.choice(["same", "same", "different", "unsure"]))
                    store.record(annotator, candidate, label, VERSION, query_qid=query)
                    votes.setdefault((query, candidate, annotator), []).append(label)
        result = corrected_clusters(store, corpus)
    current = {}
    for (query, candidate, _), labels in votes.items():
        current.setdefault((query, candidate), []).append(labels[-1])
    original = corpus.set_index("qid")["cluster"]
    corrected = result.corpus.set_index("qid")["cluster"]
    for (query, candidate), labels in current.items():
        same, different = labels.count("same"), labels.count("different")
        if different > same and original[query] != original[candidate]:
            assert corrected[query] != corrected[candidate], (query, candidate, labels)
        if different > same:
            # no other pair of questions from those two clusters ended up together either
            a, b = original[query], original[candidate]
            assert set(corrected[original == a]).isdisjoint(corrected[original == b]) or a == b
    # merged groups are unions of whole original clusters, each named after one of its members
    groups = corpus.assign(new=result.corpus["cluster"]).groupby("cluster")["new"].nunique()
    assert (groups == 1).all()
    assert set(result.corpus["cluster"]) <= set(corpus["cluster"])
    first_member = corpus.groupby("cluster")["qid"].first()
    for merge in result.merges.itertuples():
        assert corrected[first_member[merge.cluster_a]] == corrected[first_member[merge.cluster_b]] == merge.into
    assert n_clusters - result.corpus["cluster"].nunique() <= len(result.merges)


def test_a_question_judged_only_different_keeps_its_cluster_or_stays_in_none(store):
    judge(store, "ann", 1, 10, "different")  # an unclustered distractor is not like cluster A
    judge(store, "ann", 4, 8, "different")  # B is not D
    result = corrected_clusters(store, hand_corpus())
    assert result.corpus.equals(hand_corpus()), "nothing joins or forms a cluster without a 'same'"
    assert result.merges.empty


# -- rule 0: reviewers' adjudications ----------------------------------------------------------


def test_an_adjudicated_tie_is_decided_by_the_reviewer(store):
    judge(store, "ann", 1, 4, "same")
    judge(store, "bob", 1, 4, "different")
    assert list(corrected_clusters(store, hand_corpus()).conflicts["kind"]) == ["tie"]
    store.record_adjudication("rev", "same", item="qid:1:4")
    result = corrected_clusters(store, hand_corpus())
    assert result.conflicts.empty and cluster_of(result, 4) == "A"
    store.record_adjudication("rev", "different", item="qid:4:1")  # the newest decision counts, either order
    result = corrected_clusters(store, hand_corpus())
    assert result.merges.empty and cluster_of(result, 4) == "B"


def test_an_applied_pair_merges_despite_a_mixed_vote_and_a_rejected_one_never_does(store):
    judge(store, "ann", 1, 4, "same")
    judge(store, "ann", 2, 5, "different")  # A~B is mixed: not merged, reported
    judge(store, "ann", 8, 10, "same")  # D~qid:10 merges on support
    result = corrected_clusters(store, hand_corpus())
    assert list(result.conflicts["kind"]) == ["mixed"] and cluster_of(result, 4) == "B"
    store.record_adjudication("rev", "apply", cluster_a="A", cluster_b="B")
    store.record_adjudication("rev", "reject", cluster_a="D", cluster_b="qid:10")
    result = corrected_clusters(store, hand_corpus())
    assert cluster_of(result, 4) == cluster_of(result, 5) == "A" and result.conflicts.empty
    assert pd.isna(cluster_of(result, 10)), "a rejected pair is never merged"
    merged = result.merges.set_index(["cluster_a", "cluster_b"])
    assert merged.loc[("A", "B"), "decided_by"] == "rev"
    assert any("applied by reviewer rev" in d["reason"] for d in result.decisions())
