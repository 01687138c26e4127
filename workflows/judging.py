"""A person's judgments in a project: recorded from a queue's item (the Annotate tab's label keys),
withdrawn (its undo), and listed, re-judged or commented on later (the My work tab). A judgment of an item
already judged supersedes the earlier one, which stays as history (``store.judgments``).
"""

from __future__ import annotations

import pandas as pd

from annotations.models import LABELS
from qpr.errors import QPRError
from workflows.project import Project


def judge(project: Project, who: str, item: pd.Series, label: str, version: str, role: str | None = None) -> int:
    """Record ``label`` by ``who`` (under ``role``, login mode) for ``item``, a queue's row
    (``workflows.annotation_queues.Queue.rows``) of ``project``'s bundle ``version``; returns the
    judgment's id."""
    return project.store.judgments.record(
        who, int(item["candidate_qid"]), label, version, query_qid=_given(item["query_qid"], int),
        query_text=_given(item["query_text"], str), rank=int(item["rank"]), distance=float(item["distance"]), role=role,
    )


def _given(value, cast):
    """``value`` as ``cast`` makes it, or None where a row leaves it empty (NaN / NA)."""
    return None if pd.isna(value) else cast(value)


def undo(project: Project, who: str, among: list[int]) -> dict | None:
    """Withdraw ``who``'s last judgment in ``project`` still in force among the ids ``among`` (the
    ones a page recorded); returns it, or None when none is left to withdraw."""
    return project.store.judgments.undo_last(who, among=among)


def own(project: Project, who: str, judgment: str) -> pd.Series:
    """``who``'s judgment ``judgment`` (its id, as typed) in ``project``, superseded or not;
    QPRError when it is not a number or not theirs."""
    try:
        judgment_id = int(str(judgment).strip())
    except ValueError:
        raise QPRError("Type a judgment id, or click a row of your judgments.") from None
    rows = project.store.judgments.frame(annotator=who, current_only=False, ids=[judgment_id])
    if rows.empty:
        raise QPRError(f"Judgment {judgment_id} is not one of yours; click a row of your judgments.")
    return rows.iloc[0]


def rejudge(project: Project, who: str, judgment: str, label: str | None, role: str | None = None) -> tuple[pd.Series, int]:
    """Give the item of ``who``'s ``judgment`` the new ``label`` (under ``role``); returns the old
    judgment and the new one's id."""
    old = own(project, who, judgment)
    if label not in LABELS:
        raise QPRError(f"Choose the new label: {', '.join(LABELS)}.")
    query_qid = _given(old["query_qid"], int)
    new_id = project.store.judgments.record(who, int(old["candidate_qid"]), label, old["bundle_version"], query_qid=query_qid,
                                            query_text=None if query_qid is not None else old["query_text"],
                                            rank=_given(old["rank"], int), distance=_given(old["distance"], float), role=role)
    return old, new_id


def comment(project: Project, who: str, judgment: str, text: str) -> pd.Series:
    """Attach ``text`` to ``who``'s ``judgment`` in ``project``; returns that judgment."""
    old = own(project, who, judgment)
    project.store.review.comment(who, int(old["id"]), text)
    return old


def my_judgments(project: Project, who: str, search: str = "", history: bool = False) -> pd.DataFrame:
    """``who``'s judgments in ``project`` (``history``: superseded and withdrawn ones too), oldest
    first, with their ``query`` and ``candidate`` texts, ``status`` (current, undone, superseded)
    and ``comment``; only those whose texts contain ``search`` (case-insensitive) when given."""
    judged = project.store.judgments.frame(annotator=who, current_only=not history)
    judged = judged.assign(
        query=judged["query_question"].fillna(judged["query_text"]), candidate=judged["candidate_question"],
        status=["current" if c else "undone" if pd.notna(w) else "superseded"
                for c, w in zip(judged["is_current"], judged["withdrawn_at"])],
        comment=judged["id"].map(project.store.review.comments()),
    )
    words = (search or "").strip().casefold()
    if words:
        text = (judged["query"].fillna("") + "\n" + judged["candidate"].fillna("")).str.casefold()
        judged = judged[text.str.contains(words, regex=False)]
    return judged
