"""Roles per project (issue 38, projects as workspaces): who holds which role in a project, and
every action that needed one, with the role it was allowed under.

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

from annotations.models import UTCDateTime

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "project_roles",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("project", sa.String(100), nullable=False),
        sa.Column("annotator_id", sa.Integer(), sa.ForeignKey("annotators.id"), nullable=False),
        sa.Column("role", sa.String(10), nullable=False),
        sa.Column("granted_by", sa.Integer(), sa.ForeignKey("annotators.id"), nullable=False),
        sa.Column("granted_at", UTCDateTime(), nullable=False),
        sa.CheckConstraint("role IN ('owner', 'reviewer', 'annotator')", name="ck_project_roles_role"),
        sa.UniqueConstraint("project", "annotator_id", name="uq_project_roles_one"),
    )
    op.create_table(
        "project_actions",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("project", sa.String(100), nullable=False),
        sa.Column("annotator_id", sa.Integer(), sa.ForeignKey("annotators.id"), nullable=False),
        sa.Column("role", sa.String(10), nullable=False),
        sa.Column("action", sa.Text(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.CheckConstraint("role IN ('owner', 'reviewer', 'annotator', 'admin')", name="ck_project_actions_role"),
    )
    op.create_index("ix_project_actions_project", "project_actions", ["project", "id"])


def downgrade() -> None:
    op.drop_index("ix_project_actions_project", "project_actions")
    op.drop_table("project_actions")
    op.drop_table("project_roles")
