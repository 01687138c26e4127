"""Annotator identity: one annotator per name up to case, Unicode form and surrounding spaces.

Revision ID: 0003
Revises: 0002

Adds ``annotators.name_key`` with a unique index. Annotators whose names had the same key
("Alice", "alice") were one person recorded twice; they are merged into the first one written
(lowest id, whose name stays the one shown): their judgments move to it, and where both had a
current label for the same item, the later label stays current and supersedes the earlier one,
as if one person had judged twice. Nothing is deleted but the duplicate annotator rows.
"""

import unicodedata

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def _key(name: str) -> str:
    # Frozen copy of annotations.names.annotator_key as of this revision (migrations must not change).
    folded = unicodedata.normalize("NFC", unicodedata.normalize("NFC", name.strip()).casefold())
    return "".join(c for c in folded if unicodedata.category(c) != "Cf")


def upgrade() -> None:
    op.add_column("annotators", sa.Column("name_key", sa.String(400), nullable=False, server_default=""))
    bind = op.get_bind()
    first: dict[str, int] = {}
    for annotator_id, name in bind.execute(sa.text("SELECT id, name FROM annotators ORDER BY id")).all():
        key = _key(name)
        keep = first.setdefault(key, annotator_id)
        if keep == annotator_id:
            bind.execute(sa.text("UPDATE annotators SET name_key = :key WHERE id = :id"), {"key": key, "id": keep})
            continue
        both_current = bind.execute(sa.text(
            "SELECT a.id, b.id FROM judgments a JOIN judgments b ON a.item_key = b.item_key "
            "WHERE a.annotator_id = :keep AND b.annotator_id = :dup "
            "AND a.is_current IS NOT NULL AND b.is_current IS NOT NULL"
        ), {"keep": keep, "dup": annotator_id}).all()
        for a, b in both_current:
            older, newer = min(a, b), max(a, b)
            bind.execute(sa.text("UPDATE judgments SET is_current = NULL, superseded_by = :newer WHERE id = :older"),
                         {"newer": newer, "older": older})
        bind.execute(sa.text("UPDATE judgments SET annotator_id = :keep WHERE annotator_id = :dup"),
                     {"keep": keep, "dup": annotator_id})
        bind.execute(sa.text("DELETE FROM annotators WHERE id = :dup"), {"dup": annotator_id})
    op.create_index("uq_annotators_name_key", "annotators", ["name_key"], unique=True)


def downgrade() -> None:
    op.drop_index("uq_annotators_name_key", table_name="annotators")
    with op.batch_alter_table("annotators") as batch:
        batch.drop_column("name_key")
