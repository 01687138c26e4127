"""Trusting a benchmark: H@1 measured on noisy test labels, corrected by judging retrieved items.

H@1 counts a test query as a hit when its top result shares its cluster. If the test clusters
themselves hold label errors (a paraphrase filed elsewhere, an unrelated question filed together)
the measured H@1 is wrong by the share of queries whose top result is mislabelled. Judging the
(query, top result) pairs fixes those queries one by one: ``judged_h1`` counts a judged query as
the judgment says and the others as the labels say.

``top_results`` lists each query's top result; ``order`` says which to judge first:

- ``random``: uniformly at random (seeded), the baseline;
- ``near_miss``: the labelled misses whose top result is closest first (the likeliest false
  negatives: a paraphrase filed in another cluster is what a good encoder puts first), then the
  labelled hits whose top result is farthest (possible false positives).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from annotations.errors import AnnotationError
from annotations.simulation.oracle import true_same
from qpr.evaluation.metrics import query_set
from qpr.retrieval.base import Retriever

ORDERS = ("random", "near_miss")


def top_results(retriever: Retriever, corpus: pd.DataFrame, split: str = "test") -> pd.DataFrame:
    """One row per ``split`` query of ``corpus`` (the evaluation protocol's queries, the query
    itself removed from its results): ``query_qid``, ``candidate_qid`` (its top result; a query
    with none is left out), ``distance``, ``rank`` (1) and ``labelled_hit`` (whether ``corpus``' labels call it a hit)."""
    queries = query_set(corpus, split)
    distances, qids = retriever.search_ids(queries["question"].tolist(), 2)
    own = qids[:, 0] == queries["qid"].to_numpy()
    top = np.where(own, qids[:, 1], qids[:, 0])
    table = pd.DataFrame({"query_qid": queries["qid"].to_numpy(), "candidate_qid": top,
                          "distance": np.where(own, distances[:, 1], distances[:, 0]).astype(float), "rank": 1})
    table = table[table["candidate_qid"] >= 0].reset_index(drop=True)  # -1: the index had no other question
    return table.assign(labelled_hit=true_same(corpus, table["query_qid"], table["candidate_qid"]))


def order(table: pd.DataFrame, strategy: str, seed: int = 0) -> pd.DataFrame:
    """The pairs of ``table`` (``top_results``) in the order ``strategy`` (``ORDERS``) would judge
    them, each unordered pair once: two queries that are each other's top result share one
    judgment."""
    if strategy == "random":
        return _once(table.iloc[np.random.default_rng(seed).permutation(len(table))])
    if strategy != "near_miss":
        raise AnnotationError(f"unknown order {strategy!r}; use one of {', '.join(ORDERS)}")
    # Misses by distance ascending, then hits by distance descending: one key does both.
    key = np.where(table["labelled_hit"].to_numpy(bool), 1e12 - table["distance"].to_numpy(), table["distance"].to_numpy())
    return _once(table.assign(key=key).sort_values(["key", "query_qid"], kind="stable").drop(columns="key"))


def _once(ranked: pd.DataFrame) -> pd.DataFrame:
    ends = ranked[["query_qid", "candidate_qid"]]
    return ranked[~pd.DataFrame({"a": ends.min(axis=1), "b": ends.max(axis=1)}).duplicated()].reset_index(drop=True)


def judged_h1(table: pd.DataFrame, judgments: pd.DataFrame) -> float:
    """H@1 over ``table``'s queries where a judged (query, top result) pair (in either order) counts as its label
    says ("same": hit, "different": miss; "unsure" and unjudged pairs: as the corpus labels say).
    ``judgments``: rows with query_qid, candidate_qid and label (``store.judgments.frame()``; the
    newest per pair wins)."""
    decided = judgments[judgments["label"].isin(["same", "different"]) & judgments["query_qid"].notna()]
    said = {pair: label == "same" for q, c, label in zip(decided["query_qid"], decided["candidate_qid"], decided["label"])
            for pair in ((int(q), int(c)), (int(c), int(q)))}
    hits = [said.get((int(q), int(c)), bool(labelled)) for q, c, labelled in
            zip(table["query_qid"], table["candidate_qid"], table["labelled_hit"])]
    return float(np.mean(hits)) if hits else float("nan")
