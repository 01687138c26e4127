"""Which pairs an epoch trains on and how they are packed into batches (the sampler, kept apart
from the training loop in ``qpr.training.train`` as sentence-transformers keeps its samplers apart from
its trainer).

Each epoch pairs every training question with a random other member of its cluster
(``epoch_pairs``) or takes every pair of each cluster (``all_pairs``), optionally adds two
word-dropout views of each unlabeled question (``view_pairs``), and packs the pairs into
batches in which no two pairs share a cluster (``cluster_disjoint_batches``; otherwise a true
paraphrase would serve as an in-batch negative). ``neighbour_groups`` lets a batch gather
neighbouring clusters, so its negatives are hard ones. ``validation_pairs`` are the held-out
pairs that early stopping scores.

Annotators' judgments enter here too (``JudgedPairs``, issue 39): a pair judged *same* is one more
positive pair each epoch, a pair judged *different* is never a positive pair (even where the
clusters still hold both) and gives each of its two questions the other as a hard negative
(``JudgedPairs.negatives``), which ``qpr.model.losses.judged_negative_loss`` trains on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import faiss
import numpy as np
import pandas as pd
import torch

from qpr.model.encoder import QuestionEncoder, encode_ids
from qpr.errors import QPRError


def cluster_members(corpus: pd.DataFrame, split: str) -> list[np.ndarray]:
    """Row positions of the questions of each cluster of 2+ questions in ``split``."""
    rows = corpus[(corpus["split"] == split) & corpus["cluster"].notna()]
    groups = [g.to_numpy() for _, g in rows.groupby("cluster", sort=True).groups.items()]
    return [g for g in groups if len(g) >= 2]


def epoch_pairs(clusters: list[np.ndarray], rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pair each member of each cluster with a uniformly random other member.

    Returns (anchor rows, positive rows, cluster index of each pair).
    """
    anchors, positives, owner = [], [], []
    for c, members in enumerate(clusters):
        n = len(members)
        # An offset in 1..n-1 from each member's own position picks any other member uniformly.
        partner = (np.arange(n) + rng.integers(1, n, size=n)) % n
        anchors.append(members)
        positives.append(members[partner])
        owner.append(np.full(n, c))
    return np.concatenate(anchors), np.concatenate(positives), np.concatenate(owner)


def all_pairs(
    clusters: list[np.ndarray], batch_size: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every unordered pair of each cluster once, each in a random direction; large clusters capped.

    A batch holds one pair per cluster, so a cluster with more pairs than the epoch has batches
    would stretch the epoch into near-empty batches (Quora-lite's largest training cluster has
    5,778 pairs): such a cluster gives a random subset of pairs. Its cap is the fixed point of
    cap = ceil(sum of min(pairs, cap) / pairs a batch can hold), the fewest batches the capped
    epoch needs (capping shrinks the epoch, hence the fixed point; a batch holds at most
    ``batch_size`` pairs and one per cluster, so fewer clusters than ``batch_size`` hold fewer).
    On Quora-lite 69 clusters are capped at 267 pairs.
    Returns (anchor rows, positive rows, cluster index of each pair), as ``epoch_pairs`` does.
    """
    sizes = np.array([len(members) for members in clusters])
    pair_counts = sizes * (sizes - 1) // 2
    per_batch = min(batch_size, len(clusters))
    cap = math.ceil(pair_counts.sum() / per_batch)
    while (smaller := math.ceil(np.minimum(pair_counts, cap).sum() / per_batch)) < cap:
        cap = smaller
    anchors, positives, owner = [], [], []
    for c, (members, total) in enumerate(zip(clusters, pair_counts)):
        take = min(total, cap)
        # Pair t of the row-major upper triangle, drawn without building all n(n-1)/2 pairs.
        t = rng.choice(total, take, replace=False) if take < total else np.arange(total)
        n = len(members)
        row_start = np.arange(n) * n - np.arange(n) * (np.arange(n) + 1) // 2
        first = np.searchsorted(row_start, t, side="right") - 1
        second = t - row_start[first] + first + 1
        swap = rng.random(len(t)) < 0.5
        anchors.append(members[np.where(swap, second, first)])
        positives.append(members[np.where(swap, first, second)])
        owner.append(np.full(len(t), c))
    return np.concatenate(anchors), np.concatenate(positives), np.concatenate(owner)


def unlabeled_rows(corpus: pd.DataFrame, clusters: list[np.ndarray]) -> np.ndarray:
    """Rows of the questions that anchor no training pair and are not val/test questions (those
    are the queries), one row per distinct text: the material for self-supervised pairs."""
    paired = np.zeros(len(corpus), dtype=bool)
    paired[np.concatenate(clusters)] = True
    rows = np.flatnonzero(~paired & ~corpus["split"].isin(["val", "test"]).to_numpy())
    _, first = np.unique(corpus["question"].to_numpy()[rows].astype(str), return_index=True)
    return np.sort(rows[first])


@dataclass(frozen=True)
class JudgedPairs:
    """Judged question pairs as corpus rows: ``same`` and ``different``, each ``(K, 2)``; each
    pair once, in either direction."""

    same: np.ndarray
    different: np.ndarray

    @classmethod
    def of(cls, corpus: pd.DataFrame, judged: pd.DataFrame | None) -> "JudgedPairs":
        """The pairs of ``judged`` (columns ``qid1``, ``qid2``, ``is_duplicate`` 1/0: the export's
        pairs table, ``annotations.export.training_pairs``) whose two questions are in ``corpus``
        and are not val/test questions (those are the queries a model is scored on)."""
        empty = np.zeros((0, 2), dtype=np.int64)
        if judged is None or judged.empty:
            return cls(empty, empty)
        trainable = ~corpus["split"].isin(["val", "test"]).to_numpy()
        row_of = pd.Series(np.arange(len(corpus)), index=corpus["qid"].to_numpy())
        row_of = row_of[~row_of.index.duplicated()]
        a = judged["qid1"].map(row_of).to_numpy(dtype=float)
        b = judged["qid2"].map(row_of).to_numpy(dtype=float)
        known = ~np.isnan(a) & ~np.isnan(b) & (a != b)
        a, b = a[known].astype(np.int64), b[known].astype(np.int64)
        usable = trainable[a] & trainable[b]
        same = judged["is_duplicate"].to_numpy()[known][usable] == 1
        pairs = np.stack([a[usable], b[usable]], axis=1)
        return cls(pairs[same], pairs[~same])

    def __len__(self) -> int:
        return len(self.same) + len(self.different)

    def positive_pairs(self, anchors: np.ndarray, positives: np.ndarray, owner: np.ndarray,
                       clusters: list[np.ndarray], rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """An epoch's pairs (``epoch_pairs``' three arrays) without any judged-different pair and
        with each judged-same pair added in a random direction. An added pair belongs to its
        anchor's cluster (so no cluster-mate shares its batch), or to a new owner of its own when the
        anchor is in no training cluster."""
        if len(self.different):
            cannot = set(map(tuple, self.different.tolist())) | set(map(tuple, self.different[:, ::-1].tolist()))
            keep = np.array([(a, p) not in cannot for a, p in zip(anchors.tolist(), positives.tolist())], dtype=bool)
            anchors, positives, owner = anchors[keep], positives[keep], owner[keep]
        if not len(self.same):
            return anchors, positives, owner
        flip = rng.random(len(self.same)) < 0.5
        extra = np.where(flip[:, None], self.same[:, ::-1], self.same)
        cluster_of = {row: c for c, members in enumerate(clusters) for row in members.tolist()}
        next_owner = len(clusters) + np.arange(len(extra))
        extra_owner = np.array([cluster_of.get(a, n) for a, n in zip(extra[:, 0].tolist(), next_owner.tolist())])
        return (np.concatenate([anchors, extra[:, 0]]), np.concatenate([positives, extra[:, 1]]),
                np.concatenate([owner, extra_owner]))

    def negatives(self, anchors: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """For each anchor row, a random question judged different from it, or -1 for none."""
        out = np.full(len(anchors), -1, dtype=np.int64)
        if not len(self.different):
            return out
        both = np.concatenate([self.different, self.different[:, ::-1]])
        both = both[rng.permutation(len(both))]  # which of an anchor's negatives comes first is random
        first = pd.Series(both[:, 1]).groupby(both[:, 0]).first()
        hit = pd.Series(anchors).map(first)
        known = hit.notna().to_numpy()
        out[known] = hit[known].astype(np.int64).to_numpy()
        return out


def view_pairs(id_lists: list[list], dropout: float, rng: np.random.Generator) -> tuple[list[list], list[list]]:
    """Two views of each token-id list, each keeping every token with probability 1 - ``dropout``
    (at least one token), as (first views, second views)."""
    def view(ids: list) -> list:
        keep = rng.random(len(ids)) >= dropout
        if not keep.any():
            keep[rng.integers(len(ids))] = True
        return [token for token, kept in zip(ids, keep) if kept]

    return [view(ids) for ids in id_lists], [view(ids) for ids in id_lists]


def batch_units(
    owner: np.ndarray, batch_size: int, rng: np.random.Generator, group: np.ndarray | None = None
) -> list[list[int]]:
    """Pair indices in random order, cut into units that go into a batch whole.

    Without ``group`` each pair is a unit of its own. With ``group`` (one label per pair) a unit
    is one round of a group: the k-th pair of each of the group's clusters, cut at random into
    chunks of at most ``batch_size``. So a unit's clusters are distinct and alike, and a group's
    later rounds are placed independently, in other batches, beside other groups' units.
    """
    order = rng.permutation(len(owner))
    if group is None:
        return [[pair] for pair in order.tolist()]
    frame = pd.DataFrame({"pair": order, "owner": owner[order], "group": group[order]})
    frame["round"] = frame.groupby("owner").cumcount()
    frame["chunk"] = frame.groupby(["group", "round"]).cumcount() // batch_size
    units = [pairs.tolist() for _, pairs in frame.groupby(["group", "round", "chunk"])["pair"]]
    return [units[i] for i in rng.permutation(len(units))]


def cluster_disjoint_batches(
    owner: np.ndarray, batch_size: int, rng: np.random.Generator, group: np.ndarray | None = None
) -> list[np.ndarray]:
    """Shuffle pair indices into batches of at most ``batch_size`` with distinct ``owner`` values.

    Greedy first fit of ``batch_units``: each unit goes to the first open batch with room for it
    that holds none of its clusters, so a big cluster spreads over several batches. With ``group``
    the clusters of one group share batches. Batches of a single pair (no negative) are dropped.
    """
    batches: list[list[int]] = []
    seen: list[set] = []
    first_open = 0
    for unit in batch_units(owner, batch_size, rng, group):
        clusters = owner[unit].tolist()
        b = first_open
        while b < len(batches) and (len(batches[b]) + len(unit) > batch_size or not seen[b].isdisjoint(clusters)):
            b += 1
        if b == len(batches):
            batches.append([])
            seen.append(set())
        batches[b].extend(unit)
        seen[b].update(clusters)
        while first_open < len(batches) and len(batches[first_open]) >= batch_size:
            first_open += 1
    order = rng.permutation(len(batches))
    return [np.asarray(batches[i]) for i in order if len(batches[i]) >= 2]


def neighbour_groups(
    encoder: QuestionEncoder, token_ids: list[list[int]], clusters: list[np.ndarray], batch_size: int, seed: int
) -> np.ndarray:
    """A group label per training cluster: k-means (FAISS) over the clusters' mean vectors under
    the current encoder, with about ``batch_size`` clusters per group.

    Batching a group's pairs together makes a batch's negatives the clusters the encoder finds
    most alike: harder negatives than random ones (and, with label noise, more false negatives,
    which SDML's smoothing is meant to absorb).
    """
    k = len(clusters) // batch_size
    if k < 2:
        return np.zeros(len(clusters), dtype=np.int64)
    rows = np.concatenate(clusters)
    owner = np.repeat(np.arange(len(clusters)), [len(c) for c in clusters])
    was_training = encoder.training
    encoder.eval()
    with torch.inference_mode():
        vectors = encode_ids(encoder, [token_ids[i] for i in rows], chunk_size=512).numpy()
    encoder.train(was_training)
    centroids = np.zeros((len(clusters), vectors.shape[1]), dtype=np.float32)
    np.add.at(centroids, owner, vectors)
    centroids /= np.bincount(owner)[:, None]
    kmeans = faiss.Kmeans(centroids.shape[1], k, niter=10, seed=seed)
    kmeans.train(centroids)
    return kmeans.index.search(centroids, 1)[1].ravel()


def validation_questions(corpus: pd.DataFrame, n: int, seed: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Rows of up to ``n`` questions of val clusters (whole clusters, in cluster order or, with a
    ``seed``, in a random order, so a corpus of several sources is sampled across them) and their
    cluster numbers: what ``qpr.evaluation.metrics.nearest_neighbour_accuracy`` scores. Empty without val clusters."""
    clusters = cluster_members(corpus, "val")
    if seed is not None:
        clusters = [clusters[i] for i in np.random.default_rng(seed).permutation(len(clusters))]
    if not clusters:
        return np.array([], dtype=np.int64), np.array([], dtype=np.int64)
    owner = np.repeat(np.arange(len(clusters)), [len(c) for c in clusters])
    return np.concatenate(clusters)[:n], owner[:n]


def validation_pairs(corpus: pd.DataFrame, n: int, seed: int) -> tuple[list[str], list[str], np.ndarray]:
    """Up to ``n`` positive pairs from val clusters and as many negatives (questions of two
    different val clusters), as (texts a, texts b, labels 1/0)."""
    clusters = cluster_members(corpus, "val")
    if len(clusters) < 2:
        # Negatives pair questions of two different val clusters, so one cluster is not enough.
        raise QPRError(
            f"{len(clusters)} validation cluster(s) (split 'val' with 2+ questions); early stopping on ROC AUC "
            "needs at least 2: give more clusters the 'val' split"
        )
    rng = np.random.default_rng(seed)
    a, b, owner = epoch_pairs(clusters, rng)
    pick = rng.permutation(len(a))[:n]
    a, b, owner = a[pick], b[pick], owner[pick]
    all_rows = np.concatenate(clusters)
    row_owner = np.concatenate([np.full(len(c), i) for i, c in enumerate(clusters)])
    neg = rng.integers(0, len(all_rows), size=len(a))
    clash = row_owner[neg] == owner
    while clash.any():  # redraw the few negatives that hit the anchor's own cluster
        neg[clash] = rng.integers(0, len(all_rows), size=int(clash.sum()))
        clash = row_owner[neg] == owner
    texts = corpus["question"].to_numpy()
    return (
        list(texts[np.concatenate([a, a])]),
        list(texts[np.concatenate([b, all_rows[neg]])]),
        np.concatenate([np.ones(len(a)), np.zeros(len(a))]),
    )
