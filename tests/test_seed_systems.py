"""The seed-systems benchmark's helpers (the stages themselves need the shared data)."""

import numpy as np

from bench.seed_systems import own_ranks, quora_slice, row


def test_rows_carry_the_paper_value_only_where_the_text_gives_one():
    film = row("film", "quora-pairs", "accuracy", 0.8, 12.0, split="test")
    assert film["paper_value"] == 0.8683 and "BiMPM" in film["paper_setting"]
    assert film["train_s"] == 12.0 and film["split"] == "test"
    fcrr = row("fcrr", "squad-paragraphs", "recall@1", 0.3)
    assert fcrr["paper_value"] is None and fcrr["paper_setting"] is None  # lost from the paper's text


def test_own_ranks_count_ties_against_the_true_column():
    scores = np.array([[0.9, 0.1, 0.5], [0.2, 0.2, 0.1]])
    assert own_ranks(scores, np.array([0, 1])).tolist() == [1, 2]


def test_quora_slice_keeps_the_chosen_train_clusters_and_every_other_split(tiny_corpus):
    sliced = quora_slice(tiny_corpus, clusters=5, seed=0)
    assert sliced.loc[sliced["split"] == "train", "cluster"].nunique() == 5
    assert (sliced["split"] == "val").sum() == (tiny_corpus["split"] == "val").sum()
    assert len(sliced) == len(tiny_corpus)
