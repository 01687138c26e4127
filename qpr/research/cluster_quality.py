"""How close a clustering is to the true one: pairwise precision / recall / F1 and B-cubed F1.

Pairwise scores count question pairs: a pair put in one cluster is a true positive when the truth
has it in one cluster too (``sklearn.metrics.cluster.pair_confusion_matrix``); the label errors
are the pairs the two disagree on (false positives: wrongly joined; false negatives: wrongly
apart). B-cubed (Bagga & Baldwin 1998) averages per question: precision is the share of its
predicted cluster that truly belongs with it, recall the share of its true cluster that is in its
predicted cluster; F1 is the harmonic mean of the two averages. A question in no cluster is a
cluster of its own on either side.

``cluster_quality`` compares a corpus' clusters with a clean corpus over the questions of one
split (the training clusters, where annotation corrects labels).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from sklearn.metrics.cluster import contingency_matrix, pair_confusion_matrix

from qpr.errors import QPRError


def _codes(labels) -> np.ndarray:
    """Integer labels; each missing label becomes a cluster of its own."""
    series = pd.Series(labels, dtype="object").reset_index(drop=True)
    missing = series.isna().to_numpy()
    codes = pd.factorize(series)[0].astype(np.int64)
    codes[missing] = codes.max(initial=-1) + 1 + np.arange(missing.sum())
    return codes


def _f1(precision: float, recall: float) -> float:
    return 2 * precision * recall / (precision + recall) if precision + recall else 0.0


def pair_scores(truth, predicted) -> dict:
    """Pairwise precision, recall and F1 of ``predicted`` cluster labels against ``truth`` (one
    label per item, aligned; None/NaN: a cluster of its own), with the counts of wrongly joined
    (``false_positive_pairs``) and wrongly separated (``false_negative_pairs``) pairs. With no pair
    joined on a side, its share is 1.0 (nothing claimed, nothing wrong)."""
    matrix = pair_confusion_matrix(_codes(truth), _codes(predicted)) // 2  # sklearn counts ordered pairs
    tp, fp, fn = int(matrix[1, 1]), int(matrix[0, 1]), int(matrix[1, 0])
    precision = tp / (tp + fp) if tp + fp else 1.0
    recall = tp / (tp + fn) if tp + fn else 1.0
    return {"pair_precision": precision, "pair_recall": recall, "pair_f1": _f1(precision, recall),
            "false_positive_pairs": fp, "false_negative_pairs": fn}


def bcubed(truth, predicted) -> dict:
    """B-cubed precision, recall and F1 of ``predicted`` against ``truth`` (as ``pair_scores``)."""
    true_codes, predicted_codes = _codes(truth), _codes(predicted)
    if not len(true_codes):
        raise QPRError("no items to compare: B-cubed needs at least one labelled item")
    overlap = contingency_matrix(true_codes, predicted_codes, sparse=True).tocoo()
    true_size = np.bincount(true_codes)[overlap.row]
    predicted_size = np.bincount(predicted_codes)[overlap.col]
    # Each cell holds n items that share both clusters; each of them scores n / size.
    precision = float((overlap.data ** 2 / predicted_size).sum() / len(true_codes))
    recall = float((overlap.data ** 2 / true_size).sum() / len(true_codes))
    return {"bcubed_precision": precision, "bcubed_recall": recall, "bcubed_f1": _f1(precision, recall)}


def cluster_quality(clean: pd.DataFrame, corpus: pd.DataFrame, split: str = "train") -> dict:
    """``pair_scores`` and ``bcubed`` of ``corpus``' clusters against ``clean``'s, over the
    questions of ``split`` in ``clean``, plus ``label_errors``: the pairs the two disagree on."""
    items = clean[clean["split"] == split]
    if items.empty:
        raise QPRError(f"the clean corpus has no {split!r} questions to compare clusters on")
    missing = np.setdiff1d(items["qid"].to_numpy(), corpus["qid"].to_numpy())
    if len(missing):
        raise QPRError(f"question {missing[0]} of the clean corpus is missing from the corpus to score")
    predicted = corpus.set_index("qid")["cluster"].reindex(items["qid"]).to_numpy(dtype=object, na_value=None)
    truth = items["cluster"].to_numpy(dtype=object, na_value=None)
    pairs = pair_scores(truth, predicted)
    return pairs | bcubed(truth, predicted) | {"label_errors": pairs["false_positive_pairs"] + pairs["false_negative_pairs"]}


def errors_fixed(before: dict, after: dict) -> float | None:
    """Share of ``before``'s label errors (``cluster_quality``) that ``after`` no longer has;
    negative if it has more. None when there were none to fix."""
    return 1 - after["label_errors"] / before["label_errors"] if before["label_errors"] else None
