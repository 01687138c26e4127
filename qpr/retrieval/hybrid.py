"""Hybrid retrieval: the encoder's and BM25's candidates, re-scored by a linear model fitted on val.

For each query the candidates are the union of the dense top ``depth`` and the BM25 top ``depth``.
Each (query, candidate) pair gets a few features (``FEATURES``) and the score is a logistic
regression fitted on the validation clusters (label: the candidate is in the query's cluster),
or, fitted across several domains' queries, a linear score fitted to rank each query's
candidates (``fit_rows(per_query=True)``).
Rank fusion (RRF) only sees ranks; the fitted scorer sees how far apart and how lexically close
two questions are, and learns how much to trust each side.

The weights are sign-constrained (``SIGNS``): sharing more words or sitting closer never lowers
a score. Unconstrained, the features' overlap let the fit give word overlap a negative weight,
and on Quora-lite a verbatim copy of the query then failed to rank first for 4% of queries.

No feature depends on the query's other candidates (no ranks, no normalisation by the best
hit). In evaluation every query finds itself in the corpus at the top of both lists; with such
features that hit cannot shift how the other questions are scored, as it would for a new query.

The fitted weights live in the bundle's manifest (its ``fusion``), so a bundle carries
the scorer that was fitted for its encoder.

Fitted on one domain's val split, those weights do not carry over to another domain
(docs/OUT_OF_DOMAIN.md). ``RankFusion`` is the fusion for a corpus without clusters to fit on:
weighted reciprocal rank fusion of the two top lists, whose one weight was chosen across several
domains (``bench/out_of_domain.py``); a bundle carries it as ``{"kind": "rrf", ...}`` and
``fused_retriever`` serves whichever fusion a bundle's manifest has.

The retrievers and fitting functions take the ``DenseRetriever`` whose encoder, index and corpus
they read (``Bundle.dense_retriever``), never the bundle.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass, replace
from typing import Sequence

import numpy as np
import pandas as pd
from scipy.optimize import minimize
from scipy.special import expit

from qpr.errors import QPRError
from qpr.evaluation.metrics import query_set
from qpr.retrieval.base import Retriever
from qpr.retrieval.dense import DenseRetriever
from qpr.retrieval.lexical import BM25Retriever
from qpr.model.text import words

FEATURES = ("dense_distance", "bm25", "bm25_share", "jaccard", "query_idf_shared", "candidate_idf_shared", "length_gap")
# The sign each feature's weight may take: closeness and overlap can only raise a score,
# distance and a length gap only lower it.
SIGNS = (-1, 1, 1, 1, 1, 1, -1)
DEPTH = 20
RRF_K = 60  # the constant of Cormack et al. (2009): a rank's weight falls slowly over the top lists


@dataclass(frozen=True)
class Fusion:
    """A fitted linear scorer over ``FEATURES`` (standardised with ``mean`` and ``scale``)."""

    mean: tuple[float, ...]
    scale: tuple[float, ...]
    coef: tuple[float, ...]
    intercept: float
    depth: int = DEPTH
    features: tuple[str, ...] = FEATURES

    def score(self, features: np.ndarray) -> np.ndarray:
        return ((features - np.asarray(self.mean)) / np.asarray(self.scale)) @ np.asarray(self.coef) + self.intercept

    def to_dict(self) -> dict:
        return {key: list(value) if isinstance(value, tuple) else value for key, value in asdict(self).items()}

    @classmethod
    def from_stored(cls, stored: dict | None) -> "Fusion":
        """The fitted scorer a bundle's manifest records (its ``fusion``; None where it has none)."""
        if not stored:
            raise QPRError("this bundle has no fitted fusion: run `python -m qpr fuse BUNDLE` first")
        fusion = cls(**{key: tuple(v) if isinstance(v, list) else v for key, v in stored.items()})
        if fusion.features != FEATURES:
            raise QPRError(f"the bundle's fusion uses features {list(fusion.features)}, this version computes "
                           f"{list(FEATURES)}: refit it with `python -m qpr fuse BUNDLE`")
        return fusion


class LexicalStats:
    """Word sets and inverse document frequencies of a corpus, for the lexical features."""

    def __init__(self, questions: Sequence[str]) -> None:
        self.word_sets = [frozenset(words(q)) for q in questions]
        df = Counter(w for ws in self.word_sets for w in ws)
        n = len(self.word_sets)
        # BM25's idf (always positive); a word no corpus question has gets the rarest word's idf.
        self.idf = {w: math.log(1 + (n - c + 0.5) / (c + 0.5)) for w, c in df.items()}
        self.unseen_idf = math.log(1 + (n - 0.5) / 1.5)

    def weight(self, ws: frozenset) -> float:
        return sum(self.idf.get(w, self.unseen_idf) for w in ws)


class HybridRetriever(Retriever):
    """``dense``'s and BM25's candidates over ``dense``'s corpus, ranked by a fitted ``Fusion``
    (see module doc; a bundle's is ``Fusion.from_stored(bundle.manifest.fusion)``). ``bm25``, one
    already built over the same corpus, is reused."""

    name = "hybrid"
    score = "fused score"

    def __init__(self, dense: DenseRetriever, fusion: Fusion, bm25: BM25Retriever | None = None) -> None:
        self.corpus = dense.corpus
        self.fusion = fusion
        if self.fusion.depth < 1:
            raise QPRError(f"the fusion's depth must be at least 1, got {self.fusion.depth}")
        if bm25 is not None and not np.array_equal(bm25.corpus["qid"].to_numpy(), self.corpus["qid"].to_numpy()):
            # Scores are read by corpus row: another corpus or row order would score the wrong questions.
            raise QPRError("the BM25 retriever given was built on another corpus than the dense retriever's")
        self.dense = dense
        self.bm25 = bm25 or BM25Retriever(dense.corpus)
        self.lexical = LexicalStats(self.corpus["question"].tolist())
        self._qids = self.corpus["qid"].to_numpy()

    def candidates(self, queries: Sequence[str], depth: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per query: (corpus rows of its candidates, their ``FEATURES`` matrix)."""
        vectors = self.dense.encode(queries)
        distances, qids = self.dense.index.search(vectors, depth)
        lists = []  # per query: candidate rows, their index distances (dense hits only), BM25 scores
        for text, qid_row, dist_row in zip(queries, qids, distances):
            dense_rows = self.dense.rows_of(qid_row[qid_row >= 0])
            scores = self.bm25.scores(text)  # one BM25 pass gives the top rows and every candidate's score
            rows = np.concatenate([dense_rows, np.setdiff1d(_top(scores, depth), dense_rows)])
            lists.append((rows, dist_row[qid_row >= 0], scores[rows]))
        # BM25-only candidates have no search distance: score them with their indexed vectors.
        extra_rows = np.unique(np.concatenate([rows[len(dist):] for rows, dist, _ in lists]))
        extra_vectors = self.dense.index.vectors(self._qids[extra_rows]) if len(extra_rows) else None
        out = []
        for text, vector, (rows, dist, bm25) in zip(queries, vectors, lists):
            extra = rows[len(dist):]
            if len(extra):
                dist = np.concatenate([dist, ((extra_vectors[np.searchsorted(extra_rows, extra)] - vector) ** 2).sum(axis=1)])
            out.append((rows, self.features(text, rows, dist, bm25)))
        return out

    def features(self, text: str, rows: np.ndarray, dense_distance: np.ndarray, bm25: np.ndarray) -> np.ndarray:
        """The ``FEATURES`` of the corpus questions at ``rows`` for the query ``text``, given their
        dense distances and BM25 scores."""
        query_words = frozenset(words(text))
        query_weight = max(self.lexical.weight(query_words), 1e-9)
        table = np.empty((len(rows), len(FEATURES)))
        for i, row in enumerate(rows):
            candidate = self.lexical.word_sets[row]
            shared = self.lexical.weight(query_words & candidate)
            union = len(query_words | candidate)
            table[i] = (
                dense_distance[i], bm25[i], bm25[i] / query_weight,
                len(query_words & candidate) / union if union else 0.0,
                shared / query_weight, shared / max(self.lexical.weight(candidate), 1e-9),
                abs(len(query_words) - len(candidate)) / max(len(query_words), len(candidate), 1),
            )
        return table

    def search_ids(self, queries: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        # Enough candidates from each side that k results exist even if the two lists coincide.
        depth = max(self.fusion.depth, k)
        distances = np.full((len(queries), k), np.inf)
        qids = np.full((len(queries), k), -1, dtype=np.int64)
        for i, (rows, table) in enumerate(self.candidates(queries, depth)):
            score = self.fusion.score(table)
            best = np.argsort(-score, kind="stable")[:k]
            distances[i, : len(best)] = -score[best]
            qids[i, : len(best)] = self._qids[rows[best]]
        return distances, qids


@dataclass(frozen=True)
class RankFusion:
    """Weighted reciprocal rank fusion: a candidate scores ``dense_weight / (k + its dense rank)
    + (1 - dense_weight) / (k + its BM25 rank)`` over the two top-``depth`` lists (ranks from 1;
    a list it is not in adds nothing). Only ranks count, so nothing in it is tied to one domain's
    distances or word statistics."""

    dense_weight: float
    k: int = RRF_K
    depth: int = DEPTH
    kind: str = "rrf"

    def __post_init__(self) -> None:
        if not 0.0 <= self.dense_weight <= 1.0 or self.k < 0 or self.depth < 1:
            raise QPRError(f"a rank fusion needs dense_weight in [0, 1], k >= 0 and depth >= 1, got {self}")

    def to_dict(self) -> dict:
        return asdict(self)


def rank_fuse(dense_qids: np.ndarray, bm25_qids: np.ndarray, fusion: RankFusion, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``(distances, qids)`` of the top ``k`` of each row's two ranked qid lists (-1: no hit)
    under ``fusion``; distance is minus the fused score. Ties keep the dense order first."""
    distances = np.full((len(dense_qids), k), np.inf)
    qids = np.full((len(dense_qids), k), -1, dtype=np.int64)
    weights = (fusion.dense_weight, 1.0 - fusion.dense_weight)
    for i, lists in enumerate(zip(dense_qids, bm25_qids)):
        scores: dict[int, float] = {}
        for weight, ranked in zip(weights, lists):
            for rank, qid in enumerate(ranked[ranked >= 0][: fusion.depth], start=1):
                scores[int(qid)] = scores.get(int(qid), 0.0) + weight / (fusion.k + rank)
        best = sorted(scores.items(), key=lambda item: -item[1])[:k]  # stable: dense hits were added first
        qids[i, : len(best)] = [qid for qid, _ in best]
        distances[i, : len(best)] = [-score for _, score in best]
    return distances, qids


class RankFusionRetriever(Retriever):
    """``dense``'s and BM25's top lists over ``dense``'s corpus merged by a ``RankFusion`` (module
    doc); ``bm25``, one already built over the same corpus, is reused."""

    name = "rrf"

    def __init__(self, dense: DenseRetriever, fusion: RankFusion, bm25: BM25Retriever | None = None) -> None:
        self.corpus, self.fusion = dense.corpus, fusion
        self.dense = dense
        self.bm25 = bm25 or BM25Retriever(dense.corpus)

    def search_ids(self, queries: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        depth = max(self.fusion.depth, k)
        _, dense = self.dense.search_ids(queries, depth)
        _, bm25 = self.bm25.search_ids(queries, depth)
        return rank_fuse(dense, bm25, replace(self.fusion, depth=depth), k)


def fused_retriever(dense: DenseRetriever, stored: dict, bm25: BM25Retriever | None = None) -> Retriever:
    """The retriever of the fusion a bundle's manifest carries (``stored``, its ``fusion``) over its
    ``dense`` retriever: rank fusion or the fitted hybrid (QPRError if it is empty)."""
    if stored.get("kind") == "rrf":
        return RankFusionRetriever(dense, RankFusion(**stored), bm25)
    return HybridRetriever(dense, Fusion.from_stored(stored), bm25)


def _top(scores: np.ndarray, depth: int) -> np.ndarray:
    """Rows of the ``depth`` highest positive scores (a score of 0 shares no word with the query)."""
    top = np.argpartition(-scores, min(depth, len(scores) - 1))[:depth]
    return top[scores[top] > 0]


def fit_fusion(dense: DenseRetriever, split: str = "val", depth: int = DEPTH, bm25: BM25Retriever | None = None,
               max_queries: int | None = None, seed: int = 0) -> Fusion:
    """Fit the hybrid scorer over ``dense`` on the ``split`` queries of its corpus (never test)."""
    if split == "test":
        raise QPRError("the fusion is fitted on val (or train) queries; test is for measuring it")
    if max_queries is not None and max_queries < 1:
        raise QPRError(f"max_queries must be at least 1, got {max_queries}")
    queries = query_set(dense.corpus, split)
    if max_queries is not None and len(queries) > max_queries:
        queries = queries.sample(max_queries, random_state=seed)
    return fit_rows([fusion_rows(dense, queries, depth, bm25)], depth, f"the {split} queries' candidates")


def fusion_rows(dense: DenseRetriever, queries: pd.DataFrame, depth: int = DEPTH, bm25: BM25Retriever | None = None,
                positives: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What a fusion over ``dense`` is fitted on: the ``FEATURES`` of each query's candidates
    (``queries``: rows of ``dense``'s corpus, with qid and cluster), whether each candidate is in
    the query's cluster, and the query's position in ``queries`` (one array each, a row per
    candidate). ``positives``, one corpus row per query, stands in for the clusters where there
    are none (``qpr.retrieval.fusion_choice``): that row is the query's one paraphrase.

    Each query's own row is left out of its candidates: it is trivially the nearest on both
    sides and would teach the scorer nothing about paraphrases.
    """
    if depth < 1:
        raise QPRError(f"depth must be at least 1, got {depth}")
    # Unfitted placeholder weights: only the candidate and feature machinery is used here.
    placeholder = Fusion(mean=(0.0,) * len(FEATURES), scale=(1.0,) * len(FEATURES), coef=(0.0,) * len(FEATURES),
                         intercept=0.0, depth=depth)
    hybrid = HybridRetriever(dense, placeholder, bm25)
    own_rows = dense.rows_of(queries["qid"].to_numpy())
    cluster = dense.corpus["cluster"].to_numpy(dtype=object, na_value=None)
    tables, labels, owners = [np.empty((0, len(FEATURES)))], [np.empty(0, dtype=bool)], [np.empty(0, dtype=np.int64)]
    for position, (own_row, own_cluster, (rows, table)) in enumerate(zip(
        own_rows, queries["cluster"].to_numpy(dtype=object, na_value=None),
        hybrid.candidates(queries["question"].tolist(), depth),
    )):
        keep = rows != own_row
        tables.append(table[keep])
        labels.append(cluster[rows[keep]] == own_cluster if positives is None else rows[keep] == positives[position])
        owners.append(np.full(int(keep.sum()), position))
    return np.concatenate(tables), np.concatenate(labels), np.concatenate(owners)


def fit_rows(parts: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]], depth: int = DEPTH, what: str = "the candidates",
             per_query: bool = False) -> Fusion:
    """The fusion fitted on (features, labels, owners) pooled from ``parts`` (``fusion_rows``;
    several corpora fit one fusion meant for corpora it never saw: ``bench/out_of_domain.py``).

    By default a logistic regression over all candidates: is this candidate a paraphrase?
    ``per_query`` fits what the scorer is used for instead, ranking each query's candidates: a
    softmax over them, the paraphrases its targets (a conditional logit), so a level that moves
    all of one query's candidates (how high BM25 scores run for its words, how far apart a
    domain's questions sit) weighs nothing; its intercept is 0, as a rank has none. QPRError
    when the candidates are all paraphrases or none are (``per_query``: when no query has both)."""
    x = np.concatenate([features for features, _, _ in parts])
    y = np.concatenate([labels for _, labels, _ in parts])
    if y.all() or not y.any():
        raise QPRError(f"{what} are all {'positive' if y.all() else 'negative'}: "
                       "a fusion needs both paraphrases and non-paraphrases among them")
    mean, scale = x.mean(axis=0), x.std(axis=0) + 1e-9
    if per_query:  # a query is its part and its owner there (owners count from 0 in every part)
        part = np.concatenate([np.full(len(owners), i) for i, (_, _, owners) in enumerate(parts)])
        owner = np.concatenate([owners for _, _, owners in parts])
        coef, intercept = _signed_conditional_logit((x - mean) / scale, y, np.column_stack([part, owner]), what), 0.0
    else:
        coef, intercept = _signed_logistic_regression((x - mean) / scale, y.astype(float))
    return Fusion(tuple(float(v) for v in mean), tuple(float(v) for v in scale), tuple(float(v) for v in coef), intercept, depth)


def _bounds() -> list[tuple[float | None, float | None]]:
    """L-BFGS-B's bounds that keep each weight's sign in ``SIGNS``."""
    return [(None, 0.0) if sign < 0 else (0.0, None) for sign in SIGNS]


def _signed_conditional_logit(x: np.ndarray, y: np.ndarray, key: np.ndarray, what: str) -> np.ndarray:
    """Weights of a softmax over each group's rows (a group: the rows of one ``key`` row) that
    puts its mass on the group's positives, L2-regularised as ``_signed_logistic_regression``,
    signs as ``SIGNS``. Groups without both a positive and a negative say nothing about ranking
    and are left out."""
    group = np.unique(key, axis=0, return_inverse=True)[1].ravel()
    positives, sizes = np.bincount(group, weights=y), np.bincount(group)
    informative = ((positives > 0) & (positives < sizes))[group]
    if not informative.any():
        raise QPRError(f"no query among {what} has both a paraphrase and a non-paraphrase among its candidates: "
                       "a fusion fitted per query needs some")
    x, y = x[informative], y[informative].astype(float)
    group = np.unique(group[informative], return_inverse=True)[1]

    def loss(w: np.ndarray) -> tuple[float, np.ndarray]:
        s = x @ w
        top = np.full(group.max() + 1, -np.inf)
        np.maximum.at(top, group, s)
        e = np.exp(s - top[group])  # shifted by each group's largest score: no overflow
        every, mine = np.bincount(group, weights=e), np.bincount(group, weights=e * y)
        value = (np.log(every) - np.log(mine)).sum() + 0.5 * w @ w
        return value, x.T @ (e / every[group] - e * y / mine[group]) + w

    fitted = minimize(loss, np.zeros(x.shape[1]), jac=True, method="L-BFGS-B", bounds=_bounds())
    if not fitted.success:
        raise QPRError(f"fitting the fusion did not converge ({fitted.message}); refit with more queries")
    return fitted.x


def _signed_logistic_regression(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
    """L2-regularised logistic regression (the penalty of scikit-learn's default C=1) whose
    weights keep the signs in ``SIGNS``. scikit-learn cannot bound coefficients, so the loss is
    minimised with SciPy's L-BFGS-B, which can."""

    def loss(params: np.ndarray) -> tuple[float, np.ndarray]:
        w, b = params[:-1], params[-1]
        z = x @ w + b
        residual = expit(z) - y
        value = np.logaddexp(0.0, z).sum() - y @ z + 0.5 * w @ w
        return value, np.append(x.T @ residual + w, residual.sum())

    fitted = minimize(loss, np.zeros(x.shape[1] + 1), jac=True, method="L-BFGS-B", bounds=_bounds() + [(None, None)])
    if not fitted.success:
        raise QPRError(f"fitting the fusion did not converge ({fitted.message}); refit with more val queries")
    return fitted.x[:-1], float(fitted.x[-1])
