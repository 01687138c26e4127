"""What to judge next: suspicion ordering on constructed distances, skipping judged pairs,
least coherent clusters, and choosing the next cluster."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from annotations.db import open_store
from annotations.errors import AnnotationError
from annotations.queue import QUEUE_COLUMNS, least_coherent, next_cluster, spot_check
from conftest import make_corpus
from qpr.errors import QPRError
from qpr.retrieval.lexical import BM25Retriever
from qpr.data.coherence import cluster_coherence

VERSION = "v1"
CORPUS = pd.DataFrame({
    "qid": np.arange(1, 10, dtype="int64"),
    "question": ["a one", "a two", "a three", "b one", "b two", "c one", "c two", "loner", "d one"],
    "cluster": pd.array(["A", "A", "A", "B", "B", "C", "C", None, "D"], dtype="string"),
    "split": ["train"] * 7 + ["none", "train"],
})
# What each question retrieves: (qid, distance), nearest first. A's members retrieve each other at
# 0.4, 0.8 / 0.4, 0.6 / 0.6, 0.8 (median 0.6) and outsiders at various distances.
RESULTS = {
    "a one": [(1, 0.0), (4, 0.1), (8, 0.3), (2, 0.4), (3, 0.8), (6, 0.9)],
    "a two": [(2, 0.0), (1, 0.4), (5, 0.5), (3, 0.6), (4, 0.7)],
    "a three": [(3, 0.0), (7, 0.2), (2, 0.6), (1, 0.8)],
    "b one": [(4, 0.0), (1, 0.2), (2, 0.3)],  # B's members never retrieve each other
    "b two": [(5, 0.0), (3, 0.5)],
    "c one": [(6, 0.0), (7, 0.1), (1, 0.5)],
    "c two": [(7, 0.0), (6, 0.1), (2, 0.6)],
    "d one": [(9, 0.0), (8, 0.05)],
    "loner": [(8, 0.0), (9, 0.05)],
    "typed query": [(4, 0.2), (1, 0.3)],
    "B ONE?!": [(4, 0.05), (1, 0.3)],  # a case and punctuation variant of "b one"
}
A_OWN_DISTANCES = [0.4, 0.8, 0.4, 0.6, 0.6, 0.8]


class TableRetriever:
    """The ``search_ids`` interface over the fixed RESULTS table (qid -1 pads missing hits)."""

    def search_ids(self, texts, k):
        distances = np.full((len(texts), k), np.finfo(np.float32).max, dtype=np.float32)
        qids = np.full((len(texts), k), -1, dtype=np.int64)
        for row, text in enumerate(texts):
            for rank, (qid, distance) in enumerate(RESULTS[text][:k]):
                qids[row, rank], distances[row, rank] = qid, distance
        return distances, qids


@pytest.fixture
def store(tmp_path):
    with open_store(f"sqlite:///{tmp_path / 'a.db'}", project="demo") as opened:
        opened.corpora.register(VERSION, CORPUS)
        yield opened


def test_spot_check_ranks_outsiders_by_how_much_closer_they_are_than_the_clusters_own_members(store):
    queue = spot_check(store, TableRetriever(), CORPUS, "ann", cluster="A", k=10)
    assert list(queue.columns) == QUEUE_COLUMNS
    reference = float(np.median(A_OWN_DISTANCES))
    # each outsider once, with the member that retrieved it closest
    closest = {4: (1, 0.1, 2), 8: (1, 0.3, 3), 6: (1, 0.9, 6), 5: (2, 0.5, 3), 7: (3, 0.2, 2)}
    expected = sorted(closest, key=lambda c: closest[c][1])
    assert queue["candidate_qid"].tolist() == expected
    for row in queue.itertuples():
        query, distance, rank = closest[row.candidate_qid]
        assert (row.query_qid, row.rank) == (query, rank)
        assert row.distance == pytest.approx(distance) and row.suspicion == pytest.approx(reference - distance)
    assert queue.set_index("candidate_qid").loc[8, "cluster"] is pd.NA  # unclustered questions are candidates
    assert queue["query_text"].isna().all()


def test_spot_check_only_looks_at_the_top_k(store):
    queue = spot_check(store, TableRetriever(), CORPUS, "ann", cluster="A", k=2)
    assert queue["candidate_qid"].tolist() == [4, 7]  # the only outsiders within each member's top 2


def test_without_own_members_in_the_results_the_reference_is_the_farthest_hit(store):
    queue = spot_check(store, TableRetriever(), CORPUS, "ann", cluster="B", k=10)
    assert queue["candidate_qid"].tolist() == [1, 2, 3]
    assert queue["suspicion"].tolist() == pytest.approx([0.5 - 0.2, 0.5 - 0.3, 0.5 - 0.5])


def test_spot_check_skips_what_this_annotator_judged_in_either_direction(store):
    store.judgments.record("ann", 4, "same", VERSION, query_qid=2)  # B's 4 against A's member 2
    store.judgments.record("ann", 3, "different", VERSION, query_qid=7)  # C's 7 as the query, A's 3 the candidate
    mine = spot_check(store, TableRetriever(), CORPUS, "ann", cluster="A", k=10)
    assert 4 not in set(mine["candidate_qid"]) and 7 not in set(mine["candidate_qid"])
    assert {4, 7} <= set(spot_check(store, TableRetriever(), CORPUS, "bob", cluster="A", k=10)["candidate_qid"])


def test_a_typed_query_lists_every_hit_in_retrieval_order(store):
    queue = spot_check(store, TableRetriever(), CORPUS, "ann", query_text="typed query", k=10)
    assert queue["candidate_qid"].tolist() == [4, 1] and queue["suspicion"].tolist() == pytest.approx([-0.2, -0.3])
    assert queue["query_text"].tolist() == ["typed query"] * 2 and queue["query_qid"].isna().all()
    store.judgments.record("ann", 4, "same", VERSION, query_text="typed query")
    assert spot_check(store, TableRetriever(), CORPUS, "ann", query_text="typed query")["candidate_qid"].tolist() == [1]


def test_spot_check_refuses_bad_requests(store):
    with pytest.raises(AnnotationError, match="not in the corpus"):
        spot_check(store, TableRetriever(), CORPUS, "ann", cluster="Z")
    with pytest.raises(AnnotationError, match="exactly one of cluster or query_text"):
        spot_check(store, TableRetriever(), CORPUS, "ann", cluster="A", query_text="typed query")
    with pytest.raises(AnnotationError, match="annotator name is empty"):
        spot_check(store, TableRetriever(), CORPUS, " ", cluster="A")
    with pytest.raises(QPRError, match="k must be"):
        spot_check(store, TableRetriever(), CORPUS, "ann", cluster="A", k=0)


def test_spot_check_with_a_real_retriever(tmp_path):
    corpus = make_corpus(n_topics=6, distractors=3)
    with open_store(f"sqlite:///{tmp_path / 'b.db'}", project="demo") as store:
        store.corpora.register(VERSION, corpus)
        cluster = corpus["cluster"].dropna().iloc[0]
        queue = spot_check(store, BM25Retriever(corpus), corpus, "ann", cluster=cluster, k=10)
        assert len(queue) > 0 and queue["candidate_qid"].is_unique
        assert not queue["cluster"].eq(cluster).fillna(False).any()
        assert queue["suspicion"].is_monotonic_decreasing
        first = queue.iloc[0]
        store.judgments.record("ann", int(first["candidate_qid"]), "different", VERSION, query_qid=int(first["query_qid"]))
        again = spot_check(store, BM25Retriever(corpus), corpus, "ann", cluster=cluster, k=10)
        assert again["candidate_qid"].tolist() == queue["candidate_qid"].tolist()[1:]


def test_least_coherent_lists_clusters_lowest_coherence_first():
    corpus = pd.DataFrame({
        "qid": np.arange(1, 8, dtype="int64"),
        "question": ["same words", "same words", "red apple", "green pear", "red pear", "alone", "x"],
        "cluster": pd.array(["same", "same", "mixed", "mixed", "mixed", "solo", None], dtype="string"),
        "split": "train",
    })
    table = least_coherent(corpus)
    assert table["cluster"].tolist() == ["mixed", "same"]  # "solo" has one question
    assert table["size"].tolist() == [3, 2] and table["coherence"].iloc[0] < table["coherence"].iloc[1] == 1.0
    for row in table.itertuples():
        assert row.coherence == pytest.approx(cluster_coherence(corpus.loc[corpus["cluster"] == row.cluster, "question"]))
    assert least_coherent(corpus, n=1)["cluster"].tolist() == ["mixed"]


def test_next_cluster_avoids_clusters_the_annotator_already_checked(store):
    eligible = {"A", "B", "C"}  # D has one question
    assert next_cluster(store, CORPUS, "ann", rng_seed=1) in eligible
    assert next_cluster(store, CORPUS, "ann", rng_seed=5) == next_cluster(store, CORPUS, "ann", rng_seed=5)
    store.judgments.record("ann", 4, "same", VERSION, query_qid=1)  # a query in A
    store.judgments.record("ann", 1, "same", VERSION, query_qid=6)  # a query in C
    assert {next_cluster(store, CORPUS, "ann", rng_seed=seed) for seed in range(10)} == {"B"}
    assert next_cluster(store, CORPUS, "bob", rng_seed=0) in eligible
    store.judgments.record("ann", 1, "unsure", VERSION, query_qid=5)
    with pytest.raises(AnnotationError, match="every cluster"):
        next_cluster(store, CORPUS, "ann")


def test_next_cluster_with_a_retriever_prefers_the_most_suspicious_candidates(store):
    # best unjudged suspicion: A 0.6 - 0.1 = 0.5, B 0.5 - 0.2 = 0.3, C 0.1 - 0.5 = -0.4
    assert next_cluster(store, CORPUS, "ann", rng_seed=0, retriever=TableRetriever()) == "A"
    store.judgments.record("ann", 4, "same", VERSION, query_qid=1)
    assert next_cluster(store, CORPUS, "ann", rng_seed=0, retriever=TableRetriever()) == "B"


def test_a_typed_query_that_is_a_corpus_question_is_that_question_never_its_own_candidate(store):
    """Issue 38, bug 1: "Check query" with a corpus question offered that question as candidate 1."""
    queue = spot_check(store, TableRetriever(), CORPUS, "ann", query_text=" a one ")
    assert 1 not in set(queue["candidate_qid"]), "never its own candidate"
    assert not ({2, 3} & set(queue["candidate_qid"])), "nor a question of its own cluster"
    assert queue["query_qid"].tolist() == [1] * len(queue) and queue["query_text"].isna().all()
    assert queue["candidate_qid"].tolist() == [4, 8, 6]  # -distance order, as for any typed query
    free = spot_check(store, TableRetriever(), CORPUS, "ann", query_text="typed query")
    assert free["query_qid"].isna().all() and free["query_text"].eq("typed query").all()
    # Issue 54: a case or punctuation variant of a corpus question is not offered that question.
    variant = spot_check(store, TableRetriever(), CORPUS, "ann", query_text="B ONE?!")
    assert variant["candidate_qid"].tolist() == [1]


def test_an_empty_queue_says_why_and_never_blames_judgments_nobody_made(store):
    """Issue 38, bug 2: a new annotator was told everything was judged already (by them)."""
    from annotations.queue import why_empty

    clustered = CORPUS.assign(cluster=CORPUS["cluster"].fillna("D"))  # D's members retrieve only each other
    nothing_outside = spot_check(store, TableRetriever(), clustered, "new", cluster="D")
    assert nothing_outside.empty and "finds no question outside" in why_empty(nothing_outside)
    full = spot_check(store, TableRetriever(), CORPUS, "ann", cluster="C")
    for row in full.itertuples():
        store.judgments.record("ann", int(row.candidate_qid), "different", VERSION, query_qid=int(row.query_qid))
    judged = spot_check(store, TableRetriever(), CORPUS, "ann", cluster="C")
    assert judged.empty and why_empty(judged) == f"Of the {len(full)} question(s) retrieved here, {len(full)} judged by you already: nothing left to check."
    taken = spot_check(store, TableRetriever(), CORPUS, "bob", cluster="C", overlap=1)
    assert taken.empty and f"{len(full)} labelled by enough other annotators" in why_empty(taken)
