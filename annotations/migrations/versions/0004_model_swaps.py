"""Model swaps: who put a retrained model into service, when, replacing which, from which judgments.

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

from annotations.models import UTCDateTime

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "model_swaps",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("annotator_id", sa.Integer(), sa.ForeignKey("annotators.id"), nullable=False),
        sa.Column("bundle_version", sa.String(100), sa.ForeignKey("bundles.version"), nullable=False),
        sa.Column("replaced_version", sa.String(100), sa.ForeignKey("bundles.version"), nullable=True),
        sa.Column("judgment_ids", sa.JSON(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("model_swaps")
