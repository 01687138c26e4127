"""Review (migration 0004): reviewers' adjudications, comments on judgments, the guidelines."""

from __future__ import annotations

import pandas as pd
from sqlalchemy import select
from sqlalchemy.orm import Session

from annotations.errors import AnnotationError
from annotations.models import (
    ADJUDICATION_DECISIONS, Adjudication, Annotator, BundleVersion, Guideline, Judgment, JudgmentComment,
)
from annotations.names import annotator_key, annotator_name
from annotations.repositories.base import Repository, annotator_row, integer_id

ADJUDICATION_COLUMNS = [
    "id", "reviewer", "kind", "item_key", "query_qid", "candidate_qid", "cluster_a", "cluster_b", "decision", "note",
    "created_at",
]


class ReviewRepository(Repository):
    """Decisions of reviewers, annotators' notes on their own judgments, and versioned guidelines."""

    def adjudicate(
        self,
        reviewer: str,
        decision: str,
        item: str | None = None,
        cluster_a: str | None = None,
        cluster_b: str | None = None,
        note: str | None = None,
    ) -> int:
        """Record a reviewer's decision and return its id. Either ``item`` (an item key
        "qid:<query>:<candidate>", decided "same" or "different") or a cluster pair
        (``cluster_a``, ``cluster_b``: a proposed merge or conflict, decided "apply" or "reject").
        A later decision on the same target supersedes this one (``adjudications`` shows the newest)."""
        name = annotator_name(reviewer)
        if decision not in ADJUDICATION_DECISIONS:
            raise AnnotationError(f"decision must be one of {', '.join(ADJUDICATION_DECISIONS)}; got {decision!r}")
        row: dict = {"decision": decision, "note": (note or "").strip() or None}
        if decision in ("same", "different"):
            parts = (item or "").strip().split(":")
            if len(parts) != 3 or parts[0] != "qid" or not all(p.isdigit() for p in parts[1:]):
                raise AnnotationError(f"a '{decision}' decision needs an item like qid:<query qid>:<candidate qid>; got {item!r}")
            row |= {"kind": "item", "item_key": ":".join(parts), "query_qid": int(parts[1]), "candidate_qid": int(parts[2])}
        else:
            a, b = (cluster_a or "").strip(), (cluster_b or "").strip()
            if not a or not b or a == b:
                raise AnnotationError(f"an '{decision}' decision needs two different clusters (cluster A and cluster B)")
            row |= {"kind": "cluster_pair", "cluster_a": min(a, b), "cluster_b": max(a, b)}

        def work(session: Session) -> int:
            adjudication = Adjudication(project=self.project, reviewer_id=annotator_row(session, name).id, **row)
            session.add(adjudication)
            session.flush()
            return adjudication.id

        return self.writer.write(work)

    def adjudications(self, current_only: bool = True) -> pd.DataFrame:
        """This project's reviewer decisions (``ADJUDICATION_COLUMNS``), oldest first; ``current_only``
        keeps the newest per target (item key, or sorted cluster pair)."""
        statement = (
            select(Adjudication.id, Annotator.name, Adjudication.kind, Adjudication.item_key, Adjudication.query_qid,
                   Adjudication.candidate_qid, Adjudication.cluster_a, Adjudication.cluster_b, Adjudication.decision,
                   Adjudication.note, Adjudication.created_at)
            .join(Annotator, Annotator.id == Adjudication.reviewer_id).where(Adjudication.project == self.project)
            .order_by(Adjudication.id)
        )
        with Session(self.engine) as session:
            rows = session.execute(statement).all()
        frame = pd.DataFrame(rows, columns=ADJUDICATION_COLUMNS)
        frame["created_at"] = pd.to_datetime(frame["created_at"], utc=True)
        frame = frame.astype({"id": "int64", "query_qid": "Int64", "candidate_qid": "Int64"})
        if current_only and not frame.empty:
            target = frame["item_key"].fillna("pair:" + frame["cluster_a"].fillna("") + "\n" + frame["cluster_b"].fillna(""))
            frame = frame[~target.duplicated(keep="last")]
        return frame.reset_index(drop=True)

    def comment(self, annotator: str, judgment_id: int, text: str) -> int:
        """Attach ``text`` to one of the annotator's own judgments (the newest comment is shown)."""
        name = annotator_name(annotator)
        text = (text or "").strip()
        if not text:
            raise AnnotationError("the comment is empty: type what you want to note about this judgment")
        judgment_id = integer_id(judgment_id, "judgment id")

        def work(session: Session) -> int:
            owner = session.scalar(select(Annotator.name_key).join(Judgment)
                                   .join(BundleVersion, BundleVersion.version == Judgment.bundle_version)
                                   .where(Judgment.id == judgment_id, BundleVersion.project == self.project))
            if owner != annotator_key(name):
                raise AnnotationError(f"judgment {judgment_id} is not one of {name}'s judgments; pick one from your history")
            row = JudgmentComment(judgment_id=judgment_id, annotator_id=annotator_row(session, name).id, text=text)
            session.add(row)
            session.flush()
            return row.id

        return self.writer.write(work)

    def comments(self) -> pd.Series:
        """The newest comment of every commented judgment of this project, indexed by judgment id."""
        with Session(self.engine) as session:
            rows = session.execute(
                select(JudgmentComment.judgment_id, JudgmentComment.text).join(Judgment)
                .join(BundleVersion, BundleVersion.version == Judgment.bundle_version)
                .where(BundleVersion.project == self.project).order_by(JudgmentComment.id)).all()
        return pd.Series({int(j): t for j, t in rows}, dtype=object)

    def set_guidelines(self, editor: str, text: str, same_examples: str = "", different_examples: str = "") -> int:
        """Store a new version of this project's annotation guidelines (older versions stay as history)."""
        name = annotator_name(editor)
        if not (text or "").strip():
            raise AnnotationError("the guidelines are empty: write what 'same' and 'different' mean")

        def work(session: Session) -> int:
            row = Guideline(project=self.project, editor_id=annotator_row(session, name).id, text=text.strip(),
                            same_examples=(same_examples or "").strip(), different_examples=(different_examples or "").strip())
            session.add(row)
            session.flush()
            return row.id

        return self.writer.write(work)

    def guidelines(self) -> dict | None:
        """This project's guidelines in force (text, same_examples, different_examples, editor,
        created_at), or None."""
        with Session(self.engine) as session:
            row = session.execute(
                select(Guideline.text, Guideline.same_examples, Guideline.different_examples, Annotator.name, Guideline.created_at)
                .join(Annotator, Annotator.id == Guideline.editor_id).where(Guideline.project == self.project)
                .order_by(Guideline.id.desc()).limit(1)
            ).first()
        if row is None:
            return None
        return dict(zip(["text", "same_examples", "different_examples", "editor", "created_at"], row))
