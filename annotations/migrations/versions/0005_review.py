"""Review: adjudications (reviewer decisions on items and cluster pairs), judgment comments,
annotation guidelines.

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

from annotations.models import UTCDateTime

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "adjudications",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("reviewer_id", sa.Integer(), sa.ForeignKey("annotators.id"), nullable=False),
        sa.Column("kind", sa.String(20), nullable=False),
        sa.Column("item_key", sa.String(120), nullable=True),
        sa.Column("query_qid", sa.BigInteger(), nullable=True),
        sa.Column("candidate_qid", sa.BigInteger(), nullable=True),
        sa.Column("cluster_a", sa.Text(), nullable=True),
        sa.Column("cluster_b", sa.Text(), nullable=True),
        sa.Column("decision", sa.String(10), nullable=False),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.CheckConstraint("kind IN ('item', 'cluster_pair')", name="ck_adjudications_kind"),
        sa.CheckConstraint("decision IN ('same', 'different', 'apply', 'reject')", name="ck_adjudications_decision"),
        sa.CheckConstraint("(kind = 'item') = (item_key IS NOT NULL)", name="ck_adjudications_item"),
    )
    op.create_index("ix_adjudications_reviewer_id", "adjudications", ["reviewer_id"])
    op.create_index("ix_adjudications_item_key", "adjudications", ["item_key"])
    op.create_table(
        "judgment_comments",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("judgment_id", sa.Integer(), sa.ForeignKey("judgments.id"), nullable=False),
        sa.Column("annotator_id", sa.Integer(), sa.ForeignKey("annotators.id"), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
    )
    op.create_index("ix_judgment_comments_judgment_id", "judgment_comments", ["judgment_id"])
    op.create_table(
        "guidelines",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("editor_id", sa.Integer(), sa.ForeignKey("annotators.id"), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("same_examples", sa.Text(), nullable=False),
        sa.Column("different_examples", sa.Text(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("guidelines")
    op.drop_table("judgment_comments")
    op.drop_table("adjudications")
