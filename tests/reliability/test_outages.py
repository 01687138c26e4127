"""The database goes away while judgments are being recorded, and comes back.

PostgreSQL: a private server (started here, as the postgres user when run as root; never the
shared one) is stopped and started again. SQLite: the disk filling up, simulated with
``PRAGMA max_page_count`` (SQLite answers SQLITE_FULL as for a full disk; ``bench.db_outages``
also fills a real tmpfs where it may mount one). The outage lasts longer than the writer's
patience, so writers get the message; every acknowledged judgment must be stored, nothing but
that message may reach a writer, and writing must work again without restarting anything.
"""

from __future__ import annotations

import pytest

import annotations.writer as writer
from harness.db_outages import postgres_bin, postgres_restart, sqlite_disk_full


@pytest.fixture(autouse=True)
def short_patience(monkeypatch):
    monkeypatch.setattr(writer, "OUTAGE_PATIENCE_S", 1.0)


def check(run: dict, message: str) -> None:
    assert run["other_errors"] == []
    assert run["acknowledged"] > 20 and run["lost"] == 0
    assert run["clear_messages"] >= 1
    assert all(message in m and m.endswith("nothing was recorded") for m in run["message_examples"])
    assert run["recovered"]


def test_postgres_restarted_mid_session():
    if postgres_bin() is None:
        pytest.skip("PostgreSQL's server programs are not installed (bash .ci/run installs them)")
    run = postgres_restart(down_s=3.0)
    check(run, "the annotation database cannot be reached")
    assert run["read_during"].startswith("the annotation database cannot be reached")


def test_sqlite_disk_full_mid_session():
    run = sqlite_disk_full("pages", down_s=3.0)
    check(run, "its disk is full")
