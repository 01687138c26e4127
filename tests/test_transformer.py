"""The optional transformer backend (qpr.systems.transformer) on a tiny BERT made in a temp folder
(conftest.make_sentence_model): trained from the CLI, saved, reloaded, searched and retrained;
its loss falls on a fixed batch; a bad base model and a missing extra are clear errors. The
bundle is also served by the app with the seed systems (tests/test_seed_bundles.py)."""

from __future__ import annotations

import json
import re
import sys

import numpy as np
import pytest
import torch

from qpr.bundles.bundle import Bundle, is_bundle
from qpr.bundles.training import retrain_bundle
from qpr.cli.main import main
from qpr.errors import QPRError
from qpr.model.losses import SDMLLoss
from qpr.systems.transformer import EXTRA, embed, load_model

pytest.importorskip("sentence_transformers")


@pytest.fixture
def cluster_file(tmp_path):
    from conftest import make_corpus

    path = tmp_path / "clusters.tsv"
    make_corpus().to_csv(path, sep="\t", index=False)
    return path


def test_the_sdml_loss_falls_on_a_fixed_batch_as_the_model_trains(sentence_model):
    from conftest import TEMPLATES, TOPICS

    model = load_model(sentence_model, "base")
    anchors = [TEMPLATES[0].format(t=topic) for topic in TOPICS[:8]]
    positives = [TEMPLATES[1].format(t=topic) for topic in TOPICS[:8]]
    loss_fn, optimizer = SDMLLoss(smoothing=0.3), torch.optim.AdamW(model.parameters(), lr=1e-3)
    torch.manual_seed(0)
    model.eval()  # no dropout: the same batch gives the same loss unless the weights change
    losses = []
    for _ in range(15):
        loss = loss_fn(embed(model, anchors), embed(model, positives))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.8 * losses[0]


def test_train_cli_fine_tunes_a_transformer_into_a_bundle_that_reloads_and_searches(sentence_model, cluster_file, tmp_path,
                                                                                     capsys):
    out = tmp_path / "transformer"
    assert main(["train", "--system", "transformer", "--base", str(sentence_model), "--data", str(cluster_file),
                 "--out", str(out), "--epochs", "1", "--steps-per-epoch", "2", "--batch-size", "8", "--lr", "1e-3",
                 "--distance", "cosine", "--index", "Flat", "--quiet"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["system"] == "transformer" and set(printed["metrics"]) == {"val", "test"}
    assert is_bundle(out) and (out / "transformer" / "modules.json").is_file()
    loaded = Bundle.load(out)
    fit = loaded.manifest.training["fit"]
    assert [row["batches"] for row in fit["history"]] == [0, 2] and fit["base"] == str(sentence_model)
    assert loaded.manifest.encoder_config["batch_size"] == 8 and loaded.manifest.encoder_config["distance"] == "cosine"
    assert loaded.index.dim == 32
    assert main(["search", str(out), "how do i learn chess ?", "-k", "1", "--dense", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["hits"][0]["question"] == "how do i learn chess ?"


def test_questions_are_added_to_a_transformer_bundle_without_a_rebuild(transformer_bundles, tmp_path, capsys):
    trained, _ = transformer_bundles
    path = trained.save(tmp_path / "b")
    new = tmp_path / "new.tsv"
    new.write_text("qid\tquestion\tcluster\n9001\thow do i learn to juggle ?\t\n")
    assert main(["add", str(path), str(new)]) == 0
    grown = Bundle.load(path)
    assert len(grown.index) == len(trained.corpus) + 1
    assert main(["search", str(path), "how do i learn to juggle ?", "-k", "1", "--dense", "--json"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["hits"][0]["qid"] == 9001


def test_a_base_that_is_no_model_is_refused_before_anything_is_written(cluster_file, tmp_path, capsys):
    out = tmp_path / "b"
    (tmp_path / "not-a-model").mkdir()
    (tmp_path / "not-a-model" / "notes.txt").write_text("hello")
    for base in (tmp_path / "missing", tmp_path / "not-a-model"):
        assert main(["train", "--system", "transformer", "--base", str(base), "--data", str(cluster_file),
                     "--out", str(out), "--quiet"]) == 2
        err = capsys.readouterr().err
        assert f"--base '{base}' is not a sentence-transformers model" in err and "Traceback" not in err
        assert not out.exists()


def test_without_the_extra_training_and_loading_say_what_to_install(transformer_bundles, cluster_file, tmp_path,
                                                                    monkeypatch, capsys):
    trained, _ = transformer_bundles
    path = trained.save(tmp_path / "saved")
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # `import sentence_transformers` now fails
    missing = re.escape(f"needs sentence-transformers, an optional extra: pip install -e '.[{EXTRA}]'")
    with pytest.raises(QPRError, match=missing):
        Bundle.load(path)
    assert main(["train", "--system", "transformer", "--data", str(cluster_file), "--out", str(tmp_path / "b"),
                 "--quiet"]) == 2
    assert f"pip install -e '.[{EXTRA}]'" in capsys.readouterr().err


def test_a_bundle_with_a_damaged_or_missing_model_is_refused_with_what_is_wrong(transformer_bundles, tmp_path):
    trained, _ = transformer_bundles
    path = trained.save(tmp_path / "b")
    (path / "transformer" / "model.safetensors").write_bytes(b"not weights")
    with pytest.raises(QPRError, match="the bundle's model .* is not a sentence-transformers model.*the bundle is damaged"):
        Bundle.load(path)
    (path / "transformer" / "modules.json").unlink()
    with pytest.raises(QPRError, match="missing transformer/modules.json"):
        Bundle.load(path)


def test_retraining_continues_the_bundle_s_model_and_leaves_the_served_one_untouched(transformer_bundles):
    trained, _ = transformer_bundles
    texts = trained.corpus["question"].tolist()[:10]
    before = trained.encode(texts)
    corrected = trained.corpus.copy()
    train_clusters = corrected.loc[corrected["split"] == "train", "cluster"].unique()
    corrected.loc[corrected["cluster"] == train_clusters[1], "cluster"] = train_clusters[0]  # a merge
    new = retrain_bundle(trained, corrected, max_epochs=1, provenance={"export_id": 3}, progress=False)
    assert new.system == "transformer" and new.manifest.provenance == {"export_id": 3}
    assert new.manifest.data_fingerprint != trained.manifest.data_fingerprint
    fit = new.manifest.training["fit"]
    assert fit["warm_start"] and [row["epoch"] for row in fit["history"]] == [0, 1]
    assert new.manifest.training["settings"]["epochs"] == 1
    assert new.manifest.training["settings"]["lr"] == trained.manifest.training["settings"]["lr"]
    np.testing.assert_array_equal(trained.encode(texts), before)  # the served model was not trained further
