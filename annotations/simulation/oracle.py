"""A simulated annotator that knows the true clusters, and the ground-truth measures it allows.

Measuring the annotation loop (``workflows.simulated_loop``) needs an annotator whose answers are known:
``SimulatedAnnotator(truth)`` answers "same" exactly when two questions share a cluster of the
``truth`` corpus (the clean labels before ``qpr.data.noise`` split clusters; a question in no cluster
shares none), wrong on a seeded random ``error_rate`` share of its answers, and records every
answer through ``store.judgments.record`` as a person clicking in the app would: under one
annotator name, one judgment per item.

The measures compare judgments and merges with the truth: ``label_errors`` (which pairs a
noisy corpus labels wrongly, either way), ``precision`` (share of judged pairs
that are real false negatives), ``recall`` (share of split clusters with a confirmed pair across
their halves) and ``reconnected`` (split clusters whose questions are in one cluster again).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from annotations.errors import AnnotationError
from annotations.queue import judged_pairs
from annotations.store import AnnotationStore


def true_same(truth: pd.DataFrame, query_qids: Sequence[int], candidate_qids: Sequence[int]) -> np.ndarray:
    """Whether each (query, candidate) pair shares a cluster of ``truth`` (bool array)."""
    cluster_of = pd.Series(truth["cluster"].array, index=truth["qid"].to_numpy())
    asked = np.concatenate([np.asarray(query_qids, dtype="int64"), np.asarray(candidate_qids, dtype="int64")])
    unknown = np.setdiff1d(asked, cluster_of.index.to_numpy())
    if len(unknown):
        raise AnnotationError(f"question {unknown[0]} is not in the ground-truth corpus")
    a = cluster_of.reindex(query_qids).reset_index(drop=True)
    b = cluster_of.reindex(candidate_qids).reset_index(drop=True)
    return a.eq(b).fillna(False).to_numpy(bool)


class SimulatedAnnotator:
    """Answers from ground truth (see the module doc); ``seed`` fixes which answers are wrong."""

    def __init__(self, truth: pd.DataFrame, name: str = "oracle", error_rate: float = 0.0, seed: int = 0,
                 near: bool = False) -> None:
        if not 0.0 <= error_rate <= 1.0:
            raise AnnotationError(f"the simulated annotator's error rate must be between 0 and 1, got {error_rate}")
        self.truth = truth
        self.name = name
        self.error_rate = error_rate
        self.near = near
        self._rng = np.random.default_rng(seed)

    def labels(self, query_qids: Sequence[int], candidate_qids: Sequence[int], distances=None) -> np.ndarray:
        """"same" or "different" for each pair: the truth, flipped where a seeded draw falls
        below ``error_rate``; with ``near`` and the pairs' ``distances``, the errors fall on the near
        pairs (people confuse questions that look alike): the chance falls linearly with the pair's
        distance rank, from twice the rate for the nearest to none for the farthest, the rate on average."""
        chance = np.full(len(query_qids), self.error_rate)
        if self.near and distances is not None and len(chance):
            order = pd.Series(np.asarray(distances, dtype=float)).rank(pct=True, na_option="bottom").to_numpy()
            chance = np.clip(2 * self.error_rate * (1 - order + 0.5 / len(chance)), 0.0, 1.0)
        wrong = self._rng.random(len(query_qids)) < chance
        return np.where(true_same(self.truth, query_qids, candidate_qids) ^ wrong, "same", "different")

    def judge(self, store: AnnotationStore, candidates: pd.DataFrame, bundle_version: str) -> pd.DataFrame:
        """Record one judgment per row of ``candidates`` (query_qid, candidate_qid, rank, distance)
        against ``bundle_version``; returns the rows with ``label``, ``true_same`` and ``judgment_id``.

        Refuses, before recording anything, a pair listed twice (in either order) or already
        judged by this annotator: one judgment per item.
        """
        queries, shown = candidates["query_qid"].tolist(), candidates["candidate_qid"].tolist()
        earlier = judged_pairs(store.judgments.frame(annotator=self.name))
        seen: set[tuple[int, int]] = set()
        for pair in zip(queries, shown):
            if pair in earlier or pair in seen:
                raise AnnotationError(f"{self.name} already judged questions {pair[0]} and {pair[1]}: one judgment per item")
            seen |= {pair, pair[::-1]}
        labels = self.labels(queries, shown, candidates["distance"].to_numpy())
        ids = [
            store.judgments.record(self.name, int(c), str(label), bundle_version, query_qid=int(q), rank=None if pd.isna(r) else int(r),
                         distance=None if pd.isna(d) else float(d))
            for q, c, label, r, d in zip(queries, shown, labels, candidates["rank"], candidates["distance"])
        ]
        return candidates.assign(label=labels, true_same=true_same(self.truth, queries, shown), judgment_id=ids)


def label_errors(truth: pd.DataFrame, corpus: pd.DataFrame, query_qids: Sequence[int], candidate_qids: Sequence[int]) -> np.ndarray:
    """Whether ``corpus``' labels get each pair wrong (bool array): a false negative (apart in
    ``corpus``, together in ``truth``) or a false positive (the other way round)."""
    return true_same(truth, query_qids, candidate_qids) != true_same(corpus, query_qids, candidate_qids)


def precision(judged: pd.DataFrame) -> float:
    """Share of judged pairs (rows with ``true_same``) that are real false negatives; NaN if none."""
    return float(judged["true_same"].mean()) if len(judged) else float("nan")


def recall(judgments: pd.DataFrame, truth: pd.DataFrame, split: Sequence[str]) -> float:
    """Share of the ``split`` clusters (true clusters that noise cut in two) reconnected by at least
    one confirmed pair: a pair labelled "same" whose questions both belong to that true cluster.
    ``judgments``: rows with query_qid, candidate_qid and label (e.g. ``store.judgments.frame()``)."""
    if not len(split):
        return float("nan")
    confirmed = judgments[judgments["label"] == "same"]
    query_qids = confirmed["query_qid"].astype("int64").to_numpy()
    really = true_same(truth, query_qids, confirmed["candidate_qid"].to_numpy())
    cluster_of = truth.set_index("qid")["cluster"]
    found = set(cluster_of.reindex(query_qids[really]).dropna())
    return len(found & set(split)) / len(split)


def reconnected(corpus: pd.DataFrame, truth: pd.DataFrame, split: Sequence[str]) -> int:
    """How many ``split`` clusters have all their true members in one cluster of ``corpus``."""
    members = truth[truth["cluster"].isin(list(split))]
    now = corpus.set_index("qid")["cluster"].reindex(members["qid"]).to_numpy()
    labels = pd.Series(now).groupby(members["cluster"].to_numpy()).nunique(dropna=False)
    return int((labels == 1).sum())
