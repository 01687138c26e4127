"""The payoff bench's bookkeeping (issue 57): a row carries the issue's keys, the paired
difference's intervals span draws and seeds, the shape check, the results file keeps other rows,
and every regime's noise touches only the training clusters."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bench.loop_payoff import ISSUE_KEYS, payoff_markdown, versus_product, with_payoff_row
from annotations.rounds import AUDIT_ORDERS
import bench.payoff
from bench.payoff import DESIGNS, ENCODERS, QUEUES, REGIMES, WEIGHTS, bootstrap_ci, check_batch, regime_rows, summary_row
from qpr.errors import QPRError
from qpr.model.encoder import EncoderConfig
from qpr.model.text import TextConfig
from qpr.training.train import TrainConfig
from qpr.research.cluster_quality import cluster_quality


def h1(gain: float) -> dict:
    rng = np.random.default_rng(0)
    uncorrected = 0.5 + rng.normal(0, 0.01, (3, 5))
    return {"uncorrected": uncorrected, "corrected": uncorrected + gain + rng.normal(0, 0.005, (3, 5)),
            "ceiling": uncorrected + 0.2}


def test_a_payoff_row_has_the_issue_keys_intervals_and_the_share_recovered(tmp_path):
    about = [{"pair_f1_before": 0.2, "pair_f1_after": 0.25}] * 3
    row = summary_row("banking77-auto", "product", "product", 1000, 0.05, h1(0.02), {((10, 8),)}, about)
    low, high = row["corrected_minus_uncorrected_ci95"]
    assert low > 0 and low < row["corrected_minus_uncorrected"] < high
    assert row["equal_steps"] and row["draws"] == 3 and row["seeds"] == 5
    assert abs(row["recovered_share"] - 0.1) < 0.01 and row["ceiling_h1"] > row["H1_after_mean"]
    unequal = summary_row("banking77-auto", "product", "product", 1000, 0.05, h1(0.0), {((10, 8),), ((11, 8),)}, about)
    assert not unequal["equal_steps"]
    results = tmp_path / "r.json"
    results.write_text(json.dumps({"runs": [{"part": "retrain", "noise": "fp"}], "control": {"x": 1}}))
    written = with_payoff_row(results, row, 5)
    assert [r["part"] for r in written["runs"]] == ["retrain", "payoff"] and written["control"] == {"x": 1}
    assert all(set(ISSUE_KEYS) <= set(r) for r in written["runs"])
    results.write_text(json.dumps(written))
    again = with_payoff_row(results, row | {"corrected_minus_uncorrected": 0.0}, 5)
    assert len(again["runs"]) == 2, "the same regime, budget, error, design and encoder replace their row"
    assert "| banking77-auto | product | product | 1000 | 0.050 | **yes** |" in payoff_markdown(again)
    loss = summary_row("quora-fp-0.4", "product", "quick", 1000, 0.05, h1(-0.02), {((10, 8),)}, about)
    bar = payoff_markdown(with_payoff_row(results, loss, 5))
    assert "primary endpoint's lower end above zero: yes" in bar and "another regime's lower end above zero: **none**" in bar
    assert "upper end below zero at annotator error <= 5%: **quora-fp-0.4 (quick encoder) at annotator error 0.05" in bar
    assert "another regime's lower end above zero at another budget: none" in bar
    results.write_text(json.dumps(with_payoff_row(results, loss, 5)))
    later = summary_row("banking77-auto-fine", "product", "quick", 4000, 0.05, h1(0.02), {((10, 8),)}, about)
    bar = payoff_markdown(with_payoff_row(results, later, 5))
    assert "another regime's lower end above zero: **none**" in bar, "the bar reads the primary's budget only"
    assert "at another budget: banking77-auto-fine (quick encoder) at annotator error 0.05" in bar and "at 4,000 judgments" in bar


def test_recorded_draws_extend_a_row_with_only_the_new_draws_trained(monkeypatch, tmp_path):
    """--keep-recorded-draws: a row's recorded cells stand for its draws (no model is trained for
    them), the new draws are trained, and the row over all of them is what one run would give."""
    cells, about = h1(0.02), [{"pair_f1_before": 0.2 + d, "pair_f1_after": 0.25} for d in range(3)]
    full = summary_row("banking77-auto", "product", "product", 1000, 0.05, cells, {((10, 8),)}, about)
    first = summary_row("banking77-auto", "product", "product", 1000, 0.05, {a: v[:2] for a, v in cells.items()},
                        {((10, 8),)}, about[:2])
    first = json.loads(json.dumps(first))  # as the results file holds it
    trained = []

    def draw_cells(data, work, regime, budget, error, design, draw, seeds, log, encoder):
        trained.append(draw)
        return {arm: list(cells[arm][draw]) for arm in cells}, {((10, 8),)}, about[draw]

    monkeypatch.setattr(bench.payoff, "draw_cells", draw_cells)
    rows = regime_rows(tmp_path, tmp_path, "banking77-auto", 1000, [0.05], 3, 5, lambda line: None,
                       encoder="product", recorded=[first | {"encoder": "quick"}, first])
    (row,) = list(rows)
    assert trained == [2], "only the draw after the recorded ones is trained"
    assert row == full
    other_seeds = regime_rows(tmp_path, tmp_path, "banking77-auto", 1000, [0.05], 3, 5, lambda line: None,
                              encoder="product", recorded=[first | {"seeds": 4}])
    trained.clear()
    list(other_seeds)
    assert trained == [0, 1, 2], "a row of other seeds is not taken"


def test_a_design_row_on_later_draws_is_paired_with_the_products_same_draws(monkeypatch, tmp_path):
    """--first-draw: a design measured on draws 3-5 only is trained on those draws, says so in the
    table, and is compared with the product's cells of draws 3-5 (not 0-2)."""
    rng = np.random.default_rng(2)
    uncorrected = 0.5 + rng.normal(0, 0.01, (6, 5))
    product_cells = {"uncorrected": uncorrected, "ceiling": uncorrected + 0.2,
                     "corrected": uncorrected + np.repeat([[0.0], [0.0], [0.0], [0.03], [0.03], [0.03]], 5, axis=1)}
    about = [{"pair_f1_before": 0.2, "pair_f1_after": 0.25}] * 6
    product = summary_row("banking77-auto", "product", "product", 1000, 0.05, product_cells, {((10, 8),)}, about)
    trained = []

    def draw_cells(data, work, regime, budget, error, design, draw, seeds, log, encoder):
        trained.append(draw)
        return ({"uncorrected": list(uncorrected[draw]), "ceiling": list(uncorrected[draw] + 0.2),
                 "corrected": list(uncorrected[draw] + 0.01)}, {((10, 8),)}, about[draw])

    monkeypatch.setattr(bench.payoff, "draw_cells", draw_cells)
    (design,) = regime_rows(tmp_path, tmp_path, "banking77-auto", 1000, [0.05], 6, 5, lambda line: None,
                            ("no-purity",), "product", first_draw=3)
    assert trained == [3, 4, 5] and design["draws"] == 3 and design["first_draw"] == 3
    results = tmp_path / "r.json"
    results.write_text(json.dumps(with_payoff_row(results, product, 5)))
    rows = with_payoff_row(results, design, 5)["runs"]
    assert versus_product(design, rows).startswith("-0.0200 [-0.0200, -0.0200]"), "paired with the product's draws 3-5"
    assert "| no-purity | product | 1000 | 0.050 |  | 3 (3-5) | 5 |" in payoff_markdown({"runs": rows})


def test_the_bar_reads_the_product_encoders_primary_row_first_and_keeps_the_quick_ones_beside_it(tmp_path):
    about = [{"pair_f1_before": 0.2, "pair_f1_after": 0.25}] * 3
    results = tmp_path / "r.json"
    quick = summary_row("banking77-auto", "product", "quick", 1000, 0.05, h1(0.0), {((10, 8),)}, about)
    results.write_text(json.dumps(with_payoff_row(results, quick, 5)))
    bar = payoff_markdown(json.loads(results.read_text()))
    assert "lower end above zero: **no**, banking77-auto (quick encoder)" in bar
    assert "(the product's encoder not measured there)" in bar
    product = summary_row("banking77-auto", "product", "product", 1000, 0.05, h1(0.02), {((10, 8),)}, about)
    both = with_payoff_row(results, product, 5)
    assert len(both["runs"]) == 2, "another encoder's row is kept beside the first"
    bar = payoff_markdown(both)
    assert "lower end above zero: yes, banking77-auto (product encoder) at annotator error 0.05" in bar
    assert ", banking77-auto (quick encoder) at annotator error 0.05" in bar and "not measured there" not in bar


def test_the_t_interval_over_draw_means_uses_the_t_quantile_of_its_draws():
    """Six draws: t(0.975, 5) = 2.571, not the normal's 2 (which gave too narrow an interval)."""
    rng = np.random.default_rng(1)
    cells = {"uncorrected": 0.5 + rng.normal(0, 0.01, (6, 5))}
    cells |= {"corrected": cells["uncorrected"] + rng.normal(0.02, 0.01, (6, 5)), "ceiling": cells["uncorrected"] + 0.2}
    row = summary_row("banking77-auto", "product", "quick", 1000, 0.05, cells, {((10, 8),)}, [{"pair_f1_before": 0.2, "pair_f1_after": 0.2}] * 6)
    means = (cells["corrected"] - cells["uncorrected"]).mean(axis=1)
    low, high = row["corrected_minus_uncorrected_draws_t95"]
    assert high - low == pytest.approx(2 * 2.5706 * means.std(ddof=1) / np.sqrt(6), rel=1e-4)


def test_the_product_encoder_is_what_qpr_train_builds_by_default():
    assert ENCODERS["product"] == (TextConfig(), EncoderConfig())
    assert ENCODERS["quick"][1].embedding_dim < EncoderConfig().embedding_dim


def test_the_bootstrap_resamples_draws_as_well_as_seeds():
    rng = np.random.default_rng(1)
    seeds_only = np.tile(rng.normal(0, 1, 5), (3, 1))  # three identical draws
    spread = seeds_only + np.array([[-2.0], [0.0], [2.0]])  # draws that disagree
    narrow, wide = bootstrap_ci(seeds_only, rng), bootstrap_ci(spread, rng)
    assert wide[1] - wide[0] > 2 * (narrow[1] - narrow[0])


@pytest.mark.parametrize("regime", list(REGIMES))
def test_a_regime_changes_only_the_training_clusters(regime, data_dir):
    clean, noisy = REGIMES[regime](data_dir, 1)
    assert clean["qid"].equals(noisy["qid"]) and clean["question"].equals(noisy["question"])
    assert clean["split"].equals(noisy["split"])
    train = (clean["split"] == "train").to_numpy()
    assert noisy.loc[~train, "cluster"].equals(clean.loc[~train, "cluster"]), "val and test queries keep their clusters"
    assert cluster_quality(clean, noisy)["pair_f1"] < 0.95, "the training clusters are noisy, as partitions"
    check_batch(regime, {"ceiling": clean, "uncorrected": noisy})
    if regime != "banking77-auto":
        assert not REGIMES[regime](data_dir, 2)[1]["cluster"].equals(noisy["cluster"]), "each draw draws its noise"


def test_a_regime_with_too_few_clusters_for_the_batch_is_refused(tiny_corpus):
    with pytest.raises(QPRError, match="RETRAIN_BATCH"):
        check_batch("tiny", {"ceiling": tiny_corpus})


def test_a_weight_design_is_the_product_with_one_retrain_setting_moved_off_its_default():
    defaults = TrainConfig()
    for design, moved in WEIGHTS.items():
        assert DESIGNS[design] == DESIGNS["product"] and len(moved) == 1
        [(field, value)] = moved.items()
        assert getattr(defaults, field) != value, f"{design} must move {field} off the product's default"
        TrainConfig(**{field: value})  # a valid setting


def test_a_queue_design_is_the_products_retrain_on_a_queue_the_app_offers():
    for design, order in QUEUES.items():
        assert DESIGNS[design] == DESIGNS["product"] and order in AUDIT_ORDERS and order != "purity"


def test_a_design_row_says_its_difference_to_the_products_cells_paired_by_draw_and_seed(tmp_path):
    about = [{"pair_f1_before": 0.2, "pair_f1_after": 0.25}] * 3
    results = tmp_path / "r.json"
    product = summary_row("banking77-auto", "product", "quick", 1000, 0.05, h1(0.02), {((10, 8),)}, about)
    design = summary_row("banking77-auto", "no-purity", "quick", 1000, 0.05, h1(0.0), {((10, 8),)}, about)
    other = summary_row("banking77-auto", "no-purity", "product", 1000, 0.05, h1(0.0), {((10, 8),)}, about)
    results.write_text(json.dumps(with_payoff_row(results, product, 5)))
    results.write_text(json.dumps(with_payoff_row(results, other, 5)))
    rows = with_payoff_row(results, design, 5)["runs"]
    row = next(r for r in rows if r["design"] == "no-purity" and r["encoder"] == "quick")
    text = versus_product(row, rows)
    assert text.startswith("-0.02"), text  # h1(0.0) - h1(0.02) on the same uncorrected cells
    low, high = (float(x) for x in text[text.index("[") + 1:-1].split(", "))
    assert low < -0.0199 and -0.0201 < high < 0, "the same noise in both: the interval holds the exact difference"
    assert versus_product(next(r for r in rows if r["encoder"] == "product"), rows) == "", "no product row of its encoder"
    assert versus_product(product, rows) == ""
