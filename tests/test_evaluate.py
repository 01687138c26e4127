import numpy as np
import pandas as pd
import pytest

from qpr.evaluation.metrics import TOP, evaluate, hits_of, query_set, rank_metrics, ranked_qids


def test_rank_metrics_by_hand():
    hits = np.zeros((4, TOP), dtype=bool)
    hits[0, 0] = True          # rank 1
    hits[1, [2, 5]] = True     # first hit at rank 3
    hits[2, 15] = True         # rank 16: outside H@10
    metrics = rank_metrics(hits)  # row 3: no hit
    assert metrics["H1"] == 0.25
    assert metrics["H10"] == 0.5
    assert metrics["MRR"] == pytest.approx((1 + 1 / 3 + 1 / 16 + 0) / 4)
    assert metrics["queries"] == 4


class FixedRetriever:
    """Returns a fixed ranking for each query text, to test the protocol in isolation."""

    def __init__(self, rankings):
        self.rankings = rankings

    def search_ids(self, queries, k):
        qids = np.full((len(queries), k), -1)
        for row, text in enumerate(queries):
            ranked = self.rankings[text][:k]
            qids[row, : len(ranked)] = ranked
        return np.zeros(qids.shape), qids


def test_query_is_removed_from_its_own_results_and_only_its_split_is_queried():
    corpus = pd.DataFrame(
        {
            "qid": [1, 2, 3, 4, 5],
            "question": ["a", "b", "c", "d", "e"],
            "cluster": pd.array(["x", "x", "y", "y", None], dtype="string"),
            "split": ["test", "test", "val", "val", "none"],
        }
    )
    # "a" retrieves itself first: not a hit; then a distractor, then its paraphrase (rank 2 after removal).
    retriever = FixedRetriever({"a": [1, 5, 2], "b": [2, 1]})
    metrics = evaluate(retriever, corpus, "test")
    assert metrics["queries"] == 2
    assert metrics["H1"] == 0.5  # "b" finds "a" at rank 1 once itself is removed
    assert metrics["MRR"] == pytest.approx((1 / 2 + 1) / 2)


def test_ranked_lists_drop_the_query_and_pad_and_their_hits_are_its_cluster_s_questions():
    corpus = pd.DataFrame({"qid": [1, 2, 3, 4, 5], "question": ["a", "b", "c", "d", "e"],
                           "cluster": pd.array(["x", "x", "y", "y", None], dtype="string"), "split": "test"})
    queries = query_set(corpus, "test")  # the four clustered questions
    retriever = FixedRetriever({"a": [1, 5, 2], "b": [3, 2, 1], "c": [4], "d": []})
    qids = ranked_qids(retriever, queries)
    assert qids.shape == (4, TOP) and qids[:, :3].tolist() == [[5, 2, -1], [3, 1, -1], [4, -1, -1], [-1, -1, -1]]
    hits = hits_of(qids, corpus, queries)
    assert hits[:, :3].tolist() == [[False, True, False], [False, True, False], [True, False, False], [False] * 3]
    assert not hits[:, 3:].any()  # padding is never a hit
