"""Lexical retrievers: Okapi BM25 (distance: minus the score) and TF-IDF cosine (1 - cosine), and
the TF-IDF vectorizer the seed systems share."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import bm25s
import numpy as np
import pandas as pd
from sklearn.feature_extraction.text import TfidfVectorizer

from qpr.model.text import words
from qpr.retrieval.base import Retriever


class BM25Retriever(Retriever):
    """Okapi BM25 (bm25s, k1=1.5, b=0.75) over word tokens (punctuation ignored).

    Built over ``corpus`` (tokenizing every question: 30 s at 1M questions, 20 minutes at 10M,
    docs/SCALE.md), or ``load``-ed as ``save`` wrote it, memory-mapped, which costs no time."""

    name = "bm25"
    score = "BM25 score"

    def __init__(self, corpus: pd.DataFrame, index: bm25s.BM25 | None = None) -> None:
        self.corpus = corpus.reset_index(drop=True)
        self._qids = self.corpus["qid"].to_numpy()
        if index is None:
            index = bm25s.BM25()
            index.index([words(q) for q in self.corpus["question"]], show_progress=False)
        self._bm25 = index

    def save(self, folder: Path) -> None:
        """Write the index to the new folder ``folder`` (bm25s' arrays and vocabulary, no pickle)."""
        self._bm25.save(str(folder), show_progress=False)

    @classmethod
    def load(cls, folder: Path, corpus: pd.DataFrame) -> "BM25Retriever | None":
        """The index ``save`` wrote to ``folder`` over ``corpus``, its arrays memory-mapped (read
        as searches touch them); None if the folder is missing, unreadable, or indexes another
        number of questions: the index is derived from the corpus, so the caller builds it anew."""
        if not (Path(folder) / "params.index.json").is_file():
            return None
        try:
            index = bm25s.BM25.load(str(folder), mmap=True, show_progress=False)
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return cls(corpus, index) if index.scores.get("num_docs") == len(corpus) else None

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
