"""Alembic environment: migrates the connection that annotations.db.migrate hands over.

There is no alembic.ini: annotations.db builds the Config in code (script_location = this folder),
so migrations run the same from any working directory.
"""

from alembic import context

from annotations.models import Base

context.configure(
    connection=context.config.attributes["connection"],
    target_metadata=Base.metadata,
    render_as_batch=True,  # SQLite cannot ALTER most things; batch mode rebuilds tables instead
)
with context.begin_transaction():
    context.run_migrations()
