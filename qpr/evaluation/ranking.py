"""Metrics of the other papers' protocols: reranking (P@k, MAP, MRR) and AUC(0.05).

Reranking (Smolyakov & Srikant, "Neural Approaches to Question Retrieval"; SemEval-2016 Task 3B):
each query comes with a short list of candidates, some relevant; a system orders them and is
scored by precision at 1 and 5, average precision (mean over queries: MAP) and reciprocal rank
of the first relevant candidate (MRR). ``rerank_metrics`` takes one boolean relevance list per
query *in the system's order*; ``order_by_scores`` turns scores into that order.

A query whose candidates hold no relevant one has no defined AP or reciprocal rank. With
``empty="zero"`` (default) such queries stay in the mean and score 0 on every metric: that is
what SemEval-2016's scorer does (with it the search engine's order on the dev part scores MAP
0.7135 and MRR 0.7667, the task's published IR baseline). ``empty="skip"`` leaves them out. Both
count them in ``queries_without_relevant``. The AskUbuntu paper's text does not say which it used.

AUC(0.05) (the same paper's transfer metric): the area under the ROC curve from false positive
rate 0 to 0.05, divided by 0.05 so that a perfect ranking scores 1 ("reported on a scale of
0-1"). That is the plain normalised partial area. scikit-learn's ``roc_auc_score(max_fpr=0.05)``
is a different number: it applies the McClish correction, which maps a random ranking to 0.5
instead of 0.025. ``auc_at_fpr(..., mcclish=True)`` gives sklearn's value for comparison; the
protocol uses the plain one (``tests/test_ranking_metrics.py`` checks both by hand).
"""

from __future__ import annotations

from typing import Literal, Sequence

import numpy as np
from sklearn.metrics import roc_auc_score, roc_curve

from qpr.errors import QPRError


def order_by_scores(scores: Sequence[float]) -> np.ndarray:
    """Candidate positions from highest to lowest score; ties keep the given (input) order."""
    return np.argsort(-np.asarray(scores, dtype=float), kind="stable")


def average_precision(relevant: Sequence[bool]) -> float:
    """Mean of the precision at each relevant candidate's rank (0 if none is relevant)."""
    rel = np.asarray(relevant, dtype=bool)
    if not rel.any():
        return 0.0
    ranks = np.flatnonzero(rel) + 1
    return float(np.mean(np.arange(1, len(ranks) + 1) / ranks))


def reciprocal_rank(relevant: Sequence[bool]) -> float:
    """1 / rank of the first relevant candidate (0 if none is relevant)."""
    rel = np.asarray(relevant, dtype=bool)
    return float(1.0 / (rel.argmax() + 1)) if rel.any() else 0.0


def precision_at(relevant: Sequence[bool], k: int) -> float:
    """Share of the first ``k`` ranks holding a relevant candidate (a list shorter than k counts
    the missing ranks as not relevant)."""
    return float(np.asarray(relevant, dtype=bool)[:k].sum() / k)


def rerank_metrics(ranked_relevance: Sequence[Sequence[bool]], empty: Literal["skip", "zero"] = "zero") -> dict:
    """P@1, P@5, MAP and MRR over queries, each given as relevance flags in ranked order."""
    if empty not in ("skip", "zero"):
        raise QPRError(f"unknown empty-query policy {empty!r}: use 'skip' or 'zero'")
    lists = [np.asarray(r, dtype=bool) for r in ranked_relevance]
    without = sum(not r.any() for r in lists)
    kept = [r for r in lists if r.any()] if empty == "skip" else lists
    if not kept:
        raise QPRError("no query has a relevant candidate: reranking metrics are undefined")
    return {
        "P@1": float(np.mean([precision_at(r, 1) for r in kept])),
        "P@5": float(np.mean([precision_at(r, 5) for r in kept])),
        "MAP": float(np.mean([average_precision(r) for r in kept])),
        "MRR": float(np.mean([reciprocal_rank(r) for r in kept])),
        "queries": len(kept),
        "queries_without_relevant": without,
    }


def rerank_by_scores(scores: Sequence[Sequence[float]], relevance: Sequence[Sequence[bool]], **kwargs) -> dict:
    """``rerank_metrics`` of each query's candidates ordered by ``scores`` (higher first)."""
    if len(scores) != len(relevance):
        raise QPRError(f"{len(scores)} score lists for {len(relevance)} queries")
    ranked = []
    for s, r in zip(scores, relevance):
        if len(s) != len(r):
            raise QPRError(f"a query has {len(s)} scores for {len(r)} candidates")
        ranked.append(np.asarray(r, dtype=bool)[order_by_scores(s)])
    return rerank_metrics(ranked, **kwargs)


def auc_at_fpr(labels: Sequence[int], scores: Sequence[float], max_fpr: float = 0.05, mcclish: bool = False) -> float:
    """Area under the ROC curve up to false positive rate ``max_fpr``, divided by ``max_fpr``.

    Tied scores give the diagonal ROC segment (as sklearn's ``roc_curve``); the curve is cut at
    ``max_fpr`` by linear interpolation. ``mcclish=True`` returns scikit-learn's standardised
    partial AUC instead (``roc_auc_score(max_fpr=...)``), a different scale (module docstring).
    """
    labels = np.asarray(labels)
    if not 0.0 < max_fpr <= 1.0:
        raise QPRError(f"max_fpr must be in (0, 1], got {max_fpr}")
    if len(np.unique(labels)) != 2:
        raise QPRError("AUC needs both positive and negative labels")
    if mcclish:
        return float(roc_auc_score(labels, scores, max_fpr=max_fpr))
    fpr, tpr, _ = roc_curve(labels, scores, drop_intermediate=False)
    stop = np.searchsorted(fpr, max_fpr, side="right")
    x = np.append(fpr[:stop], max_fpr)
    y = np.append(tpr[:stop], np.interp(max_fpr, fpr, tpr))
    return float(np.trapezoid(y, x) / max_fpr)
