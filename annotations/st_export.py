"""Corrected clusters in sentence-transformers' training format: the columns its trainers take.

``training_tables(export.corpus, export.pairs)`` turns an export (``annotations.export.Export``)
into two tables of question texts, ready for ``MultipleNegativesRankingLoss`` (each row's
positive is its anchor's match; the other rows' positives in a batch are its negatives):

- ``anchor_positive`` (anchor, positive): each question of a corrected cluster with the next
  member of its cluster (by qid, round the cluster: every member is an anchor once, a cluster of
  two gives one row), then each judged "same" pair not already there, once whichever way round;
- ``triplets`` (anchor, positive, negative): each judged "different" pair once, as a hard
  negative: the anchor is the question that was searched from (the pair's first question), or
  the other one when only it has a cluster-mate, its positive that cluster-mate and its negative
  the question judged different. A pair whose two questions have no cluster-mate has no positive
  to stand beside and is left out (counted in ``without_positive``).

Only training questions take part: a val or test question is what a model is scored on
(``qpr.training.sampling.JudgedPairs`` leaves them out of our own training the same way), so the
held-out clusters stay held out for whoever trains on these tables.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

ANCHOR_POSITIVE = ["anchor", "positive"]
TRIPLET = ["anchor", "positive", "negative"]
HELD_OUT = ("val", "test")


@dataclass(frozen=True)
class TrainingTables:
    """The two tables (module doc) and how many judged-different pairs had no positive."""

    anchor_positive: pd.DataFrame
    triplets: pd.DataFrame
    without_positive: int


def training_tables(corpus: pd.DataFrame, pairs: pd.DataFrame) -> TrainingTables:
    """``corpus``'s corrected clusters (``qpr.data.corpus.COLUMNS``) and its judged ``pairs``
    (``annotations.export.training_pairs``: qid1, qid2, is_duplicate) as sentence-transformers'
    training tables (module doc)."""
    training = corpus[~corpus["split"].isin(HELD_OUT)]
    text = training.set_index("qid")["question"]
    mate = {}  # a training question -> the next member of its cluster
    for _, members in training.dropna(subset=["cluster"]).sort_values("qid").groupby("cluster", sort=True)["qid"]:
        qids = members.tolist()
        if len(qids) > 1:
            mate.update(zip(qids, qids[1:] + qids[:1]))
    judged = pairs[pairs["qid1"].isin(text.index) & pairs["qid2"].isin(text.index) & (pairs["qid1"] != pairs["qid2"])]
    positives = _once([*mate.items(), *_pairs(judged, 1)])
    triplets, without_positive = [], 0
    for a, b in _once(_pairs(judged, 0)):
        for anchor, negative in ((a, b), (b, a)):
            positive = mate.get(anchor)
            if positive is not None and positive != negative:  # a mate judged different is no positive
                triplets.append((anchor, positive, negative))
                break
        else:
            without_positive += 1
    return TrainingTables(_texts(positives, ANCHOR_POSITIVE, text), _texts(triplets, TRIPLET, text), without_positive)


def _pairs(judged: pd.DataFrame, is_duplicate: int) -> list[tuple[int, int]]:
    chosen = judged[judged["is_duplicate"] == is_duplicate]
    return list(zip(chosen["qid1"].tolist(), chosen["qid2"].tolist()))


def _once(pairs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``pairs`` in their order, each pair of questions once whichever way round (the first way kept)."""
    seen, kept = set(), []
    for a, b in pairs:
        if frozenset((a, b)) not in seen:
            seen.add(frozenset((a, b)))
            kept.append((a, b))
    return kept


def _texts(rows: list[tuple[int, ...]], columns: list[str], text: pd.Series) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=columns, dtype="int64")
    return frame.apply(lambda column: column.map(text)).astype(str) if len(frame) else frame.astype(str)
