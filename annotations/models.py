"""ORM models of the annotation database (the current schema; migrations/ builds and upgrades it).

- ``bundles`` / ``corpus_questions``: the corpus snapshot (qid, question, cluster, split) that a
  bundle version serves. Judgments point into it, so a judged id always names a known question.
- ``annotators`` / ``judgments``: one annotator per identity (``Annotator.name_key``), one row per label given. A re-judgment of the same item adds a
  row and marks the earlier one ``superseded_by`` it; an undo marks a row ``withdrawn_at``. Rows
  are never deleted, so the full history stays.
- ``exports`` / ``export_judgments`` / ``merge_decisions``: what each export of corrected clusters
  included and which cluster merges, splits (or conflicts) it derived from the judgments.
- ``label_versions`` / ``label_changes``: corrected clusters served at once, one version after
  another per bundle (who, when, which judgments and decisions; rollbacks are versions too).
"""

from __future__ import annotations

from datetime import datetime, timezone

from sqlalchemy import (
    JSON, BigInteger, Boolean, CheckConstraint, DateTime, Float, ForeignKey, ForeignKeyConstraint,
    Index, Integer, String, Text, TypeDecorator, UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from qpr.serving.slugs import DEMO, MAX_SLUG

LABELS = ("same", "different", "unsure")
ROLES = ("owner", "reviewer", "annotator")  # a project's roles, most rights first (ProjectRole)
MAX_NAME_CHARS = 100
# The project that owns what was written before judgments were scoped by project (migration 0009),
# until a project claims its bundle versions (``store.corpora.claim_versions``): the demo.
FIRST_PROJECT = DEMO
MAX_PROJECT_CHARS = MAX_SLUG
MAX_KEY_CHARS = 4 * MAX_NAME_CHARS  # case folding can lengthen a name (one character folds to at most three)


class UTCDateTime(TypeDecorator):
    """A timezone-aware UTC timestamp on every backend (SQLite keeps no offset, so store naive UTC)."""

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect) -> datetime | None:
        if value is None:
            return None
        return value.astimezone(timezone.utc).replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, dialect) -> datetime | None:
        return None if value is None else value.replace(tzinfo=timezone.utc)


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class Base(DeclarativeBase):
    pass


class BundleVersion(Base):
    """A bundle version whose corpus snapshot was registered; ``fingerprint`` is qpr.data.corpus.fingerprint.
    ``project``: the project it belongs to. Everything recorded against a bundle version (judgments,
    comments, exports, swaps, label versions) belongs to that project, and every read of the store
    is scoped to one project through it (``annotations.repositories.base.Repository``)."""

    __tablename__ = "bundles"
    __table_args__ = (Index("ix_bundles_project", "project"),)

    version: Mapped[str] = mapped_column(String(100), primary_key=True)
    project: Mapped[str] = mapped_column(String(MAX_PROJECT_CHARS), server_default=FIRST_PROJECT)
    fingerprint: Mapped[str] = mapped_column(String(64))
    questions: Mapped[int] = mapped_column(Integer)
    registered_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class CorpusQuestion(Base):
    """One question of a bundle's corpus as it was served (its original cluster and split)."""

    __tablename__ = "corpus_questions"

    bundle_version: Mapped[str] = mapped_column(String(100), ForeignKey("bundles.version"), primary_key=True)
    qid: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    question: Mapped[str] = mapped_column(Text)
    cluster: Mapped[str | None] = mapped_column(Text)
    split: Mapped[str] = mapped_column(String(10))


class Annotator(Base):
    """A person who judges. ``name`` is shown as they first wrote it (trimmed, NFC); ``name_key``
    is who they are (``annotations.names.annotator_key``: NFC, case-folded, invisible format
    characters dropped), and its unique index is what keeps "Alice", "alice" and "  ALICE  " one
    annotator on every backend, whichever process writes first."""

    __tablename__ = "annotators"
    __table_args__ = (Index("uq_annotators_name_key", "name_key", unique=True),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(MAX_NAME_CHARS), unique=True)
    # The default only lets the migration add the column to a filled table; the store always sets it.
    name_key: Mapped[str] = mapped_column(String(MAX_KEY_CHARS), server_default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class Judgment(Base):
    """One label an annotator gave to a (query, candidate) item, as shown by one bundle version.

    The query is a corpus question (``query_qid``) or free text (``query_text``), never both.
    ``item_key`` names the item independently of the bundle ("qid:<query_qid>:<candidate_qid>" or
    "text:<sha256 of query_text>:<candidate_qid>"). ``is_current`` is True for the annotator's live
    label of the item and NULL (not False) otherwise, so the unique constraint on
    (annotator, project, item_key, is_current) allows any amount of history but one current label
    per project, on every database (NULLs never collide in a unique constraint).
    """

    __tablename__ = "judgments"
    __table_args__ = (
        ForeignKeyConstraint(["bundle_version", "candidate_qid"], ["corpus_questions.bundle_version", "corpus_questions.qid"]),
        ForeignKeyConstraint(["bundle_version", "query_qid"], ["corpus_questions.bundle_version", "corpus_questions.qid"]),
        CheckConstraint(f"label IN ({', '.join(repr(label) for label in LABELS)})", name="ck_judgments_label"),
        CheckConstraint("(query_qid IS NULL) <> (query_text IS NULL)", name="ck_judgments_one_query"),
        CheckConstraint("is_current IS NULL OR (superseded_by IS NULL AND withdrawn_at IS NULL)", name="ck_judgments_current"),
        CheckConstraint(f"role IS NULL OR role IN ({', '.join(repr(role) for role in (*ROLES, 'admin'))})", name="ck_judgments_role"),
        UniqueConstraint("annotator_id", "project", "item_key", "is_current", name="uq_judgments_one_current"),
        Index("ix_judgments_project", "project"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    annotator_id: Mapped[int] = mapped_column(ForeignKey("annotators.id"), index=True)
    # Its bundle version's project, kept beside it: an item (the same qids) is another item in
    # another project, so one current label per annotator, project and item.
    project: Mapped[str] = mapped_column(String(MAX_PROJECT_CHARS), server_default=FIRST_PROJECT)
    bundle_version: Mapped[str] = mapped_column(String(100), ForeignKey("bundles.version"))
    query_qid: Mapped[int | None] = mapped_column(BigInteger)
    query_text: Mapped[str | None] = mapped_column(Text)
    candidate_qid: Mapped[int] = mapped_column(BigInteger)
    item_key: Mapped[str] = mapped_column(String(120))
    label: Mapped[str] = mapped_column(String(10))
    rank: Mapped[int | None] = mapped_column(Integer)
    distance: Mapped[float | None] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    is_current: Mapped[bool | None] = mapped_column(Boolean, default=True)
    superseded_by: Mapped[int | None] = mapped_column(ForeignKey("judgments.id"))
    withdrawn_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    role: Mapped[str | None] = mapped_column(String(10))  # the role it was made under (login mode); NULL with typed names


class Export(Base):
    """One export of corrected clusters: where it went and from which bundle's corpus."""

    __tablename__ = "exports"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    bundle_version: Mapped[str | None] = mapped_column(String(100), ForeignKey("bundles.version"))
    format: Mapped[str] = mapped_column(String(10))
    path: Mapped[str] = mapped_column(Text)
    questions: Mapped[int] = mapped_column(Integer)
    clusters_before: Mapped[int] = mapped_column(Integer)
    clusters_after: Mapped[int] = mapped_column(Integer)


class ExportJudgment(Base):
    """A judgment that an export took into account."""

    __tablename__ = "export_judgments"

    export_id: Mapped[int] = mapped_column(ForeignKey("exports.id"), primary_key=True)
    judgment_id: Mapped[int] = mapped_column(ForeignKey("judgments.id"), primary_key=True)


class MergeDecision(Base):
    """A merge an export applied, or a conflict it left for review (annotations.merge).

    ``decision`` is "merged" or the conflict kind; ``cluster_a``/``cluster_b`` name the original
    clusters (or "qid:<n>" for a question in no cluster); ``judgment_ids`` is a JSON list.
    """

    __tablename__ = "merge_decisions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    export_id: Mapped[int] = mapped_column(ForeignKey("exports.id"), index=True)
    decision: Mapped[str] = mapped_column(String(20))
    cluster_a: Mapped[str] = mapped_column(Text)
    cluster_b: Mapped[str] = mapped_column(Text)
    judgment_ids: Mapped[list[int]] = mapped_column(JSON)
    reason: Mapped[str] = mapped_column(Text)


class ModelSwap(Base):
    """A retrained model put into service: who confirmed it and when, which bundle it replaced,
    and the judgments it was trained from (the ids in its manifest's ``labels``)."""

    __tablename__ = "model_swaps"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    annotator_id: Mapped[int] = mapped_column(ForeignKey("annotators.id"))
    bundle_version: Mapped[str] = mapped_column(String(100), ForeignKey("bundles.version"))
    replaced_version: Mapped[str | None] = mapped_column(String(100), ForeignKey("bundles.version"))
    judgment_ids: Mapped[list[int]] = mapped_column(JSON)


# -- review (migration 0004): adjudications, comments, guidelines ---------------------------------

ADJUDICATION_DECISIONS = ("same", "different", "apply", "reject")


class Adjudication(Base):
    """A reviewer's decision, recorded as such (never as a judgment).

    ``kind`` "item": a tie or mixed item (``item_key``, query/candidate qids) decided "same" or
    "different". ``kind`` "cluster_pair": a proposed merge or conflict between ``cluster_a`` and
    ``cluster_b`` (sorted) decided "apply" or "reject". The newest row per target is in force;
    older rows stay as history.
    """

    __tablename__ = "adjudications"
    __table_args__ = (
        Index("ix_adjudications_project", "project"),
        CheckConstraint("kind IN ('item', 'cluster_pair')", name="ck_adjudications_kind"),
        CheckConstraint(f"decision IN ({', '.join(repr(d) for d in ADJUDICATION_DECISIONS)})",
                        name="ck_adjudications_decision"),
        CheckConstraint("(kind = 'item') = (item_key IS NOT NULL)", name="ck_adjudications_item"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    project: Mapped[str] = mapped_column(String(MAX_PROJECT_CHARS), server_default=FIRST_PROJECT)
    reviewer_id: Mapped[int] = mapped_column(ForeignKey("annotators.id"), index=True)
    kind: Mapped[str] = mapped_column(String(20))
    item_key: Mapped[str | None] = mapped_column(String(120), index=True)
    query_qid: Mapped[int | None] = mapped_column(BigInteger)
    candidate_qid: Mapped[int | None] = mapped_column(BigInteger)
    cluster_a: Mapped[str | None] = mapped_column(Text)
    cluster_b: Mapped[str | None] = mapped_column(Text)
    decision: Mapped[str] = mapped_column(String(10))
    note: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class JudgmentComment(Base):
    """A free-text comment on one judgment (the newest per judgment is shown)."""

    __tablename__ = "judgment_comments"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    judgment_id: Mapped[int] = mapped_column(ForeignKey("judgments.id"), index=True)
    annotator_id: Mapped[int] = mapped_column(ForeignKey("annotators.id"))
    text: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class Guideline(Base):
    """One version of a project's annotation guidelines; its newest row is in force, older ones are
    history. ``same_examples`` / ``different_examples``: one example pair per line."""

    __tablename__ = "guidelines"
    __table_args__ = (Index("ix_guidelines_project", "project"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    project: Mapped[str] = mapped_column(String(MAX_PROJECT_CHARS), server_default=FIRST_PROJECT)
    editor_id: Mapped[int] = mapped_column(ForeignKey("annotators.id"))
    text: Mapped[str] = mapped_column(Text)
    same_examples: Mapped[str] = mapped_column(Text)
    different_examples: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


# -- served labels (migration 0006): corrections served at once, their history -----------------

LABEL_VERSION_KINDS = ("apply", "rollback", "revert")


class LabelVersion(Base):
    """A version of the labels served over one bundle's corpus (``annotations.corrections``).

    Version 0 of every bundle is its own corpus and has no row. ``kind`` "apply": corrected
    clusters computed from the judgments then in force (``judgment_ids``; ``decisions``: the
    merges, splits and conflicts, as ``MergeResult.decisions``); "rollback": the labels of version
    ``restores`` served again; "revert": one decision undone by a reviewer's rejection, then
    applied. ``annotator_id``: who did it. Rows are never changed or deleted.
    """

    __tablename__ = "label_versions"
    __table_args__ = (
        UniqueConstraint("bundle_version", "number", name="uq_label_versions_number"),
        CheckConstraint(f"kind IN ({', '.join(repr(k) for k in LABEL_VERSION_KINDS)})", name="ck_label_versions_kind"),
        CheckConstraint("number >= 1", name="ck_label_versions_number"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    bundle_version: Mapped[str] = mapped_column(String(100), ForeignKey("bundles.version"))
    number: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(10))
    restores: Mapped[int | None] = mapped_column(Integer)
    annotator_id: Mapped[int] = mapped_column(ForeignKey("annotators.id"))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    note: Mapped[str | None] = mapped_column(Text)
    judgment_ids: Mapped[list[int]] = mapped_column(JSON)
    decisions: Mapped[list[dict]] = mapped_column(JSON)


class LabelChange(Base):
    """A question whose cluster or split in a label version differs from its bundle's snapshot
    (only those are stored: a version is the snapshot plus its changes)."""

    __tablename__ = "label_changes"

    label_version_id: Mapped[int] = mapped_column(ForeignKey("label_versions.id"), primary_key=True)
    qid: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    cluster: Mapped[str | None] = mapped_column(Text)
    split: Mapped[str] = mapped_column(String(10))


class ProjectRole(Base):
    """A person's role in a project (login mode; ``ui.common.AppContext.allowed``): ``owner``
    (uploads versions, trains, uses or discards a model, grants roles), ``reviewer`` (reviews and
    applies corrections, and judges) or ``annotator`` (judges). One role per person and project;
    a new grant replaces the old one."""

    __tablename__ = "project_roles"
    __table_args__ = (
        CheckConstraint(f"role IN ({', '.join(repr(role) for role in ROLES)})", name="ck_project_roles_role"),
        UniqueConstraint("project", "annotator_id", name="uq_project_roles_one"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    project: Mapped[str] = mapped_column(String(100))
    annotator_id: Mapped[int] = mapped_column(ForeignKey("annotators.id"))
    role: Mapped[str] = mapped_column(String(10))
    granted_by: Mapped[int] = mapped_column(ForeignKey("annotators.id"))
    granted_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class ProjectAction(Base):
    """An action that needed a role, as it was allowed: who, in which project, under which role
    (``admin``: one of the app's admins, ``QPR_ADMINS``), and what they did."""

    __tablename__ = "project_actions"
    __table_args__ = (
        CheckConstraint(f"role IN ({', '.join(repr(role) for role in (*ROLES, 'admin'))})", name="ck_project_actions_role"),
        Index("ix_project_actions_project", "project", "id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    project: Mapped[str] = mapped_column(String(100))
    annotator_id: Mapped[int] = mapped_column(ForeignKey("annotators.id"))
    role: Mapped[str] = mapped_column(String(10))
    action: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
