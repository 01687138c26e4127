"""The corpus-wide task, the cut of negligible items and the annotator's pace (annotations.task)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from annotations.task import NEGLIGIBLE, build_task, pace_seconds, remaining, worth_checking


def test_the_task_is_cross_cluster_training_pairs_most_suspicious_first(tiny_bundle):
    corpus = tiny_bundle.corpus
    task = build_task(tiny_bundle.dense_retriever(), corpus, size=25)
    assert len(task) == 25 and task["suspicion"].is_monotonic_decreasing
    cluster = corpus.set_index("qid")["cluster"]
    split = corpus.set_index("qid")["split"]
    assert (cluster[task["query_qid"].astype(int)].to_numpy() != cluster[task["candidate_qid"]].to_numpy()).all()
    assert set(split[task["candidate_qid"]]) == {"train"} and task["question"].notna().all()


def test_remaining_leaves_out_pairs_judged_in_either_direction(tiny_bundle):
    task = build_task(tiny_bundle.dense_retriever(), tiny_bundle.corpus, size=10)
    first = task.iloc[0]
    judged = pd.DataFrame({"query_qid": [first["candidate_qid"]], "candidate_qid": [int(first["query_qid"])]})
    left = remaining(task, judged)
    assert len(left) == 9 and (int(first["query_qid"]), int(first["candidate_qid"])) not in set(
        zip(left["query_qid"].astype(int), left["candidate_qid"]))


def test_pace_is_the_median_gap_without_breaks():
    start = pd.Timestamp("2026-01-01T10:00:00Z")
    times = [start + pd.Timedelta(seconds=s) for s in (0, 4, 10, 16, 3600, 3605)]
    assert pace_seconds(pd.DataFrame({"created_at": times})) == 5.5  # gaps 4, 6, 6, 5; the hour's break left out
    assert pace_seconds(pd.DataFrame({"created_at": times[:1]})) is None


def test_worth_checking_cuts_below_the_negligible_chance():
    queue = pd.DataFrame({"candidate_qid": [1, 2, 3]})
    kept = worth_checking(queue, np.array([0.5, NEGLIGIBLE, NEGLIGIBLE / 2]))
    assert list(kept["candidate_qid"]) == [1, 2]
    assert worth_checking(queue, None).equals(queue)
