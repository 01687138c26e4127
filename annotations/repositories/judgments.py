"""Judgments with history: record, undo, read back, and each annotator's progress.

An annotator's new label for an item supersedes their previous one, which stays as history; at
most one label per annotator and item is current (a database constraint, see ``models.Judgment``).
"""

from __future__ import annotations

import math
import numbers
from datetime import datetime

import pandas as pd
from sqlalchemy import Select, and_, func, or_, select
from sqlalchemy.orm import Session, aliased

from annotations.errors import AnnotationError
from annotations.models import LABELS, ROLES, Annotator, BundleVersion, CorpusQuestion, Judgment, utcnow
from annotations.names import annotator_key, annotator_name, item_key
from annotations.repositories.base import Repository, annotator_row, bundle_version_name, integer_id
from qpr.errors import QPRError
from qpr.model.text import check_queries

JUDGMENT_COLUMNS = [
    "id", "annotator", "bundle_version", "query_qid", "query_text", "candidate_qid", "item_key", "label", "rank",
    "distance", "created_at", "query_cluster", "candidate_cluster", "query_question", "candidate_question",
    "is_current", "superseded_by", "withdrawn_at", "role",
]


class JudgmentRepository(Repository):
    """The judgments of every annotator, and who the annotators are."""

    def record(
        self,
        annotator: str,
        candidate_qid: int,
        label: str,
        bundle_version: str,
        query_qid: int | None = None,
        query_text: str | None = None,
        rank: int | None = None,
        distance: float | None = None,
        role: str | None = None,
    ) -> int:
        """Record one judgment in one transaction and return its id.

        The query is a corpus question (``query_qid``) or free text (``query_text``): exactly one.
        ``role`` is the role the annotator judged under in the project (login mode), None without.
        Both ids must be in the corpus registered for ``bundle_version``, a bundle version of this
        project. If this annotator already
        labelled the same (query, candidate), that label is superseded by this one (kept as history).
        """
        name = annotator_name(annotator)
        if label not in LABELS:
            raise AnnotationError(f"label must be one of {', '.join(LABELS)}; got {label!r}")
        if (query_qid is None) == (query_text is None):
            raise AnnotationError("give exactly one of query_qid (a corpus question) or query_text (a typed query)")
        candidate_qid = integer_id(candidate_qid, "candidate_qid")
        if query_qid is not None:
            query_qid = integer_id(query_qid, "query_qid")
            if query_qid == candidate_qid:
                raise AnnotationError(f"question {query_qid} cannot be judged against itself")
        else:
            try:
                check_queries([query_text], 1)
            except QPRError as err:
                raise AnnotationError(str(err)) from None
        if rank is not None and (isinstance(rank, bool) or int(rank) != rank or rank < 1):
            raise AnnotationError(f"rank must be a positive integer, got {rank!r}")
        if distance is not None and not (isinstance(distance, numbers.Real) and math.isfinite(distance)):
            raise AnnotationError(f"distance must be a finite number, got {distance!r}")
        if role is not None and role not in (*ROLES, "admin"):
            raise AnnotationError(f"role must be one of {', '.join((*ROLES, 'admin'))} or None; got {role!r}")
        version = bundle_version_name(bundle_version)
        key = item_key(candidate_qid, query_qid, query_text)

        def work(session: Session) -> int:
            self.own_version(session, version)
            _check_known(session, version, [q for q in (query_qid, candidate_qid) if q is not None])
            person = annotator_row(session, name)
            previous = session.scalar(
                self._scoped(select(Judgment)).where(
                    Judgment.annotator_id == person.id, Judgment.item_key == key, Judgment.is_current.is_(True)
                )
            )
            if previous is not None:
                previous.is_current = None  # before the insert: one current label per item
                session.flush()
            judgment = Judgment(
                annotator_id=person.id, project=self.project, bundle_version=version, query_qid=query_qid, query_text=query_text,
                candidate_qid=candidate_qid, item_key=key, label=label,
                rank=None if rank is None else int(rank), distance=None if distance is None else float(distance), role=role,
            )
            session.add(judgment)
            session.flush()
            if previous is not None:
                previous.superseded_by = judgment.id
            return judgment.id

        return self.writer.write(work)

    def undo_last(self, annotator: str, among: list[int] | None = None) -> dict | None:
        """Withdraw the annotator's most recent judgment still in force in this project and return it
        (None if none).

        Only their own: the annotator is found by identity (``annotator_key``), so "Alice" undoes
        what "alice" recorded and nobody else's. ``among`` limits it to those judgment ids that are
        still the current label of their item (the app passes what one page recorded, so a page
        never withdraws work done elsewhere). The row stays as history (``withdrawn_at`` set). A
        label it had replaced becomes current again.
        """
        key = annotator_key(annotator_name(annotator))

        def work(session: Session) -> int | None:
            query = self._scoped(select(Judgment)).join(Annotator).where(Annotator.name_key == key,
                                                                         Judgment.withdrawn_at.is_(None))
            if among is not None:
                query = query.where(Judgment.id.in_([int(i) for i in among]), Judgment.is_current.is_(True))
            last = session.scalar(query.order_by(Judgment.id.desc()).limit(1))
            if last is None:
                return None
            last.is_current = None
            last.withdrawn_at = utcnow()
            session.flush()
            replaced = session.scalar(select(Judgment).where(Judgment.superseded_by == last.id))
            if replaced is not None:
                replaced.superseded_by = None
                replaced.is_current = True
            return last.id

        withdrawn = self.writer.write(work)
        if withdrawn is None:
            return None
        frame = self.frame(current_only=False, ids=[withdrawn])
        return frame.iloc[0].to_dict()

    def frame(
        self,
        annotator: str | None = None,
        cluster: str | None = None,
        current_only: bool = True,
        ids: list[int] | None = None,
    ) -> pd.DataFrame:
        """This project's judgments as a DataFrame (``JUDGMENT_COLUMNS``), oldest first.

        ``cluster`` keeps judgments whose query or candidate was in that cluster in the judgment's
        bundle snapshot; ``current_only`` drops superseded and withdrawn ones; ``ids`` picks rows.
        ``query_cluster``/``candidate_cluster`` and the question texts come from that snapshot.
        """
        query_q, candidate_q = aliased(CorpusQuestion), aliased(CorpusQuestion)
        statement = self._scoped(
            select(
                Judgment.id, Annotator.name, Judgment.bundle_version, Judgment.query_qid, Judgment.query_text,
                Judgment.candidate_qid, Judgment.item_key, Judgment.label, Judgment.rank, Judgment.distance, Judgment.created_at,
                query_q.cluster, candidate_q.cluster, query_q.question, candidate_q.question,
                Judgment.is_current, Judgment.superseded_by, Judgment.withdrawn_at, Judgment.role,
            )
            .join(Annotator, Annotator.id == Judgment.annotator_id)
            .outerjoin(query_q, and_(query_q.bundle_version == Judgment.bundle_version, query_q.qid == Judgment.query_qid))
            .join(candidate_q, and_(candidate_q.bundle_version == Judgment.bundle_version, candidate_q.qid == Judgment.candidate_qid))
            .order_by(Judgment.id)
        )
        if annotator is not None:
            statement = statement.where(Annotator.name_key == annotator_key(annotator_name(annotator)))
        if cluster is not None:
            statement = statement.where(or_(query_q.cluster == cluster, candidate_q.cluster == cluster))
        if current_only:
            statement = statement.where(Judgment.is_current.is_(True))
        if ids is not None:
            statement = statement.where(Judgment.id.in_([int(i) for i in ids]))
        with Session(self.engine) as session:
            rows = session.execute(statement).all()
        frame = pd.DataFrame(rows, columns=JUDGMENT_COLUMNS)
        frame["is_current"] = frame["is_current"].notna()
        for column in ("created_at", "withdrawn_at"):
            frame[column] = pd.to_datetime(frame[column], utc=True)
        return frame.astype({
            "id": "int64", "query_qid": "Int64", "candidate_qid": "int64", "rank": "Int64", "distance": "float64",
            "superseded_by": "Int64", "query_cluster": "string", "candidate_cluster": "string",
        })

    def progress(self, annotator: str) -> dict:
        """``today``: items of this project the annotator has a label for that was recorded since
        local midnight; ``total``: items they have a label for. Both count current labels only (a
        re-judged item counts once, an undone one not at all), so ``today`` never exceeds
        ``total`` and every page of the same annotator shows the same."""
        key = annotator_key(annotator_name(annotator))
        midnight = datetime.now().astimezone().replace(hour=0, minute=0, second=0, microsecond=0)
        counted = self._scoped(select(func.count(Judgment.id))).join(Annotator).where(
            Annotator.name_key == key, Judgment.is_current.is_(True))
        with Session(self.engine) as session:
            today = session.scalar(counted.where(Judgment.created_at >= midnight))
            total = session.scalar(counted)
        return {"today": int(today), "total": int(total)}

    def annotators(self) -> list[str]:
        """Everyone who judged in this project, by the name they first wrote, alphabetically."""
        with Session(self.engine) as session:
            return list(session.scalars(self._scoped(select(Annotator.name)
                                                     .join_from(Judgment, Annotator, Annotator.id == Judgment.annotator_id))
                                        .distinct().order_by(Annotator.name)))

    def _scoped(self, statement: Select) -> Select:
        """``statement`` (over ``Judgment``) limited to this project's judgments."""
        return statement.where(Judgment.project == self.project)

    def display_name(self, annotator: str) -> str:
        """How the annotator ``annotator`` identifies is shown: the name they first wrote, or
        ``annotator`` normalised if they have recorded nothing yet."""
        name = annotator_name(annotator)
        with Session(self.engine) as session:
            shown = session.scalar(select(Annotator.name).where(Annotator.name_key == annotator_key(name)))
        return shown or name


def _check_known(session: Session, version: str, qids: list[int]) -> None:
    """AnnotationError unless every id of ``qids`` is a question of bundle ``version``'s corpus."""
    known = set(session.scalars(
        select(CorpusQuestion.qid).where(CorpusQuestion.bundle_version == version, CorpusQuestion.qid.in_(qids))
    ))
    unknown = [q for q in qids if q not in known]
    if unknown and session.get(BundleVersion, version) is None:
        raise AnnotationError(f"bundle version {version!r} is not registered: register its corpus first")
    if unknown:
        raise AnnotationError(f"question id {unknown[0]} is not in the corpus of bundle {version!r}")
