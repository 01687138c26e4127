"""Word vectors trained on the corpus's own questions, to initialise the encoder's embeddings.

Skip-gram (gensim's Word2Vec) runs over the corpus's questions, unlabeled ones included, so the
encoder starts from vectors in which words used alike are close, instead of random ones. On
Quora-lite that cost 13-18 points of val H@1 (docs/QUALITY.md), so ``TrainConfig.word_vectors``
is off by default. gensim is an optional dependency (the ``bench`` and ``dev`` extras:
``pip install -e '.[bench]'``): only this option needs it.
"""

from __future__ import annotations

import zlib
from typing import Iterable

import numpy as np

from qpr.errors import QPRError
from qpr.model.text import Vocabulary, tokenize


def _stable_hash(text: str) -> int:
    # gensim seeds each word's starting vector with this hash; Python's own is salted per process.
    return zlib.crc32(text.encode("utf-8"))


def skipgram_vectors(texts: Iterable[str], dim: int, seed: int) -> tuple[list[str], np.ndarray]:
    """Skip-gram vectors of the words of ``texts`` seen at least twice, as (words, ``(n, dim)`` float32).

    The vectors are centred and scaled to unit standard deviation per component, the scale of the
    embedding layer's random initialisation, so the rows no word reaches fit beside them.
    """
    try:
        from gensim.models import Word2Vec
    except ImportError as err:
        raise QPRError("word vectors need gensim: pip install -e '.[bench]'") from err
    sentences = [tokens for tokens in (tokenize(text) for text in texts) if tokens]
    if not sentences:
        raise QPRError("no text to train word vectors on")
    # One worker: with several, gensim's result depends on thread timing.
    model = Word2Vec(vector_size=dim, sg=1, window=5, min_count=2, epochs=5, workers=1, seed=seed, hashfxn=_stable_hash)
    model.build_vocab(sentences)
    if not model.wv.index_to_key:
        raise QPRError("no word occurs twice in the text for word vectors: give more questions")
    model.train(sentences, total_examples=model.corpus_count, epochs=model.epochs)
    # Skip-gram vectors share one large common direction (on Quora-lite random word pairs have a
    # mean cosine of 0.76, 0.06 once centred). Centring keeps words from starting almost alike;
    # it did not make the option gain (docs/QUALITY.md).
    centred = model.wv.vectors - model.wv.vectors.mean(axis=0)
    return list(model.wv.index_to_key), (centred / centred.std()).astype(np.float32)


def embedding_rows(words: list[str], vectors: np.ndarray, vocab: Vocabulary) -> tuple[np.ndarray, np.ndarray]:
    """Starting rows for ``vocab``'s embedding ids: every id a word maps to (its own id or hash bin,
    and with subwords its n-grams' bins) gets the mean vector of the words that map to it.

    Returns (the ids some word reaches, ascending; their ``(len(ids), dim)`` float32 rows).
    """
    sums = np.zeros((vocab.size, vectors.shape[1]), dtype=np.float64)
    counts = np.zeros(vocab.size, dtype=np.int64)
    for word, vector in zip(words, vectors):
        for token_id in {vocab.token_id(word), *vocab.subword_ids(word)}:
            sums[token_id] += vector
            counts[token_id] += 1
    ids = np.flatnonzero(counts)
    return ids, (sums[ids] / counts[ids, None]).astype(np.float32)


def word_vector_rows(texts: Iterable[str], vocab: Vocabulary, dim: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``embedding_rows`` of the ``skipgram_vectors`` of ``texts``: what ``TrainConfig.word_vectors`` starts from."""
    return embedding_rows(*skipgram_vectors(texts, dim, seed), vocab)
