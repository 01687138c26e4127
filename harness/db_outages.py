"""The annotation database goes away mid-session and comes back: what writers see, what is kept.

Two outages, each while a thread keeps recording judgments through one ``AnnotationStore`` (as
the app's process does):

- PostgreSQL restarted: a private server (``private_postgres``: initdb in a temporary folder, as
  the ``postgres`` user when run as root, on its own port; never the shared server) is stopped
  with ``pg_ctl -m fast`` and started again after ``down_s`` seconds;
- SQLite's disk full: the database lives on a small tmpfs mounted for the run and a filler file
  takes the space left, then is deleted (``mode="tmpfs"``; needs the right to mount), or the same
  simulated with ``PRAGMA max_page_count`` on every connection (``mode="pages"``: SQLite then
  answers SQLITE_FULL exactly as for a full disk).

Counted per outage: judgments acknowledged (ids returned) and how many of them are stored
afterwards, the messages writers got (each must be ``DatabaseUnavailable``'s), and whether
writing worked again without restarting anything (recovered).

The tests run each outage briefly (tests/reliability/test_outages.py); ``python -m bench.db_outages``
runs every one this machine allows and prints the figures.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pandas as pd
from sqlalchemy import event

from annotations.backup import judgment_ids
from annotations.db import open_store
from annotations.errors import DatabaseUnavailable

VERSION = "load-v1"


def small_corpus(n: int = 400) -> pd.DataFrame:
    """``n`` questions in clusters of four, all train: what the load and outage runs record judgments on."""
    return pd.DataFrame({
        "qid": np.arange(n, dtype="int64"), "question": [f"how do i do thing number {i}?" for i in range(n)],
        "cluster": [str(i // 4) for i in range(n)], "split": ["train"] * n,
    })


def postgres_bin() -> Path | None:
    """The folder of PostgreSQL's server programs (pg_ctl, initdb), or None where they are not installed."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
    if found:
        return found[-1].parent
    pg_ctl = shutil.which("pg_ctl")
    return Path(pg_ctl).parent if pg_ctl else None


def _as_server_user(command: list[str]) -> list[str]:
    # initdb and postgres refuse to run as root: run them as the postgres user then.
    if os.geteuid() != 0:
        return command
    return ["su", "postgres", "-c", " ".join(f"'{part}'" for part in command)]


class PrivatePostgres:
    """A PostgreSQL server of our own in ``folder`` (``start``/``stop``/``url``)."""

    def __init__(self, folder: Path) -> None:
        self.bin = postgres_bin()
        if self.bin is None:
            raise RuntimeError("PostgreSQL's server programs (initdb, pg_ctl) are not installed")
        self.folder = folder
        self.data = folder / "data"
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        if os.geteuid() == 0:
            shutil.chown(folder, "postgres", "postgres")
        subprocess.run(_as_server_user([str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres"]),
                       check=True, capture_output=True)

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@/postgres?host={self.folder}&port={self.port}"

    def start(self) -> None:
        subprocess.run(_as_server_user([str(self.bin / "pg_ctl"), "-D", str(self.data), "-w", "-l",
                                        str(self.folder / "server.log"), "-o", f"-p {self.port} -k {self.folder} -c listen_addresses=",
                                        "start"]), check=True, capture_output=True)

    def stop(self) -> None:
        subprocess.run(_as_server_user([str(self.bin / "pg_ctl"), "-D", str(self.data), "-w", "-m", "fast", "stop"]),
                       check=True, capture_output=True)


@contextlib.contextmanager
def private_postgres() -> Iterator[PrivatePostgres]:
    """A started private server, stopped and deleted on exit."""
    folder = Path(tempfile.mkdtemp(prefix="qpr-pg-"))
    os.chmod(folder, 0o755)
    server = PrivatePostgres(folder)
    server.start()
    try:
        yield server
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):
            server.stop()
        shutil.rmtree(folder, ignore_errors=True)


def through_outage(store, away: Callable[[], None], back: Callable[[], None], down_s: float,
                   after: int = 20) -> dict:
    """Record judgments in a thread while the database goes ``away`` for ``down_s`` seconds and
    comes ``back``; stop once ``after`` more were acknowledged after it returned."""
    acknowledged, messages, other = [], [], []
    stop, returned = threading.Event(), threading.Event()
    after_return = []

    def write() -> None:
        i = 0
        while not stop.is_set():
            i += 1
            try:
                judgment = store.judgments.record(f"writer {i % 3}", 2 + i % 300, ("same", "different")[i % 2], VERSION,
                                        query_qid=1, rank=1 + i % 10)
            except DatabaseUnavailable as err:
                messages.append(str(err))
                continue
            except Exception as err:  # noqa: BLE001 -- a traceback in the app: counted as a failure
                other.append(f"{type(err).__name__}: {err}")
                continue
            acknowledged.append(judgment)
            if returned.is_set():
                after_return.append(judgment)

    thread = threading.Thread(target=write)
    thread.start()
    try:
        while len(acknowledged) < 20:
            time.sleep(0.01)
        away()
        try:
            store.judgments.progress("writer 1")  # a read while it is away: the page's views read too
            read = "answered"
        except DatabaseUnavailable as err:
            read = str(err)
        except Exception as err:  # noqa: BLE001 -- a traceback in the app
            read = f"traceback: {type(err).__name__}: {err}"
        time.sleep(down_s)
        back()
        returned.set()
        deadline = time.monotonic() + 120
        while len(after_return) < after and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        thread.join()
    return {"acknowledged": acknowledged, "messages": messages, "other_errors": other,
            "read_during": read, "recovered": len(after_return) >= after}


def _summary(run: dict, stored: set[int]) -> dict:
    return {"acknowledged": len(run["acknowledged"]), "lost": sum(i not in stored for i in run["acknowledged"]),
            "clear_messages": len(run["messages"]), "message_examples": sorted(set(run["messages"]))[:2],
            "other_errors": run["other_errors"][:3], "read_during": run["read_during"][:200], "recovered": run["recovered"]}


def postgres_restart(down_s: float = 12.0) -> dict:
    """The PostgreSQL outage (module doc)."""
    with private_postgres() as server:
        with open_store(server.url, project="demo") as store:
            store.corpora.register(VERSION, small_corpus())
            run = through_outage(store, server.stop, server.start, down_s)
            stored = set(store.judgments.frame(current_only=False)["id"].astype(int))
    return _summary(run, stored) | {"outage": "postgresql restarted", "down_s": down_s}


def _max_pages(store, limit: list[int]) -> None:
    @event.listens_for(store.engine, "checkout")
    def _limit(dbapi_connection, _record, _proxy) -> None:
        dbapi_connection.execute(f"PRAGMA max_page_count = {limit[0]}")


def sqlite_disk_full(mode: str = "pages", down_s: float = 12.0) -> dict:
    """The SQLite outage (module doc); ``mode`` "tmpfs" or "pages"."""
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        if mode == "tmpfs":
            subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(folder)], check=True, capture_output=True)
        try:
            path = folder / "annotations.db"
            with open_store(f"sqlite:///{path}", project="demo") as store:
                store.corpora.register(VERSION, small_corpus())
                filler = folder / "filler"
                limit = [1_000_000_000]
                if mode == "pages":
                    _max_pages(store, limit)

                def fill() -> None:
                    if mode == "tmpfs":
                        with contextlib.suppress(OSError), filler.open("wb") as handle:  # every free block
                            while True:
                                handle.write(b"\0" * 65536)
                                handle.flush()
                    else:
                        limit[0] = 1  # below the file's size: no page can be added

                def free() -> None:
                    if mode == "tmpfs":
                        filler.unlink()
                    else:
                        limit[0] = 1_000_000_000

                run = through_outage(store, fill, free, down_s)
            stored = set(judgment_ids(path))
        finally:
            if mode == "tmpfs":
                subprocess.run(["umount", str(folder)], check=False, capture_output=True)
    return _summary(run, stored) | {"outage": f"sqlite disk full ({'a full tmpfs' if mode == 'tmpfs' else 'PRAGMA max_page_count'})",
                                    "down_s": down_s}


def can_mount() -> bool:
    """Whether this process may mount a tmpfs (root with CAP_SYS_ADMIN)."""
    with tempfile.TemporaryDirectory() as name:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", name], capture_output=True)
        if done.returncode == 0:
            subprocess.run(["umount", name], capture_output=True)
        return done.returncode == 0
