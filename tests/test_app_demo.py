"""The demo corpus (hand-written data the app serves by default), the demo bundle cache, and
retraining / swapping the served model (workflows.demos, qpr.bundles.training, qpr.serving.served_model)."""

from __future__ import annotations

import shutil

import pandas as pd
import pytest

from qpr.bundles.bundle import Bundle
from qpr.data.corpus import fingerprint, read_cluster_file
from workflows.demos import DEMO_CORPUS, SPLIT_PARAPHRASES, bundle_key, demo_bundle
from qpr.model.encoder import EncoderConfig
from qpr.errors import QPRError
from qpr.retrieval.hybrid import HybridRetriever
from qpr.bundles.training import compare_bundles, held_out_splits, retrain_bundle, train_bundle
from qpr.retrieval.dense import DenseRetriever
from qpr.bundles.bundle import serving_retriever
from qpr.serving.served_model import ServedModel
from qpr.training.train import TrainConfig
from conftest import make_corpus


@pytest.fixture(scope="module")
def corpus() -> pd.DataFrame:
    return read_cluster_file(DEMO_CORPUS)


def test_demo_corpus_has_the_promised_shape(corpus):
    sizes = corpus.groupby("cluster").size()
    assert 400 <= len(corpus) <= 600
    assert sizes.min() >= 2 and sizes.max() <= 8
    assert corpus["cluster"].isna().sum() >= 20, "distractors in no cluster"
    assert not corpus["question"].str.lower().duplicated().any()
    split_of = corpus.dropna(subset=["cluster"]).groupby("cluster")["split"].agg(set)
    assert (split_of.map(len) == 1).all(), "a cluster lies in exactly one split"
    share = split_of.map(min).value_counts(normalize=True)
    assert share["train"] > 0.7 and share["val"] > 0.05 and share["test"] > 0.05
    assert set(corpus.loc[corpus["cluster"].isna(), "split"]) == {"none"}


def test_demo_corpus_shows_markup_and_scripts_as_test_cases(corpus):
    questions = corpus["question"]
    for needle in ("<b>", "**", "<script>", "onerror"):
        assert questions.str.contains(needle, regex=False).any(), needle
    assert questions.str.contains("[\u0600-\u06ff]").any(), "a right-to-left question"


def test_split_paraphrases_are_distinct_training_clusters(corpus):
    clusters = set(corpus["cluster"].dropna())
    for a, b in SPLIT_PARAPHRASES:
        assert a in clusters and b in clusters and a != b
        assert set(corpus.loc[corpus["cluster"].isin([a, b]), "split"]) == {"train"}


def test_demo_bundle_is_cached_by_content(bundle, demo_cache, corpus):
    again = demo_bundle(cache=demo_cache, progress=False, log=lambda _: None)
    assert again.version == bundle.version, "an unchanged corpus loads the cached bundle"
    assert fingerprint(bundle.corpus) == fingerprint(corpus)
    edited = corpus.copy()
    edited.loc[0, "question"] = "How do I renew my passport quickly?"
    assert bundle_key(fingerprint(edited)) != bundle_key(fingerprint(corpus))
    assert set(bundle.manifest.metrics) == {"val", "test"}


def test_the_demo_serves_the_hybrid_and_a_verbatim_question_finds_itself_first(bundle):
    served = serving_retriever(bundle)
    assert isinstance(served, HybridRetriever) and set(bundle.manifest.hybrid_metrics) == {"val", "test"}
    _, top = served.search_ids(bundle.corpus["question"].tolist(), 1)
    assert (top[:, 0] == bundle.corpus["qid"].to_numpy()).all()


def test_a_bundle_whose_val_cannot_fit_a_fusion_serves_the_encoder(monkeypatch):
    import qpr.bundles.training as module

    def unfit(*args, **kwargs):
        raise QPRError("the val queries' candidates are all negative")

    monkeypatch.setattr(module, "fit_fusion", unfit)
    small = TrainConfig(batch_size=16, max_epochs=1, val_pairs=100)
    trained = train_bundle(make_corpus(), small, encoder_config=EncoderConfig(embedding_dim=16, channels=16, output_dim=8),
                           progress=False)
    assert trained.manifest.fusion is None and "all negative" in trained.manifest.fusion_skipped
    assert trained.manifest.hybrid_metrics is None and set(trained.manifest.metrics) == {"val", "test"}
    assert isinstance(serving_retriever(trained), DenseRetriever)


def test_a_damaged_cached_bundle_is_rebuilt(bundle, demo_cache, tmp_path):
    cache = tmp_path / "cache"
    shutil.copytree(demo_cache, cache)
    (next((cache / "demo-bundle").iterdir()) / "model.safetensors").unlink()
    messages = []
    rebuilt = demo_bundle(cache=cache, progress=False, log=messages.append)
    assert rebuilt.version != bundle.version
    assert any("training the demo bundle again" in m and "model.safetensors" in m for m in messages)
    Bundle.load(next((cache / "demo-bundle").iterdir()))  # the rebuilt cache is complete


def test_retrain_continues_the_encoder_and_compares_on_the_same_queries(bundle):
    merged = bundle.corpus.copy()
    a, b = SPLIT_PARAPHRASES[0]
    merged.loc[merged["cluster"] == b, "cluster"] = a
    new = retrain_bundle(bundle, merged, max_epochs=1, progress=False)
    assert new.version != bundle.version
    assert new.vocab.tokens == bundle.vocab.tokens and new.encoder.config == bundle.encoder.config
    assert new.manifest.training["warm_start"] is True
    assert len(new.manifest.training["history"]) == 1
    table = compare_bundles(bundle, new, merged)
    assert list(table["model"]) == ["current"] * 2 + ["retrained"] * 2
    assert list(table["split"]) == ["val", "test"] * 2
    for split in ("val", "test"):
        queries = table.loc[table["split"] == split, "queries"]
        assert queries.nunique() == 1, "both models answer the same held-out queries"
    assert table[["H1", "MRR"]].apply(lambda c: c.between(0, 1)).all().all()


def test_compare_refuses_a_corpus_without_held_out_clusters(bundle):
    train_only = bundle.corpus.assign(split="train")
    assert held_out_splits(train_only) == []
    with pytest.raises(QPRError, match="nothing held out"):
        compare_bundles(bundle, bundle, train_only)


def test_served_model_swaps_only_on_confirm(bundle):
    model = ServedModel(bundle)
    old = model.current()
    with pytest.raises(QPRError, match="retrain first"):
        model.confirm(bundle.version)
    other = bundle.with_manifest(version="v-next")
    model.propose(other, pd.DataFrame())
    assert model.current() is old, "proposing does not change what is served"
    with pytest.raises(QPRError):
        model.confirm("some-other-version")
    served = model.confirm("v-next")
    assert model.current() is served and served.bundle.version == "v-next" and model.candidate() is None
    model.propose(bundle, pd.DataFrame())
    model.discard()
    assert model.candidate() is None and model.current() is served

