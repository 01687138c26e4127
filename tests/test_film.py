import numpy as np
import pytest
from scipy import sparse

from qpr.evaluation.metrics import evaluate
from qpr.systems.film import (
    FilmConfig,
    TripletObjective,
    cayley_step,
    fit_film,
    optimise_stiefel,
    pair_neighbour_ranks,
    pairwise_knn_accuracy,
)


def _orthonormal(rng, d, r):
    return np.linalg.qr(rng.normal(size=(d, r)))[0]


def test_cayley_step_stays_on_the_stiefel_manifold_for_any_step():
    rng = np.random.default_rng(0)
    w = _orthonormal(rng, 40, 5)
    g = rng.normal(size=(40, 5))
    for tau in (1e-3, 0.5, 10.0, 1e3):
        y = cayley_step(w, g, tau)
        assert np.allclose(y.T @ y, np.eye(5), atol=1e-9)
        assert not np.allclose(y, w)
    assert np.allclose(cayley_step(w, g, 0.0), w)


def test_cayley_curve_descends_along_the_gradient():
    rng = np.random.default_rng(1)
    x = sparse.random(60, 30, density=0.2, random_state=1, format="csr")
    a, p, n = rng.integers(0, 60, (3, 200))
    objective = TripletObjective(x, a, p, n, margin=0.2, sharpness=10.0)
    w = _orthonormal(rng, 30, 4)
    f, g = objective.value_and_grad(w)
    # A small enough step along the Cayley curve lowers the objective.
    assert objective.value(cayley_step(w, g, 1e-3)) < f
    # The gradient matches finite differences.
    e = np.zeros_like(w)
    e[3, 2] = 1e-6
    assert (objective.value(w + e) - objective.value(w - e)) / 2e-6 == pytest.approx(g[3, 2], rel=1e-4, abs=1e-9)


def test_optimiser_decreases_the_objective_and_keeps_the_projection_orthonormal():
    rng = np.random.default_rng(2)
    # Two latent classes: a triplet's anchor and positive share one, the negative has the other.
    d, half = 50, 25
    rows = []
    for cls in (0, 1):
        for _ in range(40):
            v = np.zeros(d)
            v[rng.choice(np.arange(cls * half, (cls + 1) * half), 3, replace=False)] = 1
            v[rng.choice(d, 3, replace=False)] += 1  # shared noise words
            rows.append(v / np.linalg.norm(v))
    x = sparse.csr_matrix(np.array(rows))
    anchors = rng.integers(0, 80, 400)
    positives = (anchors // 40) * 40 + rng.integers(0, 40, 400)
    negatives = (1 - anchors // 40) * 40 + rng.integers(0, 40, 400)
    objective = TripletObjective(x, anchors, positives, negatives, margin=0.2, sharpness=10.0)
    w0 = _orthonormal(rng, d, 3)
    w, history = optimise_stiefel(objective, w0, FilmConfig(rank=3, max_iter=200))
    values = [h["objective"] for h in history]
    assert values[-1] < 0.7 * values[0]
    # BB steps with the non-monotone search converge: the Riemannian gradient vanishes.
    assert history[-1]["grad_norm"] < 1e-5 < history[0]["grad_norm"]
    # Non-monotone search: never above the starting value, and the running reference decreases.
    assert max(values) <= values[0] + 1e-12
    assert np.allclose(w.T @ w, np.eye(3), atol=1e-8)


def test_pairwise_knn_ranks_and_accuracy_by_hand():
    vectors = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9], [-1.0, 0.05]])
    ranks = pair_neighbour_ranks(vectors, np.array([0, 0, 2, 4]), np.array([1, 2, 3, 0]), k_max=3)
    # 0 and 1 are each other's nearest; 0 and 2: 2 is 3rd nearest of 0 (after 1, 3); 4 and 0: 0 is 4's
    # 4th (beyond k_max), 4 is 0's 4th too -> k_max + 1.
    assert ranks.tolist() == [1, 3, 1, 4]
    acc = pairwise_knn_accuracy(ranks, np.array([1, 0, 1, 0]), ks=[1, 3])
    assert acc == {1: 1.0, 3: 0.75}


def test_fit_film_on_synthetic_clusters_lowers_the_objective_and_retrieves(tiny_corpus):
    model = fit_film(tiny_corpus, FilmConfig(rank=8, max_iter=40, min_df=1))
    assert model.history[-1]["objective"] < model.history[0]["objective"]
    assert np.allclose(model.projection.T @ model.projection, np.eye(model.projection.shape[1]), atol=1e-8)
    vectors = model.encode(["how do i learn chess ?"])
    assert vectors.shape == (1, 8) and np.isclose(np.linalg.norm(vectors), 1.0, atol=1e-5)
    # Template words are shared by all clusters, so only the topic word separates them: FILM learns
    # that for the training clusters (test topics are words no triplet has, which rank 8 cannot keep).
    assert evaluate(model.retriever(tiny_corpus), tiny_corpus, "train")["H1"] == 1.0
    start = fit_film(tiny_corpus, FilmConfig(rank=8, max_iter=1, min_df=1))
    assert evaluate(start.retriever(tiny_corpus), tiny_corpus, "train")["H1"] < 0.5


@pytest.mark.parametrize("similarity", ["dot", "cosine"])
def test_gradient_matches_finite_differences_for_both_similarities(similarity):
    rng = np.random.default_rng(3)
    x = sparse.random(50, 20, density=0.3, random_state=3, format="csr")
    a, p, n = rng.integers(0, 50, (3, 150))
    objective = TripletObjective(x, a, p, n, margin=0.2, sharpness=5.0, similarity=similarity)
    w = _orthonormal(rng, 20, 4)
    _, g = objective.value_and_grad(w)
    for i, j in [(0, 0), (7, 3), (19, 1)]:
        e = np.zeros_like(w)
        e[i, j] = 1e-6
        numeric = (objective.value(w + e) - objective.value(w - e)) / 2e-6
        assert numeric == pytest.approx(g[i, j], rel=1e-4, abs=1e-8)
