"""Corrected clusters from judgments as pair constraints: moves, merges on evidence, splits, cannot-links, the disagreement rule, reviewers."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from annotations.db import open_store
from annotations.constraints import constrained_clusters, corrected_clusters
from annotations.pair_scores import PairScorer
from annotations.repositories.review import ADJUDICATION_COLUMNS
from qpr.data.corpus import SPLITS
from qpr.retrieval.calibration import Calibration

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
    with open_store(f"sqlite:///{tmp_path / 'a.db'}", project="demo") as opened:
        opened.corpora.register(VERSION, hand_corpus())
        yield opened


def judge(store, annotator: str, query: int, candidate: int, label: str) -> int:
    return store.judgments.record(annotator, candidate, label, VERSION, query_qid=query)


def cluster_of(result, qid: int):
    value = result.corpus.set_index("qid").loc[qid, "cluster"]
    return None if pd.isna(value) else value


def test_a_single_same_link_moves_one_question_and_never_chains_clusters(store):
    ab = judge(store, "ann", 1, 4, "same")
    bc = judge(store, "ann", 5, 6, "same")
    result = corrected_clusters(store, hand_corpus())
    # Without a model, a linked question goes where most of its links are, then to the larger cluster.
    assert [cluster_of(result, q) for q in range(1, 10)] == ["A", "A", "A", "A", "C", "C", "C", "D", "D"]
    assert result.merges.empty, "one link is no evidence that two whole clusters mean the same"
    moves = result.splits.set_index("qid")
    assert moves.loc[4, ["cluster", "into"]].tolist() == ["B", "A"] and moves.loc[4, "judgment_ids"] == [ab]
    assert moves.loc[5, ["cluster", "into"]].tolist() == ["B", "C"] and moves.loc[5, "judgment_ids"] == [bc]
    assert "judged the same" in moves.loc[4, "evidence"]
    assert result.conflicts.empty and result.judgment_ids == [ab, bc]
    # every question keeps its split: C's test questions do not move into training
    pd.testing.assert_series_equal(result.corpus["split"], hand_corpus()["split"])
    assert result.corpus[["qid", "question"]].equals(hand_corpus()[["qid", "question"]])


def test_independent_links_merge_two_whole_clusters_and_links_through_one_question_move_it(store):
    judge(store, "ann", 1, 4, "same")
    judge(store, "ann", 1, 5, "same")  # two links, but both through question 1: not independent
    result = corrected_clusters(store, hand_corpus())
    assert result.merges.empty and cluster_of(result, 1) == "B" and cluster_of(result, 2) == "A"
    two = judge(store, "ann", 2, 5, "same")  # now 1 and 2 of A are each linked to B
    result = corrected_clusters(store, hand_corpus())
    assert {cluster_of(result, q) for q in range(1, 6)} == {"A"} and result.splits.empty
    merge = result.merges.iloc[0]
    assert len(result.merges) == 1 and (merge["cluster_a"], merge["cluster_b"], merge["into"], merge["support"]) == ("A", "B", "A", 2)
    assert two in merge["judgment_ids"] and "2 independent link(s)" in merge["evidence"]


def test_a_cannot_link_stops_a_merge_of_whole_clusters_and_is_reported(store):
    judge(store, "ann", 1, 4, "same")
    judge(store, "ann", 2, 5, "same")
    different = judge(store, "ann", 3, 5, "different")  # A and B hold questions judged different
    result = corrected_clusters(store, hand_corpus())
    assert result.merges.empty
    conflict = result.conflicts.iloc[0]
    assert (conflict["kind"], conflict["cluster_a"], conflict["cluster_b"]) == ("mixed", "A", "B")
    assert different in conflict["judgment_ids"] and "not merged" in conflict["reason"]
    # the linked questions still end together, and the questions judged different apart
    assert cluster_of(result, 1) == cluster_of(result, 4) and cluster_of(result, 2) == cluster_of(result, 5)
    assert cluster_of(result, 3) != cluster_of(result, 5)


def test_a_different_pair_between_two_clusters_does_not_stop_another_question_moving(store):
    same = judge(store, "ann", 1, 4, "same")
    judge(store, "ann", 2, 5, "different")
    result = corrected_clusters(store, hand_corpus())
    assert result.merges.empty and cluster_of(result, 4) == "A" and cluster_of(result, 5) == "B"
    assert result.splits[["cluster", "qid", "into"]].values.tolist() == [["B", 4, "A"]]
    assert result.splits.iloc[0]["judgment_ids"] == [same] and result.conflicts.empty


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
    store.judgments.undo_last("ann")  # back to "same"
    assert cluster_of(corrected_clusters(store, hand_corpus()), 4) == "A"


# -- splits: false positives (rule 3) ------------------------------------------------------------


def test_a_member_judged_different_from_its_cluster_leaves_it_and_keeps_its_split(store):
    inside = judge(store, "ann", 1, 3, "different")  # 1 is the reference, 3 does not belong
    result = corrected_clusters(store, hand_corpus())
    assert cluster_of(result, 3) is None and cluster_of(result, 1) == cluster_of(result, 2) == "A"
    assert result.corpus.set_index("qid").loc[3, "split"] == "train"
    split = result.splits.iloc[0]
    assert len(result.splits) == 1 and (split["cluster"], split["qid"], split["into"]) == ("A", 3, "")
    assert split["judgment_ids"] == [inside] and result.conflicts.empty and result.merges.empty
    assert [d for d in result.decisions() if d["decision"] == "split"] == [{
        "decision": "split", "cluster_a": "A", "cluster_b": "qid:3", "judgment_ids": [inside],
        "reason": "1 item(s) judged it different from members of A; left A, now in no cluster"}]


def test_the_candidate_of_a_different_item_is_the_one_that_leaves(store):
    judge(store, "ann", 3, 1, "different")
    result = corrected_clusters(store, hand_corpus())
    assert cluster_of(result, 1) is None and cluster_of(result, 3) == "A"


def test_a_split_follows_the_majority_and_a_tie_splits_nothing(store):
    tie = [judge(store, "ann", 1, 3, "different"), judge(store, "bob", 1, 3, "same")]
    result = corrected_clusters(store, hand_corpus())
    assert result.splits.empty and cluster_of(result, 3) == "A"
    assert result.conflicts[["kind", "cluster_a", "cluster_b", "judgment_ids"]].values.tolist() == [["tie", "A", "A", tie]]
    judge(store, "cid", 1, 3, "different")  # 2:1
    result = corrected_clusters(store, hand_corpus())
    assert cluster_of(result, 3) is None and result.conflicts.empty


def test_a_member_judged_both_different_and_same_inside_its_cluster_stays_and_is_reported(store):
    different = judge(store, "ann", 1, 3, "different")
    same = judge(store, "bob", 2, 3, "same")
    result = corrected_clusters(store, hand_corpus())
    assert result.splits.empty and cluster_of(result, 3) == "A"
    assert result.conflicts[["kind", "cluster_a", "cluster_b", "judgment_ids"]].values.tolist() == [
        ["mixed", "A", "qid:3", [different, same]]]
    assert "not split" in result.conflicts.iloc[0]["reason"]


def test_members_voted_out_together_and_judged_alike_form_a_cluster_of_their_own(store):
    judge(store, "ann", 1, 2, "different")
    judge(store, "ann", 1, 3, "different")
    judge(store, "ann", 2, 3, "same")  # a "same" with another outsider does not hold either in A
    result = corrected_clusters(store, hand_corpus())
    assert cluster_of(result, 1) == "A" and cluster_of(result, 2) == cluster_of(result, 3) == "new-2"
    assert set(result.splits["qid"]) == {2, 3} and set(result.splits["into"]) == {"new-2"}
    assert result.merges[["cluster_a", "cluster_b"]].values.tolist() == [["qid:2", "qid:3"]]
    pd.testing.assert_series_equal(result.corpus["split"], hand_corpus()["split"])


def test_a_member_voted_out_joins_the_cluster_it_was_judged_the_same_as(store):
    judge(store, "ann", 1, 3, "different")
    joins = judge(store, "ann", 3, 4, "same")
    result = corrected_clusters(store, hand_corpus())
    assert cluster_of(result, 3) == "B" and cluster_of(result, 1) == "A"
    assert result.splits.iloc[0]["into"] == "B" and "joined B" in result.decisions()[-1]["reason"]
    assert result.merges[["cluster_a", "cluster_b", "judgment_ids"]].values.tolist() == [["B", "qid:3", [joins]]]


def test_a_member_voted_out_never_comes_back_with_its_links(store):
    judge(store, "ann", 1, 3, "different")
    judge(store, "ann", 3, 4, "same")
    judge(store, "ann", 3, 5, "same")  # 3 ~ B
    judge(store, "ann", 2, 5, "same")  # 2 ~ B as well: 2 follows its link, 3 may not go back to A
    result = corrected_clusters(store, hand_corpus())
    assert [cluster_of(result, q) for q in range(1, 6)] == ["A", "B", "B", "B", "B"]
    assert result.conflicts.empty and result.merges[["cluster_a", "cluster_b"]].values.tolist() == [["B", "qid:3"]]
    assert result.splits.set_index("qid")["into"].to_dict() == {2: "B", 3: "B"}


def test_a_reviewer_splits_a_member_off_or_keeps_it_whatever_the_votes(store):
    judge(store, "ann", 1, 3, "different")
    judge(store, "ann", 2, 3, "same")  # mixed: 3 stays, reported
    store.review.adjudicate("rev", "apply", cluster_a="A", cluster_b="qid:3")
    store.review.adjudicate("rev", "apply", cluster_a="qid:9", cluster_b="D")  # no votes at all
    result = corrected_clusters(store, hand_corpus())
    assert cluster_of(result, 3) is None and cluster_of(result, 9) is None and result.conflicts.empty
    assert result.splits.set_index("qid")["decided_by"].to_dict() == {3: "rev", 9: "rev"}
    assert any(d["decision"] == "split" and d["reason"].startswith("applied by reviewer rev") for d in result.decisions())
    store.review.adjudicate("rev", "reject", cluster_a="A", cluster_b="qid:3")
    result = corrected_clusters(store, hand_corpus())
    assert cluster_of(result, 3) == "A" and result.conflicts.empty and list(result.splits["qid"]) == [9]
    judge(store, "ann", 9, 8, "same")  # 9 was split off D by the reviewer: a "same" does not bring it back
    assert cluster_of(corrected_clusters(store, hand_corpus()), 9) is None


def test_an_adjudicated_item_inside_a_cluster_decides_the_split(store):
    judge(store, "ann", 1, 3, "different")
    judge(store, "bob", 1, 3, "same")
    store.review.adjudicate("rev", "different", item="qid:1:3")
    assert cluster_of(corrected_clusters(store, hand_corpus()), 3) is None


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
    store.judgments.record("ann", 4, "same", VERSION, query_text="how can i learn python")
    renamed = hand_corpus().assign(question=lambda f: f["question"].where(f["qid"] != 4, "how to study java ?"))
    store.corpora.register("v2", renamed)
    store.judgments.record("ann", 4, "same", "v2", query_qid=1)  # about a different question 4
    result = corrected_clusters(store, hand_corpus())
    assert result.merges.empty and result.splits.empty and result.judgment_ids == []
    assert len(corrected_clusters(store, renamed).splits) == 1


questions = st.integers(2, 14).flatmap(lambda n: st.tuples(
    st.lists(st.sampled_from(["A", "B", "C", None]), min_size=n, max_size=n),
    st.lists(st.sampled_from(list(SPLITS)), min_size=n, max_size=n),
    st.lists(st.tuples(st.integers(1, n), st.integers(1, n), st.sampled_from(["same", "same", "different", "unsure"])),
             max_size=3 * n),
    st.lists(st.tuples(st.sampled_from(["A", "B", "C", *(f"qid:{q}" for q in range(1, n + 1))]),
                       st.sampled_from(["A", "B", "C", *(f"qid:{q}" for q in range(1, n + 1))]),
                       st.sampled_from(["apply", "reject"])), max_size=2),
))


@given(questions)
@settings(max_examples=100, derandomize=True, deadline=None, database=None)
def test_merge_and_split_never_lose_duplicate_or_move_a_question_across_splits(drawn):
    """Property over random corpora, votes (each row one annotator's current label) and reviewer
    decisions on cluster pairs (merges and splits): every question is there once with its text,
    keeps its split (one in "none" may take its group's), changes cluster only by a reported
    merge or split; without reviewers, no majority-"different" item ends in one cluster unless
    its candidate's membership is reported mixed."""
    check_invariants(drawn, None)


@given(questions, st.integers(0, 2**16))
@settings(max_examples=100, derandomize=True, deadline=None, database=None)
def test_the_invariants_hold_with_a_model_too(drawn, seed):
    """The same property when a model's pair probabilities move questions, merge clusters and
    re-place those voted out: random 2-d points, p = sigmoid(2 - squared distance)."""
    n = len(drawn[0])
    points = np.random.default_rng(seed).normal(scale=1.5, size=(n, 2))
    check_invariants(drawn, PairScorer(np.arange(1, n + 1), points, Calibration(1.0, 2.0, 0)))


def check_invariants(drawn, scorer) -> None:
    clusters, splits, votes, pair_decisions = drawn
    n = len(clusters)
    corpus = pd.DataFrame({"qid": np.arange(1, n + 1, dtype="int64"), "question": [f"question {i}" for i in range(1, n + 1)],
                           "cluster": pd.array(clusters, dtype="string"), "split": splits})
    votes = pd.DataFrame([(i, q, c, label) for i, (q, c, label) in enumerate(votes, 1) if q != c],
                         columns=["id", "query_qid", "candidate_qid", "label"])
    adjudications = pd.DataFrame([(i, "rev", "cluster_pair", None, None, None, min(a, b), max(a, b), d, None, None)
                                  for i, (a, b, d) in enumerate(pair_decisions, 1) if a != b], columns=ADJUDICATION_COLUMNS)
    result = constrained_clusters(corpus, votes, adjudications, scorer)
    out = result.corpus
    assert out[["qid", "question"]].equals(corpus[["qid", "question"]]) and out["qid"].is_unique
    kept = corpus["split"] != "none"
    assert out["split"][kept].equals(corpus["split"][kept])
    assert (out["split"][~kept & out["cluster"].isna()] == "none").all()
    moved = out["qid"][out["cluster"].fillna("") != corpus["cluster"].fillna("")]
    merged_into = set(result.merges["into"])
    split_off = set(result.splits["qid"])
    for qid in moved:
        assert qid in split_off or out.set_index("qid").loc[qid, "cluster"] in merged_into, qid
    before, after = ({int(q): None if pd.isna(c) else c for q, c in zip(f["qid"], f["cluster"])} for f in (corpus, out))
    for row in result.splits.itertuples():
        assert before[row.qid] == row.cluster != after[row.qid] and (after[row.qid] or "") == row.into
    if not adjudications.empty:
        return
    mixed = {(c.cluster_a, c.cluster_b) for c in result.conflicts.itertuples() if c.kind == "mixed"}
    for item in result.items[result.items["decision"] == "different"].itertuples():
        q, c = int(item.query_qid), int(item.candidate_qid)
        together = after[q] is not None and after[q] == after[c]
        # the member voted out is the candidate, or with a model the one less like the cluster
        assert not together or {(before[c], f"qid:{c}"), (before[q], f"qid:{q}")} & mixed, (q, c)


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
    store.review.adjudicate("rev", "same", item="qid:1:4")
    result = corrected_clusters(store, hand_corpus())
    assert result.conflicts.empty and cluster_of(result, 4) == "A"
    store.review.adjudicate("rev", "different", item="qid:4:1")  # the newest decision counts, either order
    result = corrected_clusters(store, hand_corpus())
    assert result.merges.empty and cluster_of(result, 4) == "B"


def test_an_applied_pair_merges_despite_a_mixed_vote_and_a_rejected_one_never_does(store):
    judge(store, "ann", 1, 4, "same")
    judge(store, "ann", 2, 5, "different")  # A and B hold questions judged different: 4 moves, A and B stay apart
    judge(store, "ann", 8, 10, "same")  # qid:10 joins D
    result = corrected_clusters(store, hand_corpus())
    assert cluster_of(result, 4) == "A" and cluster_of(result, 5) == "B" and cluster_of(result, 10) == "D"
    store.review.adjudicate("rev", "apply", cluster_a="A", cluster_b="B")
    store.review.adjudicate("rev", "reject", cluster_a="D", cluster_b="qid:10")
    result = corrected_clusters(store, hand_corpus())
    assert cluster_of(result, 4) == cluster_of(result, 5) == "A" and result.conflicts.empty
    assert pd.isna(cluster_of(result, 10)), "a rejected pair is never merged"
    merged = result.merges.set_index(["cluster_a", "cluster_b"])
    assert merged.loc[("A", "B"), "decided_by"] == "rev"
    assert any("applied by reviewer rev" in d["reason"] for d in result.decisions())
