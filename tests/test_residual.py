import json

import numpy as np
import pytest
import torch

from qpr.errors import QPRError
from qpr.systems.residual import (
    IdfEmbedder,
    ResidualConfig,
    ResidualRetriever,
    fit_residual,
    recall_at,
    target_ranks,
)
from qpr.data.squad import squad_paragraphs


@pytest.mark.parametrize("kind", ["fcrr", "convrr"])
def test_residual_blocks_keep_shapes_and_unit_norms(kind):
    torch.manual_seed(0)
    for stride in (1, 2):
        model = ResidualRetriever(24, ResidualConfig(kind=kind, hidden=16, filters=3, window=5, stride=stride))
        out = model(torch.randn(7, 24))
        assert out.shape == (7, 24)
        assert torch.allclose(out.norm(dim=1), torch.ones(7), atol=1e-6)


def test_alpha_zero_is_the_normalised_identity():
    model = ResidualRetriever(10, ResidualConfig(alpha=0.0))
    x = torch.randn(4, 10)
    assert torch.allclose(model(x), torch.nn.functional.normalize(x, dim=1))
    with pytest.raises(QPRError):
        ResidualConfig(kind="mlp")


def test_idf_embedder_weights_words_by_idf_by_hand():
    vocab = ["the", "bank", "river"]
    vectors = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
    docs = ["the bank", "the river", "the the"]  # idf: the 0, bank log 3, river log 3
    emb = IdfEmbedder(vocab, vectors, docs)
    # "the bank": (0 * [1,0] + log3 * [0,1]) / 2, normalised -> [0, 1]; without idf: [1,1]/sqrt2.
    assert np.allclose(emb.encode(["the bank"])[0], [0.0, 1.0])
    plain = IdfEmbedder(vocab, vectors, docs, use_idf=False)
    assert np.allclose(plain.encode(["the bank"])[0], [2**-0.5, 2**-0.5])
    assert np.allclose(emb.encode(["unknown words only"])[0], 0.0)  # nothing known: zero vector


def test_recall_and_ranks_by_hand():
    queries = np.array([[1.0, 0.0], [0.0, 1.0], [0.7, 0.7]])
    targets = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    ranks = target_ranks(queries, targets, np.array([0, 0, 2]))
    # Query 2's target scores 0, tied with target 3 and behind target 2: a tie counts against it.
    assert ranks.tolist() == [1, 3, 3]
    r = recall_at(np.array([1, 2, 3]), ks=(1, 2))
    assert r == {"recall@1": pytest.approx(1 / 3), "recall@2": pytest.approx(2 / 3), "recall_avg": pytest.approx(0.5)}


@pytest.mark.parametrize("kind", ["fcrr", "convrr"])
def test_training_with_hard_negatives_improves_retrieval_over_the_input_embedding(kind):
    # Targets are random unit vectors; anchors are a fixed rotation of their targets plus noise,
    # so the input embedding ranks poorly and a learned map can recover the targets.
    rng = np.random.default_rng(0)
    dim, n_targets = 16, 60
    targets = rng.normal(size=(n_targets, dim)).astype(np.float32)
    targets /= np.linalg.norm(targets, axis=1, keepdims=True)
    rotation = np.linalg.qr(rng.normal(size=(dim, dim)))[0].astype(np.float32)
    owner = rng.integers(0, n_targets, 1200)
    anchors = targets[owner] @ rotation + 0.1 * rng.normal(size=(1200, dim)).astype(np.float32)
    anchors /= np.linalg.norm(anchors, axis=1, keepdims=True)
    before = recall_at(target_ranks(anchors, targets, owner), ks=(1,))["recall@1"]
    config = ResidualConfig(kind=kind, hidden=64, filters=4, window=3, alpha=1.0, batch_size=32, max_epochs=15, lr=3e-3)
    result = fit_residual(anchors, targets[owner], owner, config)
    after = recall_at(target_ranks(result.model.transform(anchors), targets, owner), ks=(1,))["recall@1"]
    assert after > before + 0.3
    assert result.history[-1]["loss"] < result.history[0]["loss"]


def test_early_stopping_keeps_the_best_epoch():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(100, 8)).astype(np.float32)
    scores = iter([0.1, 0.5, 0.4, 0.3, 0.2, 0.9])
    result = fit_residual(x, x, np.arange(100), ResidualConfig(max_epochs=6, patience=2, batch_size=16),
                          validate=lambda model: next(scores))
    assert result.best_epoch == 2 and len(result.history) == 4


def test_squad_paragraphs_reader(tmp_path):
    payload = {"data": [{"title": "A", "paragraphs": [
        {"context": "first", "qas": [{"question": "q1", "answers": []}, {"question": "q2", "answers": []}]},
        {"context": "second", "qas": [{"question": "q3", "answers": []}]}]}]}
    path = tmp_path / "s.json"
    path.write_text(json.dumps(payload))
    paragraphs, questions = squad_paragraphs(path)
    assert paragraphs["context"].tolist() == ["first", "second"]
    assert questions["pid"].tolist() == [0, 0, 1]
    path.write_text(json.dumps({"data": [{"title": "A"}]}))
    with pytest.raises(QPRError):
        squad_paragraphs(path)


@pytest.mark.integration
def test_shared_squad_files_hold_the_protocol_s_counts(data_dir):
    from qpr.data.squad import load_squad

    paragraphs, questions = load_squad("dev")
    assert len(paragraphs) == 2067 and len(questions) == 10570
    train_paragraphs, train_questions = load_squad("train-partial")
    assert train_paragraphs["title"].nunique() == 44 and len(train_questions) == 11877
    assert not set(train_paragraphs["title"]) & set(paragraphs["title"])  # no article overlap
