"""The bare-questions figure's bookkeeping (issue 57): the held-out queries are not in the project's
corpus, and a budget's row gives the served model's H@1 beside BM25, MiniLM and a general encoder
that never saw BANKING77, on the same draws, with intervals over draws and seeds."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
import pytest

from bench.bare_payoff import QUERIES, draw_split, fair_general, markdown, recorded_draws, summarise


def test_a_draw_holds_its_queries_out_of_the_corpus():
    truth = pd.DataFrame({"qid": range(3000), "question": [f"q{i}" for i in range(3000)],
                          "cluster": [f"c{i % 77}" for i in range(3000)], "split": "train"})
    corpus, queries = draw_split(truth, 0)
    assert len(queries) == QUERIES and len(corpus) == len(truth) - QUERIES
    assert not set(queries["qid"]) & set(corpus["qid"])
    assert not draw_split(truth, 1)[1]["qid"].equals(queries["qid"]), "each draw holds out other queries"


def test_a_row_puts_the_served_model_beside_bm25_and_minilm():
    def draw(served: list[float], bm25: float, minilm: float) -> dict:
        return {"bm25_h1": bm25, "minilm_h1": minilm,
                "250": {"judged": 250, "clusters": 30, "served_h1": served, "train_s": [1.0] * len(served)}}

    draws = [draw([0.70, 0.72, 0.71], 0.65, 0.80), draw([0.74, 0.73, 0.75], 0.66, 0.82), draw([0.69, 0.70, 0.71], 0.64, 0.79)]
    [row] = summarise(draws, 0.05, 3, (250,))
    assert abs(row["minilm_h1"] - (0.80 + 0.82 + 0.79) / 3) < 1e-9 and row["draws"] == 3 and row["seeds"] == 3
    low, high = row["served_minus_minilm_ci95"]
    assert low < row["served_h1_mean"] - row["minilm_h1"] < high < 0
    assert row["served_minus_bm25_ci95"][0] > 0
    shown = markdown({"data": "toy", "rows": [row], "general": "not measured", "machine": "m", "date": "d", "seconds": 1})
    assert "| 250 |" in shown and "0.803" in shown and "not measured" in shown


def toy_draws(general: bool) -> list[dict]:
    draws = []
    for d, (served, bm25, minilm, gen) in enumerate([([0.70, 0.72], 0.65, 0.80, 0.74), ([0.74, 0.73], 0.66, 0.82, 0.70),
                                                     ([0.69, 0.70], 0.64, 0.79, 0.71)]):
        cells = {"bm25_h1": bm25, "minilm_h1": minilm,
                 "250": {"judged": 250, "clusters": 30 + d, "served_h1": served, "train_s": [1.0, 3.0]},
                 "500": {"judged": 500 - d, "clusters": 60 + d, "served_h1": [x + 0.01 for x in served], "train_s": [2.0, 2.0]}}
        draws.append(cells | ({"general_h1": gen} if general else {}))
    return draws


def test_the_general_encoder_stands_beside_the_served_model_when_every_draw_measured_it():
    with_general = summarise(toy_draws(True), 0.05, 2, (250, 500))
    without = summarise(toy_draws(False), 0.05, 2, (250, 500))
    assert "general_h1" not in without[0], "no column from draws that did not measure it"
    row = with_general[0]
    assert abs(row["general_h1"] - (0.74 + 0.70 + 0.71) / 3) < 1e-9 and row["general_h1_per_draw"] == [0.74, 0.70, 0.71]
    low, high = row["served_minus_general_ci95"]
    assert low <= row["served_h1_mean"] - row["general_h1"] <= high
    shown = markdown({"data": "toy", "rows": with_general, "general": "qpr general without BANKING77", "machine": "m",
                      "date": "d", "seconds": 1})
    assert "general H@1" in shown and "served - general" in shown and "| 0.717 |" in shown
    assert "general H@1" not in markdown({"data": "toy", "rows": without, "general": "not measured", "machine": "m",
                                          "date": "d", "seconds": 1})


def test_recorded_rows_give_back_the_draws_they_were_computed_from():
    for general in (False, True):
        rows = summarise(toy_draws(general), 0.05, 2, (250, 500))
        again = summarise(recorded_draws({"rows": rows}), 0.05, 2, (250, 500))
        assert again == rows


def test_a_general_bundle_taught_banking77_is_refused():
    def bundle(domains):
        return SimpleNamespace(version="v", manifest=SimpleNamespace(training={"domains": domains} if domains else {}))

    fair = bundle(["insuranceqa", "squad"])
    assert fair_general(fair) is fair
    for unfair in (bundle(["banking77", "squad"]), bundle(None)):
        with pytest.raises(SystemExit, match="without it"):
            fair_general(unfair)
