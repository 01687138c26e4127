"""Backups that are valid SQLite (or nearly) but not ours, and what restoring each does to a live
database (``python -m bench.reliability_ops restore`` measures them; the tests restore each).

Each tamper takes a copy of a good backup (judgments with a history: replaced, withdrawn, in
force) and changes it as an attacker or a mistaken operator might: a trigger that deletes the
judgments, a view, a 9-byte change inside a CHECK constraint, a foreign table set, an older or an
unknown schema revision, a judgment history that contradicts itself, rows written around a CHECK
constraint, a scrambled page. The bench restores each over a live database with ``--replace`` as
``qpr-annotations restore`` does, and records whether it was refused in one line, whether the
live file is byte for byte as it was, and whether the next judgment is then recorded (and no
earlier one lost). ``bench.reliability_ops`` folds the figures into ``bench/results/reliability.json``.
"""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
import tempfile
from contextlib import closing
from pathlib import Path

import pandas as pd
from sqlalchemy.exc import SQLAlchemyError

from annotations.backup import backup, judgment_ids, restore
from annotations.db import open_store
from annotations.errors import AnnotationError
from qpr.errors import one_line

CORPUS = pd.DataFrame({"qid": range(1, 41), "question": [f"question {i}" for i in range(1, 41)],
                       "cluster": [f"c{i // 4}" for i in range(40)], "split": "train"})


def good_backup(folder: Path) -> tuple[str, Path]:
    """A live database with a judgment history (replaced, withdrawn and current judgments, no
    "different" label so that a changed CHECK on it still passes SQLite's integrity check) and
    a backup of it: (the live URL, the backup)."""
    url = f"sqlite:///{folder / 'live.db'}"
    with open_store(url, project="demo") as store:
        store.corpora.register("v1", CORPUS)
        for i in range(30):
            store.judgments.record(f"annotator {i % 3}", 2 + i % 10, ("same", "unsure")[i % 2], "v1", query_qid=1)
        store.judgments.undo_last("annotator 0")
    out = folder / "good.db"
    backup(url, out)
    return url, out


def _sql(*statements: str):
    def tamper(path: Path) -> None:
        with closing(sqlite3.connect(path)) as connection:
            for statement in statements:
                connection.execute(statement)
            connection.commit()
    return tamper


def _schema_text(old: str, new: str):
    """A change inside the stored definition of the judgments table (``writable_schema``)."""
    def tamper(path: Path) -> None:
        with closing(sqlite3.connect(path)) as connection:
            version = connection.execute("PRAGMA schema_version").fetchone()[0]
            connection.execute("PRAGMA writable_schema = ON")
            connection.execute("UPDATE sqlite_master SET sql = replace(sql, ?, ?) WHERE name = 'judgments'", (old, new))
            connection.execute(f"PRAGMA schema_version = {version + 1}")
            connection.commit()
    return tamper


def _foreign(path: Path) -> None:
    path.unlink()
    _sql("CREATE TABLE judgments (id INTEGER PRIMARY KEY, label TEXT)",
         "INSERT INTO judgments (label) VALUES ('same'), ('different')")(path)


def _scrambled(path: Path) -> None:
    with closing(sqlite3.connect(path)) as connection:
        page = connection.execute("PRAGMA page_size").fetchone()[0]
    data = bytearray(path.read_bytes())
    for offset in range(3 * page + 8, 3 * page + 400):  # the third page's cells, past its header
        data[offset] = (data[offset] * 31 + 7) % 256
    path.write_bytes(bytes(data))


TAMPERS = {
    "trigger": _sql("CREATE TRIGGER keep_one AFTER INSERT ON judgments BEGIN DELETE FROM judgments WHERE id < NEW.id; END"),
    "view": _sql("CREATE VIEW every_judgment AS SELECT * FROM judgments"),
    "changed_check": _schema_text("'different'", "'DIFFERENT'"),  # 9 bytes inside ck_judgments_label
    "foreign_tables": _foreign,
    "older_revision": _sql("UPDATE alembic_version SET version_num = '0007'"),
    "unknown_revision": _sql("UPDATE alembic_version SET version_num = 'ffff9999'"),
    "broken_history": _sql("UPDATE judgments SET is_current = NULL WHERE id = (SELECT MAX(id) FROM judgments "
                           "WHERE is_current = 1)"),  # out of force, neither replaced nor withdrawn
    "rows_around_a_check": _sql("PRAGMA ignore_check_constraints = ON",
                                "UPDATE judgments SET label = 'maybe' WHERE id = 1"),
    "scrambled_page": _scrambled,
}


def tampered(folder: Path, good: Path, name: str) -> Path:
    """A copy of the backup ``good`` changed by ``TAMPERS[name]``."""
    path = folder / f"{name}.db"
    shutil.copyfile(good, path)
    TAMPERS[name](path)
    return path


def try_restore(url: str, live: Path, backup_file: Path) -> dict:
    """Restore ``backup_file`` over the live database; then record one more judgment."""
    before, ids = hashlib.sha256(live.read_bytes()).hexdigest(), judgment_ids(live)
    outcome, message = "restored", ""
    try:
        restore(backup_file, url, replace=True)
    except AnnotationError as err:
        outcome, message = "refused", str(err)
    untouched = hashlib.sha256(live.read_bytes()).hexdigest() == before
    try:
        with open_store(url, project="demo") as store:
            next_id = store.judgments.record("after the restore", 5, "different", "v1", query_qid=1)
        after = judgment_ids(live)
        kept, next_error = next_id in after and set(ids) <= set(after), ""
    except (AnnotationError, SQLAlchemyError) as err:  # what a restored foreign file did before the check
        kept, next_error = False, one_line(err)
    return {"outcome": outcome, "one_line": "\n" not in message, "message": message, "live_untouched": untouched,
            "next_judgment_kept": kept, "next_judgment_error": next_error}


def run_tampered(log=print) -> dict:
    """Every tamper, each against a fresh live database."""
    cases = {}
    for name in TAMPERS:
        with tempfile.TemporaryDirectory() as folder:
            url, good = good_backup(Path(folder))
            case = try_restore(url, Path(folder) / "live.db", tampered(Path(folder), good, name))
        log(f"{name}: {case['outcome']}: {case['message'][:160]}")
        cases[name] = case
    refused = [c for c in cases.values() if c["outcome"] == "refused" and c["one_line"] and c["live_untouched"]
               and c["next_judgment_kept"]]
    return {"tried": len(cases), "refused": len(refused), "cases": cases}

