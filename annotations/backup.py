"""Backups of the annotation database taken while the app runs, their check, and restore.

SQLite (``backup``): SQLite's online backup API (``sqlite3.Connection.backup``) copies the live
file page by page into a new file; if a writer commits during the copy it starts again, so the copy
is one consistent state of the database (the app keeps writing meanwhile: the copy runs in steps and
holds no lock between them). The copy is written to a temporary sibling, switched out of WAL mode
(one self-contained file), checked (``PRAGMA integrity_check`` and the judgments it holds), then
moved into place (``qpr.fsutil.atomic.atomic_path``).

PostgreSQL: ``backup`` runs ``pg_dump --format=custom`` when it is on the PATH (the same
consistent snapshot, taken by the server); restoring it is ``pg_restore`` (docs/RELIABILITY.md).

``restore`` (SQLite) first copies the backup aside and checks that copy (``annotations.backup_check``:
a file that is valid SQLite but not an annotation database of this version, whole and consistent,
is refused before the live database is touched), then copies it into the database with the same
API: into a new file through a temporary sibling, or, with ``replace=True`` only, over an existing
database in one SQLite transaction (a running app's next read sees the restored database whole;
never half of it).

Each backup is noted beside the database (``last_backup``), for the app's status line.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
import subprocess
import tempfile
from contextlib import closing
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

from sqlalchemy import make_url
from sqlalchemy.engine import URL
from sqlalchemy.exc import ArgumentError

from annotations.backup_check import check_backup
from annotations.errors import AnnotationError
from qpr.errors import one_line
from qpr.fsutil.atomic import atomic_path
from qpr.settings import settings

PAGES_PER_STEP = 256  # pages copied per step of an online backup: the live database is locked only per step


@dataclass(frozen=True)
class Backup:
    """A backup taken: where, when (UTC, ISO), how many judgments it holds and the highest id."""

    path: str
    at: str
    judgments: int
    last_judgment_id: int | None


def _url(url: str) -> URL:
    try:
        return make_url(url)
    except ArgumentError as err:
        raise AnnotationError(f"not a database URL: {url!r} (expected e.g. sqlite:///data/annotations.db)") from err


def _sqlite_file(url: URL) -> Path | None:
    """The database file of a SQLite URL (None for another backend); in-memory databases are refused."""
    if url.get_backend_name() != "sqlite":
        return None
    if not url.database or url.database == ":memory:":
        raise AnnotationError("an in-memory SQLite database cannot be backed up or restored; use a file")
    return Path(url.database).resolve()


def judgment_ids(path: Path) -> list[int]:
    """The judgment ids in the SQLite annotation database at ``path`` (after an integrity check)."""
    try:
        with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as connection:
            problems = connection.execute("PRAGMA integrity_check").fetchall()
            if problems != [("ok",)]:
                raise AnnotationError(f"{path} is a damaged SQLite database ({problems[0][0]}); use another backup")
            return [row[0] for row in connection.execute("SELECT id FROM judgments ORDER BY id")]
    except sqlite3.DatabaseError as err:
        raise AnnotationError(f"{path} is not an annotation database ({err}); give a file written by "
                              "`qpr-annotations backup`") from err


def _copy(source: Path, target: Path, standalone: bool = True) -> None:
    """Copy the SQLite database ``source`` into ``target`` with the online backup API.
    ``standalone``: ``target`` is a new file, left as one self-contained file (rollback journal,
    not WAL); otherwise it is a live database that keeps its journal mode."""
    with closing(sqlite3.connect(f"file:{source}?mode=ro", uri=True)) as src, closing(sqlite3.connect(target)) as dst:
        # Into a live database in one step: one write transaction, so its readers never see half of it.
        src.backup(dst, pages=PAGES_PER_STEP if standalone else -1)
        if standalone:
            dst.execute("PRAGMA journal_mode = DELETE")


def backup(url: str, out: str | Path) -> Backup:
    """Back up the annotation database at ``url`` (SQLAlchemy URL) to the new file ``out``.

    Raises AnnotationError when the database cannot be read, ``out`` exists (a backup never
    replaces a file), or PostgreSQL's ``pg_dump`` is not installed."""
    parsed, out = _url(url), Path(out)
    if out.exists():
        raise AnnotationError(f"{out} exists; a backup never replaces a file: choose a new name")
    source = _sqlite_file(parsed)
    if source is None:
        return _pg_dump(parsed, out)
    if not source.is_file():
        raise AnnotationError(f"there is no database at {source}; check --db (or QPR_DB_URL)")
    with atomic_path(out) as tmp:
        try:
            _copy(source, tmp)
        except sqlite3.Error as err:
            raise AnnotationError(f"cannot back up {source}: {err}") from err
        ids = judgment_ids(tmp)
    done = Backup(str(out.resolve()), _now(), len(ids), ids[-1] if ids else None)
    _note(parsed, done)
    return done


def restore(backup_file: str | Path, url: str, replace: bool = False) -> Backup:
    """Restore the SQLite backup ``backup_file`` into the database at ``url``; returns what it holds.

    An existing database is replaced only with ``replace`` (its judgments are gone afterwards,
    unless they are in the backup). Before anything is written the backup is copied aside and
    that copy checked (``annotations.backup_check``: whole, this version's revision, its schema
    exactly as the migrations make it, no trigger or view of its own, rows that keep every
    constraint and a consistent judgment history): anything else is refused with one line and the
    database is left as it was. The copy checked is the one restored, and the restored database
    holds exactly its judgments: checked after the copy."""
    backup_file, parsed = Path(backup_file), _url(url)
    target = _sqlite_file(parsed)
    if target is None:
        raise AnnotationError("restore writes SQLite databases; restore a PostgreSQL dump with pg_restore "
                              "(see docs/RELIABILITY.md)")
    if not backup_file.is_file():
        raise AnnotationError(f"{backup_file}: no such backup file")
    existing = target.exists() and target.stat().st_size > 0
    if existing and not replace:
        raise AnnotationError(f"{target} is an existing database (it may be in use); nothing was changed. "
                              "To replace it with the backup, run again with --replace")
    with tempfile.TemporaryDirectory(prefix="qpr-restore-") as folder:
        staged = Path(folder) / "backup.db"
        try:
            _copy(backup_file, staged)
        except sqlite3.DatabaseError as err:
            raise AnnotationError(f"{backup_file} is not an annotation database ({one_line(err)}); nothing was "
                                  "changed: give a file written by `qpr-annotations backup`") from err
        check_backup(staged, name=backup_file)
        expected = judgment_ids(staged)
        if existing:
            try:
                _copy(staged, target, standalone=False)  # one SQLite transaction: readers see the old or the restored database
            except sqlite3.Error as err:
                raise AnnotationError(f"cannot restore into {target}: {err}; nothing was changed") from err
        else:
            with atomic_path(target) as tmp:
                _copy(staged, tmp)
    if judgment_ids(target) != expected:
        raise AnnotationError(f"the restored {target} does not hold the backup's judgments; restore again")
    return Backup(str(target), _now(), len(expected), expected[-1] if expected else None)


def _pg_dump(url: URL, out: Path) -> Backup:
    pg_dump = shutil.which("pg_dump")
    if pg_dump is None:
        raise AnnotationError("pg_dump is not installed here; install PostgreSQL's client tools, or run pg_dump "
                              "where they are (see docs/RELIABILITY.md)")
    libpq = url.set(drivername="postgresql").render_as_string(hide_password=False)
    with atomic_path(out) as tmp:
        result = subprocess.run([pg_dump, "--format=custom", "--file", str(tmp), "--dbname", libpq],
                                capture_output=True, text=True)
        if result.returncode:
            lines = result.stderr.strip().splitlines() or [f"exit status {result.returncode}"]
            raise AnnotationError(f"pg_dump failed: {lines[0]}")
    done = Backup(str(out.resolve()), _now(), -1, None)  # the count is known once restored (pg_restore)
    _note(url, done)
    return done


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def note_path(url: str | URL) -> Path:
    """Where the last backup of the database at ``url`` is noted: beside a SQLite file, else in
    the cache folder (``QPR_CACHE_DIR``) under a name made from the URL."""
    parsed = _url(url) if isinstance(url, str) else url
    source = _sqlite_file(parsed)
    if source is not None:
        return source.with_name(source.name + ".last-backup.json")
    key = hashlib.sha256(parsed.render_as_string(hide_password=True).encode()).hexdigest()[:16]
    return settings().cache_dir / f"last-backup-{key}.json"


def _note(url: URL, done: Backup) -> None:
    with atomic_path(note_path(url)) as tmp:
        tmp.write_text(json.dumps(asdict(done)))


def last_backup(url: str | URL) -> Backup | None:
    """The last backup noted for the database at ``url``, or None (never backed up, an unreadable
    note, or an in-memory database)."""
    try:
        return Backup(**json.loads(note_path(url).read_text()))
    except (OSError, ValueError, TypeError):  # AnnotationError (in-memory) is a ValueError too
        return None


def backup_line(url: str | URL) -> str:
    """One line for the app's status: when the database was last backed up, or how to back it up."""
    done = last_backup(url)
    if done is None:
        return "No backup of the annotation database yet: run `qpr-annotations backup --out FILE`."
    held = f", {done.judgments} judgments" if done.judgments >= 0 else ""
    return f"Last backup of the annotation database: {done.at.replace('T', ' ').replace('+00:00', ' UTC')}{held}."
