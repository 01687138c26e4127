"""The role each judgment was made under (issue 38: roles per project, recorded with every
action): NULL for judgments made with typed names, which carry no role, and for older ones.

Revision ID: 0008
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


CHECK = "role IS NULL OR role IN ('owner', 'reviewer', 'annotator', 'admin')"


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        # SQLite adds a table constraint only by copying the table; a column's own CHECK comes with
        # ADD COLUMN, so the judgments are not rewritten.
        op.execute(f"ALTER TABLE judgments ADD COLUMN role VARCHAR(10) CONSTRAINT ck_judgments_role CHECK ({CHECK})")
    else:
        op.add_column("judgments", sa.Column("role", sa.String(10), nullable=True))
        op.create_check_constraint("ck_judgments_role", "judgments", CHECK)


def downgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":  # SQLite drops a column's own CHECK with the column
        op.drop_constraint("ck_judgments_role", "judgments", type_="check")
    op.drop_column("judgments", "role")
