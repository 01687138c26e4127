"""The constrained clustering with a model (issue 57): a linked question goes where its links and
the model point, one link merges two whole clusters only when the model finds them alike as
wholes, a question voted out is re-placed or left in no cluster, and the threshold is fitted on
the judged pairs."""

from __future__ import annotations

import numpy as np
import pandas as pd

from annotations.constraints import constrained_clusters
from annotations.pair_scores import DEFAULT_THRESHOLD, PairScorer, fit_threshold
from annotations.purity import cluster_purity
from annotations.repositories.review import ADJUDICATION_COLUMNS
from qpr.retrieval.calibration import Calibration
from tests.test_annotations_merge import hand_corpus

NONE = pd.DataFrame(columns=ADJUDICATION_COLUMNS)
FAR = {q: (100.0 + 10 * q, 50.0) for q in range(1, 13)}  # every question far from every other, unless placed


def scorer(**placed) -> PairScorer:
    """A model that puts question ``q<n>`` at the given 2-d point; p = sigmoid(2 - squared distance)."""
    points = FAR | {int(name[1:]): point for name, point in placed.items()}
    return PairScorer(np.arange(1, 13), np.array([points[q] for q in range(1, 13)]), Calibration(1.0, 2.0, 0))


def votes(*rows) -> pd.DataFrame:
    return pd.DataFrame([(i, q, c, label) for i, (q, c, label) in enumerate(rows, 1)],
                        columns=["id", "query_qid", "candidate_qid", "label"])


def clusters(result) -> list:
    return [None if pd.isna(c) else c for c in result.corpus["cluster"]]


def test_a_linked_question_goes_where_the_model_points_not_just_to_the_larger_cluster():
    judged = votes((1, 4, "same"))
    model = scorer(q1=(10, 0), q2=(0, 0), q3=(0, 0.5), q4=(10, 0.5), q5=(10.5, 0))
    assert clusters(constrained_clusters(hand_corpus(), judged, NONE))[:5] == ["A", "A", "A", "A", "B"]
    result = constrained_clusters(hand_corpus(), judged, NONE, model)
    assert clusters(result)[:5] == ["B", "A", "A", "B", "B"], "question 1 is like B: it moves, 4 stays"
    assert result.threshold == DEFAULT_THRESHOLD and "probability" in result.splits.iloc[0]["evidence"]


def test_one_link_merges_whole_clusters_only_when_the_model_finds_them_alike_as_wholes():
    judged = votes((6, 8, "same"))
    alike = scorer(q6=(20, 0), q7=(20, 0.2), q8=(20.2, 0), q9=(20, 0.3))
    result = constrained_clusters(hand_corpus(), judged, NONE, alike)
    assert set(clusters(result)[5:9]) == {"C"} and result.merges[["cluster_a", "cluster_b", "into"]].values.tolist() == [
        ["C", "D", "C"]]
    assert "probability" in result.merges.iloc[0]["evidence"]
    apart = scorer(q6=(20, 0), q7=(20, 0.2), q8=(20.2, 0), q9=(40, 0))  # D as a whole is unlike C
    result = constrained_clusters(hand_corpus(), judged, NONE, apart)
    assert result.merges.empty and clusters(result)[5:9] == ["C", "C", "C", "D"]


def test_a_question_voted_out_is_re_placed_where_the_model_points_or_left_in_no_cluster():
    judged = votes((1, 3, "different"))
    near_b = scorer(q1=(0, 0), q2=(0, 0.5), q3=(10, 0.2), q4=(10, 0.5), q5=(10.5, 0))
    result = constrained_clusters(hand_corpus(), judged, NONE, near_b)
    assert clusters(result)[:5] == ["A", "A", "B", "B", "B"]
    assert result.splits[["cluster", "qid", "into"]].values.tolist() == [["A", 3, "B"]]
    assert "re-placed by the model" in result.splits.iloc[0]["evidence"]
    nowhere = scorer(q1=(0, 0), q2=(0, 0.5))
    assert clusters(constrained_clusters(hand_corpus(), judged, NONE, nowhere))[:3] == ["A", "A", None]


def test_the_model_picks_which_side_of_a_different_pair_leaves():
    judged = votes((3, 1, "different"))  # without a model the candidate (1) leaves
    assert clusters(constrained_clusters(hand_corpus(), judged, NONE))[:3] == [None, "A", "A"]
    odd_three = scorer(q1=(0, 0), q2=(0, 0.5))
    assert clusters(constrained_clusters(hand_corpus(), judged, NONE, odd_three))[:3] == ["A", "A", None]


def test_the_threshold_separates_the_judged_pairs_and_waits_for_enough_of_each():
    probabilities = np.array([0.1, 0.2, 0.25, 0.3, 0.35, 0.4, 0.7, 0.8, 0.85, 0.9, 0.95, 0.97])
    same = probabilities > 0.5
    cut = fit_threshold(probabilities, same)
    assert 0.4 < cut <= 0.7 and ((probabilities >= cut) == same).all()
    assert fit_threshold(probabilities[:8], same[:8]) == DEFAULT_THRESHOLD  # only 2 "same" pairs judged


def test_a_cluster_audited_impure_weighs_less_and_a_cluster_of_verified_links_counts_whole():
    judged = votes((1, 2, "different"), (1, 3, "different"), (4, 5, "same"), (11, 12, "same"))
    result = constrained_clusters(hand_corpus(), judged, NONE)
    purity, prior = cluster_purity(hand_corpus(), result)
    assert prior == 1 / 3  # of the three audited pairs inside an imported cluster, one was the same
    assert purity["A"] == (0 + 4 * prior) / (2 + 4) and purity["B"] == (1 + 4 * prior) / (1 + 4)
    assert purity["C"] == purity["D"] == prior and purity["new-11"] == 1.0


def test_a_clusters_own_prior_replaces_the_overall_share_where_given():
    judged = votes((1, 2, "different"), (1, 3, "different"), (4, 5, "same"), (11, 12, "same"))
    result = constrained_clusters(hand_corpus(), judged, NONE)
    overall, prior = cluster_purity(hand_corpus(), result)
    purity, same_prior = cluster_purity(hand_corpus(), result, priors=pd.Series({"A": 0.9, "C": 0.2}))
    assert same_prior == prior, "the overall share is still what was audited"
    assert purity["A"] == (0 + 4 * 0.9) / (2 + 4), "an audited cluster shrinks towards its own prior"
    assert purity["B"] == overall["B"] and purity["D"] == prior, "without a prior of its own: the overall share"
    assert purity["C"] == 0.2 and purity["new-11"] == 1.0


def test_coherence_is_the_probability_at_the_mean_distance_between_different_members():
    model = scorer(q1=(0, 0), q2=(1, 0), q3=(0, 2))
    groups = pd.Series({"pair": [1, 2], "three": [1, 2, 3], "far": [4, 5]})
    coherent = model.coherence(groups)
    assert coherent["pair"] == model.pairs([1], [2])[0], "two members: their one pair's probability"
    mean_distance = (1 + 4 + 5) / 3  # squared distances of (1, 2), (1, 3), (2, 3)
    assert np.isclose(coherent["three"], model.calibration.probability(np.array([mean_distance]))[0])
    assert coherent["far"] < coherent["three"] < coherent["pair"]
