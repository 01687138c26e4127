"""Concurrent searches coalesced: one encoder pass and one FAISS call for the queries waiting.

Under a burst of searches the app's handler threads each searched alone, one after another on
the GIL: every search paid its own encoder call and index call. ``CoalescedRetriever`` wraps the
served retriever so that searches arriving while one runs wait and are then answered together
(``search_ids`` on all their queries at once): no timer, so a lone search is never held back, and
the more searches wait, the larger (and cheaper per query) the next batch. docs/SERVING.md
measures it.

Leadership passes from caller to caller: the first caller with nobody searching runs a batch (its
own queries and whatever waits); when it is done, the oldest waiting caller runs the next one.
No thread of its own, so a replaced served model leaves nothing running behind.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from qpr.retrieval.base import Retriever

MAX_BATCH = 64  # queries in one call at most: a larger batch would hold its first caller longer


@dataclass
class _Request:
    queries: list[str]
    k: int
    wake: threading.Event = field(default_factory=threading.Event)
    leads: bool = False
    result: tuple[np.ndarray, np.ndarray] | None = None
    error: BaseException | None = None


class CoalescedRetriever(Retriever):
    """``inner`` with concurrent ``search_ids`` calls answered together (module doc); same
    ``name`` and ``corpus``, and every other attribute (``encode``, ``index``) is ``inner``'s.
    Results are ``inner``'s for the same queries: requests are grouped by ``k``."""

    def __init__(self, inner: Retriever, max_batch: int = MAX_BATCH) -> None:
        self.inner = inner
        self.name, self.score = inner.name, inner.score
        self.corpus = inner.corpus
        self.max_batch = max_batch
        self._lock = threading.Lock()
        self._waiting: list[_Request] = []
        self._busy = False  # a caller is running a batch, or has been told to
        self.batches = 0  # calls made to ``inner`` (for tests and benchmarks)

    def __getattr__(self, name: str):
        if "inner" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.__dict__["inner"], name)

    def search_ids(self, queries: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        request = _Request(list(queries), k)
        with self._lock:
            self._waiting.append(request)
            if not self._busy:
                self._busy = request.leads = True
                request.wake.set()
        while True:
            request.wake.wait()
            request.wake.clear()
            if request.result is not None or request.error is not None:
                break
            if request.leads:
                self._run_batch()
        if request.error is not None:
            raise request.error
        return request.result

    def _run_batch(self) -> None:
        """Answer the waiting requests (up to ``max_batch`` queries, the oldest first, at least
        one request), then hand the lead to the oldest request still waiting."""
        with self._lock:
            taken, size = [], 0
            while self._waiting and (not taken or size + len(self._waiting[0].queries) <= self.max_batch):
                taken.append(self._waiting.pop(0))
                size += len(taken[-1].queries)
        for k in dict.fromkeys(r.k for r in taken):
            group = [r for r in taken if r.k == k]
            try:
                distances, qids = self.inner.search_ids([q for r in group for q in r.queries], k)
                self.batches += 1
                start = 0
                for r in group:
                    r.result = (distances[start : start + len(r.queries)], qids[start : start + len(r.queries)])
                    start += len(r.queries)
            except Exception as err:  # every caller of the batch gets the error, as it would alone
                for r in group:
                    r.error = err
        with self._lock:
            if self._waiting:
                self._waiting[0].leads = True
                self._waiting[0].wake.set()
            else:
                self._busy = False
        for r in taken:
            r.wake.set()
