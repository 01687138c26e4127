"""Record exports: which judgments each export included and the merges/conflicts it derived.

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

from annotations.models import UTCDateTime

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "exports",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("bundle_version", sa.String(100), sa.ForeignKey("bundles.version"), nullable=True),
        sa.Column("format", sa.String(10), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("questions", sa.Integer(), nullable=False),
        sa.Column("clusters_before", sa.Integer(), nullable=False),
        sa.Column("clusters_after", sa.Integer(), nullable=False),
    )
    op.create_table(
        "export_judgments",
        sa.Column("export_id", sa.Integer(), sa.ForeignKey("exports.id"), primary_key=True),
        sa.Column("judgment_id", sa.Integer(), sa.ForeignKey("judgments.id"), primary_key=True),
    )
    op.create_table(
        "merge_decisions",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("export_id", sa.Integer(), sa.ForeignKey("exports.id"), nullable=False),
        sa.Column("decision", sa.String(20), nullable=False),
        sa.Column("cluster_a", sa.Text(), nullable=False),
        sa.Column("cluster_b", sa.Text(), nullable=False),
        sa.Column("judgment_ids", sa.JSON(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
    )
    op.create_index("ix_merge_decisions_export_id", "merge_decisions", ["export_id"])


def downgrade() -> None:
    op.drop_table("merge_decisions")
    op.drop_table("export_judgments")
    op.drop_table("exports")
