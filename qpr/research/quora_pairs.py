"""Quora-lite as a pair classification task (the FILM paper's Quora protocol, on our split).

Quora-lite's duplicate pairs fall inside clusters, so each takes its cluster's split. Its
non-duplicate pairs (the BiMPM dev/test negatives) are almost all between questions in no cluster
(split "none"), so they have no split of their own: ``pair_sets`` deals them at random (seeded)
half to val and half to test. A pair touching a training question is left out of both, so no
evaluated pair was seen in training. The positive share is 74% on test (79% on val), where the paper's BiMPM
split tests on balanced pairs (about 36% of its training pairs are duplicates); the majority-class accuracy is
reported beside every result; ``balanced`` samples a set down to half duplicates, the paper's
test as printed.

Two decision rules: a score threshold chosen on val (``threshold_rule``), and FILM's pairwise kNN
(``qpr.systems.film``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from qpr.errors import QPRError


def pair_sets(pairs: pd.DataFrame, corpus: pd.DataFrame, seed: int = 0) -> dict[str, pd.DataFrame]:
    """``{"val": ..., "test": ...}`` frames with columns ``question1, question2, label``."""
    split_of = pd.Series(corpus["split"].to_numpy(), index=corpus["qid"].to_numpy())
    s1 = split_of.reindex(pairs["qid1"]).fillna("none").to_numpy()
    s2 = split_of.reindex(pairs["qid2"]).fillna("none").to_numpy()
    held = np.where(s1 != "none", s1, s2)
    held = np.where((s1 == "train") | (s2 == "train"), "train", held)
    coin = np.random.default_rng(seed).random(len(pairs)) < 0.5
    held = np.where(held == "none", np.where(coin, "val", "test"), held)
    out = {}
    for split in ("val", "test"):
        rows = pairs[held == split]
        out[split] = pd.DataFrame({"question1": rows["question1"].to_numpy(), "question2": rows["question2"].to_numpy(),
                                   "label": rows["is_duplicate"].to_numpy().astype(int)})
        if out[split]["label"].nunique() < 2:
            raise QPRError(f"the {split} pairs hold only one label: no classification to measure")
    return out


def balanced(pairs: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
    """``pairs`` (a ``pair_sets`` frame) with its more frequent label sampled down, at random
    (seeded), to the count of the other: half duplicates, as the BiMPM split's test the FILM paper
    reports on, so the majority class scores 0.5. Row order is kept."""
    counts = pairs["label"].value_counts()
    if len(counts) < 2:
        raise QPRError("the pairs hold only one label: nothing to balance")
    keep = np.ones(len(pairs), dtype=bool)
    larger = pairs["label"].to_numpy() == counts.idxmax()
    rng = np.random.default_rng(seed)
    keep[rng.choice(np.flatnonzero(larger), counts.max() - counts.min(), replace=False)] = False
    return pairs[keep].reset_index(drop=True)


def majority_accuracy(labels: np.ndarray) -> float:
    """Accuracy of always predicting the more frequent label."""
    share = float(np.mean(labels))
    return max(share, 1.0 - share)


def threshold_rule(val_scores: np.ndarray, val_labels: np.ndarray) -> float:
    """The score threshold (similar iff score >= it) with the best val accuracy."""
    order = np.argsort(-val_scores, kind="stable")
    s, y = val_scores[order], np.asarray(val_labels)[order]
    # Predicting the first i as similar: correct = positives among them + negatives after them.
    correct = np.concatenate([[0], np.cumsum(y)]) + (len(y) - y.sum()) - np.concatenate([[0], np.cumsum(1 - y)])
    best = int(np.argmax(correct))
    return float(np.inf) if best == 0 else float(s[best - 1])


def threshold_accuracy(scores: np.ndarray, labels: np.ndarray, threshold: float) -> float:
    return float(np.mean((np.asarray(scores) >= threshold) == np.asarray(labels, dtype=bool)))
