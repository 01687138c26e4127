"""Which queue the Annotate tab works through, and what to tell the annotator about it.

A project with clusters is spot-checked (``annotations.queue``: a cluster, a typed query), or
worked through as the corpus-wide task (``annotations.task``: built once per served bundle,
``CorpusTasks``; with the annotator's progress through it and their pace). A project of bare questions has no cluster to check:
"Next cluster" and "Corpus-wide task" build clusters there instead (``annotations.grouping``),
and the message says how many clusters the judgments form and how many training needs. Every
queue leaves out the items with a negligible chance of meaning the same (``worth_checking``).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import pandas as pd

from annotations.grouping import needs_clusters, next_group, progress
from annotations.queue import next_cluster, spot_check, why_empty
from annotations.task import BREAK_S, TASK_SIZE, build_task, pace_seconds, remaining, worth_checking
from qpr.serving.served_model import Served
from qpr.settings import settings
from workflows.project import Project


@dataclass(frozen=True)
class Queue:
    """Rows to judge (``annotations.queue.QUEUE_COLUMNS``), the ``cluster`` checked (None for a
    query or a group), the seed of a cluster-building ``group`` (None otherwise) and the
    ``message`` to show. For the corpus-wide ``task``: its size, how many of its pairs the
    annotator has judged (``task_done``) and their ``pace`` so far (seconds per judgment, or None)."""

    rows: pd.DataFrame
    message: str
    cluster: str | None = None
    group: int | None = None
    task: bool = False
    task_size: int = 0
    task_done: int = 0
    pace: float | None = None


def corpus_task_size(size: int | None = None) -> int:
    """The corpus-wide task's size: ``size``, else ``QPR_TASK_SIZE``, else ``annotations.task.TASK_SIZE``."""
    return size or settings().task_size or TASK_SIZE


class CorpusTasks:
    """The corpus-wide task of each served bundle (``annotations.task.build_task``), built once per
    bundle version."""

    def __init__(self) -> None:
        self._tasks: dict[str, pd.DataFrame] = {}

    def of(self, served: Served, size: int) -> pd.DataFrame:
        """The task of ``size`` pairs over ``served``'s bundle, built on first asking."""
        version = served.bundle.version
        if version not in self._tasks:
            self._tasks[version] = build_task(served.model_retriever, served.bundle.corpus, size,
                                              calibration=served.calibrations.get(served.model_retriever.name))
        return self._tasks[version]


def task_queue(project: Project, who: str, tasks: CorpusTasks, size: int) -> Queue:
    """The corpus-wide task's pairs ``who`` has not judged yet in ``project``, most worth checking
    first (``tasks``' task of ``size`` pairs over what it serves), with the task's size, how much
    of it they did and their pace; on a project of bare questions, which has no task yet, the next
    group to build a cluster from (``group_queue``)."""
    served = project.served()
    if needs_clusters(served.bundle.corpus):
        return group_queue(project, who)
    task, mine = tasks.of(served, size), project.store.judgments.frame(annotator=who)
    left = remaining(task, mine)
    message = f"{len(left)} pair(s) of the task left for you." if len(left) else "You have judged every pair of the task."
    return Queue(left, message, task=True, task_size=len(task), task_done=len(task) - len(left), pace=pace_seconds(mine))


def recent_pace(times: tuple[float, ...], before: float | None) -> float | None:
    """Seconds per judgment: the median gap between ``times`` (when a page's last judgments were
    recorded; breaks over ``annotations.task.BREAK_S`` left out) once there is one, else ``before``."""
    gaps = [b - a for a, b in zip(times, times[1:]) if b - a <= BREAK_S]
    return statistics.median(gaps) if gaps else before


def cluster_queue(project: Project, who: str, cluster: str = "") -> Queue:
    """``cluster`` spot-checked against ``project``'s served labels; with no cluster given, the one
    the app picks, or on a project of bare questions the next group to build a cluster from."""
    served, store = project.served(), project.store
    cluster = (cluster or "").strip()
    if not cluster and needs_clusters(served.bundle.corpus):
        return group_queue(project, who)
    cluster = cluster or next_cluster(store, served.corpus, who, retriever=served.model_retriever)
    rows, message = _worth_checking(served, spot_check(store, served.model_retriever, served.corpus, who, cluster=cluster))
    return Queue(rows, message, cluster=cluster)


def query_queue(project: Project, who: str, text: str) -> Queue:
    """What ``project``'s served retriever finds for a typed query (a corpus question typed exactly
    is that question)."""
    served = project.served()
    rows, message = _worth_checking(served, spot_check(project.store, served.model_retriever, served.corpus, who, query_text=text))
    return Queue(rows, message)


def group_queue(project: Project, who: str) -> Queue:
    """The next group of ``project``'s near questions to confirm or reject (``annotations.grouping``)."""
    served = project.served()
    rows = next_group(project.store, served.model_retriever, served.bundle.corpus, who)
    if rows.empty:
        message = "No question outside a cluster has an unjudged near question left: nothing to propose."
        return Queue(rows, f"{message} {building_note(project)}")
    kept, _ = _worth_checking(served, rows)
    return Queue(kept, building_note(project), group=int(rows["query_qid"].iloc[0]))


def building_note(project: Project) -> str:
    """How many clusters ``project``'s judgments form so far, how many training needs, and what to
    do next."""
    formed, needed = progress(project.store, project.served().bundle.corpus)
    if formed >= needed:
        return (f"**{formed}** cluster(s) of 2+ questions formed, enough to train (training needs {needed}): "
                "train a model on the Projects tab ('Train in the background'), or go on building.")
    return (f"**{formed}** cluster(s) of 2+ questions formed so far; training needs **{needed}**. Say whether each "
            "question means the same as the seed: 'same meaning' links form clusters, 'different' keeps them apart.")


def _worth_checking(served: Served, queue: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    kept = worth_checking(queue, served.probability(served.model_retriever, queue["distance"]))
    if queue.empty:
        return kept, why_empty(queue)
    cut = len(queue) - len(kept)
    return kept, f"{len(kept)} retrieved question(s) to check" + (
        f"; {cut} with under a 1% chance of meaning the same left out." if cut else ".")
