"""The annotation store against SQLite and PostgreSQL: schema, recording, history, bad input,
concurrent writers, a writer killed mid-transaction, and migrations.

PostgreSQL cases run when QPR_TEST_POSTGRES_URL is set (``bash .ci/run`` starts a server and sets
it); each uses a fresh schema that is dropped afterwards, so reruns start clean.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pandas as pd
import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, inspect, text

import annotations.db
import annotations.writer
from annotations.db import alembic_config, open_store
from annotations.errors import AnnotationError
from annotations.models import Base
from annotations.repositories.base import corpus_snapshot
from conftest import POSTGRES_URL, fresh_schema, make_corpus
from qpr.data.corpus import fingerprint

VERSION = "v1"
# 8 writers of 200 judgments each overlap for their whole run on both databases (1,600 contended
# writes); more per writer only made the test longer.
WRITERS, PER_WRITER = 8, 200


@pytest.fixture
def corpus():
    return make_corpus()


@pytest.fixture
def store(db_url, corpus):
    with open_store(db_url, project="demo") as opened:
        opened.corpora.register(VERSION, corpus)
        yield opened


def count_rows(store, table: str) -> int:
    with store.engine.connect() as connection:
        return connection.execute(text(f"SELECT COUNT(*) FROM {table}")).scalar_one()


# -- schema ------------------------------------------------------------------------------------


def test_migrated_schema_matches_the_models(db_url):
    with open_store(db_url, project="demo") as store, store.engine.connect() as connection:
        assert compare_metadata(MigrationContext.configure(connection), Base.metadata) == []
        head = ScriptDirectory.from_config(alembic_config()).get_current_head()
        assert MigrationContext.configure(connection).get_current_heads() == (head,)


def test_sqlite_connections_use_wal_busy_timeout_and_foreign_keys(scratch_dir):
    with open_store(f"sqlite:///{scratch_dir / 'a.db'}", project="demo") as store, store.engine.connect() as connection:
        assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert connection.exec_driver_sql("PRAGMA busy_timeout").scalar() > 0


def test_a_fresh_schema_starts_empty_holds_what_is_written_and_is_dropped_after():
    if not POSTGRES_URL:
        pytest.skip("QPR_TEST_POSTGRES_URL is not set (bash .ci/run starts PostgreSQL and sets it)")
    with fresh_schema(POSTGRES_URL, "fresh_schema_test") as url, open_store(url, project="demo") as store:
        with store.engine.connect() as connection:
            schema = connection.exec_driver_sql("SELECT current_schema()").scalar()
        assert schema.startswith("fresh_schema_test_") and count_rows(store, "judgments") == 0
        store.corpora.register(VERSION, make_corpus())
        store.judgments.record("ann", 2, "same", VERSION, query_qid=1)
        assert count_rows(store, "judgments") == 1
    admin = create_engine(POSTGRES_URL)
    with admin.connect() as connection:
        left = connection.execute(text("SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = :name"),
                                  {"name": schema}).scalar_one()
    admin.dispose()
    assert left == 0


def test_default_url_is_a_sqlite_file_under_data_and_env_overrides_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("QPR_DB_URL", raising=False)
    with open_store(project="demo") as store:
        store.corpora.register(VERSION, make_corpus())
    assert (tmp_path / "data" / "annotations.db").is_file()
    monkeypatch.setenv("QPR_DB_URL", f"sqlite:///{tmp_path / 'other' / 'x.db'}")
    with open_store(project="demo") as store:
        assert store.corpora.versions().empty
    assert (tmp_path / "other" / "x.db").is_file()


# -- corpus snapshots --------------------------------------------------------------------------


def test_registered_corpus_reads_back_unchanged_and_registering_again_is_idempotent(store, corpus):
    store.corpora.register(VERSION, corpus)
    version, snapshot = store.corpora.snapshot()
    assert version == VERSION
    pd.testing.assert_frame_equal(snapshot, corpus.astype({"split": str}), check_dtype=False)
    assert snapshot["cluster"].isna().sum() == corpus["cluster"].isna().sum() > 0
    assert count_rows(store, "corpus_questions") == len(corpus)


def test_a_known_digest_confirms_a_registered_version_without_reading_the_corpus(store, corpus, tiny_bundle, monkeypatch):
    import annotations.repositories.corpus as corpus_repository

    digest = fingerprint(corpus_snapshot(corpus))
    assert tiny_bundle.manifest.data_fingerprint == fingerprint(corpus_snapshot(tiny_bundle.corpus))  # what the app passes
    with monkeypatch.context() as patched:
        patched.setattr(corpus_repository, "corpus_snapshot", lambda _: pytest.fail("the corpus was read again"))
        store.corpora.register(VERSION, corpus, digest)
    changed = corpus.assign(question=corpus["question"] + " really")
    with pytest.raises(AnnotationError, match="already registered with a different corpus"):
        store.corpora.register(VERSION, changed, fingerprint(corpus_snapshot(changed)))
    monkeypatch.setattr(corpus_repository, "INSERT_CHUNK", 7)  # a new version goes in by chunks
    store.corpora.register("v2", changed, "a digest no version has")
    assert count_rows(store, "corpus_questions") == 2 * len(corpus)
    assert store.corpora.snapshot("v2")[1]["question"].tolist() == changed["question"].tolist()


def test_same_version_with_another_corpus_is_refused_and_newest_version_is_the_default(store, corpus):
    changed = corpus.assign(question=corpus["question"] + " really")
    with pytest.raises(AnnotationError, match="already registered with a different corpus"):
        store.corpora.register(VERSION, changed)
    store.corpora.register("v2", changed)
    assert store.corpora.snapshot()[0] == "v2"
    assert store.corpora.snapshot(VERSION)[1]["question"].tolist() == corpus["question"].tolist()
    with pytest.raises(AnnotationError, match="not registered"):
        store.corpora.snapshot("v9")


def test_corpus_with_duplicate_qids_or_missing_columns_is_refused(store, corpus):
    with pytest.raises(AnnotationError, match="appears more than once"):
        store.corpora.register("bad", pd.concat([corpus, corpus.head(1)]))
    with pytest.raises(AnnotationError, match="missing column"):
        store.corpora.register("bad", corpus.drop(columns="cluster"))
    assert store.corpora.versions()["version"].tolist() == [VERSION]


# -- recording ---------------------------------------------------------------------------------


def test_rejudging_replaces_the_current_label_and_keeps_history(store):
    first = store.judgments.record("ann", 2, "same", VERSION, query_qid=1, rank=1, distance=0.25)
    second = store.judgments.record("ann", 2, "different", VERSION, query_qid=1, rank=3, distance=0.5)
    other = store.judgments.record("bob", 2, "same", VERSION, query_qid=1)
    current = store.judgments.frame(annotator="ann")
    assert current["id"].tolist() == [second] and current["label"].tolist() == ["different"]
    history = store.judgments.frame(annotator="ann", current_only=False).set_index("id")
    assert history.loc[first, "superseded_by"] == second and not history.loc[first, "is_current"]
    assert history.loc[first, "label"] == "same" and history.loc[first, "rank"] == 1
    assert store.judgments.frame(annotator="bob")["id"].tolist() == [other]
    row = store.judgments.frame().set_index("id").loc[second]
    assert (row["query_cluster"], row["candidate_cluster"], row["distance"]) == ("c-python", "c-python", 0.5)


def test_undo_withdraws_the_last_judgment_and_restores_the_label_it_replaced(store):
    first = store.judgments.record("ann", 2, "same", VERSION, query_qid=1)
    other = store.judgments.record("ann", 3, "unsure", VERSION, query_qid=1)
    second = store.judgments.record("ann", 2, "different", VERSION, query_qid=1)
    undone = store.judgments.undo_last("ann")
    assert undone["id"] == second and undone["label"] == "different" and undone["withdrawn_at"] is not pd.NaT
    assert sorted(store.judgments.frame(annotator="ann")["id"]) == [first, other]
    assert store.judgments.undo_last("ann")["id"] == other
    assert store.judgments.undo_last("ann")["id"] == first
    assert store.judgments.undo_last("ann") is None and store.judgments.undo_last("nobody") is None
    assert store.judgments.frame().empty
    assert count_rows(store, "judgments") == 3  # history kept


def test_free_text_queries_are_items_of_their_own(store):
    a = store.judgments.record("ann", 7, "same", VERSION, query_text="how to learn guitar fast")
    b = store.judgments.record("ann", 7, "different", VERSION, query_text="how to learn guitar fast")
    c = store.judgments.record("ann", 7, "same", VERSION, query_text="guitar lessons")
    current = store.judgments.frame(annotator="ann").set_index("id")
    assert sorted(current.index) == [b, c] and a not in current.index
    assert current.loc[b, "query_text"] == "how to learn guitar fast" and pd.isna(current.loc[b, "query_qid"])


def test_cluster_filter_and_progress(store):
    store.judgments.record("ann", 6, "different", VERSION, query_qid=1)  # python vs guitar
    store.judgments.record("ann", 12, "same", VERSION, query_qid=2)  # python vs chess
    store.judgments.record("ann", 12, "different", VERSION, query_qid=2)
    store.judgments.record("bob", 13, "same", VERSION, query_qid=11)  # chess vs chess
    clusters = make_corpus().set_index("qid")["cluster"]
    guitar = clusters[6]
    assert store.judgments.frame(cluster=guitar)["candidate_qid"].tolist() == [6]
    assert sorted(store.judgments.frame(cluster=clusters[12])["candidate_qid"]) == [12, 13]
    # Issue 38, bug 4: a re-judged item counts once in both counts, so today never exceeds total.
    assert store.judgments.progress("ann") == {"today": 2, "total": 2}
    store.judgments.undo_last("ann")
    assert store.judgments.progress("ann") == {"today": 2, "total": 2}  # the earlier label is current again
    assert store.judgments.progress("nobody") == {"today": 0, "total": 0}
    # ... and counts are per project: judgments in another project are not counted in this one's.
    other = store.for_project("other")
    other.corpora.register("v-other", make_corpus())
    other.judgments.record("ann", 7, "same", "v-other", query_qid=3)
    assert store.judgments.progress("ann") == {"today": 2, "total": 2}
    assert other.judgments.progress("ann") == {"today": 1, "total": 1}


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"annotator": ""}, "annotator name is empty"),
        ({"annotator": "   "}, "annotator name is empty"),
        ({"annotator": None}, "annotator name is empty"),
        ({"annotator": "x" * 101}, "at most 100"),
        ({"label": "Same"}, "label must be one of"),
        ({"label": "yes"}, "label must be one of"),
        ({"candidate_qid": 99999}, "question id 99999 is not in the corpus"),
        ({"query_qid": 88888}, "question id 88888 is not in the corpus"),
        ({"candidate_qid": "2"}, "must be an integer"),
        ({"bundle_version": "v-unknown"}, "not registered"),
        ({"bundle_version": ""}, "bundle version is empty"),
        ({"query_qid": None}, "exactly one of query_qid"),
        ({"query_text": "how do i learn python ?"}, "exactly one of query_qid"),
        ({"query_qid": 2}, "against itself"),
        ({"rank": 0}, "rank must be a positive integer"),
        ({"distance": float("nan")}, "distance must be a finite number"),
        ({"query_qid": None, "query_text": "   "}, "query is empty"),
    ],
)
def test_bad_input_is_refused_with_a_clear_message_and_writes_nothing(store, kwargs, message):
    args = {"annotator": "ann", "candidate_qid": 2, "label": "same", "bundle_version": VERSION, "query_qid": 1} | kwargs
    with pytest.raises(AnnotationError, match=message):
        store.judgments.record(**args)
    assert count_rows(store, "judgments") == 0 and count_rows(store, "annotators") == 0


def test_sql_looking_strings_are_stored_verbatim(store):
    name = "Robert'); DROP TABLE judgments; --"
    query = "\"; DELETE FROM annotators WHERE '1'='1"
    store.judgments.record(name, 2, "same", VERSION, query_text=query)
    row = store.judgments.frame(annotator=name).iloc[0]
    assert (row["annotator"], row["query_text"]) == (name, query)
    assert store.judgments.annotators() == [name]
    assert {"judgments", "annotators"} <= set(inspect(store.engine).get_table_names())


# -- concurrency -------------------------------------------------------------------------------


ITEMS = [(q, c) for q in range(1, 161) for c in range(1, 161) if q != c][:PER_WRITER]


def write_judgments(url: str, annotator: str, items: int = PER_WRITER) -> None:
    """One writer: one judgment for each of the first ``items`` items, through its own store."""
    with open_store(url, project="demo") as store:
        for i, (query, candidate) in enumerate(ITEMS[:items]):
            store.judgments.record(annotator, candidate, ("same", "different", "unsure")[i % 3], VERSION, query_qid=query)


def run_threads(url: str, annotators: list[str], items: int = PER_WRITER) -> list[BaseException]:
    errors: list[BaseException] = []

    def target(name: str) -> None:
        try:
            write_judgments(url, name, items)
        except BaseException as err:  # noqa: BLE001 - reported to the test below
            errors.append(err)

    threads = [threading.Thread(target=target, args=(name,)) for name in annotators]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


def assert_all_stored(store, annotators: list[str]) -> None:
    stored = store.judgments.frame()
    assert len(stored) == WRITERS * PER_WRITER
    assert stored["id"].is_unique
    assert not stored.duplicated(["annotator", "item_key"]).any()
    assert stored.groupby("annotator").size().to_dict() == {name: PER_WRITER for name in annotators}


def test_eight_writer_threads_store_every_judgment(db_url, corpus):
    with open_store(db_url, project="demo") as store:
        store.corpora.register(VERSION, corpus)
        annotators = [f"writer-{i}" for i in range(WRITERS)]
        assert run_threads(db_url, annotators) == []
        assert_all_stored(store, annotators)


def test_eight_writer_processes_store_every_judgment(db_url, corpus):
    with open_store(db_url, project="demo") as store:
        store.corpora.register(VERSION, corpus)
    annotators = [f"writer-{i}" for i in range(WRITERS)]
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=write_judgments, args=(db_url, name)) for name in annotators]
    for process in processes:
        process.start()
    for process in processes:
        process.join()
    assert [p.exitcode for p in processes] == [0] * WRITERS  # a "database is locked" would exit 1
    with open_store(db_url, project="demo") as store:
        assert_all_stored(store, annotators)


def test_one_annotator_in_eight_threads_keeps_exactly_one_current_label_per_item(db_url, corpus):
    items = 100
    with open_store(db_url, project="demo") as store:
        store.corpora.register(VERSION, corpus)
        assert run_threads(db_url, ["same-person"] * WRITERS, items) == []
        history = store.judgments.frame(current_only=False)
        assert len(history) == WRITERS * items
        current = history[history["is_current"]]
        assert len(current) == items and current["item_key"].is_unique
        # every item's labels form one chain: each replaced label points at a distinct later one
        replaced = history[~history["is_current"]]
        assert replaced["superseded_by"].notna().all() and replaced["superseded_by"].is_unique
        assert (replaced["superseded_by"].astype("int64").to_numpy() > replaced["id"].to_numpy()).all()


@pytest.fixture
def locked_sqlite(scratch_dir, corpus, monkeypatch):
    """A store whose SQLite waits only 1 ms for a lock (so record() itself must retry), and a
    separate connection that holds the write lock until it is released."""
    monkeypatch.setattr(annotations.db, "SQLITE_BUSY_TIMEOUT_MS", 1)
    path = scratch_dir / "busy.db"
    store = open_store(f"sqlite:///{path}", project="demo")
    store.corpora.register(VERSION, corpus)
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    yield store, holder
    holder.close()
    store.close()


def test_a_write_retries_until_a_busy_sqlite_database_is_free(locked_sqlite, monkeypatch):
    store, holder = locked_sqlite
    pauses = []
    real_pause = annotations.writer._pause
    monkeypatch.setattr(annotations.writer, "_pause", lambda attempt: (pauses.append(attempt), real_pause(attempt)))
    release = threading.Timer(0.3, holder.execute, args=("COMMIT",))
    release.start()
    judgment = store.judgments.record("ann", 2, "same", VERSION, query_qid=1)
    release.join()
    assert len(pauses) > 0  # the first attempt met the lock and was retried
    assert store.judgments.frame()["id"].tolist() == [judgment]


def test_a_database_busy_for_too_long_gives_a_clear_error_and_writes_nothing(locked_sqlite, monkeypatch):
    store, holder = locked_sqlite
    monkeypatch.setattr(annotations.writer, "WRITE_PATIENCE_S", 0.2)
    with pytest.raises(AnnotationError, match="stayed busy for .* s; nothing was written, try again"):
        store.judgments.record("ann", 2, "same", VERSION, query_qid=1)
    holder.execute("ROLLBACK")
    assert store.judgments.frame().empty and store.judgments.annotators() == []


KILLED_WRITER = """
import sys, time
from sqlalchemy import text
from annotations.db import open_store
store = open_store(sys.argv[1], project="demo")
with store.engine.connect() as connection:
    connection = connection.execution_options(annotations_write=True)
    with connection.begin():
        connection.execute(text("UPDATE judgments SET label = 'different'"))
        connection.execute(text("INSERT INTO annotators (name, created_at) VALUES ('ghost', CURRENT_TIMESTAMP)"))
        print("inside", flush=True)
        time.sleep(600)
"""


def test_writer_killed_mid_transaction_leaves_the_database_consistent(store, db_url):
    kept = store.judgments.record("ann", 2, "same", VERSION, query_qid=1)
    repo = Path(__file__).resolve().parents[1]
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(repo), os.environ.get("PYTHONPATH", "")])}
    writer = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, db_url], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert writer.stdout.readline().strip() == "inside"
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait()
    assert writer.returncode == -signal.SIGKILL
    with open_store(db_url, project="demo") as reopened:
        if reopened.engine.dialect.name == "sqlite":
            with reopened.engine.connect() as connection:
                assert connection.exec_driver_sql("PRAGMA integrity_check").scalar() == "ok"
        assert reopened.judgments.frame()[["id", "label"]].values.tolist() == [[kept, "same"]]
        assert reopened.judgments.annotators() == ["ann"]
        reopened.judgments.record("bob", 2, "different", VERSION, query_qid=1)  # the write lock was released
        assert len(reopened.judgments.frame()) == 2


# -- migrations --------------------------------------------------------------------------------


def test_database_at_the_first_revision_is_upgraded_on_open_and_keeps_its_data(db_url):
    config = alembic_config()
    engine = create_engine(db_url)
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "0001")
        assert "exports" not in inspect(connection).get_table_names()
        connection.execute(text(
            "INSERT INTO bundles (version, fingerprint, questions, registered_at) VALUES ('old', 'f', 2, CURRENT_TIMESTAMP)"
        ))
        connection.execute(text(
            "INSERT INTO corpus_questions (bundle_version, qid, question, cluster, split) "
            "VALUES ('old', 1, 'how do i learn python ?', 'a', 'train'), ('old', 2, 'learn python how ?', 'b', 'train')"
        ))
        connection.execute(text("INSERT INTO annotators (id, name, created_at) VALUES (1, 'ann', CURRENT_TIMESTAMP)"))
        connection.execute(text(
            "INSERT INTO judgments (annotator_id, bundle_version, query_qid, candidate_qid, item_key, label, created_at, "
            "is_current) VALUES (1, 'old', 1, 2, 'qid:1:2', 'same', CURRENT_TIMESTAMP, TRUE)"
        ))
    engine.dispose()
    with open_store(db_url, project="demo") as store:
        assert "exports" in inspect(store.engine).get_table_names()
        kept = store.judgments.frame()
        assert kept[["annotator", "query_qid", "candidate_qid", "label"]].values.tolist() == [["ann", 1, 2, "same"]]
        store.judgments.record("ann", 1, "same", "old", query_qid=2)
        assert len(store.judgments.frame()) == 2


def test_database_from_a_newer_version_is_refused(db_url):
    with open_store(db_url, project="demo") as store, store.engine.begin() as connection:
        connection.execute(text("UPDATE alembic_version SET version_num = '9999_from_the_future'"))
    with pytest.raises(AnnotationError, match="9999_from_the_future.*newer version"):
        open_store(db_url, project="demo")
