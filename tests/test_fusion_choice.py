"""``qpr.retrieval.fusion_choice``: a fusion chosen for an encoder by a reference embedding's
neighbours, without the corpus's clusters."""

import copy
from dataclasses import replace

import numpy as np
import pytest

from qpr.bundles.bundle import Bundle
from qpr.errors import QPRError
from qpr.retrieval import fusion_choice
from qpr.retrieval.fusion_choice import DENSE, agreement, choose_fusion, reference_neighbours
from qpr.retrieval.hybrid import FEATURES, Fusion, HybridRetriever, fusion_rows
from qpr.retrieval.index import IndexConfig

# A fusion that reads BM25 alone (no weight on the dense distance): what a carried fusion that
# does not fit the encoder at hand can come down to.
BM25_ONLY = Fusion(mean=(0.0,) * len(FEATURES), scale=(1.0,) * len(FEATURES), coef=(0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0), intercept=0.0)


@pytest.fixture(scope="module")
def unit_bundle(tiny_bundle):
    """``tiny_bundle``'s encoder with unit-length outputs: its index's Euclidean order is the
    inner product's, so its own vectors are a reference that agrees with it exactly."""
    encoder = copy.deepcopy(tiny_bundle.encoder)
    encoder.config = replace(encoder.config, normalize=True)
    return Bundle.create(encoder, tiny_bundle.vocab, tiny_bundle.corpus, IndexConfig("Flat"))


def test_reference_neighbours_by_hand():
    vectors = np.array([[1, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0.8, 0.6], [0, 0, 1]], dtype=np.float32)
    # Row 0's nearest other row is its duplicate, whichever of the two the search lists first.
    np.testing.assert_array_equal(reference_neighbours(vectors, np.array([0, 1, 2, 4])), [1, 0, 3, 3])


def test_fusion_rows_take_one_positive_per_query_instead_of_clusters(tiny_bundle):
    dense = tiny_bundle.dense_retriever()
    queries = tiny_bundle.corpus.iloc[[0, 5, 9]]
    features, _, owners = fusion_rows(dense, queries)
    positives = np.array([1, 6, 8])
    _, labels, owners_again = fusion_rows(dense, queries, positives=positives)
    np.testing.assert_array_equal(owners, owners_again)
    assert labels.sum() <= len(queries) and len(labels) == len(features)
    # Each query's label marks its positive's candidate row and nothing else: redo it by hand.
    hybrid = HybridRetriever(dense, BM25_ONLY)
    expected = [rows[rows != own] == positive for (rows, _), own, positive
                in zip(hybrid.candidates(queries["question"].tolist(), 20), [0, 5, 9], positives)]
    np.testing.assert_array_equal(labels, np.concatenate(expected))


def test_a_reference_that_is_the_encoder_itself_never_keeps_a_fusion_that_ignores_it(unit_bundle):
    dense = unit_bundle.dense_retriever()
    vectors = unit_bundle.index.vectors(unit_bundle.corpus["qid"].to_numpy())
    choice = choose_fusion(dense, vectors, BM25_ONLY, sample=200)
    assert set(choice.agreement) == {"carried", "refit", DENSE}
    assert choice.agreement[DENSE] > 0.9  # the dense part is the reference, ties aside
    assert choice.agreement["carried"] < choice.agreement[DENSE]
    assert choice.name != "carried" and choice.agreement[choice.name] == max(choice.agreement.values())
    assert (choice.fusion is None) == (choice.name == DENSE)
    sampled = min(200, len(unit_bundle.corpus))  # half refits, the other half compares
    assert choice.questions == sampled - sampled // 2 and choice.to_dict()["chosen"] == choice.name


def test_the_agreement_is_recomputed_from_the_chosen_retriever(unit_bundle):
    dense = unit_bundle.dense_retriever()
    vectors = unit_bundle.index.vectors(unit_bundle.corpus["qid"].to_numpy())
    rows = np.arange(0, len(unit_bundle.corpus), 3)
    neighbours = reference_neighbours(vectors, rows)
    assert agreement(dense, dense, rows, neighbours) > 0.9
    # A reference whose neighbour is never what the dense part finds first: agreement 0.
    assert agreement(dense, dense, rows, rows) == 0.0


def test_a_reference_of_the_wrong_size_is_refused(tiny_bundle):
    dense = tiny_bundle.dense_retriever()
    with pytest.raises(QPRError, match="one per question"):
        choose_fusion(dense, np.ones((3, 4), dtype=np.float32), BM25_ONLY)


def test_a_refit_that_cannot_be_fitted_leaves_the_carried_fusion_and_the_dense_part(unit_bundle, monkeypatch):
    def cannot_fit(*args, **kwargs):
        raise QPRError("no query among the reference's neighbours has both a paraphrase and a non-paraphrase")

    monkeypatch.setattr(fusion_choice, "fit_rows", cannot_fit)
    vectors = unit_bundle.index.vectors(unit_bundle.corpus["qid"].to_numpy())
    choice = choose_fusion(unit_bundle.dense_retriever(), vectors, BM25_ONLY, sample=60)
    assert set(choice.agreement) == {"carried", DENSE} and choice.name in choice.agreement


def test_a_corpus_too_small_to_compare_on_keeps_the_carried_fusion(tiny_bundle):
    small = Bundle.create(tiny_bundle.encoder, tiny_bundle.vocab, tiny_bundle.corpus.head(3), IndexConfig("Flat"))
    choice = choose_fusion(small.dense_retriever(), np.eye(3, dtype=np.float32), BM25_ONLY)
    assert (choice.name, choice.fusion, choice.agreement, choice.questions) == ("carried", BM25_ONLY, {}, 0)
