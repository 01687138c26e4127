"""Retrieval metrics under the paper's protocol, pair ROC AUC, and index recall.

Protocol (``../shared/data/README.md``): every question of a ``split`` cluster is a query against
the whole corpus; the query itself is removed from its results; a hit is a retrieved question of
the same cluster; H@1, H@10 and MRR are computed over the top 20.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.stats import bootstrap
from sklearn.metrics import roc_auc_score

from qpr.model.encoder import QuestionEncoder, encode_texts
from qpr.errors import QPRError
from qpr.model.text import Vocabulary

TOP = 20


def rank_metrics(hits: np.ndarray) -> dict:
    """H@1, H@10 and MRR of a ``(queries, TOP)`` boolean matrix (True where rank r is a hit)."""
    hits = np.asarray(hits, dtype=bool)
    first = np.where(hits.any(axis=1), hits.argmax(axis=1) + 1, 0)
    reciprocal = np.where(first > 0, 1.0 / np.maximum(first, 1), 0.0)
    return {
        "H1": float(hits[:, :1].any(axis=1).mean()),
        "H10": float(hits[:, :10].any(axis=1).mean()),
        "MRR": float(reciprocal.mean()),
        "queries": int(len(hits)),
    }


def query_set(corpus: pd.DataFrame, split: str) -> pd.DataFrame:
    """The evaluation queries: questions of ``split`` that are in a cluster."""
    queries = corpus[(corpus["split"] == split) & corpus["cluster"].notna()]
    if queries.empty:
        raise QPRError(f"no queries: the corpus has no clustered questions with split {split!r}")
    return queries


def ranked_qids(retriever, queries: pd.DataFrame, batch: int = 4096) -> np.ndarray:
    """``(len(queries), TOP)`` qids that ``retriever`` (anything with ``search_ids``) ranks first for
    each query, best first, the query itself removed; -1 pads a shorter list. Kept apart from
    ``hits_of`` so that ranked lists can be fused before they are scored (bench/out_of_domain.py)."""
    out = np.full((len(queries), TOP), -1, dtype=np.int64)
    texts, qids = queries["question"].tolist(), queries["qid"].to_numpy()
    for start in range(0, len(texts), batch):
        _, found = retriever.search_ids(texts[start : start + batch], TOP + 1)
        for row, (own, retrieved) in enumerate(zip(qids[start : start + batch], found)):
            retrieved = retrieved[(retrieved != own) & (retrieved >= 0)][:TOP]
            out[start + row, : len(retrieved)] = retrieved
    return out


def hits_of(qids: np.ndarray, corpus: pd.DataFrame, queries: pd.DataFrame) -> np.ndarray:
    """Where each of ``ranked_qids``'s lists holds a question of its query's cluster (a boolean
    matrix of the same shape; padding is never a hit)."""
    cluster_of = pd.Series(corpus["cluster"].astype(object).to_numpy(), index=corpus["qid"].to_numpy())
    found = cluster_of.reindex(qids.ravel()).to_numpy().reshape(qids.shape)
    return (found == queries["cluster"].astype(object).to_numpy()[:, None]) & (qids >= 0)


def hit_matrix(retriever, corpus: pd.DataFrame, queries: pd.DataFrame, batch: int = 4096) -> np.ndarray:
    """``(len(queries), TOP)`` hits of ``retriever`` (anything with ``search_ids``), self removed."""
    return hits_of(ranked_qids(retriever, queries, batch), corpus, queries)


def evaluate(retriever, corpus: pd.DataFrame, split: str = "test") -> dict:
    """H@1 / H@10 / MRR (top 20) of ``retriever`` over the ``split`` queries of ``corpus``."""
    queries = query_set(corpus, split)
    return rank_metrics(hit_matrix(retriever, corpus, queries))


def h1_change(before: np.ndarray, after: np.ndarray, seed: int = 0) -> tuple[float, float, float]:
    """H@1 of ``after`` minus that of ``before`` (``hit_matrix`` results over the same queries, in
    the same order) and its 95% confidence interval by a paired bootstrap over the queries
    (``scipy.stats.bootstrap``, percentile): how much of a change the number of queries can tell
    from luck."""
    first_before, first_after = before[:, 0].astype(float), after[:, 0].astype(float)
    change = float(first_after.mean() - first_before.mean())
    if np.array_equal(first_before, first_after):
        return change, change, change  # no query changed: nothing to resample
    interval = bootstrap((first_before, first_after), lambda b, a, axis: a.mean(axis=axis) - b.mean(axis=axis),
                         paired=True, vectorized=True, n_resamples=2000, confidence_level=0.95, method="percentile",
                         random_state=np.random.default_rng(seed)).confidence_interval
    return change, float(interval.low), float(interval.high)


def pair_auc(encoder: QuestionEncoder, vocab: Vocabulary, a: list[str], b: list[str], labels: np.ndarray) -> float:
    """ROC AUC of negative squared distance as a same-meaning score over labelled pairs."""
    va, vb = encode_texts(encoder, vocab, a), encode_texts(encoder, vocab, b)
    return float(roc_auc_score(labels, -((va - vb) ** 2).sum(axis=1)))


def nearest_neighbour_accuracy(vectors: np.ndarray, owner: np.ndarray) -> float:
    """Share of the unit-length rows of ``vectors`` whose nearest other row has the same ``owner``
    (cluster): the early-stopping score of encoders for which random-negative ROC AUC is too easy."""
    scores = vectors @ vectors.T
    np.fill_diagonal(scores, -np.inf)
    return float(np.mean(owner[scores.argmax(axis=1)] == owner))


def index_recall(approximate, exact, queries: np.ndarray, k: int = TOP) -> float:
    """Mean share of the exact top-``k`` ids that the approximate index also returns (each
    anything with ``search(vectors, k)`` -> (distances, ids): a ``VectorIndex``)."""
    _, want = exact.search(queries, k)
    _, got = approximate.search(queries, k)
    return float(np.mean([len(np.intersect1d(w, g)) / len(w) for w, g in zip(want, got)]))
