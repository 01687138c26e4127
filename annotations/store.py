"""The annotation store: corpus snapshots, judgments with history, progress, export records.

Every write is one committed transaction, made through the store's ``GroupCommitWriter``
(``annotations/writer.py``: group commit, retries while the database is busy). Input a user must
fix raises AnnotationError and writes nothing.
"""

from __future__ import annotations

import hashlib
import json
import math
import numbers
import operator
import unicodedata
from datetime import datetime
from typing import Callable

import pandas as pd
from sqlalchemy import Engine, and_, func, insert, or_, select
from sqlalchemy.orm import Session, aliased

from annotations.errors import AnnotationError
from annotations.models import (
    LABELS, MAX_NAME_CHARS, Annotator, BundleVersion, CorpusQuestion, Export, ExportJudgment, Judgment,
    MergeDecision, ModelSwap, utcnow,
)
from annotations.models import ADJUDICATION_DECISIONS, Adjudication, Guideline, JudgmentComment
from annotations.models import LABEL_VERSION_KINDS, LabelChange, LabelVersion
from annotations.writer import GroupCommitWriter
from qpr.data.corpus import COLUMNS, check_corpus, fingerprint
from qpr.errors import QPRError
from qpr.model.text import check_queries, text_problem

JUDGMENT_COLUMNS = [
    "id", "annotator", "bundle_version", "query_qid", "query_text", "candidate_qid", "item_key", "label", "rank",
    "distance", "created_at", "query_cluster", "candidate_cluster", "query_question", "candidate_question",
    "is_current", "superseded_by", "withdrawn_at",
]
LABEL_VERSION_COLUMNS = [
    "number", "created_at", "annotator", "kind", "restores", "note", "judgment_ids", "decisions", "changes",
]
ADJUDICATION_COLUMNS = [
    "id", "reviewer", "kind", "item_key", "query_qid", "candidate_qid", "cluster_a", "cluster_b", "decision", "note",
    "created_at",
]


def item_key(candidate_qid: int, query_qid: int | None = None, query_text: str | None = None) -> str:
    """The bundle-independent name of a (query, candidate) item (see models.Judgment)."""
    if query_qid is not None:
        return f"qid:{query_qid}:{candidate_qid}"
    return f"text:{hashlib.sha256(query_text.encode()).hexdigest()}:{candidate_qid}"


def annotator_name(name: object) -> str:
    """The annotator name as written, normalised: surrounding spaces removed, Unicode NFC (so an
    accent typed as one character or as two is the same name). AnnotationError for an empty or
    over-long name, or one holding control characters or invalid Unicode. Who the name identifies
    is ``annotator_key``; the store shows an annotator by the name they first wrote."""
    if not isinstance(name, str) or not name.strip():
        raise AnnotationError("the annotator name is empty: type your name")
    problem = text_problem(name)
    if problem:
        raise AnnotationError(f"the annotator name {problem}")
    name = unicodedata.normalize("NFC", name.strip())
    control = next((c for c in name if unicodedata.category(c) == "Cc"), None)
    if control is not None:
        raise AnnotationError(f"the annotator name contains the control character U+{ord(control):04X}; type it on one line "
                              "without it")
    if len(name) > MAX_NAME_CHARS:
        raise AnnotationError(f"the annotator name has {len(name)} characters; use at most {MAX_NAME_CHARS}")
    if not annotator_key(name):
        raise AnnotationError("the annotator name has no visible characters: type your name")
    return name


def annotator_key(name: str) -> str:
    """Who ``name`` identifies: the normalised name case-folded (``str.casefold``: "Straße" and
    "STRASSE" are one person) and without invisible format characters (zero-width spaces and
    joiners, which would let "alice" and "al\u200bice" look alike and be two people).
    ``annotations/migrations/versions/0003_annotator_identity.py`` holds a frozen copy."""
    folded = unicodedata.normalize("NFC", unicodedata.normalize("NFC", name.strip()).casefold())
    return "".join(c for c in folded if unicodedata.category(c) != "Cf")


def _qid(value: object, what: str) -> int:
    try:
        if isinstance(value, bool):
            raise TypeError
        return operator.index(value)
    except TypeError:
        raise AnnotationError(f"{what} must be an integer question id, got {value!r}") from None


class AnnotationStore:
    """Judgments and corpus snapshots in one database; open it with ``annotations.db.open_store``."""

    def __init__(self, engine: Engine, write_option: str, group_commit: bool | None = None) -> None:
        self.engine = engine
        self.writer = GroupCommitWriter(engine, write_option, group_commit)

    def close(self) -> None:
        """Finish the queued writes, then release the database's connections."""
        self.writer.close()
        self.engine.dispose()

    def __enter__(self) -> "AnnotationStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- corpus snapshots -------------------------------------------------------------------

    def register_corpus(self, bundle_version: str, corpus: pd.DataFrame) -> None:
        """Store the qid/question/cluster/split snapshot that ``bundle_version`` serves.

        Idempotent: registering the same version with the same corpus again does nothing; the same
        version with a different corpus is refused (judgments already point into the first one).
        """
        version = _bundle_version(bundle_version)
        snapshot = _snapshot(corpus)
        digest = fingerprint(snapshot)

        def work(session: Session) -> None:
            existing = session.get(BundleVersion, version)
            if existing is not None:
                if existing.fingerprint != digest:
                    raise AnnotationError(
                        f"bundle version {version!r} is already registered with a different corpus; "
                        "a new corpus needs a new bundle version"
                    )
                return
            session.add(BundleVersion(version=version, fingerprint=digest, questions=len(snapshot)))
            session.flush()
            rows = snapshot.astype(object).where(snapshot.notna(), None).assign(bundle_version=version)
            session.execute(insert(CorpusQuestion), rows.to_dict("records"))

        self.writer.write(work)

    def bundle_versions(self) -> pd.DataFrame:
        """Registered bundle versions (version, questions, registered_at), newest first."""
        with Session(self.engine) as session:
            rows = session.execute(
                select(BundleVersion.version, BundleVersion.questions, BundleVersion.registered_at)
                .order_by(BundleVersion.registered_at.desc(), BundleVersion.version.desc())
            ).all()
        return pd.DataFrame(rows, columns=["version", "questions", "registered_at"])

    def corpus(self, bundle_version: str | None = None) -> tuple[str, pd.DataFrame]:
        """``(version, corpus)``: the registered snapshot of ``bundle_version`` (default: the newest),
        as a qpr corpus (columns qid, question, cluster, split)."""
        versions = self.bundle_versions()["version"].tolist()
        if not versions:
            raise AnnotationError("no corpus is registered in the annotation database yet (open the app with a bundle first)")
        version = versions[0] if bundle_version is None else bundle_version
        if version not in versions:
            raise AnnotationError(f"bundle version {version!r} is not registered; known: {', '.join(versions)}")
        with Session(self.engine) as session:
            rows = session.execute(
                select(CorpusQuestion.qid, CorpusQuestion.question, CorpusQuestion.cluster, CorpusQuestion.split)
                .where(CorpusQuestion.bundle_version == version)
                .order_by(CorpusQuestion.qid)
            ).all()
        frame = pd.DataFrame(rows, columns=COLUMNS)
        return version, frame.astype({"qid": "int64", "question": str, "cluster": "string", "split": str})

    # -- judgments --------------------------------------------------------------------------

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
    ) -> int:
        """Record one judgment in one transaction and return its id.

        The query is a corpus question (``query_qid``) or free text (``query_text``): exactly one.
        Both ids must be in the corpus registered for ``bundle_version``. If this annotator already
        labelled the same (query, candidate), that label is superseded by this one (kept as history).
        """
        name = annotator_name(annotator)
        if label not in LABELS:
            raise AnnotationError(f"label must be one of {', '.join(LABELS)}; got {label!r}")
        if (query_qid is None) == (query_text is None):
            raise AnnotationError("give exactly one of query_qid (a corpus question) or query_text (a typed query)")
        candidate_qid = _qid(candidate_qid, "candidate_qid")
        if query_qid is not None:
            query_qid = _qid(query_qid, "query_qid")
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
        version = _bundle_version(bundle_version)
        key = item_key(candidate_qid, query_qid, query_text)

        def work(session: Session) -> int:
            _check_known(session, version, [q for q in (query_qid, candidate_qid) if q is not None])
            person = _person(session, name)
            previous = session.scalar(
                select(Judgment).where(
                    Judgment.annotator_id == person.id, Judgment.item_key == key, Judgment.is_current.is_(True)
                )
            )
            if previous is not None:
                previous.is_current = None  # before the insert: one current label per item
                session.flush()
            judgment = Judgment(
                annotator_id=person.id, bundle_version=version, query_qid=query_qid, query_text=query_text,
                candidate_qid=candidate_qid, item_key=key, label=label,
                rank=None if rank is None else int(rank), distance=None if distance is None else float(distance),
            )
            session.add(judgment)
            session.flush()
            if previous is not None:
                previous.superseded_by = judgment.id
            return judgment.id

        return self.writer.write(work)

    def undo_last(self, annotator: str, among: list[int] | None = None) -> dict | None:
        """Withdraw the annotator's most recent judgment still in force and return it (None if none).

        Only their own: the annotator is found by identity (``annotator_key``), so "Alice" undoes
        what "alice" recorded and nobody else's. ``among`` limits it to those judgment ids that are
        still the current label of their item (the app passes what one page recorded, so a page
        never withdraws work done elsewhere). The row stays as history (``withdrawn_at`` set). A
        label it had replaced becomes current again.
        """
        key = annotator_key(annotator_name(annotator))

        def work(session: Session) -> int | None:
            query = select(Judgment).join(Annotator).where(Annotator.name_key == key, Judgment.withdrawn_at.is_(None))
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
        frame = self.judgments(current_only=False, ids=[withdrawn])
        return frame.iloc[0].to_dict()

    def judgments(
        self,
        annotator: str | None = None,
        cluster: str | None = None,
        current_only: bool = True,
        ids: list[int] | None = None,
    ) -> pd.DataFrame:
        """Judgments as a DataFrame (``JUDGMENT_COLUMNS``), oldest first.

        ``cluster`` keeps judgments whose query or candidate was in that cluster in the judgment's
        bundle snapshot; ``current_only`` drops superseded and withdrawn ones; ``ids`` picks rows.
        ``query_cluster``/``candidate_cluster`` and the question texts come from that snapshot.
        """
        query_q, candidate_q = aliased(CorpusQuestion), aliased(CorpusQuestion)
        statement = (
            select(
                Judgment.id, Annotator.name, Judgment.bundle_version, Judgment.query_qid, Judgment.query_text,
                Judgment.candidate_qid, Judgment.item_key, Judgment.label, Judgment.rank, Judgment.distance, Judgment.created_at,
                query_q.cluster, candidate_q.cluster, query_q.question, candidate_q.question,
                Judgment.is_current, Judgment.superseded_by, Judgment.withdrawn_at,
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
        """``today``: judgments the annotator recorded since local midnight that were not undone
        (re-judgments count); ``total``: items they currently have a label for."""
        key = annotator_key(annotator_name(annotator))
        midnight = datetime.now().astimezone().replace(hour=0, minute=0, second=0, microsecond=0)
        counted = select(func.count(Judgment.id)).join(Annotator).where(Annotator.name_key == key)
        with Session(self.engine) as session:
            today = session.scalar(counted.where(Judgment.created_at >= midnight, Judgment.withdrawn_at.is_(None)))
            total = session.scalar(counted.where(Judgment.is_current.is_(True)))
        return {"today": int(today), "total": int(total)}

    def annotators(self) -> list[str]:
        """Every annotator, by the name they first wrote, alphabetically."""
        with Session(self.engine) as session:
            return list(session.scalars(select(Annotator.name).order_by(Annotator.name)))

    def display_name(self, annotator: str) -> str:
        """How the annotator ``annotator`` identifies is shown: the name they first wrote, or
        ``annotator`` normalised if they have recorded nothing yet."""
        name = annotator_name(annotator)
        with Session(self.engine) as session:
            shown = session.scalar(select(Annotator.name).where(Annotator.name_key == annotator_key(name)))
        return shown or name

    # -- served models ------------------------------------------------------------------------

    def record_swap(self, annotator: str, bundle_version: str, replaced_version: str | None,
                    judgment_ids: list[int]) -> int:
        """Record that ``annotator`` put ``bundle_version`` into service in place of
        ``replaced_version``, trained from ``judgment_ids``; returns the record's id."""
        name = annotator_name(annotator)
        version = _bundle_version(bundle_version)

        def work(session: Session) -> int:
            for known in (version, replaced_version):
                if known is not None and session.get(BundleVersion, known) is None:
                    raise AnnotationError(f"bundle version {known!r} is not registered: register its corpus first")
            swap = ModelSwap(annotator_id=_person(session, name).id, bundle_version=version,
                             replaced_version=replaced_version, judgment_ids=[int(i) for i in judgment_ids])
            session.add(swap)
            session.flush()
            return swap.id

        return self.writer.write(work)

    def swaps(self) -> pd.DataFrame:
        """Every model swap, oldest first: id, created_at, annotator (as first written),
        bundle_version, replaced_version, judgment_ids."""
        with Session(self.engine) as session:
            rows = session.execute(
                select(ModelSwap.id, ModelSwap.created_at, Annotator.name, ModelSwap.bundle_version,
                       ModelSwap.replaced_version, ModelSwap.judgment_ids).join(Annotator).order_by(ModelSwap.id)
            ).all()
        return pd.DataFrame(rows, columns=["id", "created_at", "annotator", "bundle_version", "replaced_version", "judgment_ids"])

    # -- exports ----------------------------------------------------------------------------

    def record_export(
        self,
        bundle_version: str | None,
        fmt: str,
        path: str,
        counts: dict,
        judgment_ids: list[int],
        decisions: list[dict],
        created: datetime | None = None,
        before_commit: Callable[[int], None] | None = None,
    ) -> int:
        """Record an export (``counts``: questions, clusters_before, clusters_after), the judgments
        it included and its merge decisions (dicts with decision, cluster_a, cluster_b,
        judgment_ids, reason) in one transaction; returns the export id.

        ``before_commit(export_id)`` runs inside the transaction, after the rows are written and
        before the commit: ``annotations.export`` places the files there, so the database holds an
        export only once its files are in place, and an error placing them records nothing. It
        may run again if the transaction is retried."""

        def work(session: Session) -> int:
            if bundle_version is not None and session.get(BundleVersion, bundle_version) is None:
                raise AnnotationError(f"bundle version {bundle_version!r} is not registered")
            export = Export(bundle_version=bundle_version, format=fmt, path=path, **counts)
            if created is not None:
                export.created_at = created
            session.add(export)
            session.flush()
            if judgment_ids:
                session.execute(insert(ExportJudgment), [{"export_id": export.id, "judgment_id": int(j)} for j in judgment_ids])
            if decisions:
                session.execute(insert(MergeDecision), [d | {"export_id": export.id} for d in decisions])
            if before_commit is not None:
                before_commit(export.id)
            return export.id

        return self.writer.write(work, solo=True)

    def export_recorded(self, note: dict) -> bool:
        """Whether the export that ``note`` describes (export_id, path, created: what
        ``annotations.export`` journals while placing files) was committed to the database."""
        try:
            export_id, path, created = int(note["export_id"]), str(note["path"]), datetime.fromisoformat(note["created"])
        except (KeyError, TypeError, ValueError):
            return False
        with Session(self.engine) as session:
            row = session.get(Export, export_id)
        return row is not None and row.path == path and row.created_at == created

    # -- review: adjudications, comments, guidelines (migration 0004) --------------------------

    def record_adjudication(
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
            adjudication = Adjudication(reviewer_id=_person(session, name).id, **row)
            session.add(adjudication)
            session.flush()
            return adjudication.id

        return self.writer.write(work)

    def adjudications(self, current_only: bool = True) -> pd.DataFrame:
        """Reviewer decisions (``ADJUDICATION_COLUMNS``), oldest first; ``current_only`` keeps the
        newest per target (item key, or sorted cluster pair)."""
        statement = (
            select(Adjudication.id, Annotator.name, Adjudication.kind, Adjudication.item_key, Adjudication.query_qid,
                   Adjudication.candidate_qid, Adjudication.cluster_a, Adjudication.cluster_b, Adjudication.decision,
                   Adjudication.note, Adjudication.created_at)
            .join(Annotator, Annotator.id == Adjudication.reviewer_id).order_by(Adjudication.id)
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
        judgment_id = _qid(judgment_id, "judgment id")

        def work(session: Session) -> int:
            owner = session.scalar(select(Annotator.name_key).join(Judgment).where(Judgment.id == judgment_id))
            if owner != annotator_key(name):
                raise AnnotationError(f"judgment {judgment_id} is not one of {name}'s judgments; pick one from your history")
            row = JudgmentComment(judgment_id=judgment_id, annotator_id=_person(session, name).id, text=text)
            session.add(row)
            session.flush()
            return row.id

        return self.writer.write(work)

    def comments(self) -> pd.Series:
        """The newest comment of every commented judgment, indexed by judgment id."""
        with Session(self.engine) as session:
            rows = session.execute(select(JudgmentComment.judgment_id, JudgmentComment.text).order_by(JudgmentComment.id)).all()
        return pd.Series({int(j): t for j, t in rows}, dtype=object)

    def set_guidelines(self, editor: str, text: str, same_examples: str = "", different_examples: str = "") -> int:
        """Store a new version of the annotation guidelines (older versions stay as history)."""
        name = annotator_name(editor)
        if not (text or "").strip():
            raise AnnotationError("the guidelines are empty: write what 'same' and 'different' mean")

        def work(session: Session) -> int:
            row = Guideline(editor_id=_person(session, name).id, text=text.strip(),
                            same_examples=(same_examples or "").strip(), different_examples=(different_examples or "").strip())
            session.add(row)
            session.flush()
            return row.id

        return self.writer.write(work)

    def guidelines(self) -> dict | None:
        """The guidelines in force (text, same_examples, different_examples, editor, created_at), or None."""
        with Session(self.engine) as session:
            row = session.execute(
                select(Guideline.text, Guideline.same_examples, Guideline.different_examples, Annotator.name, Guideline.created_at)
                .join(Annotator, Annotator.id == Guideline.editor_id).order_by(Guideline.id.desc()).limit(1)
            ).first()
        if row is None:
            return None
        return dict(zip(["text", "same_examples", "different_examples", "editor", "created_at"], row))

    # -- served labels (migration 0006) ---------------------------------------------------------

    def record_labels(self, annotator: str, bundle_version: str, labels: pd.DataFrame, kind: str = "apply",
                      judgment_ids: list[int] = (), decisions: list[dict] = (), restores: int | None = None,
                      note: str | None = None) -> int:
        """Record ``labels`` (the corpus of ``bundle_version`` with corrected clusters and splits)
        as that bundle's next label version, by ``annotator``; returns its number (1, 2, ...).
        ``kind``, ``judgment_ids``, ``decisions``, ``restores``: see ``models.LabelVersion``. Only
        questions whose cluster or split differ from the registered snapshot are stored.
        AnnotationError if ``labels`` holds other questions (or texts) than the snapshot, or
        ``restores`` names no earlier version."""
        name = annotator_name(annotator)
        if kind not in LABEL_VERSION_KINDS:
            raise AnnotationError(f"kind must be one of {', '.join(LABEL_VERSION_KINDS)}; got {kind!r}")
        version, snapshot = self.corpus(bundle_version)
        labels = _snapshot(labels).sort_values("qid").reset_index(drop=True)
        if not labels[["qid", "question"]].equals(snapshot[["qid", "question"]]):
            raise AnnotationError(f"these labels are not over the corpus of bundle {version!r} (other questions or texts); "
                                  "compute them from that bundle's corpus")
        moved = (labels["cluster"].fillna("") != snapshot["cluster"].fillna("")) | (labels["split"] != snapshot["split"])
        changes = labels.loc[moved, ["qid", "cluster", "split"]]
        changes = changes.astype(object).where(changes.notna(), None).to_dict("records")
        # JSON columns take plain numbers only (numpy integers are not JSON)
        decided = json.loads(json.dumps(list(decisions), default=int))

        def work(session: Session) -> int:
            number = (session.scalar(select(func.max(LabelVersion.number)).where(LabelVersion.bundle_version == version))
                      or 0) + 1
            if restores is not None and not 0 <= restores < number:
                raise AnnotationError(f"bundle {version!r} has no label version {restores} to restore "
                                      f"(versions 0 to {number - 1})")
            row = LabelVersion(bundle_version=version, number=number, kind=kind, restores=restores,
                               annotator_id=_person(session, name).id, note=(note or "").strip() or None,
                               judgment_ids=[int(i) for i in judgment_ids], decisions=decided)
            session.add(row)
            session.flush()
            if changes:
                session.execute(insert(LabelChange), [c | {"label_version_id": row.id} for c in changes])
            return number

        return self.writer.write(work)

    def label_versions(self, bundle_version: str) -> pd.DataFrame:
        """The label versions of ``bundle_version`` (``LABEL_VERSION_COLUMNS``), oldest first;
        ``changes``: how many questions each one labels differently from the bundle's snapshot."""
        changed = (select(LabelChange.label_version_id, func.count().label("n"))
                   .group_by(LabelChange.label_version_id).subquery())
        statement = (
            select(LabelVersion.number, LabelVersion.created_at, Annotator.name, LabelVersion.kind, LabelVersion.restores,
                   LabelVersion.note, LabelVersion.judgment_ids, LabelVersion.decisions, func.coalesce(changed.c.n, 0))
            .join(Annotator, Annotator.id == LabelVersion.annotator_id)
            .outerjoin(changed, changed.c.label_version_id == LabelVersion.id)
            .where(LabelVersion.bundle_version == bundle_version).order_by(LabelVersion.number)
        )
        with Session(self.engine) as session:
            rows = session.execute(statement).all()
        frame = pd.DataFrame(rows, columns=LABEL_VERSION_COLUMNS)
        frame["created_at"] = pd.to_datetime(frame["created_at"], utc=True)
        return frame.astype({"number": "int64", "restores": "Int64", "changes": "int64"})

    def labels(self, bundle_version: str, number: int | None = None) -> tuple[int, pd.DataFrame]:
        """``(number, corpus)``: the corpus of ``bundle_version`` under its label version ``number``
        (default: the newest; 0, or none recorded: the registered snapshot itself)."""
        version, corpus = self.corpus(bundle_version)
        with Session(self.engine) as session:
            if number is None:
                number = session.scalar(select(func.max(LabelVersion.number)).where(LabelVersion.bundle_version == version)) or 0
            if number == 0:
                return 0, corpus
            row_id = session.scalar(select(LabelVersion.id).where(LabelVersion.bundle_version == version,
                                                                  LabelVersion.number == number))
            if row_id is None:
                raise AnnotationError(f"bundle {version!r} has no label version {number}")
            rows = session.execute(select(LabelChange.qid, LabelChange.cluster, LabelChange.split)
                                   .where(LabelChange.label_version_id == row_id)).all()
        changes = pd.DataFrame(rows, columns=["qid", "cluster", "split"]).set_index("qid")
        position = corpus.set_index("qid").index.get_indexer(changes.index)
        corpus.loc[position, "cluster"] = pd.array(changes["cluster"], dtype="string")
        corpus.loc[position, "split"] = changes["split"].to_numpy()
        return int(number), corpus


def _bundle_version(version: object) -> str:
    if not isinstance(version, str) or not version.strip():
        raise AnnotationError("the bundle version is empty: pass the version of the bundle that was shown")
    if len(version) > 100:
        raise AnnotationError(f"bundle version {version[:40]!r}... is longer than 100 characters")
    return version


def _snapshot(corpus: pd.DataFrame) -> pd.DataFrame:
    """The corpus columns to register, checked by the corpus schema's one validator."""
    try:
        return check_corpus(corpus, "the corpus")
    except QPRError as err:
        raise AnnotationError(str(err)) from None


def _person(session: Session, name: str) -> Annotator:
    """The annotator ``name`` identifies (``annotator_key``), created on their first write."""
    person = session.scalar(select(Annotator).where(Annotator.name_key == annotator_key(name)))
    if person is None:
        # A concurrent first write under another spelling violates the unique name_key index;
        # the retry then finds that annotator.
        person = Annotator(name=name, name_key=annotator_key(name))
        session.add(person)
        session.flush()
    return person


def _check_known(session: Session, version: str, qids: list[int]) -> None:
    known = set(session.scalars(
        select(CorpusQuestion.qid).where(CorpusQuestion.bundle_version == version, CorpusQuestion.qid.in_(qids))
    ))
    unknown = [q for q in qids if q not in known]
    if unknown and session.get(BundleVersion, version) is None:
        raise AnnotationError(f"bundle version {version!r} is not registered: register its corpus first")
    if unknown:
        raise AnnotationError(f"question id {unknown[0]} is not in the corpus of bundle {version!r}")
