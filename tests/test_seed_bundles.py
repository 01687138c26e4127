"""The seed systems (FILM, IDF-embed, FCRR, ConvRR) as bundles: trained by `python -m qpr train
--system ...`, saved, loaded, searched, served by the app and retrained, on tiny synthetic data.
The optional transformer backend is served and retrained by the app here too (its own tests:
tests/test_transformer.py)."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

from qpr.bundles.bundle import Bundle, is_bundle
from qpr.bundles.training import retrain_bundle, train_seed_bundle
from qpr.cli.main import main
from qpr.errors import QPRError
from qpr.retrieval.index import IndexConfig
from qpr.systems.seed_encoders import SYSTEMS, SeedSettings
from qpr.bundles.bundle import serving_retriever
from qpr.serving.served_model import ServedModel

SMALL = SeedSettings(film_rank=8, film_iterations=20, word_dim=16, epochs=4, patience=2)
SERVED = SYSTEMS + ("transformer",)


def needs(system: str) -> None:
    if system == "transformer":  # the optional extra
        pytest.importorskip("sentence_transformers")
    elif system != "film":  # the word-vector systems train skip-gram vectors with gensim
        pytest.importorskip("gensim")


@pytest.fixture(scope="module")
def seed_bundles(tmp_path_factory, request):
    """Each seed system trained on ``make_corpus()``, saved and loaded back: {system: (trained, loaded)};
    the transformer's (conftest ``transformer_bundles``) when sentence-transformers is installed."""
    from conftest import make_corpus

    corpus, folder, out = make_corpus(), tmp_path_factory.mktemp("seed-bundles"), {}
    for system in SYSTEMS:
        if system != "film" and not _has_gensim():
            continue
        trained = train_seed_bundle(corpus, system, SMALL, IndexConfig("Flat"))
        out[system] = (trained, Bundle.load(trained.save(folder / system)))
    if importlib.util.find_spec("sentence_transformers"):
        out["transformer"] = request.getfixturevalue("transformer_bundles")
    return out


def _has_gensim() -> bool:
    try:
        import gensim  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.parametrize("system", SERVED)
def test_a_seed_bundle_loads_as_saved_and_finds_a_training_question_s_paraphrases(seed_bundles, system):
    needs(system)
    trained, loaded = seed_bundles[system]
    assert loaded.system == trained.manifest.system == system and loaded.vocab is None
    assert loaded.version == trained.version and loaded.manifest.training["settings"]["seed"] == 0
    texts = loaded.corpus["question"].tolist()
    np.testing.assert_allclose(loaded.encode(texts), trained.encode(texts), atol=1e-6)
    assert np.allclose(np.linalg.norm(loaded.encode(texts[:20]), axis=1), 1.0, atol=1e-5)  # unit rows: L2 = cosine ranking
    # An encoder, not a pair scorer: a question's vector does not depend on what it is encoded with.
    np.testing.assert_allclose(loaded.encode(texts[:1])[0], loaded.encode(texts[:20])[0], atol=1e-6)
    assert set(loaded.manifest.metrics) == {"val", "test"}
    train = loaded.corpus[loaded.corpus["split"] == "train"].iloc[0]
    dense = loaded.dense_retriever()
    assert dense.name == system  # results and calibrations say which system ranked them
    hits = dense.search(train["question"], 3)
    assert hits[0].qid == train["qid"]  # itself first
    assert hits[1].cluster == train["cluster"]  # then a paraphrase it was trained on


@pytest.mark.parametrize("system", SERVED)
def test_the_app_serves_a_seed_bundle(seed_bundles, system, tmp_path):
    needs(system)
    from annotations.db import open_store
    from ui.common import AppContext
    from ui.page import QPRPage

    _, loaded = seed_bundles[system]
    store = open_store(f"sqlite:///{tmp_path / 'annotations.db'}", project="demo")
    try:
        page = QPRPage(AppContext(ServedModel(loaded), store, "name", cache=tmp_path))
        page.build()
        query = loaded.corpus["question"].iloc[0]
        table = page.search.search(query, 5, False)[page.search.results]
        assert table["question"].iloc[0] == query and len(table) == 5
        assert type(serving_retriever(loaded)).__name__ == ("HybridRetriever" if loaded.manifest.fusion is not None else "DenseRetriever")
    finally:
        store.close()


def test_qpr_bundle_starts_the_app_on_a_seed_bundle(seed_bundles, tmp_path, monkeypatch):
    from workflows.app_start import served_bundle

    trained, _ = seed_bundles["film"]
    monkeypatch.setenv("QPR_BUNDLE", str(trained.save(tmp_path / "film")))
    served, examples = served_bundle()
    assert served.system == "film" and served.version == trained.version and len(examples) == 5


def test_retraining_a_seed_bundle_refits_it_with_its_own_settings_on_the_corrected_clusters(seed_bundles):
    trained, _ = seed_bundles["film"]
    corrected = trained.corpus.copy()
    train_clusters = corrected.loc[corrected["split"] == "train", "cluster"].unique()
    corrected.loc[corrected["cluster"] == train_clusters[1], "cluster"] = train_clusters[0]  # a merge
    new = retrain_bundle(trained, corrected, provenance={"export_id": 7})
    assert new.system == "film" and new.version != trained.version and new.manifest.provenance == {"export_id": 7}
    assert new.manifest.training["settings"] == trained.manifest.training["settings"]
    assert new.manifest.training["data"] == "corrected clusters"
    assert new.encoder.settings()["rank"] == SMALL.film_rank


def test_a_seed_bundle_replaces_an_older_one_in_place(seed_bundles, tmp_path):
    trained, _ = seed_bundles["film"]
    path = trained.save(tmp_path / "b")
    assert is_bundle(path)
    trained.save(path)  # a bundle folder may be overwritten by a bundle
    assert Bundle.load(path).version == trained.version


def test_a_damaged_seed_bundle_is_refused_with_what_is_wrong(seed_bundles, tmp_path):
    trained, _ = seed_bundles["film"]
    path = trained.save(tmp_path / "b")
    (path / "encoder.npz").write_bytes(b"not numpy")
    with pytest.raises(QPRError, match="encoder.npz is not a readable encoder file"):
        Bundle.load(path)
    (path / "encoder.npz").unlink()
    with pytest.raises(QPRError, match="missing encoder.npz"):
        Bundle.load(path)
    manifest = json.loads((path / "manifest.json").read_text())
    (path / "manifest.json").write_text(json.dumps(manifest | {"system": "bert"}))
    np.savez(path / "encoder.npz", x=np.zeros(1))
    with pytest.raises(QPRError, match="unknown system 'bert'"):
        Bundle.load(path)


def test_a_seed_bundle_with_arrays_of_another_shape_is_refused(seed_bundles, tmp_path):
    trained, _ = seed_bundles["film"]
    path = trained.save(tmp_path / "b")
    with np.load(path / "encoder.npz") as stored:
        arrays = dict(stored)
    np.savez(path / "encoder.npz", **(arrays | {"idf": arrays["idf"][:-1]}))
    with pytest.raises(QPRError, match="differ in number"):
        Bundle.load(path)


@pytest.fixture
def cluster_file(tmp_path):
    from conftest import make_corpus

    path = tmp_path / "clusters.tsv"
    make_corpus().to_csv(path, sep="\t", index=False)
    return path


def test_train_cli_trains_film_by_name_and_the_bundle_answers_search(cluster_file, tmp_path, capsys):
    out = tmp_path / "film"
    assert main(["train", "--system", "film", "--data", str(cluster_file), "--out", str(out), "--film-rank", "8",
                 "--film-iterations", "10", "--index", "Flat", "--quiet"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["system"] == "film" and set(printed["metrics"]) == {"val", "test"}
    assert Bundle.load(out).manifest.encoder_config["rank"] == 8
    assert main(["search", str(out), "how do i learn chess ?", "-k", "2", "--dense", "--json"]) == 0
    hits = json.loads(capsys.readouterr().out)["hits"]
    assert hits[0]["question"] == "how do i learn chess ?" and hits[1]["cluster"] == "c-chess"


@pytest.mark.parametrize("argv, message", [
    (["--system", "film", "--windows", "3"], "--windows is not an option of --system film"),
    (["--system", "film", "--epochs", "3"], "--epochs is not an option of --system film"),
    (["--system", "cnn-sdml", "--film-rank", "4"], "--film-rank is not an option of --system cnn-sdml"),
    (["--system", "film", "--architecture", "lstm"], "--architecture lstm contradicts --system film"),
    (["--system", "fcrr", "--epochs", "0"], "must be at least 1"),
    (["--system", "cnn-sdml", "--base", "x"], "--base is not an option of --system cnn-sdml"),
    (["--system", "film", "--steps-per-epoch", "3"], "--steps-per-epoch is not an option of --system film"),
    (["--system", "transformer", "--windows", "3"], "--windows is not an option of --system transformer"),
    (["--system", "transformer", "--batch-size", "1"], "batch_size must be at least 2"),
    (["--system", "transformer", "--distance", "euclidean"], "the transformer's distance is 'squared' or 'cosine'"),
])
def test_train_cli_refuses_options_the_system_does_not_use(cluster_file, tmp_path, capsys, argv, message):
    out = tmp_path / "b"
    assert main(["train", "--data", str(cluster_file), "--out", str(out), *argv]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()  # refused before any training


def test_train_cli_system_lstm_is_the_lstm_architecture(cluster_file, tmp_path, capsys):
    out = tmp_path / "lstm"
    assert main(["train", "--system", "lstm", "--data", str(cluster_file), "--out", str(out), "--epochs", "1",
                 "--vocab-size", "200", "--index", "Flat", "--quiet"]) == 0
    loaded = Bundle.load(out)
    assert loaded.system == "lstm" and loaded.encoder.config.architecture == "lstm" and loaded.encoder.config.pooling == "mean"


@pytest.mark.parametrize("system", ["film", "transformer"])
def test_the_app_retrains_a_served_seed_bundle_from_judgments_and_swaps_on_confirm(seed_bundles, tmp_path, system):
    from annotations.db import open_store
    from ui.common import AppContext
    from ui.page import QPRPage

    needs(system)
    _, loaded = seed_bundles[system]
    store = open_store(f"sqlite:///{tmp_path / 'annotations.db'}", project="demo")
    try:
        page = QPRPage(AppContext(ServedModel(loaded), store, "name", cache=tmp_path))
        page.build()
        cluster = loaded.corpus.loc[loaded.corpus["split"] == "train", "cluster"].iloc[0]
        view = page.annotate.start_cluster(cluster, "ann", None, None)  # the queue ranks by the system's vectors
        annotate_session = next(value for value in view.values() if type(value).__name__ == "AnnotateSession")
        assert len(annotate_session.queue) > 0
        page.annotate.judge("same", annotate_session, "ann", None, None)
        page.retrain.retrain(1, "ann", progress=lambda *args, **kwargs: None)
        candidate = page.ctx.current().model.candidate().served.bundle
        assert candidate.system == system and candidate.manifest.provenance["judgment_ids"]
        page.retrain.confirm("ann", None, None)
        served = page.ctx.current().served().bundle
        assert served.version == candidate.version
        assert Bundle.load(tmp_path / "bundles" / served.version).system == system
    finally:
        store.close()
