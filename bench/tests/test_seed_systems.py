"""The seed-systems benchmark's helpers (the stages themselves need the shared data)."""

import numpy as np
import pandas as pd
import pytest

from bench.seed_systems import aggregate, comparable, own_ranks, quora_slice, render_tables, row


def test_rows_carry_the_paper_value_only_where_the_text_gives_one():
    film = row("film", "quora-pairs", "accuracy", 0.8, 12.0, split="test")
    assert film["paper_value"] == 0.8683 and "BiMPM" in film["paper_setting"]
    assert film["train_s"] == 12.0 and film["split"] == "test"
    fcrr = row("fcrr", "squad-paragraphs", "recall@1", 0.3)
    assert fcrr["paper_value"] is None and fcrr["paper_setting"] is None  # lost from the paper's text


def test_comparable_rows_carry_the_printed_value_of_their_task_system_and_adaptation():
    direct, adversarial, tfidf = comparable([
        row("cnn-sdml", "transfer-auc05", "auc05", 0.04, 100.0, target="semeval2016-relevance", adaptation="direct"),
        row("cnn-sdml", "transfer-auc05", "auc05", 0.05, 100.0, target="semeval2016-relevance", adaptation="adversarial",
            adversary_weight=0.1),
        row("tfidf", "transfer-auc05", "auc05", 0.16, None, target="semeval2016-relevance")], "transfer-equal-settings")
    assert {r["protocol"] for r in (direct, adversarial, tfidf)} == {"paper-comparable"}
    assert (direct["paper_value"], adversarial["paper_value"], tfidf["paper_value"]) == (0.62, 0.70, 0.58)
    glove = comparable([row("mean-embed", "squad-paragraphs", "recall@50", 0.7)], "idf-squad-pretrained")[0]
    assert glove["paper_value"] == 0.806 and "Table 3" in glove["paper_setting"]
    film, tfidf = comparable([row("film", "quora-pairs", "accuracy", 0.8, rule="threshold on val"),
                              row("tfidf", "quora-pairs", "accuracy", 0.8, rule="threshold on val")], "film-quora-balanced")
    assert film["paper_value"] == 0.8683 and tfidf["paper_value"] is None  # the FILM paper prints no TF-IDF row
    assert "### Paper-comparable: FILM's Quora test" in render_tables([film, tfidf])


def test_own_ranks_count_ties_against_the_true_column():
    scores = np.array([[0.9, 0.1, 0.5], [0.2, 0.2, 0.1]])
    assert own_ranks(scores, np.array([0, 1])).tolist() == [1, 2]


def test_quora_slice_keeps_the_chosen_train_clusters_and_every_other_split():
    # 20 train clusters of two questions, then 5 val and 5 test clusters.
    corpus = pd.DataFrame({"qid": range(60), "question": [f"question {i}" for i in range(60)],
                           "cluster": [f"c{i // 2}" for i in range(60)], "split": ["train"] * 40 + ["val"] * 10 + ["test"] * 10})
    sliced = quora_slice(corpus, clusters=5, seed=0)
    assert sliced.loc[sliced["split"] == "train", "cluster"].nunique() == 5
    assert (sliced["split"] == "val").sum() == (corpus["split"] == "val").sum()
    assert len(sliced) == len(corpus)


def test_render_puts_each_protocol_in_a_table_with_the_paper_value_beside_ours():
    runs = [row("film", "quora-pairs", "accuracy", 0.79, 400.0, split="test", rule="threshold on val"),
            row("tfidf", "quora-pairs", "accuracy", 0.8, 1.0, split="test", rule="threshold on val"),
            row("cnn-sdml", "transfer-auc05", "auc05", 0.05, 60.0, target="banking77-same-intent",
                adaptation="adversarial", adversary_weight=0.1)]
    text = render_tables(runs)
    assert "### Quora-lite pair classification" in text and "### Transfer from Quora-lite" in text
    film = next(line for line in text.splitlines() if line.startswith("| film"))
    assert "0.790" in film and "0.868" in film  # ours, then the paper's
    assert "adversarial, weight 0.1" in text
    assert "### SQuAD" not in text  # no rows, no table


def test_seeds_of_one_run_pool_into_a_mean_with_its_t_interval():
    base = {"system": "lstm", "protocol": "qpr-quora-lite", "metric": "H1", "split": "test", "train_data": "slice"}
    seed_runs = [base | {"value": v, "seed": s, "train_s": t, "stage": f"lstm-seed{s}"}
                 for v, s, t in ((0.58, 0, 100.0), (0.60, 1, 110.0), (0.62, 2, 120.0))]
    seed_runs.append(base | {"split": "val", "value": 0.5, "seed": 0, "train_s": 100.0, "stage": "lstm"})
    test, val = aggregate(seed_runs)
    # mean 0.60, sd 0.02, t(0.975, 2) = 4.303: half-width 4.303 * 0.02 / sqrt(3) = 0.0497
    assert test["value"] == pytest.approx(0.60) and test["seeds"] == [0, 1, 2] and test["values"] == [0.58, 0.60, 0.62]
    assert test["ci95"] == pytest.approx([0.60 - 0.0497, 0.60 + 0.0497], abs=1e-4)
    assert test["train_s"] == 110.0 and "stage" not in test and "seed" not in test
    assert val["ci95"] is None and val["seeds"] == [0]  # one seed: no interval


def test_a_seed_measured_again_replaces_its_earlier_value():
    base = {"system": "film", "protocol": "quora-pairs", "metric": "accuracy"}
    (run,) = aggregate([base | {"value": 0.7, "seed": 0}, base | {"value": 0.8, "seed": 0}])
    assert run["values"] == [0.8] and run["value"] == 0.8


def test_render_shows_the_interval_and_the_seed_count():
    run = row("lstm", "qpr-quora-lite", "H1", 0.6, 100.0, split="test") | {"seeds": [0, 1, 2], "ci95": [0.55, 0.65]}
    line = next(line for line in render_tables([run]).splitlines() if line.startswith("| lstm"))
    assert "0.600 ± 0.050" in line and "| 3 |" in line
