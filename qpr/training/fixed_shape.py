"""Fixed-shape epochs for training on corrected labels (issue 57): every epoch has the same number
of steps and every batch exactly the same number of pairs, whatever the labels say.

Today's sampler (``qpr.training.sampling``) takes one pair per cluster member and packs pairs of
distinct clusters greedily, so relabelling changes the training itself: merging clusters cut the
batches of a BANKING77 retrain from 50 pairs to 13 and tripled the steps (docs/LOOP_PAYOFF.md),
and a "corrected - uncorrected" difference mixed label quality with optimisation. Here:

- **Steps per epoch** are fixed by the corpus size: the training questions // ``batch_size``
  (counted over the split, clustered or not, so no relabelling can change them).
- **Each batch holds exactly ``batch_size`` pairs** whose label keys are all distinct: a pair's
  keys are its questions' clusters and their must-link components (questions joined by judged
  "same" pairs), so no question's cluster-mate, and no judged-same partner, is ever an in-batch
  negative for it (at most half the owners per batch: a small project's batches are smaller).
- **What a batch is drawn from.** Each cluster is drawn about ``purity x size`` times per epoch
  (one pair per member, as today, times the estimated purity of the cluster: ``cluster_weights``,
  from the annotators' audits); a cluster whose purity is below ``min_purity`` is left out while
  enough others remain. Each judged-same pair (a *verified* positive) is drawn ``judged_repeat``
  times. The draws are spread over the epoch's fixed slots (repeated or cut, in proportion).
- **Hard negatives beside verified positives only.** A judged-same pair's anchor gets, as its
  judged negative (``qpr.model.losses.judged_negative_loss``), a question judged different from it;
  a cluster pair's positive is unverified, so it gets none. A pair judged different is never drawn
  as a cluster positive.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.cluster.hierarchy import DisjointSet

from qpr.errors import QPRError
from qpr.training.sampling import JudgedPairs

PARTNER_TRIES = 5  # redraws of a cluster partner that is judged different from its anchor
FILL_TRIES = 200  # random owners tried for a slot the shuffled draws left open


def training_clusters(corpus: pd.DataFrame) -> tuple[list[str], list[np.ndarray]]:
    """Names and row positions of the training clusters of 2+ questions (``sampling.cluster_members``' order)."""
    rows = corpus[(corpus["split"] == "train") & corpus["cluster"].notna()]
    groups = [(str(name), g.to_numpy()) for name, g in rows.groupby("cluster", sort=True).groups.items()]
    groups = [(name, g) for name, g in groups if len(g) >= 2]
    return [name for name, _ in groups], [g for _, g in groups]


@dataclass(frozen=True)
class FixedShape:
    """One training's owners (clusters, then judged-same pairs) and how often each is drawn."""

    clusters: list[np.ndarray]
    quota: np.ndarray  # expected draws per epoch of each owner
    same: np.ndarray  # (K, 2) judged-same rows
    cluster_of: dict[int, int]
    component_of: dict[int, int]
    different_of: dict[int, np.ndarray]
    cannot: frozenset
    steps: int
    batch_size: int

    @classmethod
    def build(cls, corpus: pd.DataFrame, judged: JudgedPairs, batch_size: int, cluster_weights: pd.Series | None = None,
              judged_repeat: int = 2, min_purity: float = 0.0) -> "FixedShape":
        names, clusters = training_clusters(corpus)
        weight = np.ones(len(clusters)) if cluster_weights is None else (
            pd.Series(names).map(cluster_weights).fillna(1.0).clip(0.0, 1.0).to_numpy(dtype=float))
        kept = weight >= min_purity
        if kept.sum() + len(judged.same) >= 2 * batch_size:  # leave the impure out only while enough remain
            weight = np.where(kept, weight, 0.0)
        quota = np.concatenate([weight * np.array([len(c) for c in clusters], dtype=float),
                                np.full(len(judged.same), float(judged_repeat))])
        # A small project holds fewer owners than the batch asks for: half of them per batch, as
        # the old sampler's batches did; equal labels sizes give equal shapes (what the bench needs).
        batch_size = min(batch_size, max(2, int((quota > 0).sum()) // 2))
        components = DisjointSet(judged.same.ravel().tolist())
        for a, b in judged.same.tolist():
            components.merge(a, b)
        both = np.concatenate([judged.different, judged.different[:, ::-1]])
        different_of = {int(a): both[both[:, 0] == a, 1] for a in np.unique(both[:, 0])}
        steps = max(1, int((corpus["split"] == "train").sum()) // batch_size)
        return cls(clusters, quota, judged.same, {int(r): c for c, rows in enumerate(clusters) for r in rows},
                   {int(r): int(components[r]) for r in judged.same.ravel()}, different_of,
                   frozenset(map(tuple, both.tolist())), steps, batch_size)

    def _keys(self, rows) -> set:
        keys = set()
        for row in rows:
            if row in self.cluster_of:
                keys.add(("c", self.cluster_of[row]))
            if row in self.component_of:
                keys.add(("m", self.component_of[row]))
        return keys

    def _draw(self, owner: int, rng: np.random.Generator) -> tuple[int, int, int]:
        """(anchor, positive, judged negative or -1) of one draw of ``owner``."""
        if owner >= len(self.clusters):
            anchor, positive = self.same[owner - len(self.clusters)][rng.permutation(2)].tolist()
            negatives = self.different_of.get(anchor)
            return anchor, positive, -1 if negatives is None else int(rng.choice(negatives))
        members = self.clusters[owner]
        for _ in range(PARTNER_TRIES):
            anchor, positive = (int(r) for r in rng.choice(members, 2, replace=False))
            if (anchor, positive) not in self.cannot:
                break
        return anchor, positive, -1

    def epoch(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[np.ndarray]]:
        """One epoch: (anchors, positives, judged negatives or -1, batches of pair indices), exactly
        ``steps`` batches of ``batch_size`` pairs."""
        total = self.steps * self.batch_size
        counts = np.floor(self.quota + rng.random(len(self.quota))).astype(int)  # stochastic rounding
        pool = np.repeat(np.arange(len(self.quota)), counts)
        if not len(pool):
            pool = np.flatnonzero(self.quota > 0)
        pool = np.concatenate([rng.permutation(pool) for _ in range(-(-total // len(pool)))])[:total]
        draws = [self._draw(int(owner), rng) for owner in pool]
        batches: list[list[int]] = [[] for _ in range(self.steps)]
        taken: list[set] = [set() for _ in range(self.steps)]
        left, start = [], 0
        for index, (anchor, positive, _) in enumerate(draws):
            keys = self._keys((anchor, positive))
            for offset in range(self.steps):
                b = (start + offset) % self.steps
                if len(batches[b]) < self.batch_size and taken[b].isdisjoint(keys):
                    batches[b].append(index)
                    taken[b] |= keys
                    start = (b + 1) % self.steps
                    break
            else:
                left.append(index)
        live = np.flatnonzero(self.quota > 0)
        for b in range(self.steps):
            tries = 0
            while len(batches[b]) < self.batch_size:
                draw = self._draw(int(rng.choice(live)), rng)
                keys = self._keys(draw[:2])
                if taken[b].isdisjoint(keys):
                    batches[b].append(len(draws))
                    draws.append(draw)
                    taken[b] |= keys
                elif (tries := tries + 1) > FILL_TRIES:
                    raise QPRError(f"cannot fill a batch of {self.batch_size} pairs from distinct clusters; lower the batch size")
        anchors, positives, negatives = (np.array(column, dtype=np.int64) for column in zip(*draws))
        return anchors, positives, negatives, [np.asarray(batch) for batch in batches]
