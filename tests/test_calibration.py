"""Distances as probabilities of the same meaning (qpr.retrieval.calibration)."""

from __future__ import annotations

import numpy as np

from qpr.retrieval.calibration import calibrate
from qpr.retrieval.lexical import BM25Retriever


def test_a_trained_encoder_is_calibrated_on_val_and_closer_means_more_alike(tiny_bundle):
    calibration = calibrate(tiny_bundle.dense_retriever(), tiny_bundle.corpus)
    assert calibration is not None and calibration.slope > 0 and calibration.pairs > 0
    probabilities = calibration.probability([0.0, 0.5, 2.0, 10.0])
    assert np.all(np.diff(probabilities) < 0) and np.all((probabilities > 0) & (probabilities < 1))


def test_the_probability_separates_hits_from_misses(tiny_bundle):
    corpus = tiny_bundle.corpus
    retriever = tiny_bundle.dense_retriever()
    calibration = calibrate(retriever, corpus)
    val = corpus[(corpus["split"] == "val") & corpus["cluster"].notna()]
    distances, qids = retriever.search_ids(val["question"].tolist(), 6)
    cluster = corpus.set_index("qid")["cluster"]
    same = cluster.reindex(qids.ravel()).to_numpy().reshape(qids.shape) == val["cluster"].to_numpy()[:, None]
    own = qids == val["qid"].to_numpy()[:, None]
    p = calibration.probability(distances)
    assert p[same & ~own].mean() > p[~same].mean()


def test_no_calibration_without_held_out_clusters_or_without_both_outcomes(tiny_bundle):
    corpus = tiny_bundle.corpus
    assert calibrate(BM25Retriever(corpus), corpus.assign(split="train")) is None
    one_cluster = corpus.assign(cluster="everything")
    assert calibrate(BM25Retriever(one_cluster), one_cluster) is None  # every hit is in the query's cluster
