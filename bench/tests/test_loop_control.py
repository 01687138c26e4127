"""``bench.loop_control``'s pieces that decide what its numbers mean: the paired difference, the
results file it shares with ``bench.loop_payoff``, and the automatic clusters of the realistic regime."""

import json
import math

import pytest

from bench.loop_control import merged, paired
from bench.payoff import banking77_auto


def test_the_difference_is_paired_by_seed():
    # The same per-seed gain of 0.01 on very different seeds: an exact interval around it.
    row = paired([0.51, 0.41, 0.61], [0.50, 0.40, 0.60])
    assert row["corrected_minus_uncorrected"] == pytest.approx(0.01)
    assert row["corrected_minus_uncorrected_ci95"] == pytest.approx([0.01, 0.01])


def test_the_results_file_keeps_the_other_parts_rows_and_keys(tmp_path):
    path = tmp_path / "loop_payoff.json"
    path.write_text(json.dumps({"machine": "m", "runs": [
        {"part": "export", "noise": "fp", "seeds": None}, {"part": "control", "regime": "old", "seeds": 5}]}))
    results = merged([{"part": "control", "regime": "new", "seeds": 5}], path)
    assert results["machine"] == "m"
    assert results["runs"] == [{"part": "export", "noise": "fp", "seeds": None},
                               {"part": "control", "noise": None, "seeds": 5, "regime": "new"}]


def test_banking77_clusters_are_made_without_the_intents(data_dir):
    clean, noisy = banking77_auto(data_dir)
    train = clean["split"] == "train"
    assert set(clean.loc[~train, "split"]) == {"val", "test"}
    assert noisy.loc[~train, "cluster"].equals(clean.loc[~train, "cluster"]), "queries keep their true intents"
    assert noisy.loc[train, "cluster"].nunique() == round(math.sqrt(train.sum()))
    assert noisy.loc[train, "cluster"].str.startswith("auto-").all()
