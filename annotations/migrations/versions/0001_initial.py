"""Initial schema: corpus snapshots, annotators, judgments with history.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

from annotations.models import UTCDateTime

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "bundles",
        sa.Column("version", sa.String(100), primary_key=True),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("questions", sa.Integer(), nullable=False),
        sa.Column("registered_at", UTCDateTime(), nullable=False),
    )
    op.create_table(
        "corpus_questions",
        sa.Column("bundle_version", sa.String(100), sa.ForeignKey("bundles.version"), primary_key=True),
        sa.Column("qid", sa.BigInteger(), primary_key=True, autoincrement=False),
        sa.Column("question", sa.Text(), nullable=False),
        sa.Column("cluster", sa.Text(), nullable=True),
        sa.Column("split", sa.String(10), nullable=False),
    )
    op.create_table(
        "annotators",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(100), nullable=False, unique=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
    )
    op.create_table(
        "judgments",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("annotator_id", sa.Integer(), sa.ForeignKey("annotators.id"), nullable=False),
        sa.Column("bundle_version", sa.String(100), sa.ForeignKey("bundles.version"), nullable=False),
        sa.Column("query_qid", sa.BigInteger(), nullable=True),
        sa.Column("query_text", sa.Text(), nullable=True),
        sa.Column("candidate_qid", sa.BigInteger(), nullable=False),
        sa.Column("item_key", sa.String(120), nullable=False),
        sa.Column("label", sa.String(10), nullable=False),
        sa.Column("rank", sa.Integer(), nullable=True),
        sa.Column("distance", sa.Float(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("is_current", sa.Boolean(), nullable=True),
        sa.Column("superseded_by", sa.Integer(), sa.ForeignKey("judgments.id"), nullable=True),
        sa.Column("withdrawn_at", UTCDateTime(), nullable=True),
        sa.ForeignKeyConstraint(["bundle_version", "candidate_qid"], ["corpus_questions.bundle_version", "corpus_questions.qid"]),
        sa.ForeignKeyConstraint(["bundle_version", "query_qid"], ["corpus_questions.bundle_version", "corpus_questions.qid"]),
        sa.CheckConstraint("label IN ('same', 'different', 'unsure')", name="ck_judgments_label"),
        sa.CheckConstraint("(query_qid IS NULL) <> (query_text IS NULL)", name="ck_judgments_one_query"),
        sa.CheckConstraint(
            "is_current IS NULL OR (superseded_by IS NULL AND withdrawn_at IS NULL)", name="ck_judgments_current"
        ),
        sa.UniqueConstraint("annotator_id", "item_key", "is_current", name="uq_judgments_one_current"),
    )
    op.create_index("ix_judgments_annotator_id", "judgments", ["annotator_id"])


def downgrade() -> None:
    op.drop_table("judgments")
    op.drop_table("annotators")
    op.drop_table("corpus_questions")
    op.drop_table("bundles")
