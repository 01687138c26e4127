"""Pairwise and B-cubed scores against cases worked out by hand."""

import pandas as pd
import pytest

from qpr.research.cluster_quality import bcubed, cluster_quality, errors_fixed, pair_scores
from qpr.errors import QPRError


def test_pairwise_counts_by_hand():
    # truth {0,1} {2,3}; predicted {0,1,2} {3}: joined pairs 01 (right), 02, 12 (wrong); 23 wrongly apart
    scores = pair_scores(["a", "a", "b", "b"], ["x", "x", "x", "y"])
    assert (scores["false_positive_pairs"], scores["false_negative_pairs"]) == (2, 1)
    assert scores["pair_precision"] == pytest.approx(1 / 3)
    assert scores["pair_recall"] == pytest.approx(1 / 2)
    assert scores["pair_f1"] == pytest.approx(2 * (1 / 3) * (1 / 2) / (1 / 3 + 1 / 2))


def test_bcubed_by_hand():
    # per item precision 2/3, 2/3, 1/3, 1 and recall 1, 1, 1/2, 1/2
    scores = bcubed(["a", "a", "b", "b"], ["x", "x", "x", "y"])
    assert scores["bcubed_precision"] == pytest.approx(2 / 3)
    assert scores["bcubed_recall"] == pytest.approx(3 / 4)
    assert scores["bcubed_f1"] == pytest.approx(2 * (2 / 3) * (3 / 4) / (2 / 3 + 3 / 4))


def test_missing_labels_are_clusters_of_their_own():
    # truth {0,1} and 2 alone; predicted all together: item 2 has precision 1/3, recall 1
    scores = bcubed(["a", "a", None], [1, 1, 1])
    assert scores["bcubed_precision"] == pytest.approx((2 / 3 + 2 / 3 + 1 / 3) / 3)
    assert scores["bcubed_recall"] == pytest.approx(1.0)
    # two missing labels are not one cluster
    assert pair_scores([None, None], [None, None])["pair_f1"] == pytest.approx(1.0)
    assert pair_scores(["a", "a"], [None, None])["false_negative_pairs"] == 1


def test_identical_clusterings_score_one_whatever_the_names():
    perfect = pair_scores(["a", "a", "b"], [7, 7, 3]) | bcubed(["a", "a", "b"], [7, 7, 3])
    assert perfect["pair_f1"] == perfect["bcubed_f1"] == 1.0
    assert perfect["false_positive_pairs"] == perfect["false_negative_pairs"] == 0


def corpus(clusters, split="train"):
    return pd.DataFrame({"qid": range(1, len(clusters) + 1), "question": [f"q{i}" for i in range(len(clusters))],
                         "cluster": pd.array(clusters, dtype="string"), "split": split})


def test_cluster_quality_compares_one_split_and_counts_errors_fixed():
    clean = corpus(["A", "A", "A", "B", "B"])
    clean.loc[4, "split"] = "test"  # not scored
    noisy = clean.assign(cluster=pd.array(["A", "A", "A~b", "A~b", "T"], dtype="string"))  # 2 FN + 1 FP among train
    before = cluster_quality(clean, noisy)
    assert (before["false_negative_pairs"], before["false_positive_pairs"], before["label_errors"]) == (2, 1, 3)
    # Merging A with A~b rejoins A but puts question 4 (truly B) with 1-3: three pairs wrongly joined.
    merged = cluster_quality(clean, clean.assign(cluster=pd.array(["A", "A", "A", "A", "T"], dtype="string")))
    assert (merged["false_negative_pairs"], merged["false_positive_pairs"]) == (0, 3)
    assert errors_fixed(before, merged) == 0.0
    # Moving question 3 back and 4 out fixes all three errors.
    after = cluster_quality(clean, clean.assign(cluster=pd.array(["A", "A", "A", "A~b", "T"], dtype="string")))
    assert after["label_errors"] == 0 and errors_fixed(before, after) == 1.0
    assert errors_fixed(after | {"label_errors": 0}, after) is None


def test_cluster_quality_refuses_a_corpus_without_the_clean_questions():
    with pytest.raises(QPRError, match="missing"):
        cluster_quality(corpus(["A", "A"]), corpus(["A"]))
