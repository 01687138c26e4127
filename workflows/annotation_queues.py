"""Which queue the Annotate tab works through, and what to tell the annotator about it.

A project with clusters is spot-checked (``annotations.queue``: a cluster, a typed query, the
corpus-wide task of ``annotations.task``). A project of bare questions has no cluster to check:
"Next cluster" and "Corpus-wide task" build clusters there instead (``annotations.grouping``),
and the message says how many clusters the judgments form and how many training needs. Every
queue leaves out the items with a negligible chance of meaning the same (``worth_checking``).
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from annotations.grouping import needs_clusters, next_group, progress
from annotations.queue import next_cluster, spot_check, why_empty
from annotations.store import AnnotationStore
from annotations.task import worth_checking
from qpr.serving.served_model import Served


@dataclass(frozen=True)
class Queue:
    """Rows to judge (``annotations.queue.QUEUE_COLUMNS``), the ``cluster`` checked (None for a
    query or a group), the seed of a cluster-building ``group`` (None otherwise) and the
    ``message`` to show."""

    rows: pd.DataFrame
    message: str
    cluster: str | None = None
    group: int | None = None


def cluster_queue(store: AnnotationStore, served: Served, who: str, cluster: str = "") -> Queue:
    """``cluster`` spot-checked against the served labels; with no cluster given, the one the app
    picks, or on a project of bare questions the next group to build a cluster from."""
    cluster = (cluster or "").strip()
    if not cluster and needs_clusters(served.bundle.corpus):
        return group_queue(store, served, who)
    cluster = cluster or next_cluster(store, served.corpus, who, retriever=served.dense)
    rows, message = _worth_checking(served, spot_check(store, served.dense, served.corpus, who, cluster=cluster))
    return Queue(rows, message, cluster=cluster)


def query_queue(store: AnnotationStore, served: Served, who: str, text: str) -> Queue:
    """What the served retriever finds for a typed query (a corpus question typed exactly is that question)."""
    rows, message = _worth_checking(served, spot_check(store, served.dense, served.corpus, who, query_text=text))
    return Queue(rows, message)


def group_queue(store: AnnotationStore, served: Served, who: str) -> Queue:
    """The next group of near questions to confirm or reject (``annotations.grouping``)."""
    rows = next_group(store, served.dense, served.bundle.corpus, who)
    if rows.empty:
        message = "No question outside a cluster has an unjudged near question left: nothing to propose."
        return Queue(rows, f"{message} {building_note(store, served)}")
    kept, _ = _worth_checking(served, rows)
    return Queue(kept, building_note(store, served), group=int(rows["query_qid"].iloc[0]))


def building_note(store: AnnotationStore, served: Served) -> str:
    """How many clusters the judgments form so far, how many training needs, and what to do next."""
    formed, needed = progress(store, served.bundle.corpus)
    if formed >= needed:
        return (f"**{formed}** cluster(s) of 2+ questions formed, enough to train (training needs {needed}): "
                "train a model on the Projects tab ('Train in the background'), or go on building.")
    return (f"**{formed}** cluster(s) of 2+ questions formed so far; training needs **{needed}**. Say whether each "
            "question means the same as the seed: 'same meaning' links form clusters, 'different' keeps them apart.")


def _worth_checking(served: Served, queue: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    kept = worth_checking(queue, served.probability(served.dense, queue["distance"]))
    if queue.empty:
        return kept, why_empty(queue)
    cut = len(queue) - len(kept)
    return kept, f"{len(kept)} retrieved question(s) to check" + (
        f"; {cut} with under a 1% chance of meaning the same left out." if cut else ".")
