"""What the app serves, and swapping a retrained model in without stopping searches.

``ServedModel`` holds the served bundle (with its retrievers), its served labels, at most one
retrained candidate waiting for a decision, and what the last confirmed swap replaced. Readers
take a consistent snapshot (``current()``) without waiting; a candidate replaces the served model
only through ``confirm`` (one reference swap under a lock), so searches keep working throughout.

Served labels: corrected clusters can be served at once, without retraining, as a numbered
labels version over the bundle's corpus (``relabel``; version 0 is the bundle's own corpus). The
bundle on disk and its index are untouched; what changes is the cluster every search result and
cluster view shows (``Served.corpus``, ``Served.cluster_of``).
"""

from __future__ import annotations

import functools
import hashlib
import json
import threading
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from qpr.bundles.bundle import Bundle, serving_retriever
from qpr.retrieval.calibration import Calibration, kept_calibrations
from qpr.errors import QPRError
from qpr.retrieval.base import Retriever
from qpr.retrieval.dense import DenseRetriever
from qpr.retrieval.lexical import BM25Retriever
from qpr.serving.batching import CoalescedRetriever
from qpr.settings import settings

SAME_MEANING = "same meaning"  # the header of a calibrated probability, 0 to 1 (``Served.readable``)


def calibration_key(bundle: Bundle) -> str:
    """What names the calibrations of ``bundle``'s retrievers: its version, corpus and fusion."""
    named = [bundle.version, bundle.manifest.data_fingerprint, bundle.manifest.fusion]
    return hashlib.sha256(json.dumps(named, sort_keys=True).encode()).hexdigest()[:24]


@dataclass(frozen=True)
class Served:
    """One consistent view of what is served: a bundle and the retrievers over its corpus.

    ``default`` answers searches (``serving_retriever``). ``model_retriever`` is the bundle's own
    model as a retriever: its encoder's dense retriever, or, for a lexical bundle (no encoder),
    the BM25 retriever itself. It and ``bm25`` are the default's parts, shown for comparison;
    ``model_retriever`` ranks the annotation queue and scores an export's pairs. On a lexical
    bundle ``model_retriever``, ``bm25`` and ``default`` are one BM25 retriever, so every tab
    works on BM25 alone.
    ``calibrations`` turn each one's distances into probabilities (``qpr.retrieval.calibration``).
    ``labels``: the bundle's corpus with the clusters served now (None: the bundle's own), as
    labels version ``labels_version``.
    """

    bundle: Bundle
    model_retriever: DenseRetriever | BM25Retriever
    bm25: BM25Retriever
    default: Retriever
    calibrations: dict[str, Calibration | None] = field(default_factory=dict)
    labels: pd.DataFrame | None = None
    labels_version: int = 0

    @property
    def corpus(self) -> pd.DataFrame:
        """The served corpus: the bundle's questions under the served labels."""
        return self.bundle.corpus if self.labels is None else self.labels

    @functools.cached_property
    def _cluster_by_qid(self) -> dict[int, str]:
        # A dict, built once: a pandas reindex per search cost more than the search's table.
        clustered = self.corpus[self.corpus["cluster"].notna()]
        return dict(zip(clustered["qid"].tolist(), clustered["cluster"].astype(str).tolist()))

    def cluster_of(self, qids) -> list[str | None]:
        """The served cluster of each of ``qids`` (None for a question in no cluster or not in the corpus)."""
        return [self._cluster_by_qid.get(int(q)) for q in qids]

    @classmethod
    def of(cls, bundle: Bundle, bm25: BM25Retriever | None = None) -> "Served":
        """The retrievers of ``bundle``, each with its ``Calibration`` on the val clusters (by
        retriever name; None where it cannot be fitted); ``bm25``, one over its corpus already
        built, is reused."""
        bm25 = bm25 or bundle.bm25
        own, default = bm25 if bundle.lexical else bundle.dense_retriever(), serving_retriever(bundle, bm25)
        # Concurrent searches answered together (qpr.serving.batching); a lexical bundle's BM25,
        # which is also its ``bm25`` and ``model_retriever``, stays itself.
        if settings().coalesce_searches and default is not bm25:
            coalesced = CoalescedRetriever(default)
            own, default = (coalesced if own is default else own), coalesced
        retrievers = {r.name: r for r in (default, own, bm25)}
        return cls(bundle, own, bm25, default, kept_calibrations(
            settings().cache_dir / "calibrations", calibration_key(bundle), retrievers, bundle.corpus))

    def results(self, query: str, k: int, retriever: Retriever | None = None) -> list[dict]:
        """The top ``k`` of ``retriever`` (default: the served one) for ``query``, best first: rank,
        qid, question, the served cluster (None outside clusters; corrections show at once),
        distance (what it ranks by, lower first), the probability of the same meaning (None where
        uncalibrated), and ``score`` as a person is shown it with what it is (``score_is``,
        ``readable``). QPRError
        says what to change in a query no retriever can answer."""
        retriever = retriever or self.default
        hits = retriever.search(query, k)
        distances = [h.distance for h in hits]
        probabilities = self.probability(retriever, distances)
        same = [None] * len(hits) if probabilities is None else [float(p) for p in probabilities]
        shown, scores = self.readable(retriever, distances)
        return [{"rank": h.rank, "qid": h.qid, "question": h.question, "cluster": cluster, "distance": h.distance,
                 "same_meaning": p, "score": float(score), "score_is": shown}
                for h, cluster, p, score in zip(hits, self.cluster_of([h.qid for h in hits]), same, scores)]

    def readable(self, retriever: Retriever, distances) -> tuple[str, np.ndarray]:
        """What a person is shown for ``retriever``'s ``distances``, with the header that says what
        it is: the probability of the same meaning (0 to 1) where the retriever is calibrated;
        else its own score (higher = more alike: BM25's, a fusion's) or distance (lower = more
        alike), so no column ever shows a negative "distance" or a score under a probability's name."""
        probabilities = self.probability(retriever, distances)
        if probabilities is not None:
            return SAME_MEANING, probabilities
        distances = np.asarray(distances, dtype=float)
        if retriever.score:
            return f"{retriever.score} (higher = more alike)", -distances
        return "distance (lower = more alike)", distances

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
        self._before: tuple[Served, Candidate | None, Swap | None] | None = None  # what ``undo`` restores

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
            self._before = (self._served, self._candidate, self._last_swap)
            self._last_swap = Swap(self._served.bundle, self._candidate.comparison)
            self._served, self._candidate = self._candidate.served, None
            return self._served

    def undo(self, version: str) -> Served:
        """Take back the last ``confirm``, of ``version``: serve what was served before and hold
        the candidate again, as if it had not been confirmed (the caller could not record or
        remember the swap). Refused if another swap came since."""
        with self._lock:
            if self._before is None or self._served.bundle.version != version:
                raise QPRError(f"model {version!r} is not the last one confirmed; nothing to take back")
            self._served, self._candidate, self._last_swap = self._before
            self._before = None
            return self._served

    def restart_with(self, bundle: Bundle) -> Served:
        """Serve ``bundle`` as if the app had been started with it: no candidate, no swap to show.
        For a start that finds a recorded swap whose bundle was saved but never remembered
        (``workflows.swap_recovery``)."""
        served = Served.of(bundle)
        with self._lock:
            self._served, self._candidate, self._last_swap, self._before = served, None, None, None
            return served

    def relabel(self, bundle_version: str, labels: pd.DataFrame, number: int) -> Served:
        """Serve ``labels`` (the served bundle's corpus with corrected clusters) as labels version
        ``number``, at once; refused if the bundle served by now is another one, or ``labels`` holds
        other questions than its corpus."""
        with self._lock:
            served = self._served
        if served.bundle.version != bundle_version:
            raise QPRError(f"these labels are for bundle {bundle_version!r}, but {served.bundle.version!r} is served now; "
                           "apply the corrections again")
        qids = pd.Index(served.bundle.corpus["qid"])
        if len(labels) != len(qids) or not labels["qid"].is_unique or not labels["qid"].isin(qids).all():
            raise QPRError("these labels are not over the served corpus (other questions); apply the corrections again")
        in_order = labels.set_index("qid").loc[qids].reset_index()[list(labels.columns)]  # the bundle's row order
        relabelled = replace(served, labels=in_order, labels_version=int(number))
        with self._lock:
            if self._served is not served:  # a swap or another relabel came first: ask again
                raise QPRError("the served model changed while the labels were prepared; apply the corrections again")
            self._served = relabelled
            return relabelled

    def discard(self) -> None:
        with self._lock:
            self._candidate = None
