"""Every row belongs to a project (issue 54: one project's work stays in that project).

Each project numbers its questions from 1, so a judgment, comment, export, swap or label version
is only meaningful inside its project. A bundle version now names its project, and everything
recorded against a bundle version belongs to that project through it; judgments also carry it
(the same item, the same qids, is another item in another project: one current label per
annotator, project and item), and adjudications and guidelines, which name no bundle version,
carry it themselves. Rows written before this revision belong to the demo project
(``FIRST_PROJECT``) until a project claims its own bundle versions when it is opened
(``store.corpora.claim_versions``), taking their judgments and the adjudications of their items
along; guidelines written before stay the demo's.

Revision ID: 0009
Revises: 0008
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

FIRST_PROJECT = "demo"  # annotations.models.FIRST_PROJECT as of this revision
TABLES = ("bundles", "adjudications", "guidelines", "judgments")


def upgrade() -> None:
    for table in TABLES:
        # server_default fills the existing rows; the store always sets the project itself.
        op.add_column(table, sa.Column("project", sa.String(100), nullable=False, server_default=FIRST_PROJECT))
        op.create_index(f"ix_{table}_project", table, ["project"])
    # The one-current-label rule becomes per project. SQLite changes a table's constraint only by
    # copying the table (Alembic's batch mode, under ``annotations.db.migrate``'s foreign-key
    # check; PostgreSQL alters it in place).
    with op.batch_alter_table("judgments") as batch:
        batch.drop_constraint("uq_judgments_one_current", type_="unique")
        batch.create_unique_constraint("uq_judgments_one_current", ["annotator_id", "project", "item_key", "is_current"])


def downgrade() -> None:
    with op.batch_alter_table("judgments") as batch:
        batch.drop_constraint("uq_judgments_one_current", type_="unique")
        batch.create_unique_constraint("uq_judgments_one_current", ["annotator_id", "item_key", "is_current"])
    for table in TABLES:
        op.drop_index(f"ix_{table}_project", table)
        with op.batch_alter_table(table) as batch:
            batch.drop_column("project")
