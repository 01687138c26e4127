"""The queue that asks what pays (issue 57): uncertain pairs across and within clusters, a few per
cluster; audits of the largest, least pure clusters; a random share; judged pairs never again."""

from __future__ import annotations

import numpy as np
import pytest
import pandas as pd

from annotations.rounds import PER_CLUSTER, queue_round
from annotations.simulation.oracle import SimulatedAnnotator
from qpr.retrieval.calibration import Calibration


class LineRetriever:
    """Questions on a line (qid q at position q); distance = squared gap."""

    def __init__(self, corpus: pd.DataFrame) -> None:
        self.corpus = corpus
        self.position = dict(zip(corpus["question"], corpus["qid"].astype(float)))

    def encode(self, texts):
        return np.array([[self.position[t]] for t in texts])

    def search_ids(self, texts, k):
        x = self.encode(texts)
        everything = self.corpus["qid"].to_numpy(dtype=float)
        d = (x - everything[None, :]) ** 2
        order = np.argsort(d, axis=1, kind="stable")[:, :k]
        return np.take_along_axis(d, order, axis=1), self.corpus["qid"].to_numpy()[order]


def line(n: int = 60) -> pd.DataFrame:
    clusters = ["big" if q < 8 else f"c{q // 3}" for q in range(n)]  # one cluster of 8, then clusters of 3
    return pd.DataFrame({"qid": np.arange(n, dtype="int64"), "question": [f"q{q}" for q in range(n)],
                         "cluster": pd.array(clusters, dtype="string"), "split": "train"})


def test_a_round_mixes_uncertain_audit_and_random_pairs_a_few_per_cluster():
    corpus = line()
    retriever = LineRetriever(corpus)
    calibration = Calibration(1.0, 4.0, 0)  # p = 0.5 at squared distance 4: pairs two apart are the least sure
    picked = queue_round(retriever, corpus, calibration, 20, seed=1)
    assert len(picked) == 20 and picked["kind"].value_counts().to_dict() == {"uncertain": 14, "audit": 4, "random": 2}
    assert len({frozenset(p) for p in zip(picked["query_qid"], picked["candidate_qid"])}) == 20, "no pair asked twice"
    uncertain = picked[picked["kind"] == "uncertain"]
    assert (uncertain["distance"] == 4).all() and (abs(uncertain["probability"] - 0.5) < 1e-9).all()
    cluster = corpus.set_index("qid")["cluster"]
    touched = pd.concat([uncertain["query_qid"].map(cluster), uncertain["candidate_qid"].map(cluster)]).value_counts()
    assert touched.max() <= 2 * PER_CLUSTER
    within = (uncertain["query_qid"].map(cluster) == uncertain["candidate_qid"].map(cluster))
    assert within.any() and (~within).any(), "uncertain pairs are asked across and within clusters"
    audit = picked[picked["kind"] == "audit"]
    assert (audit["query_qid"].map(cluster) == audit["candidate_qid"].map(cluster)).all()
    assert (audit["query_qid"].map(cluster) == "big").sum() == PER_CLUSTER, "nothing audited yet: the largest first"


def test_judged_pairs_are_not_asked_again_and_audits_follow_the_estimated_purity():
    corpus = line()
    retriever = LineRetriever(corpus)
    calibration = Calibration(1.0, 4.0, 0)
    cluster = corpus.set_index("qid")["cluster"]
    first = queue_round(retriever, corpus, calibration, 20, seed=1)
    assert "c19" not in set(first.loc[first["kind"] == "audit", "query_qid"].map(cluster))
    # the first round answered "unsure" (asked, no evidence); "big" then audited pure, c19 mixed
    judged = [(q, c, "unsure") for q, c in zip(first["query_qid"], first["candidate_qid"])]
    judged += [(0, 7, "same"), (1, 6, "same"), (2, 5, "same"), (3, 4, "same"), (57, 58, "different"), (57, 59, "different")]
    judgments = pd.DataFrame([(i, q, c, label) for i, (q, c, label) in enumerate(judged, 1)],
                             columns=["id", "query_qid", "candidate_qid", "label"])
    second = queue_round(retriever, corpus, calibration, 20, judgments, seed=2)
    asked = {frozenset(p) for p in zip(judgments["query_qid"], judgments["candidate_qid"])}
    assert not asked & {frozenset(p) for p in zip(second["query_qid"], second["candidate_qid"])}
    assert "c19" in set(second.loc[second["kind"] == "audit", "query_qid"].map(cluster)), "the least pure is audited first"


def test_the_simulated_annotator_errs_on_near_pairs():
    truth = pd.DataFrame({"qid": np.arange(4000), "question": "q", "cluster": pd.array(["a"] * 4000, dtype="string"),
                          "split": "train"})
    annotator = SimulatedAnnotator(truth, error_rate=0.1, seed=0, near=True)
    wrong = annotator.labels(np.arange(2000), np.arange(2000, 4000), np.arange(2000.0)) == "different"
    assert abs(wrong.mean() - 0.1) < 0.02, "the rate on average"
    assert wrong[:500].mean() > 3 * wrong[-500:].mean(), "mostly on the nearest pairs"


def test_no_pair_is_asked_twice_in_a_round_even_when_audits_and_the_random_share_meet():
    corpus = line()
    picked = queue_round(LineRetriever(corpus), corpus, Calibration(1.0, 4.0, 0), 150, seed=3)
    assert len({frozenset(p) for p in zip(picked["query_qid"], picked["candidate_qid"])}) == len(picked)


def test_audits_by_coherence_reach_a_small_mixed_cluster_before_the_largest():
    corpus = line()
    spread = [30, 45, 59]  # one small cluster whose members lie far apart: mixed, as the model sees it
    corpus.loc[corpus["qid"].isin(spread), "cluster"] = "spread"
    retriever, calibration = LineRetriever(corpus), Calibration(1.0, 4.0, 0)
    cluster = corpus.set_index("qid")["cluster"]
    by_size = queue_round(retriever, corpus, calibration, 20, seed=1)
    audited = by_size.loc[by_size["kind"] == "audit", "query_qid"].map(cluster)
    assert (audited == "big").sum() == PER_CLUSTER and "spread" not in set(audited), "by size: the largest first"
    by_coherence = queue_round(retriever, corpus, calibration, 20, seed=1, audit_order="coherence")
    audits = by_coherence[by_coherence["kind"] == "audit"]
    assert (audits["query_qid"].map(cluster) == "spread").sum() == PER_CLUSTER, "the least coherent first"
    assert (audits["query_qid"].map(cluster) == audits["candidate_qid"].map(cluster)).all()
    with pytest.raises(ValueError, match="audit_order"):
        queue_round(retriever, corpus, calibration, 20, audit_order="size")
