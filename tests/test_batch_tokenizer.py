"""``Vocabulary.encode_batch``: the same ids as ``Vocabulary.encode`` text by text (padded as
``pad_batch`` pads them), over every question of the shared Quora-lite set and over odd strings."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qpr.data.corpus import load_corpus
from qpr.errors import QPRError
from qpr.model.encoder import QuestionEncoder, EncoderConfig, encode_ids, encode_texts, pad_batch
from qpr.model.text import PAD_ID, PAPER_TEXT, TextConfig, Vocabulary, text_problem, tokenize
from qpr.model import text

CONFIGS = [TextConfig(), PAPER_TEXT, TextConfig(max_len=4, max_ngrams=3)]


def assert_same_ids(vocab: Vocabulary, texts: list[str]) -> None:
    batch = vocab.encode_batch(texts)
    lists = [vocab.encode(text) for text in texts]
    assert batch.lengths.tolist() == [len(ids) for ids in lists]
    np.testing.assert_array_equal(batch.padded(), pad_batch(lists).numpy())
    rows = np.arange(len(texts))[::-1][: max(1, len(texts) // 2)]
    np.testing.assert_array_equal(batch.padded(rows), pad_batch([lists[i] for i in rows]).numpy())


@pytest.mark.parametrize("config,share", [(CONFIGS[0], 1), (CONFIGS[1], 10), (CONFIGS[2], 10)], ids=["default", "paper", "short"])
def test_quora_lite_questions_get_the_ids_encode_gives(data_dir, config, share):
    """All of Quora-lite's questions with the default text settings, every 10th with the others."""
    texts = load_corpus(data_dir / "quora-lite")["question"].tolist()[::share]
    vocab = Vocabulary.build(texts[: len(texts) // 2], config)  # half the questions: the rest have unseen words
    for start in range(0, len(texts), 50_000):
        chunk = texts[start : start + 50_000]
        batch, lists = vocab.encode_batch(chunk), [vocab.encode(text) for text in chunk]
        assert batch.lengths.tolist() == [len(ids) for ids in lists]
        tokens = [ids if isinstance(ids, list) else [ids] for text_ids in lists for ids in text_ids]
        rows = batch.table[batch.tokens]  # each token's ids, then padding (ids are never PAD_ID)
        assert (rows != PAD_ID).sum(axis=1).tolist() == [len(ids) for ids in tokens]
        np.testing.assert_array_equal(rows[rows != PAD_ID], np.fromiter(itertools.chain.from_iterable(tokens), dtype=np.int64))
        assert_same_ids(vocab, chunk[:2000])  # and the padding, on a share


VOCAB_TEXTS = ["how do I learn python", "what is σ in ΣΟΦΙΑ", "İstanbul café", "a_b c-d"]
odd_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=30)
odd_alphabet = st.text(st.sampled_from(list("aΣσςİi\u0307_-?é \t\n\u00a0\u2028\ue000!9٣")), max_size=20)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(odd_text, odd_alphabet), min_size=1, max_size=8))
def test_odd_strings_get_the_ids_encode_gives(texts):
    texts = [t for t in texts if tokenize(t)] or ["x"]
    for config in CONFIGS:
        assert_same_ids(Vocabulary.build(VOCAB_TEXTS, config), texts)


def test_a_batch_refuses_what_encode_refuses_and_names_the_text():
    vocab = Vocabulary.build(VOCAB_TEXTS)
    for bad, message in [(["fine", " \t "], "is empty"), (["fine", "nul\x00here"], "NUL"),
                         (["fine", "half \ud800"], "surrogate"), (["fine", 3], "must be a string")]:
        with pytest.raises(QPRError, match=message):
            vocab.encode_batch(bad)
    with pytest.raises(QPRError, match="no questions"):
        vocab.encode_batch([])
    assert text_problem("fine") is None


def test_a_text_holding_the_separator_still_gets_its_ids():
    vocab = Vocabulary.build(VOCAB_TEXTS)
    assert_same_ids(vocab, ["a\ue000b", "how do i", "\ue000"])


def test_the_pieces_table_forgets_at_its_limit_and_still_answers(monkeypatch):
    monkeypatch.setattr(text._Pieces, "LIMIT", 8)
    vocab = Vocabulary.build(VOCAB_TEXTS)
    for start in range(0, 40, 5):
        assert_same_ids(vocab, [f"w{start + i} x{i}" for i in range(5)])


def test_encode_texts_gives_the_vectors_of_the_text_by_text_path():
    vocab = Vocabulary.build(VOCAB_TEXTS)
    encoder = QuestionEncoder(vocab.size, EncoderConfig(embedding_dim=8, channels=4, output_dim=3)).eval()
    texts = VOCAB_TEXTS * 3 + ["one", "a much longer question than the others are"]
    expected = encode_ids(encoder, [vocab.encode(t) for t in texts]).detach().numpy()
    np.testing.assert_allclose(encode_texts(encoder, vocab, texts, chunk_size=4, block=5), expected, rtol=1e-5, atol=1e-6)
