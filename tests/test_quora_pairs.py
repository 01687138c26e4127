import numpy as np
import pandas as pd
import pytest

from qpr.errors import QPRError
from qpr.research.quora_pairs import balanced, majority_accuracy, pair_sets, threshold_accuracy, threshold_rule


def test_pair_sets_follow_the_cluster_split_and_deal_unclustered_negatives():
    corpus = pd.DataFrame({"qid": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10],
                           "split": ["train", "train", "val", "val", "test", "test", "none", "none", "none", "none"]})
    pairs = pd.DataFrame({
        "qid1": [1, 3, 5, 7, 9, 1, 7, 8],
        "qid2": [2, 4, 6, 8, 10, 7, 9, 10],
        "question1": list("abcdefgh"), "question2": list("ABCDEFGH"),
        "is_duplicate": [1, 1, 1, 0, 0, 0, 0, 0],
    })
    sets = pair_sets(pairs, corpus, seed=0)
    everything = pd.concat(sets.values())
    assert "a" not in set(everything["question1"]) and "f" not in set(everything["question1"])  # train pairs out
    assert sets["val"]["question1"].str.contains("b").any() and sets["test"]["question1"].str.contains("c").any()
    assert sorted(everything["question1"]) == list("bcdegh")  # every none-none negative lands in one set


def test_threshold_rule_by_hand():
    scores = np.array([0.9, 0.8, 0.7, 0.2, 0.1])
    labels = np.array([1, 1, 0, 1, 0])
    # Cut after the first two: 2 + 2 correct = 0.8; after four: 3 + 1 = 0.8; the first best is kept.
    threshold = threshold_rule(scores, labels)
    assert threshold == pytest.approx(0.8)
    assert threshold_accuracy(scores, labels, threshold) == pytest.approx(0.8)
    assert majority_accuracy(labels) == pytest.approx(0.6)
    assert threshold_rule(np.array([0.5, 0.4]), np.array([0, 0])) == np.inf  # all negative: predict none


def test_balanced_keeps_every_pair_of_the_rarer_label_and_as_many_of_the_other():
    pairs = pd.DataFrame({"question1": list("abcdefgh"), "question2": list("ABCDEFGH"),
                          "label": [1, 1, 1, 0, 1, 1, 0, 1]})
    out = balanced(pairs, seed=3)
    assert out["label"].value_counts().to_dict() == {1: 2, 0: 2}
    assert {"d", "g"} <= set(out["question1"])  # the rarer label is never dropped
    assert list(out["question1"]) == sorted(out["question1"])  # order kept
    assert out.equals(balanced(pairs, seed=3)) and majority_accuracy(out["label"].to_numpy()) == 0.5
    with pytest.raises(QPRError, match="one label"):
        balanced(pairs[pairs["label"] == 1], seed=0)
