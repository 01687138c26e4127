"""Served label versions: corrected clusters served at once without retraining, with history.

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

from annotations.models import UTCDateTime

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "label_versions",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("bundle_version", sa.String(100), sa.ForeignKey("bundles.version"), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(10), nullable=False),
        sa.Column("restores", sa.Integer(), nullable=True),
        sa.Column("annotator_id", sa.Integer(), sa.ForeignKey("annotators.id"), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("judgment_ids", sa.JSON(), nullable=False),
        sa.Column("decisions", sa.JSON(), nullable=False),
        sa.UniqueConstraint("bundle_version", "number", name="uq_label_versions_number"),
        sa.CheckConstraint("kind IN ('apply', 'rollback', 'revert')", name="ck_label_versions_kind"),
        sa.CheckConstraint("number >= 1", name="ck_label_versions_number"),
    )
    op.create_table(
        "label_changes",
        sa.Column("label_version_id", sa.Integer(), sa.ForeignKey("label_versions.id"), primary_key=True),
        sa.Column("qid", sa.BigInteger(), primary_key=True, autoincrement=False),
        sa.Column("cluster", sa.Text(), nullable=True),
        sa.Column("split", sa.String(10), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("label_changes")
    op.drop_table("label_versions")
