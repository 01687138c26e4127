"""Concurrent annotators in one process: W threads each record N judgments through one
``AnnotationStore`` (as the app's process does); per-write latency, and lost judgments counted by
comparing every acknowledged id with the rows in the database. With ``--export`` a further thread
merges and exports the corrected clusters (``annotations.export``) over and over while the
writers run, as a reviewer's export would on a busy day.

    python -m bench.write_load [--url URL] [--writers 32] [--per-writer 100] [--export]
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from annotations.db import open_store
from annotations.export import export
from annotations.models import Judgment
from harness.db_outages import VERSION, small_corpus


def run_load(url: str, writers: int = 32, per_writer: int = 100, export_to: Path | None = None) -> dict:
    """Run the load against ``url`` (an empty database) and return latency figures and losses;
    with ``export_to`` (a folder) merge and export there in a loop while the writers run."""
    store = open_store(url, project="demo")
    try:
        corpus = small_corpus()
        store.corpora.register(VERSION, corpus)
        barrier = threading.Barrier(writers)
        latencies: list[float] = []
        acknowledged: list[int] = []
        errors: list[str] = []
        lock = threading.Lock()

        def writer(w: int) -> None:
            rng = np.random.default_rng(w)
            mine, ids = [], []
            barrier.wait()
            for i in range(per_writer):
                q, c = rng.choice(400, size=2, replace=False)
                start = time.perf_counter()
                try:
                    ids.append(store.judgments.record(f"annotator {w}", int(c), "same" if i % 2 else "different", VERSION,
                                            query_qid=int(q), rank=1 + i % 10))
                except Exception as err:  # counted, reported
                    with lock:
                        errors.append(f"{type(err).__name__}: {err}")
                mine.append((time.perf_counter() - start) * 1000)
            with lock:
                latencies.extend(mine)
                acknowledged.extend(ids)

        exports: list[float] = []
        writing = threading.Event()

        def exporter() -> None:
            while writing.is_set():
                start = time.perf_counter()
                try:
                    export(store, corpus, "csv", export_to / "clusters.csv", VERSION)
                    exports.append(time.perf_counter() - start)
                except Exception as err:  # counted, reported
                    with lock:
                        errors.append(f"export: {type(err).__name__}: {err}")

        threads = [threading.Thread(target=writer, args=(w,)) for w in range(writers)]
        side = [threading.Thread(target=exporter)] if export_to is not None else []
        writing.set()
        start = time.perf_counter()
        for t in threads + side:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - start
        writing.clear()
        for t in side:
            t.join()
        with Session(store.engine) as session:
            stored = set(session.scalars(select(Judgment.id).where(Judgment.annotator_id.is_not(None))))
            rows = session.scalar(select(func.count()).select_from(Judgment))
        lost = len(set(acknowledged) - stored)
        lat = np.asarray(latencies)
        return {
            "backend": store.engine.dialect.name, "writers": writers, "per_writer": per_writer,
            "acknowledged": len(acknowledged), "rows": int(rows), "lost": lost, "errors": len(errors),
            "error_examples": errors[:3], "p50_ms": float(np.percentile(lat, 50)),
            "p99_ms": float(np.percentile(lat, 99)), "max_ms": float(lat.max()), "wall_s": wall,
            "writes_per_s": len(acknowledged) / wall, "exports": len(exports),
            "export_s_max": max(exports, default=0.0),
        }
    finally:
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url")
    parser.add_argument("--writers", type=int, default=32)
    parser.add_argument("--per-writer", type=int, default=100)
    parser.add_argument("--export", action="store_true", help="merge and export in a loop while the writers run")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = args.url or f"sqlite:///{Path(tmp) / 'load.db'}"
        print(run_load(url, args.writers, args.per_writer, Path(tmp) if args.export else None))


if __name__ == "__main__":
    main()
