"""Distances as probabilities of the same meaning (qpr.retrieval.calibration)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from qpr.retrieval.calibration import calibrate, kept_calibrations
from qpr.retrieval.lexical import BM25Retriever
from qpr.serving.served_model import calibration_key


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


def test_calibrations_are_fitted_once_per_key_and_read_back(tiny_bundle, tmp_path, monkeypatch):
    import qpr.retrieval.calibration as calibration_module

    retrievers = {"dense": tiny_bundle.dense_retriever(), "bm25": BM25Retriever(tiny_bundle.corpus)}
    fitted = kept_calibrations(tmp_path, "k1", retrievers, tiny_bundle.corpus)
    assert fitted["dense"] == calibrate(retrievers["dense"], tiny_bundle.corpus) and fitted["dense"] is not None
    with monkeypatch.context() as patched:
        patched.setattr(calibration_module, "calibrate", lambda *_: pytest.fail("fitted again"))
        assert kept_calibrations(tmp_path, "k1", retrievers, tiny_bundle.corpus) == fitted
    (tmp_path / "k1.json").write_text("{not json")  # a damaged file is fitted again, and rewritten
    assert kept_calibrations(tmp_path, "k1", retrievers, tiny_bundle.corpus) == fitted
    assert json.loads((tmp_path / "k1.json").read_text())["dense"]["slope"] == fitted["dense"].slope
    one_more = retrievers | {"again": retrievers["bm25"]}  # a retriever the file lacks: fitted again
    assert kept_calibrations(tmp_path, "k1", one_more, tiny_bundle.corpus)["again"] == fitted["bm25"]


def test_the_served_model_keys_calibrations_by_version_corpus_and_fusion(tiny_bundle):
    grown = tiny_bundle.with_questions(pd.DataFrame({"qid": [10**9], "question": ["one more question"], "cluster": [None]}))
    keys = {calibration_key(b) for b in (tiny_bundle, grown, tiny_bundle.with_fusion({"weights": [1.0]}))}
    assert len(keys) == 3 and calibration_key(tiny_bundle) == calibration_key(tiny_bundle.with_card(name="x"))


def test_a_cache_that_cannot_be_written_still_gives_the_calibrations(tiny_bundle, tmp_path):
    blocked = tmp_path / "file-not-folder"
    blocked.write_text("x")  # the cache folder's place holds a file: nothing can be written under it
    retrievers = {"bm25": BM25Retriever(tiny_bundle.corpus)}
    assert kept_calibrations(blocked / "calibrations", "k", retrievers, tiny_bundle.corpus) == {
        "bm25": calibrate(retrievers["bm25"], tiny_bundle.corpus)}
