"""Bundles travel like Hub models: safetensors weights, a config and a model card; loaded by
repository id from the Hub cache (offline here), pushed with ``qpr push``; bundles written before
safetensors still load and are converted on the next save."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import torch
import yaml

from hub_layout import FakeHub, cache_repo, offline_hub  # noqa: F401 (a fixture)
from qpr import Retriever
from qpr.bundles import hub
from qpr.bundles.bundle import Bundle
from qpr.cli.main import main as qpr_main
from qpr.errors import QPRError

QUERIES = ["how do i learn chess ?", "tips for photography beginners", "best way to cook rice"]
ROOT = Path(__file__).resolve().parents[1]


def results(retriever: Retriever) -> list:
    return [retriever.search(QUERIES, 5, method=method) for method in ("served", "dense", "bm25")]


def write_old_format(bundle: Bundle, folder: Path) -> Path:
    """``folder`` as the code before safetensors wrote it: the weights pickled by ``torch.save`` in
    ``encoder.pt``, no model card or config (the old ``question_encoder.save``, kept here only)."""
    bundle.save(folder)
    torch.save(bundle.encoder.state_dict(), folder / "encoder.pt")
    for name in ("model.safetensors", "README.md", "config.json"):
        (folder / name).unlink()
    return folder


def test_a_saved_bundle_is_a_hub_model_folder(bundle, tmp_path):
    """The demo bundle (trained, measured on val and test, with a fitted hybrid) saved with a card."""
    folder = bundle.with_card(license="cc-by-4.0", datasets=["PolyAI/banking77"], credit="BANKING77").save(tmp_path / "b")
    assert (folder / "model.safetensors").is_file() and not (folder / "encoder.pt").exists()
    card = (folder / "README.md").read_text()
    front = yaml.safe_load(card.split("---")[1])
    assert front["library_name"] == "qpr" and front["license"] == "cc-by-4.0" and front["datasets"] == ["PolyAI/banking77"]
    assert "sentence-similarity" in front["tags"]
    reported = {(r["dataset"]["split"], m["type"]): m["value"]
                for entry in front["model-index"] for r in entry["results"] for m in r["metrics"]}
    assert {split for split, _ in reported} == {"val", "test"}
    for split, scores in bundle.manifest.hybrid_metrics.items():  # as served
        assert reported[(split, "hit_at_1")] == pytest.approx(scores["H1"], abs=1e-4)
    assert "## Intended use" in card and "## Training" in card and "BANKING77" in card
    config = json.loads((folder / "config.json").read_text())
    assert config["system"] == "cnn-sdml" and config["encoder_config"] == bundle.manifest.encoder_config


def test_a_bundle_loaded_by_repo_id_offline_answers_as_the_original(tiny_bundle, tmp_path, offline_hub):
    original = Retriever(tiny_bundle)
    folder = original.save(tmp_path / "b")
    cache_repo(offline_hub, "someone/qpr-tiny", folder)
    loaded = Retriever.load("someone/qpr-tiny")
    assert loaded.version == original.version
    assert results(loaded) == results(original)


def test_a_repo_id_missing_from_the_offline_cache_is_a_clear_error(offline_hub):
    with pytest.raises(QPRError, match="no Hub model repository of that name could be fetched"):
        Retriever.load("someone/not-there")
    with pytest.raises(QPRError, match="no bundle directory"):
        Retriever.load("/no/such/folder")


def test_a_bundle_from_before_safetensors_loads_and_is_converted_on_save(tiny_bundle, tmp_path):
    old = write_old_format(tiny_bundle, tmp_path / "old")
    loaded = Retriever.load(old)
    assert results(loaded) == results(Retriever(tiny_bundle))
    loaded.save(old)  # the same folder: converted in place
    assert (old / "model.safetensors").is_file() and (old / "README.md").is_file()
    assert not (old / "encoder.pt").exists()
    assert results(Retriever.load(old)) == results(Retriever(tiny_bundle))


def test_no_pickle_is_unpickled_on_the_load_path():
    """Every ``torch.load`` the product makes reads weights only (``weights_only=True``: tensors
    and plain containers, never arbitrary objects), no ``pickle.load`` is left, and ``np.load``
    keeps its default ``allow_pickle=False``; the CNN's bundle reads safetensors (tests above)."""
    torch_loads = []
    for path in (ROOT / "qpr").rglob("*.py"):
        if "research" in path.parts:  # protocols only the benchmarks run, on files they wrote
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name, keywords = ast.unparse(node.func), {k.arg: ast.unparse(k.value) for k in node.keywords}
            assert name not in ("pickle.load", "pickle.loads"), f"{path}: {ast.unparse(node)} unpickles"
            if name in ("np.load", "numpy.load"):
                assert keywords.get("allow_pickle", "False") == "False", f"{path}: {ast.unparse(node)} may unpickle"
            if name == "torch.load":
                torch_loads.append(path.name)
                assert keywords.get("weights_only") == "True", f"{path}: {ast.unparse(node)} without weights_only=True"
    assert torch_loads, "the check found no torch.load at all: it is looking in the wrong place"


def test_qpr_push_uploads_a_converted_bundle_that_loads_back_by_repo_id(tiny_bundle, tmp_path, offline_hub,
                                                                        monkeypatch, capsys):
    fake = FakeHub(offline_hub)
    monkeypatch.setattr(hub, "HfApi", lambda: fake)
    old = write_old_format(tiny_bundle, tmp_path / "old")
    assert qpr_main(["push", str(old), "--repo", "someone/qpr-pushed"]) == 0
    assert "someone/qpr-pushed" in capsys.readouterr().out
    assert fake.created == [("someone/qpr-pushed", "model", False)]
    (repo, files, deleted, message), = fake.commits
    assert "model.safetensors" in files and "README.md" in files and "encoder.pt" not in files
    assert deleted == ["*"] and tiny_bundle.version in message
    assert results(Retriever.load("someone/qpr-pushed")) == results(Retriever(tiny_bundle))
    assert qpr_main(["push", str(old), "--repo", "not a repo id"]) == 2


def test_the_app_serves_a_bundle_named_by_repo_id(tiny_bundle, tmp_path, offline_hub, monkeypatch):
    from workflows.app_start import served_bundle

    cache_repo(offline_hub, "someone/qpr-served", tiny_bundle.save(tmp_path / "b"))
    monkeypatch.setenv("QPR_BUNDLE", "someone/qpr-served")
    served, _ = served_bundle()
    assert served.version == tiny_bundle.version


def test_a_residual_retriever_from_before_safetensors_loads_and_is_converted(tmp_path):
    """FCRR / ConvRR keep their weights in model.safetensors too; an older bundle's encoder.pt
    (the old ``ResidualEncoder.save``: ``torch.save`` of the state dict) still loads."""
    pytest.importorskip("gensim")
    from conftest import make_corpus
    from qpr.bundles.training import train_system_bundle
    from qpr.retrieval.index import IndexConfig
    from qpr.systems.registry import Run
    from qpr.systems.seed_encoders import SeedSettings

    settings = SeedSettings(word_dim=16, epochs=1, patience=1)
    trained = train_system_bundle(make_corpus(), "fcrr", settings, IndexConfig("Flat"), Run(progress=False), fuse=False)
    folder = trained.save(tmp_path / "new")
    assert (folder / "model.safetensors").is_file() and not (folder / "encoder.pt").exists()
    torch.save(trained.encoder.model.state_dict(), folder / "encoder.pt")
    (folder / "model.safetensors").unlink()
    old = Retriever.load(folder)
    assert old.search(QUERIES, 5, method="dense") == Retriever(trained).search(QUERIES, 5, method="dense")
    old.save(folder)
    assert (folder / "model.safetensors").is_file() and not (folder / "encoder.pt").exists()
