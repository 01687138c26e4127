"""The general encoder's pieces on tiny synthetic data: the regression loss, the student's shape,
per-source sampling, distillation that lowers its loss, pseudo-pairs, corpus caps."""

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch

from qpr.training.distill import (GeneralConfig, Unlabelled, agreeing_pairs, pseudo_corpus, regression_loss, source_pairs,
                          student_config, train_general, word_student)
from qpr.model.encoder import EncoderConfig, encode_texts
from qpr.errors import QPRError
from qpr.data.corpus import COLUMNS
from qpr.data.sources import DOMAINS, cap_corpus, domain_cap, domain_queries, extra_questions, load_domain
from qpr.model.text import TextConfig

TINY_ENCODER = EncoderConfig(embedding_dim=16, windows=(1, 3), channels=16, output_dim=8)
TINY_TEXT = TextConfig(vocab_size=500, hash_bins=50, subword_ngrams=0)


def clustered(n_clusters: int, size: int, prefix: str) -> pd.DataFrame:
    rows = [(f"{prefix} topic{c} word{c} variant{i}", f"{prefix}{c}") for c in range(n_clusters) for i in range(size)]
    frame = pd.DataFrame(rows, columns=["question", "cluster"])
    frame.insert(0, "qid", np.arange(1, len(frame) + 1))
    frame["split"] = "train"
    frame["cluster"] = frame["cluster"].astype("string")
    return frame


def test_regression_loss_hand_case():
    teacher = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    assert regression_loss(3 * teacher, teacher).item() == pytest.approx(0.0, abs=1e-6)  # the scale is free
    # Row 0 at 90 degrees from its teacher (1 - 0), row 1 opposite (1 - (-1)): mean 1.5.
    assert regression_loss(torch.tensor([[0.0, 2.0], [0.0, -1.0]]), teacher).item() == pytest.approx(1.5)


def test_a_student_takes_its_teachers_width_and_unit_vectors():
    assert student_config(TINY_ENCODER, None) == TINY_ENCODER
    student = student_config(TINY_ENCODER, np.zeros((5, 12), dtype=np.float32))
    assert (student.output_dim, student.normalize, student.windows) == (12, True, TINY_ENCODER.windows)


def test_a_word_student_starts_from_the_teachers_word_vectors():
    rng = np.random.default_rng(0)
    topics = {w: rng.normal(size=12) for w in ("bank", "card", "loan", "fee", "rate", "app", "pin", "atm")}
    def encode(words):  # a fake teacher: one fixed random direction per word, unit length
        vectors = np.stack([topics.get(w, np.cos(np.arange(12) * (len(w) + 1))) for w in words])
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    questions = ["my card fee ?", "bank loan rate", "app pin atm", "card pin"] * 3
    encoder, vocab = word_student(questions, ["bank", "unseenword", "zebra"], encode, TINY_TEXT,
                                  replace(TINY_ENCODER, embedding_dim=4), seed=0)
    assert vocab.tokens[-2:] == ["unseenword", "zebra"]  # the teacher's words the questions lack come last
    assert "bank" in vocab.tokens[:-2] and vocab.tokens.count("bank") == 1
    assert (encoder.config.output_dim, encoder.config.normalize) == (12, True)  # the teacher's width, unit vectors
    weights = encoder.embedding.weight.detach().numpy()
    words = [t for t in vocab.tokens if t.isalnum()]
    rows = weights[[vocab.token_id(w) for w in words]]
    # Their rows are the teacher's vectors in fewer dimensions: the most alike pair by the teacher is the most alike here.
    teacher = encode(words)
    sim_teacher, sim_rows = teacher @ teacher.T, np.corrcoef(rows)
    np.fill_diagonal(sim_teacher, -np.inf); np.fill_diagonal(sim_rows, -np.inf)
    assert np.unravel_index(sim_teacher.argmax(), sim_teacher.shape) == np.unravel_index(sim_rows.argmax(), sim_rows.shape)
    assert abs(weights[[vocab.token_id(w) for w in words]].std() - 1.0) < 0.2  # the random rows' spread
    # Fewer words than embedding dimensions (a tiny corpus): the components there are, the rest zero.
    small, small_vocab = word_student(questions, [], encode, TINY_TEXT, replace(TINY_ENCODER, embedding_dim=30), seed=0)
    small_rows = small.embedding.weight.detach().numpy()[[small_vocab.token_id(w) for w in small_vocab.tokens if w.isalnum()]]
    assert np.abs(small_rows[:, 9:]).max() == 0 and np.abs(small_rows[:, :9]).max() > 0  # 9 words: 9 components
    with pytest.raises(QPRError, match="needs more questions"):
        word_student(["?"], [], encode, TINY_TEXT, TINY_ENCODER)


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
    vectors = encode_texts(result.encoder, result.vocab, questions)
    assert vectors.shape == (64, 16) and np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    # Each question's nearest other question is one the teacher puts in its subject more often than chance (1 in 8).
    similarity = vectors @ vectors.T
    np.fill_diagonal(similarity, -np.inf)
    nearest = similarity.argmax(axis=1)
    assert np.mean(nearest // 8 == np.arange(64) // 8) > 0.5


def test_labelled_pairs_of_a_student_train_with_the_cosine_distance():
    rng = np.random.default_rng(1)
    corpus = clustered(6, 3, "topic")
    teacher = rng.normal(size=(len(corpus), 12)).astype(np.float32)
    teacher /= np.linalg.norm(teacher, axis=1, keepdims=True)
    config = GeneralConfig(per_source=20, unlabelled_per_epoch=18, epochs=1, batch_size=6)
    result = train_general({"topics": corpus}, Unlabelled(corpus["question"].tolist(), teacher), config, TINY_TEXT,
                           TINY_ENCODER, progress=False)
    assert {"loss_pairs", "loss_distill"} <= set(result.history[0]) and result.encoder.config.normalize
    with pytest.raises(QPRError, match="as wide as its teacher"):
        train_general({}, Unlabelled(corpus["question"].tolist(), teacher[:, :4]), config,
                      warm_start=(result.encoder, result.vocab), progress=False)


def test_self_supervised_views_train_without_teacher():
    questions = [f"how do i fix problem {i} with device {i % 5}" for i in range(40)]
    config = GeneralConfig(unlabelled_per_epoch=40, epochs=2, batch_size=16)
    result = train_general({}, Unlabelled(questions), config, TINY_TEXT, TINY_ENCODER, progress=False)
    assert [set(row) for row in result.history] == [{"epoch", "seconds", "loss_views"}] * 2


def test_min_steps_adds_epochs_to_a_small_corpus_only():
    questions = [f"how do i fix problem {i} with device {i % 5}" for i in range(40)]
    small = GeneralConfig(unlabelled_per_epoch=40, epochs=1, batch_size=16, min_steps=7)  # 3 batches an epoch
    result = train_general({}, Unlabelled(questions), small, TINY_TEXT, TINY_ENCODER, progress=False)
    assert len(result.history) == 3  # ceil(7 / 3) epochs
    enough = GeneralConfig(unlabelled_per_epoch=40, epochs=2, batch_size=16, min_steps=3)
    assert len(train_general({}, Unlabelled(questions), enough, TINY_TEXT, TINY_ENCODER, progress=False).history) == 2
    with pytest.raises(QPRError, match="must not be negative"):
        GeneralConfig(min_steps=-1)


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


def test_extra_questions_never_repeat_the_capped_corpus(data_dir):
    extra = extra_questions("banking77", 500)
    capped = load_domain("banking77", domain_cap("banking77"))
    assert len(extra) == 500 and not extra["question"].isin(set(capped["question"])).any()
    assert extra["question"].is_unique
    assert len(extra_questions("covid-faq")) == 0  # every question already in its capped corpus
