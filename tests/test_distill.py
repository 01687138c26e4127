"""The general encoder's pieces on tiny synthetic data: teacher targets, SDML with soft targets,
per-source sampling, distillation that lowers its loss, pseudo-pairs, corpus caps."""

import math

import numpy as np
import pandas as pd
import pytest
import torch

from qpr.distill import GeneralConfig, Unlabelled, agreeing_pairs, pseudo_corpus, source_pairs, teacher_targets, train_general
from qpr.encoder import EncoderConfig
from qpr.errors import QPRError
from qpr.losses import SDMLLoss
from qpr.data import COLUMNS
from qpr.sources import DOMAINS, cap_corpus, domain_cap, domain_queries, load_domain
from qpr.text import TextConfig

TINY_ENCODER = EncoderConfig(embedding_dim=16, windows=(1, 3), channels=16, output_dim=8)
TINY_TEXT = TextConfig(vocab_size=500, hash_bins=50, subword_ngrams=0)


def clustered(n_clusters: int, size: int, prefix: str) -> pd.DataFrame:
    rows = [(f"{prefix} topic{c} word{c} variant{i}", f"{prefix}{c}") for c in range(n_clusters) for i in range(size)]
    frame = pd.DataFrame(rows, columns=["question", "cluster"])
    frame.insert(0, "qid", np.arange(1, len(frame) + 1))
    frame["split"] = "train"
    frame["cluster"] = frame["cluster"].astype("string")
    return frame


def test_teacher_targets_hand_case():
    teacher = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    targets = teacher_targets(teacher, temperature=0.5)
    # Rows 0 and 1 are the same question to the teacher: equal mass, e^2 against e^0 for row 2.
    expected_01 = math.exp(2) / (2 * math.exp(2) + 1)
    assert targets[0, 0].item() == pytest.approx(expected_01)
    assert targets[0, 1].item() == pytest.approx(expected_01)
    assert targets[2, 2].item() == pytest.approx(math.exp(2) / (math.exp(2) + 2))
    assert torch.allclose(targets.sum(dim=1), torch.ones(3))


def test_sdml_with_soft_targets_is_kl_to_them():
    loss = SDMLLoss(smoothing=0.3)
    a, p = torch.randn(4, 5), torch.randn(4, 5)
    assert loss(a, p, loss.targets(4)).item() == pytest.approx(loss(a, p).item())
    targets = torch.softmax(torch.randn(4, 4), dim=1)
    log_probs = torch.log_softmax(-torch.cdist(a, p) ** 2, dim=1)
    by_hand = (targets * (targets.log() - log_probs)).sum(dim=1).mean()
    assert loss(a, p, targets).item() == pytest.approx(by_hand.item(), rel=1e-4)


def test_source_pairs_caps_each_source_on_its_own():
    sources = {"big": clustered(50, 4, "big"), "small": clustered(5, 2, "small")}
    drawn = source_pairs(sources, per_source=60, rng=np.random.default_rng(0))
    assert [len(anchors) for anchors, _, _ in drawn] == [60, 10]  # 200 pairs capped to 60; 10 kept whole
    for anchors, positives, owner in drawn:
        assert all(a != p and a.split()[1] == p.split()[1] for a, p in zip(anchors, positives))  # cluster-mates


def test_distillation_lowers_its_loss_and_pulls_teacher_neighbours_together():
    rng = np.random.default_rng(0)
    questions = [f"question about subject{c} number{i}" for c in range(8) for i in range(8)]
    centres = rng.normal(size=(8, 16))
    teacher = np.repeat(centres, 8, axis=0) + 0.05 * rng.normal(size=(64, 16))
    teacher /= np.linalg.norm(teacher, axis=1, keepdims=True)
    config = GeneralConfig(unlabelled_per_epoch=64, epochs=8, batch_size=32, lr=3e-3, view_dropout=0.0)
    result = train_general({}, Unlabelled(questions, teacher.astype(np.float32)), config, TINY_TEXT, TINY_ENCODER, progress=False)
    losses = [row["loss_distill"] for row in result.history]
    assert losses[-1] < 0.5 * losses[0]


def test_self_supervised_views_train_without_teacher():
    questions = [f"how do i fix problem {i} with device {i % 5}" for i in range(40)]
    config = GeneralConfig(unlabelled_per_epoch=40, epochs=2, batch_size=16)
    result = train_general({}, Unlabelled(questions), config, TINY_TEXT, TINY_ENCODER, progress=False)
    assert [set(row) for row in result.history] == [{"epoch", "seconds", "loss_views"}] * 2


def test_nothing_to_train_on_is_a_clear_error():
    with pytest.raises(QPRError, match="nothing to train on"):
        train_general({}, None, GeneralConfig(), TINY_TEXT, TINY_ENCODER, progress=False)
    with pytest.raises(QPRError, match="one row each"):
        Unlabelled(["a b", "c d"], np.zeros((3, 4)))


def test_agreeing_pairs_and_their_clusters():
    dense = np.array([1, 0, 3, 2, 0])
    bm25 = np.array([1, 0, 4, 2, -1])
    pairs = agreeing_pairs(dense, bm25)
    assert pairs.tolist() == [[0, 1], [2, 3]]  # row 2 disagrees, but row 3 alone agrees on (2, 3)
    corpus = pseudo_corpus(["a", "b", "c", "d", "e"], pairs)
    assert corpus["question"].tolist() == ["a", "b", "c", "d"]
    assert corpus["cluster"].nunique() == 2 and (corpus["split"] == "train").all()


def test_cap_corpus_keeps_whole_clusters():
    corpus = clustered(30, 5, "q")
    loose = pd.DataFrame({"qid": np.arange(1000, 1050), "question": [f"loose {i}" for i in range(50)],
                          "cluster": pd.array([pd.NA] * 50, dtype="string"), "split": "none"})
    corpus = pd.concat([corpus, loose], ignore_index=True)
    capped = cap_corpus(corpus, 100, seed=1)
    assert len(capped) <= 100
    sizes = capped[capped["cluster"].notna()].groupby("cluster").size()
    assert (sizes == 5).all() and len(sizes) >= 10
    assert capped["cluster"].isna().sum() == 25  # unclustered rows keep their share (50 of 200)
    assert cap_corpus(corpus, 10_000) is corpus


@pytest.mark.parametrize("name", DOMAINS)
def test_every_shared_set_loads_as_a_domain(name, data_dir):
    corpus = load_domain(name, domain_cap(name))
    assert list(corpus.columns) == COLUMNS and corpus["qid"].is_unique and len(corpus) <= domain_cap(name)
    assert not corpus["question"].duplicated().any() or name == "quora-lite"  # Quora-lite keeps its release as is
    queries = domain_queries(corpus, name, 300)
    assert 20 <= len(queries) <= 300 and queries["cluster"].notna().all()
    train = corpus[(corpus["split"] == "train") & corpus["cluster"].notna()]
    assert train["cluster"].nunique() >= 10  # enough clusters to train on when another domain is left out
