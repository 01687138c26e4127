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
