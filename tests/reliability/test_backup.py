"""Backups taken while a writer keeps writing, checked by restoring them; restore's refusals.

A consistent copy means one state of the database: every judgment acknowledged before the
backup started is in it, and it holds exactly the judgments with ids up to its last one (no
judgment missing in the middle, none half-written).
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import threading

import pytest
from alembic import command

from annotations.backup import backup, judgment_ids, last_backup, restore
from annotations.db import alembic_config, make_engine, open_store
from annotations.errors import AnnotationError
from harness.tampered_backups import TAMPERS, good_backup, tampered, try_restore
from conftest import make_corpus
from qpr.serving.served_model import ServedModel
from ui.common import AppContext
from ui.page import QPRPage
from workflows.cli import main as annotations_main


def _writing(store, stop: threading.Event, acknowledged: list[int]) -> threading.Thread:
    """A thread recording judgments one after another until ``stop``, appending each id returned."""
    def run() -> None:
        i = 0
        while not stop.is_set():
            acknowledged.append(store.judgments.record(f"writer {i % 3}", 2 + i % 100, ("same", "different")[i % 2], "v1",
                                             query_qid=1, rank=1 + i % 10))
            i += 1
    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_backup_while_writing_is_consistent_and_restores_equal(scratch_dir):
    url = f"sqlite:///{scratch_dir / 'live.db'}"
    out = scratch_dir / "backups" / "b1.db"
    with open_store(url, project="demo") as store:
        store.corpora.register("v1", make_corpus())
        stop, acknowledged = threading.Event(), []
        thread = _writing(store, stop, acknowledged)
        try:
            while len(acknowledged) < 50:
                stop.wait(0.01)
            before = list(acknowledged)
            done = backup(url, out)
            while len(acknowledged) < len(before) + 50:  # the writer went on after the backup
                stop.wait(0.01)
        finally:
            stop.set()
            thread.join()
    copied = judgment_ids(out)
    final = judgment_ids(scratch_dir / "live.db")
    assert set(before) <= set(copied)
    assert copied == [i for i in final if i <= copied[-1]]  # one state: a prefix of the history, no holes
    assert len(final) > len(copied)
    assert (done.judgments, done.last_judgment_id) == (len(copied), copied[-1])
    assert last_backup(url) == done
    assert not list(out.parent.glob(".*"))  # no temporary left beside it

    restored_url = f"sqlite:///{scratch_dir / 'restored.db'}"
    assert restore(out, restored_url).judgments == len(copied)
    with open_store(restored_url, project="demo") as store:
        frame = store.judgments.frame(current_only=False)
    assert frame["id"].tolist() == copied


def test_restore_refuses_an_existing_database_unless_asked(scratch_dir):
    live, other = scratch_dir / "live.db", scratch_dir / "other.db"
    with open_store(f"sqlite:///{live}", project="demo") as store:
        store.corpora.register("v1", make_corpus())
        store.judgments.record("alice", 2, "same", "v1", query_qid=1)
    backup(f"sqlite:///{live}", scratch_dir / "b.db")
    with open_store(f"sqlite:///{other}", project="demo") as store:  # a database in use, with other judgments
        store.corpora.register("v1", make_corpus())
        for qid in (3, 4, 5):
            store.judgments.record("bob", qid, "different", "v1", query_qid=1)
        before = hashlib.sha256(other.read_bytes()).hexdigest()
        with pytest.raises(AnnotationError, match="--replace"):
            restore(scratch_dir / "b.db", f"sqlite:///{other}")
        assert hashlib.sha256(other.read_bytes()).hexdigest() == before
        restore(scratch_dir / "b.db", f"sqlite:///{other}", replace=True)
        # the open store sees the restored database whole on its next read
        assert store.judgments.frame(current_only=False)["annotator"].tolist() == ["alice"]
        store.judgments.record("carol", 6, "same", "v1", query_qid=1)  # and keeps writing to it
    assert len(judgment_ids(other)) == 2


def test_bad_backups_and_targets_are_refused_with_one_line(scratch_dir):
    live = scratch_dir / "live.db"
    with open_store(f"sqlite:///{live}", project="demo") as store:
        store.corpora.register("v1", make_corpus())
    (scratch_dir / "notes.txt").write_text("not a database")
    (scratch_dir / "taken.db").write_text("someone's file")
    cases = [
        (lambda: backup(f"sqlite:///{live}", scratch_dir / "taken.db"), "never replaces"),
        (lambda: backup(f"sqlite:///{scratch_dir / 'none.db'}", scratch_dir / "b.db"), "no database"),
        (lambda: backup("sqlite://", scratch_dir / "b.db"), "in-memory"),
        (lambda: backup("not a url", scratch_dir / "b.db"), "not a database URL"),
        (lambda: restore(scratch_dir / "notes.txt", f"sqlite:///{scratch_dir / 'new.db'}"), "not an annotation database"),
        (lambda: restore(scratch_dir / "missing.db", f"sqlite:///{scratch_dir / 'new.db'}"), "no such backup"),
    ]
    for call, message in cases:
        with pytest.raises(AnnotationError, match=message) as err:
            call()
        assert "\n" not in str(err.value)
    assert (scratch_dir / "taken.db").read_text() == "someone's file"
    assert not (scratch_dir / "new.db").exists()


TAMPERED = {
    "trigger": "has a trigger keep_one of its own, which this version never makes",
    "view": "has a view every_judgment of its own",
    "changed_check": "defines the table judgments otherwise than this version's migrations: \"'DIFFERENT' , 'unsure'\" "
                     "where they have \"'different' , 'unsure'\"",
    "foreign_tables": "holds no schema revision (no alembic_version table): it is not an annotation database",
    "older_revision": "is at schema revision 0007, an older one than this version's",
    "unknown_revision": "has schema revision ffff9999, which this version does not know",
    "broken_history": "judgment 30 is out of force but neither replaced nor withdrawn",
    "rows_around_a_check": "has 1 row(s) in judgments that break ck_judgments_label",
    "scrambled_page": "fails SQLite's integrity check (",
}


@pytest.mark.parametrize("name", sorted(TAMPERS))
def test_a_backup_that_is_not_ours_is_refused_before_the_live_database_is_touched(name, scratch_dir):
    url, good = good_backup(scratch_dir)
    case = try_restore(url, scratch_dir / "live.db", tampered(scratch_dir, good, name))
    assert case["outcome"] == "refused" and case["one_line"], case["message"]
    assert TAMPERED[name] in case["message"] and "nothing was changed" in case["message"]
    assert case["live_untouched"] and case["next_judgment_kept"]
    with pytest.raises(AnnotationError, match="nothing was changed"):  # nor is a new database made from it
        restore(scratch_dir / f"{name}.db", f"sqlite:///{scratch_dir / 'new.db'}")
    assert not (scratch_dir / "new.db").exists()


def test_an_older_backup_is_refused_until_a_copy_is_upgraded_as_the_message_says(scratch_dir):
    old = scratch_dir / "old.db"
    engine = make_engine(f"sqlite:///{old}")
    config = alembic_config()
    with engine.begin() as connection:  # a database as the previous version left it
        config.attributes["connection"] = connection
        command.upgrade(config, "0007")
    engine.dispose()
    with pytest.raises(AnnotationError, match="is at schema revision 0007, an older one") as err:
        restore(old, f"sqlite:///{scratch_dir / 'new.db'}")
    assert "qpr-annotations --db sqlite:///COPY stats" in str(err.value)
    shutil.copyfile(old, scratch_dir / "copy.db")
    assert annotations_main(["--db", f"sqlite:///{scratch_dir / 'copy.db'}", "stats"]) == 0
    assert restore(scratch_dir / "copy.db", f"sqlite:///{scratch_dir / 'new.db'}").judgments == 0


def test_the_good_backup_the_tampers_start_from_restores(scratch_dir):
    url, good = good_backup(scratch_dir)
    case = try_restore(url, scratch_dir / "live.db", good)
    assert case["outcome"] == "restored" and case["next_judgment_kept"]


def test_cli_refuses_a_tampered_backup_in_one_line(scratch_dir, capsys):
    url, good = good_backup(scratch_dir)
    path = tampered(scratch_dir, good, "trigger")
    assert annotations_main(["--db", url, "restore", str(path), "--replace"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has a trigger keep_one of its own" in err


def test_cli_backup_and_restore(scratch_dir, capsys):
    url = f"sqlite:///{scratch_dir / 'live.db'}"
    with open_store(url, project="demo") as store:
        store.corpora.register("v1", make_corpus())
        store.judgments.record("alice", 2, "same", "v1", query_qid=1)
    out = scratch_dir / "b.db"
    assert annotations_main(["--db", url, "backup", "--out", str(out)]) == 0
    assert "1 judgments" in capsys.readouterr().out
    assert annotations_main(["--db", url, "backup", "--out", str(out)]) == 2
    assert annotations_main(["--db", url, "restore", str(out)]) == 2
    assert "--replace" in capsys.readouterr().err
    assert annotations_main(["--db", url, "restore", str(out), "--replace"]) == 0
    assert annotations_main(["--db", f"sqlite:///{scratch_dir / 'fresh.db'}", "restore", str(out)]) == 0
    assert judgment_ids(scratch_dir / "fresh.db") == judgment_ids(out)


def test_postgres_backup_is_a_pg_dump_archive(postgres_url, tmp_path, monkeypatch):
    monkeypatch.setenv("QPR_CACHE_DIR", str(tmp_path / "cache"))  # where the last backup is noted
    if shutil.which("pg_restore") is None:
        pytest.fail("PostgreSQL's client tools (pg_dump, pg_restore) are not installed")
    with open_store(postgres_url, project="demo") as store:
        store.corpora.register("v1", make_corpus())
        store.judgments.record("alice", 2, "same", "v1", query_qid=1)
    done = backup(postgres_url, tmp_path / "pg.dump")
    listing = subprocess.run(["pg_restore", "--list", done.path], capture_output=True, text=True, check=True).stdout
    assert "TABLE DATA" in listing and "judgments" in listing
    assert last_backup(postgres_url) == done
    assert (tmp_path / "cache").is_dir()


def test_the_app_header_shows_the_last_backup(bundle, scratch_dir):
    url = f"sqlite:///{scratch_dir / 'app.db'}"
    with open_store(url, project="demo") as store:
        page = QPRPage(AppContext(ServedModel(bundle), store, "name", cache=scratch_dir))
        page.build()
        assert "No backup" in page.backup_status("alice")
        assert page.backup_status("") == "", "shown only to someone who may act on it (a name typed, here)"
        store.corpora.register("v1", make_corpus())
        store.judgments.record("alice", 2, "same", "v1", query_qid=1)
        done = backup(url, scratch_dir / "b.db")
        line = page.backup_status("alice")
    assert done.at[:10] in line and "1 judgments" in line
