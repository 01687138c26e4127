"""What the app serves, and swapping a retrained model in without stopping searches.

``ServedModel`` holds the served bundle (with its retrievers), at most one retrained candidate
waiting for a decision, and what the last confirmed swap replaced. Readers take a consistent
snapshot (``current()``) without waiting; a candidate replaces the served model only through
``confirm`` (one reference swap under a lock), so searches keep working throughout.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from qpr.bundle import Bundle
from qpr.calibration import Calibration, calibrate
from qpr.errors import QPRError
from qpr.hybrid import HybridRetriever
from qpr.retrievers import BM25Retriever, DenseRetriever, Retriever


def serving_retriever(bundle: Bundle, bm25: BM25Retriever | None = None) -> Retriever:
    """What a bundle answers queries with: the hybrid when it carries a fitted fusion (measured
    better than either part: docs/QUALITY.md), else the encoder alone; BM25 for a lexical bundle
    (no encoder yet)."""
    if bundle.lexical:
        return bm25 or BM25Retriever(bundle.corpus)
    return HybridRetriever(bundle, bm25=bm25) if "fusion" in bundle.manifest else DenseRetriever(bundle)


@dataclass(frozen=True)
class Served:
    """One consistent view of what is served: a bundle and the retrievers over its corpus.

    ``default`` answers searches (``serving_retriever``); ``dense`` and ``bm25`` are its parts,
    shown for comparison, and ``dense`` ranks the annotation queue (encoder distances). A lexical
    bundle has no encoder: there ``dense`` and ``default`` are the BM25 retriever itself, so
    every tab works on BM25 alone.
    ``calibrations`` turn each one's distances into probabilities (``qpr.calibration``).
    """

    bundle: Bundle
    dense: DenseRetriever | BM25Retriever
    bm25: BM25Retriever
    default: Retriever
    calibrations: dict[str, Calibration | None] = field(default_factory=dict)

    @classmethod
    def of(cls, bundle: Bundle, bm25: BM25Retriever | None = None) -> "Served":
        """The retrievers of ``bundle``, each with its ``Calibration`` on the val clusters (by
        retriever name; None where it cannot be fitted); ``bm25``, one over its corpus already
        built, is reused."""
        bm25 = bm25 or BM25Retriever(bundle.corpus)
        dense, default = bm25 if bundle.lexical else DenseRetriever(bundle), serving_retriever(bundle, bm25)
        retrievers = {r.name: r for r in (default, dense, bm25)}
        return cls(bundle, dense, bm25, default, {name: calibrate(r, bundle.corpus) for name, r in retrievers.items()})

    def probability(self, retriever: Retriever, distances) -> np.ndarray | None:
        """``retriever``'s distances as probabilities of the same meaning, or None if uncalibrated."""
        calibration = self.calibrations.get(retriever.name)
        return None if calibration is None else calibration.probability(distances)


@dataclass(frozen=True)
class Candidate:
    """A retrained model waiting for the user's decision, with its comparison to the served one."""

    served: Served
    comparison: pd.DataFrame


@dataclass(frozen=True)
class Swap:
    """The last confirmed swap: the bundle it ``replaced`` and the ``comparison`` that justified it."""

    replaced: Bundle
    comparison: pd.DataFrame


class ServedModel:
    """The served bundle, at most one retrained candidate, and the last swap; thread-safe.

    Readers call ``current()`` once per request and use that snapshot throughout, so a swap in
    the middle of a request cannot mix two models. Everything a swap changes (the served model,
    the candidate, the record of the swap) changes in ``confirm``, under one lock.
    """

    def __init__(self, bundle: Bundle) -> None:
        self._lock = threading.Lock()
        self._served = Served.of(bundle)
        self._candidate: Candidate | None = None
        self._last_swap: Swap | None = None

    def current(self) -> Served:
        with self._lock:
            return self._served

    def candidate(self) -> Candidate | None:
        with self._lock:
            return self._candidate

    def last_swap(self) -> Swap | None:
        with self._lock:
            return self._last_swap

    def propose(self, bundle: Bundle, comparison: pd.DataFrame, bm25: BM25Retriever | None = None) -> Candidate:
        """Hold ``bundle`` as the candidate (replacing an earlier one); retrievers are built here,
        outside the lock, so the later swap is instant. ``bm25``: one over its corpus already built."""
        candidate = Candidate(Served.of(bundle, bm25), comparison)
        with self._lock:
            self._candidate = candidate
        return candidate

    def confirm(self, version: str) -> Served:
        """Serve the candidate of ``version`` and record the swap; refuses if that is not the
        candidate any more (another confirmation or retraining replaced it meanwhile)."""
        with self._lock:
            if self._candidate is None or self._candidate.served.bundle.version != version:
                raise QPRError(f"no retrained model {version!r} is waiting to be confirmed; retrain first")
            self._last_swap = Swap(self._served.bundle, self._candidate.comparison)
            self._served, self._candidate = self._candidate.served, None
            return self._served

    def discard(self) -> None:
        with self._lock:
            self._candidate = None
