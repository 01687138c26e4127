"""Retrievers: the same search interface over the trained encoder (FAISS), a BM25 baseline, and
the seed systems' TF-IDF cosine and text -> vector search (docs/SEEDS.md).

``retriever.search("text", k)`` returns a ranked list of ``Hit``; a list of texts returns one
list per text. ``search_ids`` is the array form that evaluation uses. For both retrievers lower
``distance`` is better: squared Euclidean for the encoder, minus the BM25 score for BM25.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import bm25s
import faiss
import numpy as np
import pandas as pd
from sklearn.feature_extraction.text import TfidfVectorizer

from qpr.bundle import Bundle
from qpr.errors import QPRError
from qpr.text import check_queries, words

@dataclass(frozen=True)
class Hit:
    rank: int
    qid: int
    question: str
    cluster: str | None
    distance: float


class Retriever:
    """Base class: subclasses set ``name`` and ``corpus`` and implement ``search_ids``."""

    name: str
    corpus: pd.DataFrame

    def search_ids(self, queries: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """``(distances, qids)`` arrays of shape ``(len(queries), k)``; qid -1 where no hit."""
        raise NotImplementedError

    def search(self, queries: str | Sequence[str], k: int = 10) -> list[Hit] | list[list[Hit]]:
        single = isinstance(queries, str)
        texts = [queries] if single else list(queries)
        check_queries(texts, k)
        distances, qids = self.search_ids(texts, k)
        positions, question, cluster = self._lookup
        rows = positions.get_indexer(qids.ravel()).reshape(qids.shape)
        results = [
            [
                Hit(rank + 1, int(q), question[r], cluster[r], float(d))
                for rank, (q, r, d) in enumerate(zip(qid_row, row, dist_row))
                if q >= 0
            ]
            for qid_row, row, dist_row in zip(qids, rows, distances)
        ]
        return results[0] if single else results

    @functools.cached_property
    def _lookup(self) -> tuple[pd.Index, np.ndarray, np.ndarray]:
        # Built once: rebuilding the qid index and copying the text columns cost more per query
        # (about 20 ms on Quora-lite) than the search itself.
        return (
            pd.Index(self.corpus["qid"]),
            self.corpus["question"].to_numpy(dtype=object),
            self.corpus["cluster"].astype(object).where(self.corpus["cluster"].notna(), None).to_numpy(),
        )


class DenseRetriever(Retriever):
    """A bundle's encoder (the CNN, the LSTM or a seed system: ``Bundle.encode``) + its FAISS index."""

    name = "sdml"

    def __init__(self, bundle: Bundle) -> None:
        self.bundle = bundle
        self.corpus = bundle.corpus

    @classmethod
    def load(cls, path: str | Path) -> "DenseRetriever":
        return cls(Bundle.load(path))

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        return self.bundle.encode(texts)

    def search_ids(self, queries: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        return self.bundle.index.search(self.encode(queries), k)


class BM25Retriever(Retriever):
    """Okapi BM25 (bm25s, k1=1.5, b=0.75) over word tokens (punctuation ignored)."""

    name = "bm25"

    def __init__(self, corpus: pd.DataFrame) -> None:
        self.corpus = corpus.reset_index(drop=True)
        self._qids = self.corpus["qid"].to_numpy()
        self._bm25 = bm25s.BM25()
        self._bm25.index([words(q) for q in self.corpus["question"]], show_progress=False)

    def search_ids(self, queries: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        k = min(k, len(self.corpus))
        docs, scores = self._bm25.retrieve([words(q) for q in queries], k=k, show_progress=False)
        qids = np.where(scores > 0, self._qids[docs], -1)  # no shared word: not a hit
        return -scores, qids

    def scores(self, text: str) -> np.ndarray:
        """The BM25 score of every corpus question (in corpus row order) for the query ``text``."""
        known = self._bm25.get_tokens_ids(words(text))  # words the corpus never uses score nothing
        return self._bm25.get_scores_from_ids(known) if known else np.zeros(len(self.corpus))


def tfidf_vectorizer(texts: Sequence[str], min_df: int = 1, max_features: int | None = None) -> TfidfVectorizer:
    """A TF-IDF vectorizer (sublinear tf, smoothed idf, L2-normalised rows) over word tokens,
    fitted on ``texts``."""
    return _tfidf(min_df=min_df, max_features=max_features).fit(texts)


def restored_tfidf_vectorizer(terms: Sequence[str], idf: np.ndarray) -> TfidfVectorizer:
    """The vectorizer ``tfidf_vectorizer`` fitted, rebuilt from its ``terms`` (in column order) and
    their ``idf`` (as a bundle stores them: arrays, not a pickle)."""
    vectorizer = _tfidf(vocabulary=list(terms))
    vectorizer.idf_ = np.asarray(idf, dtype=np.float64)
    return vectorizer


def _tfidf(**settings) -> TfidfVectorizer:
    return TfidfVectorizer(tokenizer=words, lowercase=False, token_pattern=None, sublinear_tf=True, dtype=np.float32,
                           **settings)


def _top(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Row-wise top-``k`` column positions (best first) and their scores of a dense matrix."""
    k = min(k, scores.shape[1])
    part = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    picked = np.take_along_axis(scores, part, axis=1)
    order = np.argsort(-picked, axis=1, kind="stable")
    return np.take_along_axis(part, order, axis=1), np.take_along_axis(picked, order, axis=1)


class TfidfRetriever(Retriever):
    """Cosine similarity of TF-IDF vectors (the FILM and AskUbuntu papers' lexical baseline).

    The vectorizer is fitted on the corpus unless one is given. ``distance`` is 1 - cosine.
    """

    name = "tfidf"

    def __init__(self, corpus: pd.DataFrame, vectorizer: TfidfVectorizer | None = None, batch: int = 256) -> None:
        self.corpus = corpus.reset_index(drop=True)
        self.vectorizer = vectorizer or tfidf_vectorizer(self.corpus["question"].tolist())
        self.matrix_t = self.vectorizer.transform(self.corpus["question"]).T.tocsr()
        self._qids = self.corpus["qid"].to_numpy()
        self.batch = batch

    def search_ids(self, queries: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        out_d, out_q = [], []
        for start in range(0, len(queries), self.batch):
            q = self.vectorizer.transform(queries[start : start + self.batch])
            scores = (q @ self.matrix_t).toarray()
            rows, best = _top(scores, k)
            out_q.append(np.where(best > 0, self._qids[rows], -1))
            out_d.append(1.0 - best)
        return np.concatenate(out_d), np.concatenate(out_q)


class EncodeRetriever(Retriever):
    """Exact inner-product search (FAISS) over ``encode(texts)`` vectors of the corpus.

    ``encode`` must return L2-normalised float32 rows for cosine ranking; ``distance`` is
    1 - inner product. ``name`` names the system in results.
    """

    def __init__(self, corpus: pd.DataFrame, encode: Callable[[Sequence[str]], np.ndarray], name: str) -> None:
        self.corpus = corpus.reset_index(drop=True)
        self.encode = encode
        self.name = name
        vectors = np.ascontiguousarray(encode(self.corpus["question"].tolist()), dtype=np.float32)
        self.index = faiss.IndexIDMap(faiss.IndexFlatIP(vectors.shape[1]))
        self.index.add_with_ids(vectors, self.corpus["qid"].to_numpy().astype(np.int64))

    def search_ids(self, queries: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        vectors = np.ascontiguousarray(self.encode(list(queries)), dtype=np.float32)
        scores, qids = self.index.search(vectors, k)
        return 1.0 - scores, qids
