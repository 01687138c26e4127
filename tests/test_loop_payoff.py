"""Issue 21's building blocks on tiny constructed data: the false-positive suspects, which pairs a
noisy corpus labels wrongly, and H@1 corrected by judged top results (through a real store)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from annotations.simulation.benchmark_check import judged_h1, order, top_results
from annotations.db import open_store
from annotations.errors import AnnotationError
from annotations.simulation.oracle import SimulatedAnnotator, label_errors
from annotations.simulation.outlook import describe, found_errors, outlook
from annotations.simulation.strategies import POOL_COLUMNS, select, within_pool


class LineRetriever:
    """Each question "q <x>" sits at x on a line; search is exact over ``corpus``."""

    def __init__(self, corpus: pd.DataFrame) -> None:
        self.corpus = corpus

    def encode(self, texts):
        return np.array([[float(t.split()[1])] for t in texts])

    def search_ids(self, queries, k):
        points = self.encode(self.corpus["question"].tolist())[:, 0]
        distances = (self.encode(queries) - points[None, :]) ** 2
        nearest = np.argsort(distances, axis=1, kind="stable")[:, :k]
        return np.take_along_axis(distances, nearest, axis=1), self.corpus["qid"].to_numpy()[nearest]


def corpus_of(points, clusters, split="train"):
    return pd.DataFrame({"qid": range(1, len(points) + 1), "question": [f"q {p}" for p in points],
                         "cluster": pd.array(clusters, dtype="string"), "split": split})


def test_within_pool_puts_the_member_that_does_not_belong_first():
    # A = 1-3 near 0, joined with B = 4-5 near 10 (a false positive); C = 6-8 tight; D has 2 members (no core)
    corpus = corpus_of([0, 0.1, 0.2, 10, 10.1, 20, 20.1, 20.2, 30, 31], ["A"] * 5 + ["C"] * 3 + ["D"] * 2)
    pool = within_pool(LineRetriever(corpus), corpus)
    assert list(pool.columns) == POOL_COLUMNS
    assert set(pool["query_qid"]) == {3, 7}  # each cluster's core: the member nearest its mean (A's is 4.08)
    assert len(pool) == 4 + 2 and not pool["candidate_qid"].isin([9, 10]).any()
    picked = select(pool, "suspicion", 2)
    assert set(picked["candidate_qid"]) == {4, 5}
    assert (picked["suspicion"] > 0).all() and (picked["rank"] > 2).all()
    assert within_pool(LineRetriever(corpus), corpus, exclude={(3, 4), (4, 3)})["candidate_qid"].tolist() == [1, 2, 5, 6, 8]


def test_label_errors_counts_both_kinds():
    truth = corpus_of([0, 1, 2, 3], ["A", "A", "B", "B"])
    noisy = truth.assign(cluster=pd.array(["A", "A~b", "B", "B"], dtype="string"))
    noisy.loc[3, "cluster"] = "A~b"  # 1 and 2 wrongly apart; 2 and 4 wrongly together
    assert label_errors(truth, noisy, [1, 2, 3, 3], [2, 4, 4, 1]).tolist() == [True, True, True, False]


@pytest.fixture
def store(tmp_path):
    with open_store(f"sqlite:///{tmp_path / 'check.db'}", project="demo") as opened:
        yield opened


def test_judging_top_results_moves_measured_h1_to_the_true_one(store):
    # Truth: {1,2} {3,4} {5,6}. Test labels: 2 filed apart from 1 (false negative), 5 and 6 apart.
    truth = corpus_of([0, 0.1, 5, 5.2, 9, 9.1], ["A", "A", "B", "B", "C", "C"], split="test")
    noisy = truth.assign(cluster=pd.array(["A", "A~b", "B", "B", "C", "C~b"], dtype="string"))
    table = top_results(LineRetriever(truth), noisy)
    assert table["candidate_qid"].tolist() == [2, 1, 4, 3, 6, 5]
    assert table["labelled_hit"].tolist() == [False, False, True, True, False, False]
    assert judged_h1(table, store.judgments.frame()) == pytest.approx(2 / 6)  # nothing judged: as labelled
    store.corpora.register("v1", noisy)
    annotator = SimulatedAnnotator(truth)
    annotator.judge(store, table.iloc[[0]], "v1")  # one judgment settles queries 1 and 2, each other's top result
    assert judged_h1(table, store.judgments.frame()) == pytest.approx(4 / 6)
    annotator.judge(store, table.iloc[[5]], "v1")
    assert judged_h1(table, store.judgments.frame()) == pytest.approx(1.0)  # the true H@1
    assert len(order(table, "random")) == 3


def test_near_miss_order_puts_close_misses_first_then_far_hits():
    table = pd.DataFrame({"query_qid": range(1, 9), "candidate_qid": range(11, 19),
                          "distance": [0.1, 0.2, 0.3, 0.4, 2.0, 2.1, 2.2, 0.15],
                          "labelled_hit": [True, True, True, True, False, False, True, False]})
    assert order(table, "near_miss")["query_qid"].tolist() == [8, 5, 6, 7, 4, 3, 2, 1]
    assert sorted(order(table, "random", seed=3)["query_qid"]) == list(range(1, 9))
    with pytest.raises(AnnotationError, match="unknown order"):
        order(table, "nearest")


def judgments_of(labels, query_clusters, candidate_clusters):
    return pd.DataFrame({"query_qid": range(1, len(labels) + 1), "label": labels,
                         "query_cluster": pd.array(query_clusters, dtype="string"),
                         "candidate_cluster": pd.array(candidate_clusters, dtype="string")})


def test_found_errors_are_same_across_and_different_within():
    rows = judgments_of(["same", "different", "same", "different", "unsure", "same"],
                        ["A", "A", "A", "A", "A", "A"], ["B", "A", "A", "B", "B", None])
    assert found_errors(rows).tolist() == [True, True, False, False, False, True]


def test_outlook_uses_the_recent_window_and_a_wilson_interval():
    assert outlook(judgments_of(["unsure"], ["A"], ["B"])) is None
    # 10 old judgments all errors, then 20 recent ones with 5 errors; the window keeps the 20
    rows = judgments_of(["same"] * 10 + ["same"] * 5 + ["different"] * 15, ["A"] * 30, ["B"] * 30)
    estimate = outlook(rows, next_n=500, window=20)
    assert (estimate.judged, estimate.found, estimate.recent, estimate.recent_found) == (30, 15, 20, 5)
    z = 1.959964
    centre, half = (5 + z * z / 2) / (20 + z * z), z / (20 + z * z) * np.sqrt(5 * 15 / 20 + z * z / 4)
    assert (estimate.low, estimate.high) == pytest.approx((centre - half, centre + half), abs=1e-5)
    assert estimate.expected == pytest.approx((125.0, 500 * estimate.low, 500 * estimate.high))
    assert "about **125**" in describe(estimate) and "Assumed:" in describe(estimate)
