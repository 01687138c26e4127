"""The bare-questions figure's bookkeeping (issue 57): the held-out queries are not in the project's
corpus, and a budget's row gives the served model's H@1 beside BM25 and MiniLM on the same draws,
with intervals over draws and seeds."""

from __future__ import annotations

import pandas as pd

from bench.bare_payoff import QUERIES, draw_split, markdown, summarise


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
