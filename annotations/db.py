"""Opening the annotation database: engine settings per backend, schema migration, clear errors.

``open_store(url, project=...)`` accepts any SQLAlchemy URL. Without one it uses ``QPR_DB_URL`` or, failing
that, the SQLite file ``data/annotations.db`` under the working directory. SQLite connections run
in WAL mode (readers never block the writer) with a busy timeout and foreign keys on, and every
write transaction starts with ``BEGIN IMMEDIATE`` so concurrent writers queue for the lock instead
of failing half-way. The schema is brought to the current Alembic revision on open; a database
written by a newer version of this package (an unknown revision) is refused.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, create_engine, event, make_url, text
from sqlalchemy.engine import URL
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from annotations.errors import AnnotationError, DatabaseUnavailable
from annotations.store import AnnotationStore
from qpr.settings import settings

DEFAULT_URL = "sqlite:///data/annotations.db"
MIGRATIONS = Path(__file__).resolve().parent / "migrations"
SQLITE_BUSY_TIMEOUT_MS = 30_000
WRITE_OPTION = "annotations_write"  # execution option marking a write transaction
MIGRATION_LOCK_ID = 472_019_313  # arbitrary constant: PostgreSQL advisory lock held while migrating


def alembic_config() -> Config:
    """Alembic settings built in code, so migrations work from any working directory."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


def _parse_url(url: str) -> URL:
    try:
        return make_url(url)
    except ArgumentError as err:
        raise AnnotationError(f"not a database URL: {url!r} (expected e.g. sqlite:///data/annotations.db)") from err


def _sqlite_settings(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record) -> None:
        # SQLAlchemy emits BEGIN itself (below); sqlite3's own implicit BEGIN would be DEFERRED
        # and skip DDL, breaking both write queuing and transactional migrations.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection) -> None:
        # A write transaction takes the write lock up front (waiting up to the busy timeout); a
        # deferred one that later writes could fail instead of waiting.
        immediate = connection.get_execution_options().get(WRITE_OPTION)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


def _outage_errors(engine: Engine) -> None:
    @event.listens_for(engine, "handle_error")
    def _on_error(context) -> None:
        # A pre-ping's failure is the pool's business: it re-connects and the caller never sees it.
        if context.is_pre_ping:
            return
        problem = outage(context.original_exception, context.is_disconnect or context.connection is None)
        if problem:
            raise DatabaseUnavailable(f"the annotation database {problem}") from context.sqlalchemy_exception


def outage(error: BaseException, connection_lost: bool) -> str | None:
    """What is wrong, when ``error`` (a DB-API exception) says the database is away rather than the
    statement wrong: a connection that failed or was lost (``connection_lost``), a server shutting
    down or starting (SQLSTATE classes 08 and 57P), or a full disk (SQLite's SQLITE_FULL,
    PostgreSQL's 53100)."""
    sqlstate = getattr(error, "sqlstate", None) or ""
    if getattr(error, "sqlite_errorname", None) == "SQLITE_FULL" or sqlstate == "53100":
        return "cannot be written: its disk is full; free space on it (the app resumes by itself)"
    if connection_lost or sqlstate.startswith(("08", "57P")):
        return (f"cannot be reached ({_first_line(error)}); the app reconnects by itself once it is back, "
                "try again in a moment")
    return None


def make_engine(url: str | URL) -> Engine:
    """An engine for ``url`` with the per-backend settings above (SQLite folders are created).
    Connections are checked before use (a restarted server's dead ones are replaced), and errors
    that mean the database is away raise ``DatabaseUnavailable`` (``outage``)."""
    url = _parse_url(url) if isinstance(url, str) else url
    try:
        engine = create_engine(url, pool_pre_ping=True)
    except (ArgumentError, SQLAlchemyError, ImportError) as err:
        raise AnnotationError(f"cannot use database URL {_safe(url)}: {_first_line(err)}") from err
    _outage_errors(engine)
    if engine.dialect.name == "sqlite" and url.database and url.database != ":memory:":
        try:
            Path(url.database).parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise AnnotationError(f"cannot create the folder for {url.database}: {err.strerror}") from err
        _sqlite_settings(engine)
    return engine


def migrate(engine: Engine) -> str:
    """Upgrade the schema to the newest revision in one locked transaction; returns that revision.

    Refuses a database whose revision this package does not know (written by a newer version).
    """
    config = alembic_config()
    script = ScriptDirectory.from_config(config)
    known = {rev.revision for rev in script.walk_revisions()}
    with engine.connect() as connection:
        with _foreign_keys_checked_at_the_end(connection):
            _upgrade(engine, connection, config, script, known)
    return script.get_current_head()


@contextmanager
def _foreign_keys_checked_at_the_end(connection: Connection) -> Iterator[None]:
    """On SQLite, foreign keys off for the migration and checked once before it commits: a
    migration that copies a table (Alembic's batch mode) drops the original while other tables'
    rows point at it, and SQLite can only be told so outside a transaction (its own advice for
    changing a table). Other databases check them as usual."""
    if connection.dialect.name != "sqlite":
        yield
        return
    connection.connection.driver_connection.execute("PRAGMA foreign_keys = OFF")
    try:
        yield
    finally:
        connection.connection.driver_connection.execute("PRAGMA foreign_keys = ON")


def _upgrade(engine: Engine, connection: Connection, config: Config, script: ScriptDirectory, known: set[str]) -> None:
    with connection.execution_options(**{WRITE_OPTION: True}).begin():
        if engine.dialect.name == "postgresql":
            # Several processes may open a fresh database at once; only one may create the tables.
            connection.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": MIGRATION_LOCK_ID})
        current = MigrationContext.configure(connection).get_current_heads()
        unknown = [rev for rev in current if rev not in known]
        if unknown:
            raise AnnotationError(
                f"the annotation database {_safe(engine.url)} has schema revision {', '.join(unknown)}, which this "
                f"version does not know (it knows up to {script.get_current_head()}); it was written by a newer "
                "version: upgrade this software or use another database"
            )
        config.attributes["connection"] = connection
        command.upgrade(config, "head")
        if engine.dialect.name == "sqlite":
            broken = connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
            if broken:
                raise AnnotationError(f"the annotation database {_safe(engine.url)} could not be upgraded: its table "
                                      f"{broken[0][0]} has rows that point at missing rows of {broken[0][2]}; restore a backup")


def database_url(url: str | None = None) -> str:
    """``url``, else ``QPR_DB_URL``, else ``sqlite:///data/annotations.db``."""
    return url or settings().db_url or DEFAULT_URL


def open_store(url: str | None = None, *, project: str) -> AnnotationStore:
    """Open (creating or upgrading as needed) the annotation database at ``url``, seen through
    ``project`` (every query is scoped to one project; ``AnnotationStore.for_project`` reaches
    another).

    ``url`` None means ``QPR_DB_URL``, else ``sqlite:///data/annotations.db``. Raises
    AnnotationError with a one-line message for a bad URL, an unreachable server or a newer schema.
    """
    engine = make_engine(database_url(url))
    try:
        migrate(engine)
    except DatabaseUnavailable as err:
        engine.dispose()
        raise AnnotationError(f"cannot open the annotation database {_safe(engine.url)}: "
                              f"{_first_line(err.__cause__ or err)}") from err
    except AnnotationError:
        engine.dispose()
        raise
    except (SQLAlchemyError, OSError) as err:
        engine.dispose()
        raise AnnotationError(f"cannot open the annotation database {_safe(engine.url)}: {_first_line(err)}") from err
    return AnnotationStore(engine, WRITE_OPTION, project)


def _safe(url: URL) -> str:
    return url.render_as_string(hide_password=True)


def _first_line(err: BaseException) -> str:
    cause = getattr(err, "orig", None) or err
    return (str(cause).strip().splitlines() or [type(cause).__name__])[0]
