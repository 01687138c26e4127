import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from qpr.model.encoder import EncoderConfig
from qpr.errors import QPRError
from qpr.model.text import TextConfig, Vocabulary
from qpr.training.train import TrainConfig, train
from qpr.model.word_vectors import embedding_rows, skipgram_vectors, word_vector_rows

SMALL = EncoderConfig(embedding_dim=32, channels=32, output_dim=16)
ROOT = Path(__file__).resolve().parents[1]


TOPICS = {
    "car": ["drive", "park", "wash", "repair", "sell", "engine", "tyres"],
    "banana": ["peel", "eat", "slice", "ripen", "yellow", "smoothie", "fruit"],
    "python": ["learn", "code", "install", "debug", "script", "library", "syntax"],
    "guitar": ["play", "tune", "strum", "chords", "strings", "amp", "practice"],
}


def contexts() -> list[str]:
    """Short texts of a topic word amid three of its context words, 1,000 per topic; "automobile"
    appears in the same contexts as "car", never beside it."""
    rng = np.random.default_rng(0)
    texts = []
    for _ in range(1000):
        for topic, context in TOPICS.items():
            words = list(rng.choice(context, 3, replace=False))
            texts += [" ".join([*words[:2], name, words[2]]) for name in ([topic, "automobile"] if topic == "car" else [topic])]
    return texts


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def test_words_used_alike_get_closer_vectors_than_unrelated_words():
    words, vectors = skipgram_vectors(contexts(), 32, seed=0)
    car, automobile = vectors[words.index("car")], vectors[words.index("automobile")]
    others = [cosine(car, vectors[words.index(topic)]) for topic in ("banana", "python", "guitar")]
    assert cosine(car, automobile) > max(others) + 0.2
    # Centred, on the scale of the embedding layer's N(0, 1) initialisation, not word2vec's much smaller one.
    np.testing.assert_allclose(vectors.mean(axis=0), 0.0, atol=1e-4)
    assert vectors.std() == pytest.approx(1.0, rel=1e-3)


def test_only_words_seen_twice_get_vectors():
    words, _ = skipgram_vectors(["how do i fly", "how do i swim"], 8, seed=0)
    assert sorted(words) == ["do", "how", "i"]


def test_every_id_a_word_reaches_starts_at_the_mean_of_those_words():
    words = ["how", "rare", "word"]
    vectors = np.array([[1.0, 0.0], [0.0, 2.0], [4.0, 4.0]], dtype=np.float32)
    # One hash bin: "rare" and "word" share it; "how" has its own id.
    ids, rows = embedding_rows(words, vectors, Vocabulary(["how", "unused"], TextConfig(hash_bins=1, subword_ngrams=0)))
    assert ids.tolist() == [1, 3]  # padding (0) and the unused word (2) keep their random rows
    np.testing.assert_allclose(rows, [[1.0, 0.0], [2.0, 3.0]])
    # With subwords, each word's n-grams land in the bin too, once per word however many it has.
    ids, rows = embedding_rows(words, vectors, Vocabulary(["how", "unused"], TextConfig(hash_bins=1, subword_ngrams=3)))
    assert ids.tolist() == [1, 3]
    np.testing.assert_allclose(rows, [[1.0, 0.0], [5.0 / 3, 2.0]], rtol=1e-6)


def test_word_vectors_are_the_same_in_another_process(tmp_path):
    words, vectors = skipgram_vectors(contexts()[:60], 8, seed=3)
    script = (
        "import sys, json, numpy as np; sys.path.insert(0, '.'); from tests.test_word_vectors import contexts; "
        "from qpr.model.word_vectors import skipgram_vectors; words, vectors = skipgram_vectors(contexts()[:60], 8, seed=3); "
        "np.save(sys.argv[1], vectors); open(sys.argv[2], 'w').write(json.dumps(words))"
    )
    # Another hash seed: gensim seeds word vectors by hashing words, and Python's hash() is salted.
    env = os.environ | {"PYTHONHASHSEED": "12345"}
    subprocess.run([sys.executable, "-c", script, str(tmp_path / "v.npy"), str(tmp_path / "w.json")],
                   cwd=ROOT, env=env, check=True)
    assert json.loads((tmp_path / "w.json").read_text()) == words
    assert np.array_equal(np.load(tmp_path / "v.npy"), vectors)


def test_training_starts_from_word_vectors_of_the_non_query_questions(tiny_corpus):
    # With a learning rate of 0 the embeddings stay where training started them.
    config = TrainConfig(batch_size=16, max_epochs=1, val_pairs=100, lr=0.0, word_vectors=True)
    result = train(tiny_corpus, config, text_config=TextConfig(subword_ngrams=0), encoder_config=SMALL, progress=False)
    non_queries = tiny_corpus.loc[~tiny_corpus["split"].isin(["val", "test"]), "question"]
    ids, rows = word_vector_rows(non_queries, result.vocab, SMALL.embedding_dim, config.seed)
    weights = result.encoder.embedding.weight.detach().numpy()
    assert np.array_equal(weights[ids], rows)
    untouched = np.setdiff1d(np.arange(1, result.vocab.size), ids)
    plain = train(tiny_corpus, TrainConfig(batch_size=16, max_epochs=1, val_pairs=100, lr=0.0),
                  text_config=TextConfig(subword_ngrams=0), encoder_config=SMALL, progress=False)
    assert np.array_equal(weights[untouched], plain.encoder.embedding.weight.detach().numpy()[untouched])
    assert not np.array_equal(weights[ids], plain.encoder.embedding.weight.detach().numpy()[ids])


def test_a_warm_start_keeps_its_embeddings_and_needs_no_gensim(tiny_bundle, tiny_corpus, monkeypatch):
    def no_gensim(*args, **kwargs):
        raise AssertionError("word vectors trained for a warm start")

    monkeypatch.setattr("qpr.training.train.word_vector_rows", no_gensim)
    config = TrainConfig(batch_size=16, max_epochs=1, val_pairs=100, lr=0.0, word_vectors=True)
    result = train(tiny_corpus, config, warm_start=(tiny_bundle.encoder, tiny_bundle.vocab), progress=False)
    assert torch.equal(result.encoder.embedding.weight, tiny_bundle.encoder.embedding.weight)


def test_missing_gensim_or_text_is_a_clear_error(monkeypatch):
    with pytest.raises(QPRError, match="no text"):
        skipgram_vectors(["", "   "], 8, seed=0)
    with pytest.raises(QPRError, match="occurs twice"):
        skipgram_vectors(["one question only"], 8, seed=0)
    monkeypatch.setitem(sys.modules, "gensim.models", None)
    with pytest.raises(QPRError, match=re.escape("pip install -e '.[bench]'")):
        skipgram_vectors(contexts(), 8, seed=0)
