"""Dense retrievers: an encoder over its FAISS index (squared Euclidean distance), and exact
inner-product search over any ``encode`` function (the seed systems, docs/SEEDS.md)."""

from __future__ import annotations

from typing import Callable, Sequence

import faiss
import numpy as np
import pandas as pd

from qpr.retrieval.base import Retriever
from qpr.retrieval.index import VectorIndex


class DenseRetriever(Retriever):
    """An encoder (the CNN, the LSTM, a seed system or a transformer) + the FAISS index of its
    vectors of ``corpus``.

    ``encode(texts)`` returns the vectors ``index`` was built from, one row per text; ``index``
    holds every corpus question under its qid; ``name`` is the encoder's system (its name in
    ``qpr.systems.registry``, e.g. "cnn-sdml", "film"), which results and calibrations are listed
    under. A bundle builds its own: ``Bundle.dense_retriever``.
    """

    def __init__(self, encode: Callable[[Sequence[str]], np.ndarray], index: VectorIndex, corpus: pd.DataFrame,
                 name: str) -> None:
        self.name = name
        self.encode = encode
        self.index = index
        self.corpus = corpus

    def search_ids(self, queries: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        return self.index.search(self.encode(queries), k)


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
