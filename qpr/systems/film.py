"""FILM (Fast, Interpretable, Low-rank Metric learning): a low-rank projection of TF-IDF vectors
learned on the Stiefel manifold, and the paper's pairwise kNN decision rule.

A question's TF-IDF vector x (L2-normalised, d dimensions) maps to z = W^T x with W a d x r
matrix with orthonormal columns (W^T W = I: a point of the Stiefel manifold). Similarity is the
inner product s(x, y) = z_x . z_y (``similarity="dot"``, the paper's eq. 1) or the cosine of z_x
and z_y (``"cosine"``, the default). With W orthonormal a rank-128 projection keeps only part of
a TF-IDF vector's norm, so dot products stay far below a margin of 0.2: on Quora-lite the "dot"
objective moved from 0.1615 to 0.1598 in 50 iterations with the gradient vanishing (the paper
rescales by a learned diagonal, in formulas its text loses); the cosine is scale-free and is what
retrieval ranks by. Over triplets (anchor a, positive p, negative n) FILM minimises

    f(W) = mean_t  softplus(g * (margin - s(a, p) + s(a, n))) / g

the triplet hinge loss smoothed by the negative log sigmoid (the paper's step 5; ``sharpness`` g
sets how close to the hinge it is). It is minimised by the Cayley transform (a retraction that
keeps W exactly on the manifold, in the Sherman-Morrison-Woodbury form with 2r x 2r inverses)
with Barzilai-Borwein step sizes and the non-monotone line search (Zhang & Hager) that the paper
names to make BB converge, i.e. Wen & Yin's algorithm. W starts at the top-r right singular
vectors of the training TF-IDF matrix (LSA), which is a point of the manifold.

What is not the paper's: its text loses the formulas of its reformulation through the SVD of the
data matrix and the closed-form diagonal scaling (its steps 1-4), so here W is optimised directly
on St(d, r) with the objective above. Triplets: each training question, a random member of its
cluster, and a negative that is, with probability ``hard_share``, the nearest other-cluster question
under the starting projection (hard negative) and otherwise a random other-cluster question.

Decision rule (the paper's "pairwise kNN"): two sentences of an evaluated set are predicted
similar when either one is among the other's k nearest neighbours (cosine, in the projected space)
within that set; k is chosen on validation pairs.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Sequence

import faiss
import numpy as np
import pandas as pd
from scipy import sparse
from sklearn.decomposition import TruncatedSVD
from sklearn.feature_extraction.text import TfidfVectorizer

from qpr.errors import QPRError
from qpr.retrieval.dense import EncodeRetriever
from qpr.retrieval.lexical import tfidf_vectorizer
from qpr.training.sampling import cluster_members


@dataclass(frozen=True)
class FilmConfig:
    """Rank r, loss margin and sharpness, and the optimiser's budget and line-search constants."""

    rank: int = 128
    margin: float = 0.2
    sharpness: float = 10.0
    max_iter: int = 150
    grad_tol: float = 1e-6
    hard_share: float = 0.5
    similarity: str = "cosine"
    min_df: int = 2
    max_features: int | None = 50_000
    # Non-monotone line search (Zhang & Hager): sufficient decrease rho, backtracking delta,
    # averaging eta; tau0 the first step size.
    rho: float = 1e-4
    delta: float = 0.2
    eta: float = 0.85
    tau0: float = 1e-2
    seed: int = 0

    def __post_init__(self) -> None:
        if self.rank < 1 or self.max_iter < 1:
            raise QPRError(f"FILM needs rank >= 1 and max_iter >= 1: {self}")
        if not 0.0 <= self.hard_share <= 1.0:
            raise QPRError(f"hard_share must be in [0, 1], got {self.hard_share}")


@dataclass
class FilmModel:
    """The fitted vectorizer and projection, and the optimisation's trace."""

    vectorizer: TfidfVectorizer
    projection: np.ndarray  # (d, r), orthonormal columns
    config: FilmConfig
    history: list[dict] = field(default_factory=list)
    seconds: float = 0.0

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """L2-normalised projected vectors (float32) of ``texts``."""
        z = np.asarray(self.vectorizer.transform(texts) @ self.projection, dtype=np.float32)
        norms = np.linalg.norm(z, axis=1, keepdims=True)
        return z / np.maximum(norms, 1e-12)

    def retriever(self, corpus: pd.DataFrame) -> EncodeRetriever:
        return EncodeRetriever(corpus, self.encode, "film")

    def summary(self) -> dict:
        return {"config": asdict(self.config), "iterations": len(self.history) - 1, "seconds": self.seconds,
                "objective_start": self.history[0]["objective"], "objective_end": self.history[-1]["objective"]}


class TripletObjective:
    """f(W) and its Euclidean gradient for triplets of rows of a sparse matrix X (module doc).

    ``similarity`` "dot" is the paper's s = x^T W W^T y; "cosine" divides it by the projected
    norms, so that s reaches +-1 whatever share of a vector the rank-r subspace keeps (module doc).
    """

    def __init__(self, x: sparse.csr_matrix, anchors: np.ndarray, positives: np.ndarray, negatives: np.ndarray,
                 margin: float, sharpness: float, similarity: str = "dot") -> None:
        if similarity not in ("dot", "cosine"):
            raise QPRError(f"unknown similarity {similarity!r}: use 'dot' or 'cosine'")
        self.x, self.xt = x.tocsr(), x.T.tocsr()
        self.a, self.p, self.n = (np.asarray(v, dtype=np.int64) for v in (anchors, positives, negatives))
        self.margin, self.g, self.similarity = margin, sharpness, similarity

    def _terms(self, z: np.ndarray):
        """Per-triplet (violation, d s_ap / d z_a, d s_ap / d z_p, d s_an / d z_a, d s_an / d z_n)."""
        za, zp, zn = z[self.a], z[self.p], z[self.n]
        if self.similarity == "dot":
            s_ap, s_an = (za * zp).sum(1), (za * zn).sum(1)
            return self.margin - s_ap + s_an, zp, za, zn, za
        na, np_, nn_ = (np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12) for v in (za, zp, zn))
        ua, up, un = za / na, zp / np_, zn / nn_
        c_ap, c_an = (ua * up).sum(1, keepdims=True), (ua * un).sum(1, keepdims=True)
        # d cos(u, v) / d z_u = (v_hat - cos * u_hat) / |z_u|
        return (self.margin - c_ap[:, 0] + c_an[:, 0], (up - c_ap * ua) / na, (ua - c_ap * up) / np_,
                (un - c_an * ua) / na, (ua - c_an * un) / nn_)

    def value(self, w: np.ndarray) -> float:
        v = self._terms(self.x @ w)[0]
        return float(np.mean(np.logaddexp(0.0, self.g * v)) / self.g)

    def value_and_grad(self, w: np.ndarray) -> tuple[float, np.ndarray]:
        z = self.x @ w
        v, dap_a, dap_p, dan_a, dan_n = self._terms(z)
        value = float(np.mean(np.logaddexp(0.0, self.g * v)) / self.g)
        c = (0.5 * (1.0 + np.tanh(0.5 * self.g * v)) / len(v))[:, None]  # sigmoid(g v) / T
        # d f / d z per row, then one X^T product: d f / dW = X^T (d f / d Z).
        m = np.zeros_like(z)
        np.add.at(m, self.a, c * (dan_a - dap_a))
        np.add.at(m, self.n, c * dan_n)
        np.add.at(m, self.p, -c * dap_p)
        return value, np.asarray(self.xt @ m)


def cayley_step(w: np.ndarray, grad: np.ndarray, tau: float) -> np.ndarray:
    """W moved by step ``tau`` along the Cayley curve Y = (I + tau/2 A)^-1 (I - tau/2 A) W with
    A = G W^T - W G^T, via Sherman-Morrison-Woodbury (U = [G, W], V = [W, -G]): only a
    2r x 2r system is solved. Y^T Y = W^T W for every tau (A is skew-symmetric)."""
    u = np.hstack([grad, w])
    v = np.hstack([w, -grad])
    r2 = u.shape[1]
    inner = np.eye(r2) + 0.5 * tau * (v.T @ u)
    return w - tau * u @ np.linalg.solve(inner, v.T @ w)


def optimise_stiefel(objective: TripletObjective, w0: np.ndarray, config: FilmConfig, log=None) -> tuple[np.ndarray, list[dict]]:
    """Cayley transform + Barzilai-Borwein steps + non-monotone line search from ``w0``.

    Returns the final W and one history row per iteration (objective, step, gradient norm).
    """
    w = w0.copy()
    f, g = objective.value_and_grad(w)
    direction = g - w @ (g.T @ w)  # A W: the Riemannian gradient the Cayley curve descends
    history = [{"iter": 0, "objective": f, "tau": 0.0, "grad_norm": float(np.linalg.norm(direction))}]
    tau, q, c = config.tau0, 1.0, f
    for it in range(1, config.max_iter + 1):
        slope = -float(np.sum(g * direction))  # d f(Y(tau)) / d tau at tau = 0
        for _ in range(40):
            candidate = cayley_step(w, g, tau)
            f_new = objective.value(candidate)
            if f_new <= c + config.rho * tau * slope:
                break
            tau *= config.delta
        w_old, direction_old = w, direction
        w = candidate
        f, g = objective.value_and_grad(w)
        direction = g - w @ (g.T @ w)
        q_new = config.eta * q + 1.0
        c = (config.eta * q * c + f) / q_new
        q = q_new
        grad_norm = float(np.linalg.norm(direction))
        history.append({"iter": it, "objective": f, "tau": tau, "grad_norm": grad_norm})
        if log:
            log(history[-1])
        if grad_norm < config.grad_tol:
            break
        s, y = w - w_old, direction - direction_old
        sy = abs(float(np.sum(s * y)))
        if sy > 0:  # alternate the two BB step sizes
            tau = float(np.sum(s * s)) / sy if it % 2 else sy / float(np.sum(y * y))
        tau = float(np.clip(tau, 1e-10, 1e10))
    return w, history


def film_triplets(x: sparse.csr_matrix, clusters: list[np.ndarray], start: np.ndarray, hard_share: float,
                  rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(anchor, positive, negative) row triplets: every clustered row, a random cluster-mate, and a
    negative from another cluster, hard (nearest under the ``start`` projection) with probability
    ``hard_share``, else random. Rows index ``x``."""
    rows = np.concatenate(clusters)
    owner = np.repeat(np.arange(len(clusters)), [len(c) for c in clusters])
    owner_of = np.full(x.shape[0], -1)
    owner_of[rows] = owner
    partner = np.concatenate([m[(np.arange(len(m)) + rng.integers(1, len(m), len(m))) % len(m)] for m in clusters])
    negatives = rows[rng.integers(0, len(rows), len(rows))]
    clash = owner_of[negatives] == owner
    while clash.any():
        negatives[clash] = rows[rng.integers(0, len(rows), int(clash.sum()))]
        clash = owner_of[negatives] == owner
    hard = rng.random(len(rows)) < hard_share
    if hard.any():
        z = np.ascontiguousarray(x[rows] @ start, dtype=np.float32)
        faiss.normalize_L2(z)
        index = faiss.IndexFlatIP(z.shape[1])
        index.add(z)
        _, near = index.search(z[hard], 11)
        for position, candidates in zip(np.flatnonzero(hard), near):
            other = [rows[j] for j in candidates if j >= 0 and owner[j] != owner[position]]
            if other:
                negatives[position] = other[0]
    return rows, partner, negatives


def fit_film(corpus: pd.DataFrame, config: FilmConfig = FilmConfig(), log=None) -> FilmModel:
    """Fit TF-IDF and the LSA start on the corpus, then FILM's projection on train-cluster triplets."""
    start_time = time.perf_counter()
    corpus = corpus.reset_index(drop=True)
    clusters = cluster_members(corpus, "train")
    if not clusters:
        raise QPRError("FILM needs training clusters: questions with split 'train' in clusters of 2+")
    texts = corpus["question"].tolist()
    # Vocabulary, IDF and the starting LSA basis come from every corpus question (no labels), as
    # the index holds them all: words seen only outside training clusters still get a direction.
    vectorizer = tfidf_vectorizer(texts, min_df=config.min_df, max_features=config.max_features)
    x = vectorizer.transform(texts).astype(np.float64).tocsr()
    rank = min(config.rank, x.shape[1] - 1)
    svd = TruncatedSVD(rank, algorithm="randomized", random_state=config.seed).fit(x)
    w0, _ = np.linalg.qr(svd.components_.T)  # orthonormal to machine precision
    rng = np.random.default_rng(config.seed)
    a, p, n = film_triplets(x, clusters, w0, config.hard_share, rng)
    objective = TripletObjective(x, a, p, n, config.margin, config.sharpness, config.similarity)
    w, history = optimise_stiefel(objective, w0, config, log)
    return FilmModel(vectorizer, w, config, history, time.perf_counter() - start_time)


def pair_neighbour_ranks(vectors: np.ndarray, first: np.ndarray, second: np.ndarray, k_max: int) -> np.ndarray:
    """For each pair (rows ``first[i]``, ``second[i]`` of ``vectors``), the smaller of the rank of
    each one among the other's nearest neighbours (cosine, self excluded), or k_max + 1 if neither
    is within ``k_max``."""
    z = np.ascontiguousarray(vectors, dtype=np.float32).copy()
    faiss.normalize_L2(z)
    index = faiss.IndexFlatIP(z.shape[1])
    index.add(z)
    _, near = index.search(z, min(k_max + 1, len(z)))

    def rank(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        lists = near[a]
        match = lists == b[:, None]
        position = match.argmax(axis=1)
        # The query itself is usually first in its own list; it is not a neighbour.
        self_before = ((lists == a[:, None]) & (np.arange(lists.shape[1]) < position[:, None])).sum(axis=1)
        found = np.where(match.any(axis=1), position + 1 - self_before, k_max + 1)
        return np.minimum(found, k_max + 1)

    first, second = np.asarray(first), np.asarray(second)
    return np.minimum(rank(first, second), rank(second, first))


def pairwise_knn_accuracy(ranks: np.ndarray, labels: np.ndarray, ks: Sequence[int]) -> dict[int, float]:
    """Accuracy of "similar iff the pair's neighbour rank is at most k", for each k."""
    labels = np.asarray(labels, dtype=bool)
    return {int(k): float(np.mean((ranks <= k) == labels)) for k in ks}
