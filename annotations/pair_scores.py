"""How alike the model finds two questions, or a question and a cluster: the calibrated pair
probability that ``annotations.constraints`` weighs beside the judgments, and the threshold
fitted on the judged pairs that turns it into "same".

The encoder's squared Euclidean distance is what ``qpr.retrieval.calibration`` maps to the
probability that two questions mean the same. For a question ``x`` and a group ``G`` the distance
used is the mean squared distance from ``x`` to ``G``'s members,
``|x|^2 - 2 x.mean(G) + mean(|g|^2)``, exact for squared distances and cheap from each group's
mean vector and mean squared norm; between two groups, the mean over all their cross pairs. So a
cluster is scored as a whole (its centroid and spread), never by its single nearest member: one
close member cannot pull a question, or a cluster, into another.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Iterable

import numpy as np
import pandas as pd

from qpr.retrieval.calibration import Calibration, calibrate

DEFAULT_THRESHOLD = 0.5  # the calibrated probability's own "more likely same than not", while too few pairs are judged
MIN_PER_CLASS = 5  # judged pairs of each decision before the threshold is fitted on them


@dataclass(frozen=True)
class PairScorer:
    """``vectors`` (one row per qid of ``qids``, the encoder's) and the ``calibration`` of their
    squared distances."""

    qids: np.ndarray
    vectors: np.ndarray
    calibration: Calibration

    @classmethod
    def of(cls, retriever, corpus: pd.DataFrame, calibration: Calibration | None = None) -> "PairScorer | None":
        """The scorer of a dense ``retriever`` (one with ``encode``) over ``corpus``; its
        calibration fitted on ``corpus``' val clusters unless given. None where the retriever has
        no encoder (BM25) or cannot be calibrated: the judgments alone then decide."""
        encode = getattr(retriever, "encode", None)
        calibration = calibration or (calibrate(retriever, corpus) if encode is not None else None)
        if encode is None or calibration is None:
            return None
        vectors = np.asarray(encode(corpus["question"].tolist()), dtype=np.float64)
        return cls(corpus["qid"].to_numpy(dtype=np.int64), vectors, calibration)

    @functools.cached_property
    def _position(self) -> pd.Series:
        return pd.Series(np.arange(len(self.qids)), index=self.qids)

    def _rows(self, qids: Iterable[int]) -> np.ndarray:
        return self.vectors[self._position.reindex(list(qids)).to_numpy(dtype=np.int64)]

    def pairs(self, a: Iterable[int], b: Iterable[int]) -> np.ndarray:
        """The probability of each pair (a[i], b[i])."""
        x, y = self._rows(a), self._rows(b)
        return self.calibration.probability(((x - y) ** 2).sum(axis=1))

    def to_group(self, qid: int, group: Iterable[int]) -> float:
        """The probability at the mean squared distance from ``qid`` to the questions of ``group``."""
        x, g = self._rows([qid])[0], self._rows(group)
        return float(self.calibration.probability(((g - x) ** 2).sum(axis=1).mean()))

    def to_groups(self, qid: int, groups: dict[str, list[int]]) -> dict[str, float]:
        """``to_group`` for each of ``groups`` at once (by name), from their means and mean squared norms."""
        if not groups:
            return {}
        x = self._rows([qid])[0]
        names = list(groups)
        rows = [self._rows(groups[name]) for name in names]
        means = np.stack([r.mean(axis=0) for r in rows])
        squares = np.array([(r ** 2).sum(axis=1).mean() for r in rows])
        distance = (x ** 2).sum() - 2 * means @ x + squares
        return dict(zip(names, self.calibration.probability(distance).tolist()))

    def coherence(self, groups: pd.Series) -> pd.Series:
        """Per group (``groups``: name -> qids, two or more each), the probability at the mean squared
        distance between its members (every pair of two different members): how likely the model
        finds a random pair of the group the same, i.e. the group's purity as the model sees it."""
        def one(qids) -> float:
            x, n = self._rows(qids), len(qids)
            return 2 * n / (n - 1) * ((x ** 2).sum(axis=1).mean() - (x.mean(axis=0) ** 2).sum())
        distances = np.array([one(qids) for qids in groups], dtype=float)
        return pd.Series(self.calibration.probability(distances), index=groups.index, dtype=float)

    def between(self, a: Iterable[int], b: Iterable[int]) -> float:
        """The probability at the mean squared distance over every pair across groups ``a`` and ``b``."""
        x, y = self._rows(a), self._rows(b)
        distance = (x ** 2).sum(axis=1).mean() + (y ** 2).sum(axis=1).mean() - 2 * x.mean(axis=0) @ y.mean(axis=0)
        return float(self.calibration.probability(distance))


def fit_threshold(probabilities: np.ndarray, same: np.ndarray) -> float:
    """The probability above which a pair counts as the same meaning: the cut that best separates
    the judged pairs' decisions (``same``: bool per pair) by balanced accuracy (the mean of the
    shares of "same" and of "different" pairs it gets right: the queue shows far more "different"
    pairs than "same" ones, so plain accuracy would favour calling everything different).
    ``DEFAULT_THRESHOLD`` while fewer than ``MIN_PER_CLASS`` pairs of either decision are judged."""
    probabilities, same = np.asarray(probabilities, dtype=float), np.asarray(same, dtype=bool)
    if same.sum() < MIN_PER_CLASS or (~same).sum() < MIN_PER_CLASS:
        return DEFAULT_THRESHOLD
    cuts = np.unique(probabilities)
    cuts = np.concatenate([(cuts[:-1] + cuts[1:]) / 2, [cuts[-1] + 1e-9]]) if len(cuts) > 1 else cuts
    hit = probabilities[None, :] >= cuts[:, None]
    balanced = (hit[:, same].mean(axis=1) + (~hit[:, ~same]).mean(axis=1)) / 2
    return float(cuts[int(np.argmax(balanced))])
