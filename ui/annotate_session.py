"""What one browser tab is working through in the Annotate tab: an ``AnnotateSession``.

It lives in a ``gr.State``; the tab's handlers take it and return a new one (it is immutable).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import pandas as pd

from ui.display import plain
from workflows.annotation_queues import recent_pace

MEMBER_COLUMNS = ["qid", "question"]
QUEUE_COLUMNS = ["query", "question", "cluster", "same meaning", "suspicion"]  # the queue table ahead
UNDO_STEPS = 10  # how far back one page's undo reaches
PACE_WINDOW = 20  # this page's judgments the pace is taken over


@dataclass(frozen=True)
class AnnotateSession:
    """A spot-check queue being worked through: items of the served bundle ``version``, the
    ``cluster`` checked (None for a typed query) and its ``members``, the ``position`` of the
    current item, the last ``message`` shown, ``judged``: (judgment id, position) of the last
    ``UNDO_STEPS`` judgments this page recorded, the only ones its undo may withdraw, and
    ``task_size``, ``task_done`` and the pace for the corpus-wide task (kept here, so showing
    progress costs the page no query); ``group``: the seed of a cluster-building group."""

    version: str | None = None
    cluster: str | None = None
    members: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=MEMBER_COLUMNS))
    queue: pd.DataFrame = field(default_factory=pd.DataFrame)
    position: int = 0
    message: str = ""
    judged: tuple[tuple[int, int], ...] = ()
    task_size: int = 0  # the corpus-wide task's size when this is the task (annotations.task), else 0
    task_done: int = 0  # the task's pairs judged: at the start, plus this page's judgments still in force
    pace_before: float | None = None  # seconds per judgment from the annotator's history (workflows.annotation_queues)
    times: tuple[float, ...] = ()  # when this page's last judgments were recorded, for the pace
    group: int | None = None  # the seed question of a cluster-building group (workflows.annotation_queues)

    @property
    def left(self) -> int:
        return max(len(self.queue) - self.position, 0)

    @property
    def heading(self) -> str:
        """What this page is checking, shown above every message."""
        if self.version is None:
            return ""
        if self.task_size:
            return "Corpus-wide task, the pairs most worth checking first"
        if self.group is not None:
            return "Building clusters: does each question mean the same as the seed question?"
        return f"Spot-checking cluster **{plain(self.cluster)}**" if self.cluster is not None else "Checking what your query retrieves"

    def current(self) -> pd.Series | None:
        """The item to judge now, or None when the queue is finished or empty."""
        return self.queue.iloc[self.position] if self.left else None

    def after_judging(self, judgment: int, label: str) -> "AnnotateSession":
        """This session once the current item got ``label`` as judgment ``judgment``."""
        judged = (*self.judged, (judgment, self.position))[-UNDO_STEPS:]
        return replace(self, position=self.position + 1, judged=judged, task_done=self.task_done + bool(self.task_size),
                       times=(*self.times, time.time())[-PACE_WINDOW:], message=f"Recorded judgment #{judgment}: {label}.")

    @property
    def pace(self) -> float | None:
        """Seconds per judgment: this page's recent pace once it has one, else the history's."""
        return recent_pace(self.times, self.pace_before)

    def skipped(self) -> "AnnotateSession":
        """On to the next item, the current one left unjudged (it comes back next time)."""
        return replace(self, position=self.position + 1, message="Skipped (not recorded).")

    def finished(self) -> "AnnotateSession":
        """The rest of the queue left unjudged."""
        return replace(self, position=len(self.queue), message=f"Done: {self.left} item(s) left unjudged.")

    def after_undo(self, withdrawn: dict) -> "AnnotateSession":
        """This session once judgment ``withdrawn`` (a store row) was withdrawn: back at its item."""
        position = dict(self.judged)[int(withdrawn["id"])]
        judged = tuple(pair for pair in self.judged if pair[0] != withdrawn["id"])
        message = (f"Withdrew judgment #{withdrawn['id']} ({withdrawn['label']}) of \u201c{withdrawn['candidate_question']}\u201d; "
                   "judge it again.")
        return replace(self, position=position, judged=judged, task_done=self.task_done - bool(self.task_size), message=message)
