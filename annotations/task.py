"""An annotator's time well spent: the corpus-wide task, the cut of negligible items, the pace.

The **task** is the ``size`` pairs of training questions most worth a judgment, over the whole
corpus: with a calibrated encoder, one round of ``annotations.rounds`` (the pairs the model is
least sure of, across and within clusters, audits of the likeliest impure clusters and a random
share: issue 57, what a retrain learns from); on BM25 alone, cross-cluster pairs in the order the
feedback loop measured best at finding false negatives (``TASK_STRATEGY``: docs/FEEDBACK_LOOP.md
found ``suspicion`` 31-71x as precise as random picks). Progress counts the task's pairs the
annotator has judged, wherever.

The **cut**: a queue item whose probability of meaning the same (``qpr.retrieval.calibration``, fitted on
the served corpus' held-out clusters) is below ``NEGLIGIBLE`` is not shown. The feedback loop
measured that 1.0% (20% noise) to 1.8% (40% noise) of all cross-cluster pairs in an encoder's top
20 were real false negatives: an item less likely than that is worth less than a random pick from
the whole pool, so the cut sits at 1%.

The **pace** is the annotator's own: the median gap between consecutive judgments, breaks
(gaps over ``BREAK_S``) left out.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from annotations.queue import QUEUE_COLUMNS, judged_pairs
from annotations.rounds import queue_round
from annotations.simulation.strategies import candidate_pool, select
from qpr.retrieval.base import Retriever
from qpr.retrieval.calibration import Calibration

TASK_STRATEGY = "suspicion"
TASK_SIZE = 2000
NEGLIGIBLE = 0.01
BREAK_S = 300.0


def build_task(retriever: Retriever, corpus: pd.DataFrame, size: int = TASK_SIZE, k: int = 20,
               calibration: Calibration | None = None, judgments: pd.DataFrame | None = None) -> pd.DataFrame:
    """The task over ``corpus``: up to ``size`` pairs, as queue rows (``annotations.queue.QUEUE_COLUMNS``,
    query = a corpus question). With the retriever's ``calibration``, one round of
    ``annotations.rounds.queue_round`` (uncertain pairs across and within clusters, audits, a
    random share; ``judgments`` so far are not asked again), ``suspicion`` = how near the pair's
    probability is to 0.5 (0: on it); without one (BM25), cross-cluster pairs in ``TASK_STRATEGY`` order."""
    if calibration is not None:
        pool = queue_round(retriever, corpus, calibration, size, judgments)
        pool = pool.assign(suspicion=-(pool["probability"] - 0.5).abs())
    else:
        pool = select(candidate_pool(retriever, corpus, k), TASK_STRATEGY, size)
    known = corpus.set_index("qid")
    task = pool.assign(query_text=pd.NA, question=pool["candidate_qid"].map(known["question"]),
                       cluster=pool["candidate_qid"].map(known["cluster"]))
    return task[QUEUE_COLUMNS].astype({"query_qid": "Int64", "query_text": "string", "candidate_qid": "int64"})


def remaining(task: pd.DataFrame, judgments: pd.DataFrame) -> pd.DataFrame:
    """The task's pairs that ``judgments`` (one annotator's) do not label yet, in task order."""
    done = judged_pairs(judgments)
    left = [(int(q), int(c)) not in done for q, c in zip(task["query_qid"], task["candidate_qid"])]
    return task[np.asarray(left, dtype=bool)].reset_index(drop=True)


def pace_seconds(judgments: pd.DataFrame) -> float | None:
    """The annotator's median seconds per judgment (``judgments``: theirs), None before two."""
    times = pd.to_datetime(judgments["created_at"]).sort_values()
    gaps = times.diff().dt.total_seconds().dropna()
    gaps = gaps[gaps <= BREAK_S]
    return float(gaps.median()) if len(gaps) else None


def worth_checking(queue: pd.DataFrame, probability: np.ndarray | None) -> pd.DataFrame:
    """``queue`` without the items whose ``probability`` of the same meaning is below
    ``NEGLIGIBLE`` (module doc); unchanged when there is no probability to cut by."""
    if probability is None:
        return queue
    return queue[np.asarray(probability) >= NEGLIGIBLE].reset_index(drop=True)
