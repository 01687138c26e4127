import pandas as pd
import pytest

from qpr.errors import QPRError
from qpr.data.noise import SPLIT_SUFFIX, eligible_clusters, inject_false_negatives, inject_false_positives


def corpus_with_sizes(sizes, split="train"):
    rows = [(f"k{c}", f"q {c} {i}") for c, n in enumerate(sizes) for i in range(n)]
    frame = pd.DataFrame(rows, columns=["cluster", "question"])
    frame.insert(0, "qid", range(1, len(frame) + 1))
    frame["cluster"] = frame["cluster"].astype("string")
    frame["split"] = split
    return frame


@pytest.mark.parametrize("rate", [0.0, 0.1, 0.2, 0.4, 1.0])
def test_exactly_the_requested_fraction_of_eligible_clusters_is_split(rate):
    corpus = corpus_with_sizes([2] * 10 + [3, 4, 5, 6, 7] * 4)  # 20 eligible (3+) clusters
    noisy, chosen = inject_false_negatives(corpus, rate, seed=1)
    assert len(chosen) == round(rate * 20)
    assert set(chosen) <= set(eligible_clusters(corpus))
    new = noisy.loc[noisy["cluster"].str.endswith(SPLIT_SUFFIX), "cluster"].str.removesuffix(SPLIT_SUFFIX)
    assert set(new) == set(chosen)
    for name in chosen:  # halves: ceil(n/2) keep the id, floor(n/2) move
        n = (corpus["cluster"] == name).sum()
        assert (noisy["cluster"] == name).sum() == (n + 1) // 2
        assert (noisy["cluster"] == name + SPLIT_SUFFIX).sum() == n // 2
    assert noisy["qid"].equals(corpus["qid"]) and noisy["question"].equals(corpus["question"])


def test_seeded_and_leaves_held_out_clusters_alone():
    corpus = pd.concat([corpus_with_sizes([4] * 10), corpus_with_sizes([4] * 5, split="test").assign(cluster=lambda f: "t" + f["cluster"])])
    corpus["qid"] = range(1, len(corpus) + 1)
    a, chosen_a = inject_false_negatives(corpus, 0.5, seed=7)
    b, chosen_b = inject_false_negatives(corpus, 0.5, seed=7)
    assert a.equals(b) and chosen_a == chosen_b
    test_rows = corpus["split"] == "test"
    assert a.loc[test_rows, "cluster"].equals(corpus.loc[test_rows, "cluster"])


def test_bad_rate_is_refused():
    with pytest.raises(QPRError, match="between 0 and 1"):
        inject_false_negatives(corpus_with_sizes([3]), 1.5)


def test_min_size_four_leaves_no_one_question_half():
    corpus = corpus_with_sizes([3] * 10 + [4, 5] * 5)
    noisy, chosen = inject_false_negatives(corpus, 1.0, seed=2, min_size=4)
    assert len(chosen) == 10 and all((corpus.loc[corpus["cluster"] == c].shape[0]) >= 4 for c in chosen)
    assert noisy["cluster"].value_counts().min() >= 2
    assert inject_false_negatives(corpus, 1.0, seed=2)[0]["cluster"].value_counts().min() == 1  # the old artefact


@pytest.mark.parametrize("rate", [0.0, 0.2, 0.5, 1.0])
def test_false_positives_join_pairs_of_unrelated_clusters(rate):
    corpus = corpus_with_sizes([2, 3, 4, 5] * 5)  # 20 clusters
    noisy, joins = inject_false_positives(corpus, rate, seed=3)
    assert len(joins) == round(rate * 20) // 2
    guests = {guest for _, guest in joins}
    hosts = {host for host, _ in joins}
    assert not guests & hosts and set(noisy["cluster"]) == set(corpus["cluster"]) - guests
    for host, guest in joins:
        joined = noisy["cluster"] == host
        assert set(corpus.loc[joined, "cluster"]) == {host, guest}  # exactly the two, every member kept
    untouched = ~corpus["cluster"].isin(hosts | guests)
    assert noisy.loc[untouched, "cluster"].equals(corpus.loc[untouched, "cluster"])
    assert inject_false_positives(corpus, rate, seed=3)[0].equals(noisy)


def test_noise_goes_only_into_the_split_asked_for():
    corpus = pd.concat([corpus_with_sizes([4] * 6), corpus_with_sizes([4] * 6, split="test").assign(cluster=lambda f: "t" + f["cluster"])])
    corpus["qid"] = range(1, len(corpus) + 1)
    for noisy, _ in (inject_false_positives(corpus, 1.0, split="test"), inject_false_negatives(corpus, 1.0, split="test")):
        train = corpus["split"] == "train"
        assert noisy.loc[train, "cluster"].equals(corpus.loc[train, "cluster"])
        assert not noisy.loc[~train, "cluster"].equals(corpus.loc[~train, "cluster"])


def test_bad_false_positive_rate_is_refused():
    with pytest.raises(QPRError, match="between 0 and 1"):
        inject_false_positives(corpus_with_sizes([3, 3]), -0.1)
