"""Retrievers for the seed systems: TF-IDF cosine, and any text -> vector function over FAISS.

Both implement ``qpr.service.Retriever`` (``search_ids``), so ``qpr.evaluate.evaluate`` scores
them under the QPR protocol exactly as it scores the CNN and BM25.
"""

from __future__ import annotations

from typing import Callable, Sequence

import faiss
import numpy as np
import pandas as pd
from sklearn.feature_extraction.text import TfidfVectorizer

from qpr.service import Retriever
from qpr.text import words


def tfidf_vectorizer(texts: Sequence[str], min_df: int = 1, max_features: int | None = None) -> TfidfVectorizer:
    """A TF-IDF vectorizer (sublinear tf, smoothed idf, L2-normalised rows) over word tokens,
    fitted on ``texts``."""
    vectorizer = TfidfVectorizer(tokenizer=words, lowercase=False, token_pattern=None, sublinear_tf=True,
                                 min_df=min_df, max_features=max_features, dtype=np.float32)
    return vectorizer.fit(texts)


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
