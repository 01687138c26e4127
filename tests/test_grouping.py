"""Bare questions become clusters (issue 38): the cluster-building queue proposes a seed and its
nearest questions; "same meaning" links form clusters through the merge rules (connected
components), "different" links keep questions apart, and the count of clusters says when
training becomes possible."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from annotations.db import open_store
from annotations.grouping import needs_clusters, next_group, progress
from annotations.constraints import corrected_clusters
from annotations.simulation.oracle import SimulatedAnnotator
from qpr.data.upload import MIN_TRAIN_CLUSTERS
from qpr.retrieval.lexical import BM25Retriever

VERSION = "bare-v1"


TOPICS = ["password", "refund", "shipping", "invoice", "coupon", "warranty", "login", "battery", "screen", "delivery",
          "subscription", "pairing", "charger", "receipt", "voucher", "firmware", "antenna", "backup"]


def topics_corpus() -> pd.DataFrame:
    """Three questions per topic, sharing the topic's two words (and a common word or two with other topics)."""
    questions = [text.format(t) for t in TOPICS for text in ("{0} {0}s", "help with {0}s and {0}", "my {0} {0}s again")]
    return pd.DataFrame({"qid": np.arange(1, len(questions) + 1, dtype="int64"), "question": questions,
                         "cluster": pd.array(np.repeat(TOPICS, 3), dtype="string"), "split": "train"})


@pytest.fixture
def bare(tmp_path):
    """A corpus of topics as the truth, and the same questions uploaded bare, in a store."""
    truth = topics_corpus()
    corpus = truth.assign(cluster=pd.array([None] * len(truth), dtype="string"), split="none")
    with open_store(f"sqlite:///{tmp_path / 'a.db'}", project="demo") as store:
        store.corpora.register(VERSION, corpus)
        yield truth, corpus, store


def test_a_group_is_a_seed_in_no_cluster_and_its_nearest_questions_never_itself(bare):
    truth, corpus, store = bare
    assert needs_clusters(corpus) and not needs_clusters(truth)
    group = next_group(store, BM25Retriever(corpus), corpus, "ann", size=5)
    seed = int(group["query_qid"].iloc[0])
    assert group["query_qid"].eq(seed).all() and seed not in set(group["candidate_qid"])
    assert 0 < len(group) <= 5 and group["candidate_qid"].is_unique
    assert next_group(store, BM25Retriever(corpus), corpus, "ann", size=5).equals(group), "the same until judged"


def test_same_links_form_clusters_different_links_keep_apart_and_training_becomes_possible(bare):
    truth, corpus, store = bare
    retriever, oracle = BM25Retriever(corpus), SimulatedAnnotator(truth, name="ann")
    assert progress(store, corpus) == (0, MIN_TRAIN_CLUSTERS)
    seeds = []
    while progress(store, corpus)[0] < MIN_TRAIN_CLUSTERS:
        group = next_group(store, retriever, corpus, "ann", size=2)
        assert not group.empty, "the queue never runs dry before the project can train"
        assert int(group["query_qid"].iloc[0]) not in seeds, "a seed is proposed once"
        seeds.append(int(group["query_qid"].iloc[0]))
        oracle.judge(store, group, VERSION)
    formed = corrected_clusters(store, corpus).corpus
    truth_of = truth.set_index("qid")["cluster"]
    for _, members in formed[formed["cluster"].notna()].groupby("cluster"):
        assert truth_of[members["qid"]].nunique() == 1, "a perfect annotator's clusters never mix topics"
    assert (formed["cluster"].notna() & (formed["split"] == "train")).any()
    judged = store.judgments.frame()
    assert judged["query_qid"].notna().all(), "the queue's judgments name corpus questions, so they count"


def test_a_different_link_is_a_cannot_link_between_formed_clusters(bare):
    truth, corpus, store = bare
    a, b, c = corpus["qid"].iloc[:3].tolist()
    store.judgments.record("ann", b, "same", VERSION, query_qid=a)
    store.judgments.record("ann", c, "different", VERSION, query_qid=a)
    store.judgments.record("ann", c, "same", VERSION, query_qid=b)  # would chain c into a's cluster
    formed = corrected_clusters(store, corpus)
    clusters = formed.corpus.set_index("qid")["cluster"]
    assert clusters[a] == clusters[b] and pd.isna(clusters[c]) or clusters[c] != clusters[a]
    assert not formed.conflicts.empty
