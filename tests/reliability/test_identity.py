"""Identity in name mode: one annotator per name up to surrounding spaces, Unicode form and case,
shown as first written, kept by a unique index on every backend; undo touches only one's own."""

from __future__ import annotations

import threading
import unicodedata

import pytest
from alembic import command
from sqlalchemy import create_engine, text
from sqlalchemy.exc import IntegrityError

from annotations.db import alembic_config, open_store
from annotations.errors import AnnotationError
from annotations.names import annotator_key, annotator_name
from conftest import make_corpus

VERSION = "v1"


@pytest.fixture
def store(db_url):
    with open_store(db_url, project="demo") as opened:
        opened.corpora.register(VERSION, make_corpus())
        yield opened


ZOE = "Zo\u00eb"  # composed
ZOE_DECOMPOSED = unicodedata.normalize("NFD", ZOE)


@pytest.mark.parametrize("spellings, shown", [
    (["  ALICE  ", "alice", "Alice"], "ALICE"),
    ([ZOE_DECOMPOSED, "zo\u00eb", ZOE.upper()], ZOE),  # shown in NFC, as typed first
    (["Stra\u00dfe", "STRASSE", "strasse"], "Stra\u00dfe"),  # case folding, not just lower()
    (["alice", "al\u200bice", "\u200balice"], "alice"),  # an invisible character makes no second alice
])
def test_spellings_of_one_name_are_one_annotator_shown_as_first_written(store, spellings, shown):
    ids = [store.judgments.record(name, candidate, "same", VERSION, query_qid=1) for name, candidate in zip(spellings, (2, 3, 4))]
    assert store.judgments.annotators() == [shown]
    for name in spellings:
        assert store.judgments.frame(annotator=name)["id"].tolist() == ids
        assert store.judgments.progress(name)["total"] == 3
        assert store.judgments.display_name(name) == shown
    assert set(store.judgments.frame()["annotator"]) == {shown}


def test_rejudging_under_another_spelling_supersedes_and_undo_touches_only_ones_own(store):
    first = store.judgments.record("Alice", 2, "same", VERSION, query_qid=1)
    bobs = store.judgments.record("bob", 2, "different", VERSION, query_qid=1)
    second = store.judgments.record(" ALICE", 2, "different", VERSION, query_qid=1)
    current = store.judgments.frame().set_index("id")
    assert sorted(current.index) == [bobs, second]  # one current label per annotator and item
    assert store.judgments.undo_last("alice")["id"] == second
    assert store.judgments.undo_last("ALICE")["id"] == first
    assert store.judgments.undo_last("Alice") is None  # bob's judgment is not alice's to undo
    assert store.judgments.frame()["id"].tolist() == [bobs]


def test_two_spellings_racing_to_be_first_make_one_annotator(store):
    errors = []

    def judge(name, candidate):
        try:
            store.judgments.record(name, candidate, "same", VERSION, query_qid=1)
        except BaseException as err:  # pragma: no cover - reported below
            errors.append(err)

    threads = [threading.Thread(target=judge, args=(name, candidate))
               for candidate, name in enumerate(["Carol", "carol", "CAROL", " carol "] * 2, start=2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(store.judgments.annotators()) == 1 and len(store.judgments.frame(annotator="carol")) == 8


def test_the_database_refuses_a_second_annotator_with_the_same_identity(store):
    store.judgments.record("dave", 2, "same", VERSION, query_qid=1)
    with pytest.raises(IntegrityError), store.engine.begin() as connection:
        connection.execute(text("INSERT INTO annotators (name, name_key, created_at) "
                                "VALUES ('DAVE', 'dave', CURRENT_TIMESTAMP)"))


@pytest.mark.parametrize("name, message", [
    ("ann\x00", "NUL character"),
    ("ann\udcff", "lone surrogate"),
    ("ann\nbob", "control character U\\+000A"),
    ("\u200b\u200d", "no visible characters"),
    ("x" * 101, "at most 100"),
])
def test_names_that_cannot_identify_anyone_are_refused_and_write_nothing(store, name, message):
    with pytest.raises(AnnotationError, match=message):
        store.judgments.record(name, 2, "same", VERSION, query_qid=1)
    assert store.judgments.annotators() == [] and store.judgments.frame(current_only=False).empty


def test_normalising_is_idempotent():
    for name in ["  ALICE  ", ZOE_DECOMPOSED, "Stra\u00dfe", "al\u200bice"]:
        once = annotator_name(name)
        assert annotator_name(once) == once and annotator_key(once) == annotator_key(annotator_name(annotator_key(once)))


def test_upgrading_merges_annotators_that_were_one_person(db_url):
    """A database written before identities (revision 0002) may hold 'alice' and 'Alice': both
    judged item 1-2 (both current), each judged one more item. They become one annotator, the
    first written; the later label of 1-2 stays current and supersedes the earlier."""
    engine = create_engine(db_url)
    config = alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "0002")
        connection.execute(text("INSERT INTO bundles (version, fingerprint, questions, registered_at) "
                                "VALUES ('old', 'f', 4, CURRENT_TIMESTAMP)"))
        connection.execute(text("INSERT INTO corpus_questions (bundle_version, qid, question, cluster, split) VALUES "
                                "('old', 1, 'q1', 'a', 'train'), ('old', 2, 'q2', 'b', 'train'), "
                                "('old', 3, 'q3', 'c', 'train'), ('old', 4, 'q4', 'd', 'train')"))
        connection.execute(text("INSERT INTO annotators (id, name, created_at) VALUES "
                                "(1, 'alice', CURRENT_TIMESTAMP), (2, 'bob', CURRENT_TIMESTAMP), "
                                "(3, 'Alice', CURRENT_TIMESTAMP)"))
        connection.execute(text(
            "INSERT INTO judgments (id, annotator_id, bundle_version, query_qid, candidate_qid, item_key, label, "
            "created_at, is_current) VALUES "
            "(1, 1, 'old', 1, 2, 'qid:1:2', 'same', CURRENT_TIMESTAMP, TRUE), "
            "(2, 1, 'old', 1, 3, 'qid:1:3', 'same', CURRENT_TIMESTAMP, TRUE), "
            "(3, 2, 'old', 1, 2, 'qid:1:2', 'different', CURRENT_TIMESTAMP, TRUE), "
            "(4, 3, 'old', 1, 2, 'qid:1:2', 'different', CURRENT_TIMESTAMP, TRUE), "
            "(5, 3, 'old', 1, 4, 'qid:1:4', 'same', CURRENT_TIMESTAMP, TRUE)"))
    engine.dispose()
    with open_store(db_url, project="demo") as store:
        assert store.judgments.annotators() == ["alice", "bob"]
        history = store.judgments.frame(current_only=False).set_index("id")
        assert len(history) == 5  # no judgment lost
        assert history.loc[[1, 2, 4, 5], "annotator"].tolist() == ["alice"] * 4
        assert sorted(store.judgments.frame(annotator="ALICE")["id"]) == [2, 4, 5]
        assert history.loc[1, "superseded_by"] == 4 and not history.loc[1, "is_current"]
        assert store.judgments.undo_last("alice")["id"] == 5
        assert store.judgments.undo_last("alice")["id"] == 4
        assert sorted(store.judgments.frame(annotator="alice")["id"]) == [1, 2]  # undo restored the label 4 replaced
