"""Group commit on SQLite: one writer thread commits queued writes together, each in its own
SAVEPOINT; every caller gets its own result or its own error, and a return means committed."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

import annotations.store
from annotations.db import open_store
from annotations.errors import AnnotationError
from annotations.models import Annotator, Judgment
from conftest import make_corpus

VERSION = "v1"


@pytest.fixture
def store(db_url):
    """A store with the test corpus, once per backend (``db_url``)."""
    with open_store(db_url, project="demo") as store:
        store.corpora.register(VERSION, make_corpus())
        yield store


def _hold_writer(store):
    """Queue a write that blocks the writer thread until the returned event is set, so the writes
    queued meanwhile form one group."""
    release, started = threading.Event(), threading.Event()

    def block(session):
        started.set()
        release.wait()
        return None

    thread = threading.Thread(target=store.writer.write, args=(block,))
    thread.start()
    started.wait()
    return release, thread


def _submit(store, calls):
    """Start each call in its own thread, in order (each queued before the next starts)."""
    results: dict[int, object] = {}
    threads = []
    for number, call in enumerate(calls):
        def run(number=number, call=call):
            try:
                results[number] = call()
            except Exception as err:  # noqa: BLE001 -- the test inspects it
                results[number] = err
        before = store.writer._queue.qsize() if store.writer._queue is not None else 0
        thread = threading.Thread(target=run)
        thread.start()
        while store.writer._queue.qsize() <= before:  # queued (no timing assumption: wait for it)
            time.sleep(0.001)
        threads.append(thread)
    return results, threads


def test_group_commit_is_on_and_a_bad_item_fails_alone(store):
    assert store.writer.group_commit
    first = store.judgments.record("ann", 2, "same", VERSION, query_qid=1)
    groups = []
    real = store.writer._commit_group
    store.writer._commit_group = lambda group: (groups.append(len(group)), real(group))[1]
    release, holder = _hold_writer(store)

    def bad(session):
        someone = session.scalar(select(Annotator.id))
        session.add(Judgment(annotator_id=someone, bundle_version=VERSION, query_qid=1, candidate_qid=5,
                             item_key="x", label="same"))
        session.flush()  # flushed rows, then an error: only this savepoint is rolled back
        raise AnnotationError("bad item")

    calls = [
        lambda: store.judgments.record("ann", 3, "same", VERSION, query_qid=1),
        lambda: store.writer.write(bad),
        lambda: store.judgments.record("bob", 4, "different", VERSION, query_qid=1),
        lambda: store.judgments.record("ann", 99_999, "same", VERSION, query_qid=1),  # unknown qid: refused in the writer
        lambda: store.judgments.record("ann", 3, "unsure", VERSION, query_qid=1),  # supersedes the first of this group
    ]
    results, threads = _submit(store, calls)
    release.set()
    holder.join()
    for thread in threads:
        thread.join()
    assert groups[-1] == len(calls)  # all five were one transaction
    assert isinstance(results[1], AnnotationError) and str(results[1]) == "bad item"
    assert isinstance(results[3], AnnotationError)
    ids = [results[0], results[2], results[4]]
    assert all(isinstance(i, int) for i in ids)
    assert ids == sorted(ids) and ids[0] > first  # ids in the order the calls were queued
    history = store.judgments.frame(current_only=False).set_index("id")
    assert sorted(history.index) == [first, *ids]  # every good write landed, nothing of the bad ones
    assert history.loc[results[0], "superseded_by"] == results[4]
    assert history.loc[results[4], "label"] == "unsure" and history.loc[results[2], "annotator"] == "bob"


def test_a_failed_group_transaction_falls_back_to_one_by_one(store, monkeypatch):
    real = store.writer._write_now
    failed, armed = [], []

    def failing_once(work):
        if armed and not failed and work.__name__ == "run_all":
            failed.append(1)
            raise RuntimeError("the group's commit failed")
        return real(work)

    monkeypatch.setattr(store.writer, "_write_now", failing_once)
    release, holder = _hold_writer(store)
    armed.append(1)  # the next group (the three below) fails as a whole
    results, threads = _submit(store, [lambda c=c: store.judgments.record("ann", c, "same", VERSION, query_qid=1) for c in (2, 3, 4)])
    release.set()
    holder.join()
    for thread in threads:
        thread.join()
    assert failed and all(isinstance(results[n], int) for n in range(3))
    assert len(store.judgments.frame()) == 3


def test_group_commit_off_keeps_one_transaction_per_call(tmp_path):
    with open_store(f"sqlite:///{tmp_path / 'b.db'}", project="demo") as store:
        direct = annotations.store.AnnotationStore(store.engine, "annotations_write", "demo", group_commit=False)
        direct.corpora.register(VERSION, make_corpus())
        assert direct.judgments.record("ann", 2, "same", VERSION, query_qid=1) > 0 and direct.writer._thread is None


def test_close_finishes_queued_writes_and_a_later_write_restarts_the_writer(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'c.db'}", project="demo")
    store.corpora.register(VERSION, make_corpus())
    store.judgments.record("ann", 2, "same", VERSION, query_qid=1)
    store.close()
    assert store.writer._thread is None
    store.judgments.record("ann", 3, "same", VERSION, query_qid=1)
    assert len(store.judgments.frame()) == 2
    store.close()


KILLED = """
import os, signal, sys, threading
from annotations.db import open_store
store = open_store(sys.argv[1], project="demo")
real = store.writer._commit_group
def commit_then_die(group):
    if len(group) > 1:
        os.kill(os.getpid(), signal.SIGKILL)  # before this group commits: none of it acknowledged
    real(group)
store.writer._commit_group = commit_then_die
for c in range(2, 7):
    print(store.judgments.record("ann", c, "same", "v1", query_qid=1), flush=True)  # acknowledged = committed
threads = [threading.Thread(target=store.judgments.record, args=("ann", c, "same", "v1"), kwargs={"query_qid": 1}) for c in range(7, 20)]
for t in threads: t.start()
for t in threads: t.join()
"""


def test_a_killed_process_loses_no_acknowledged_write(tmp_path):
    url = f"sqlite:///{tmp_path / 'k.db'}"
    with open_store(url, project="demo") as store:
        store.corpora.register(VERSION, make_corpus())
    child = subprocess.run([sys.executable, "-c", KILLED, url], capture_output=True, text=True, timeout=120)
    acknowledged = [int(line) for line in child.stdout.split()]
    with open_store(url, project="demo") as store, Session(store.engine) as session:
        stored = set(session.scalars(select(Judgment.id)))
    assert len(acknowledged) == 5 and set(acknowledged) <= stored
    assert child.returncode in (-9, 0)
