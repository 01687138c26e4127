"""The search interface every retriever shares: ``Hit`` and ``Retriever``.

``retriever.search("text", k)`` returns a ranked list of ``Hit``; a list of texts returns one
list per text. ``search_ids`` is the array form that evaluation uses. Lower ``distance`` is
better for every retriever.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from qpr.model.text import check_queries


@dataclass(frozen=True)
class Hit:
    rank: int
    qid: int
    question: str
    cluster: str | None
    distance: float


class Retriever:
    """Base class: subclasses set ``name`` and ``corpus`` and implement ``search_ids``.
    ``score``: None when a hit's ``distance`` is a distance (never negative); else the name of the
    score it is minus (higher = more alike), as a person should be shown it (BM25's, a fusion's)."""

    name: str
    corpus: pd.DataFrame
    score: str | None = None

    def search_ids(self, queries: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """``(distances, qids)`` arrays of shape ``(len(queries), k)``; qid -1 where no hit."""
        raise NotImplementedError

    def search(self, queries: str | Sequence[str], k: int = 10) -> list[Hit] | list[list[Hit]]:
        single = isinstance(queries, str)
        texts = [queries] if single else list(queries)
        check_queries(texts, k)
        distances, qids = self.search_ids(texts, k)
        positions, question, cluster = self._lookup
        found = qids.ravel() >= 0
        rows = positions.get_indexer(qids.ravel()[found])
        # Only the found rows' texts become Python objects, not the whole corpus' (10M questions:
        # gigabytes per retriever).
        texts_found = iter(question.take(rows).to_numpy(dtype=object))
        clusters_found = iter(cluster.take(rows).to_numpy(dtype=object, na_value=None))
        results = [
            [
                Hit(rank + 1, int(q), next(texts_found), next(clusters_found), float(d))
                for rank, (q, d) in enumerate(zip(qid_row, dist_row))
                if q >= 0
            ]
            for qid_row, dist_row in zip(qids, distances)
        ]
        return results[0] if single else results

    def rows_of(self, qids) -> np.ndarray:
        """The positions in ``corpus`` of the questions ``qids`` (-1 for a qid not in it): how a
        retriever that combines others (``qpr.retrieval.hybrid``) reads their corpus by row."""
        return self._lookup[0].get_indexer(qids)

    @functools.cached_property
    def _lookup(self) -> tuple[pd.Index, pd.api.extensions.ExtensionArray, pd.api.extensions.ExtensionArray]:
        # The qid index is built once: rebuilding it per query cost more (about 20 ms on
        # Quora-lite) than the search itself. Taking rows from an Arrow column costs in proportion
        # to its chunks' count, so a large corpus is read as one chunk (``Bundle.load``).
        return pd.Index(self.corpus["qid"]), self.corpus["question"].array, self.corpus["cluster"].array
