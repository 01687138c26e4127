"""Many annotators against the running app for minutes: errors, judgments kept, latency, memory.

Starts ``python app.py`` (the demo corpus, ``harness.app_process.start_app``) on SQLite or PostgreSQL
and runs ``annotators`` simulated annotators for ``minutes``, spread over worker processes (threads
in each), each with its own Gradio session and name, calling the app's HTTP API as the page's
buttons do (``bench.search_load.GradioClient``: Gradio's plain ``/gradio_api/call`` API; Python's
``gradio_client`` cost more CPU per call than the server on this 2-core machine). Each annotator,
after a think time (exponential, mean ``think_s``), does what annotators do: takes a queue (the app
picks a cluster), judges its items (same / different / unsure), sometimes undoes, searches, applies
the corrections (serves the corrected clusters) or exports them.

Counted: errors (an HTTP failure, a Gradio error event, or no answer: never a refused input the
app explained), judgments acknowledged (the page said "Recorded judgment #N") and of those, stored
(the id is in the database after the run), p50/p99 per action, and the server's resident memory
sampled every ``rss_every_s`` seconds.

    python -m bench.sustained_load --db sqlite|postgres [--annotators 50] [--minutes 10] [--out FILE]

PostgreSQL uses a fresh schema in ``QPR_TEST_POSTGRES_URL``. ``--out`` (default
``bench/results/sustained_<db>.json``) holds the full figures; ``bench.reliability_ops`` folds them
into ``bench/results/reliability.json``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import re
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from annotations.db import open_store
from bench.common import ROOT, machine, write_json
from bench.reliability import postgres_url
from bench.search_load import QUERIES, GradioClient
from harness.app_process import start_app, stop_app

RECORDED = re.compile(r"Recorded judgment #(\d+)")
# (action, weight) once a queue has an item to judge; without one the annotator takes a queue.
ACTIONS = [("judge", 76), ("undo", 6), ("search", 10), ("queue", 5), ("apply", 1.5), ("export", 1.5)]
JUDGE_ENDPOINTS = {"same": "/judge", "different": "/judge_1", "unsure": "/judge_2"}  # the Annotate tab's buttons, in order


def _call(client: GradioClient, action: str, name: str, rng: random.Random) -> tuple[str, list]:
    """One action through the app's API; returns (the endpoint's answer as text, its data).
    ``None`` stands for a ``gr.State`` input, as Gradio's own client sends it."""
    if action == "queue":
        data = client.predict(None, name, None, api_name="/start_cluster")
    elif action == "judge":
        data = client.predict(None, None, name, api_name=JUDGE_ENDPOINTS[rng.choice(list(JUDGE_ENDPOINTS))])
    elif action == "undo":
        data = client.predict(None, name, api_name="/undo")
    elif action == "search":
        data = client.predict(rng.choice(QUERIES), 10, False, api_name="/search")
    elif action == "apply":
        data = client.predict("", name, api_name="/apply")
    else:
        data = client.predict("csv", api_name="/export_clusters")
    return json.dumps(data), data


def _has_item(data: list) -> bool:
    """Whether the Annotate tab's answer shows an item to judge: its candidate box (the 5th output) is filled."""
    return isinstance(data, list) and len(data) > 4 and isinstance(data[4], str) and bool(data[4])


def _annotator(url: str, name: str, deadline: float, think_s: float, seed: int, out: dict, lock: threading.Lock) -> None:
    rng = random.Random(seed)
    client = GradioClient(url)
    has_item = False
    while True:
        time.sleep(rng.expovariate(1 / think_s))
        if time.time() >= deadline:
            return
        action = "queue" if not has_item else rng.choices([a for a, _ in ACTIONS], [w for _, w in ACTIONS])[0]
        start = time.perf_counter()
        try:
            text, data = _call(client, action, name, rng)
            error = None
        except Exception as err:  # counted and reported: the bench's point
            text, data, error = "", None, f"{action}: {type(err).__name__}: {str(err)[:200]}"
        elapsed = (time.perf_counter() - start) * 1000
        with lock:
            out["latency"].setdefault(action, []).append(elapsed)
            if error:
                out["errors"].append(error)
            if action == "judge":
                out["acknowledged"] += [int(i) for i in RECORDED.findall(text)]
        if action in ("queue", "judge", "undo") and data is not None:
            has_item = _has_item(data)


def _worker(url: str, names: list[str], deadline: float, think_s: float, seed: int, result_path: str) -> None:
    """One load-generator process: one thread per annotator; writes its counts to ``result_path``."""
    out = {"latency": {}, "errors": [], "acknowledged": []}
    lock = threading.Lock()
    threads = [threading.Thread(target=_annotator, args=(url, name, deadline, think_s, seed * 1000 + i, out, lock))
               for i, name in enumerate(names)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    Path(result_path).write_text(json.dumps(out))


def rss_mb(pid: int) -> float:
    """Resident memory of process ``pid`` in MB (from /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def run_sustained(db_url: str, annotators: int = 50, minutes: float = 10.0, think_s: float = 4.0, processes: int = 5,
                  cache: Path = Path(tempfile.gettempdir()) / "qpr-reliability-cache", rss_every_s: float = 10.0,
                  log=print) -> dict:
    """Start the app on ``db_url``, run the load, stop the app, count what was stored."""
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        env = {"QPR_CACHE_DIR": str(cache), "QPR_DB_URL": db_url, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        process, url, _ = start_app(env, tmp / "app.log")
        try:
            GradioClient(url).predict(QUERIES[0], 10, False, api_name="/search")  # the first search builds caches
            rss = [(0.0, rss_mb(process.pid))]
            start = time.time()
            deadline = start + minutes * 60
            names = [f"annotator {i:02d}" for i in range(annotators)]
            parts = [names[i::processes] for i in range(processes)]
            context = multiprocessing.get_context("spawn")
            workers = [context.Process(target=_worker, args=(url, part, deadline, think_s, i, str(tmp / f"w{i}.json")))
                       for i, part in enumerate(parts) if part]
            for w in workers:
                w.start()
            while any(w.is_alive() for w in workers):
                time.sleep(rss_every_s)
                rss.append((round(time.time() - start, 1), rss_mb(process.pid)))
                log(f"{rss[-1][0]:.0f} s: server RSS {rss[-1][1]:.0f} MB")
            for w in workers:
                w.join()
            wall_s = time.time() - start
        finally:
            stop_app(process)
        parts_out = [json.loads((tmp / f"w{i}.json").read_text()) for i in range(len(workers))
                     if (tmp / f"w{i}.json").exists()]
        lost_workers = len(workers) - len(parts_out)
    latency: dict[str, list[float]] = {}
    errors, acknowledged = [], []
    for part in parts_out:
        for action, values in part["latency"].items():
            latency.setdefault(action, []).extend(values)
        errors += part["errors"]
        acknowledged += part["acknowledged"]
    with open_store(db_url, project="demo") as store:
        ids = set(store.judgments.frame(current_only=False)["id"].astype(int))
    stored = sum(i in ids for i in acknowledged)
    per_action = {a: {"calls": len(v), "p50_ms": round(float(np.percentile(v, 50)), 1),
                      "p99_ms": round(float(np.percentile(v, 99)), 1), "max_ms": round(float(max(v)), 1)}
                  for a, v in sorted(latency.items())}
    return {"annotators": annotators, "minutes": minutes, "think_s": think_s, "processes": processes,
            "wall_s": round(wall_s, 1), "errors": len(errors) + lost_workers, "error_examples": errors[:5],
            "acknowledged": len(acknowledged), "stored": stored, "per_action": per_action,
            "rss_mb": rss, "rss_growth_mb": round(rss[-1][1] - rss[0][1], 1),
            "machine": machine(), "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=("sqlite", "postgres"), required=True)
    parser.add_argument("--annotators", type=int, default=50)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--think-s", type=float, default=4.0, help="mean think time between an annotator's actions")
    parser.add_argument("--processes", type=int, default=5, help="load-generator processes the annotators are spread over")
    parser.add_argument("--out", type=Path, help="result file (default bench/results/sustained_<db>.json)")
    args = parser.parse_args()
    out = args.out or ROOT / "bench" / "results" / f"sustained_{args.db}.json"
    drop = None
    with tempfile.TemporaryDirectory() as name:
        if args.db == "sqlite":
            url = f"sqlite:///{Path(name) / 'annotations.db'}"
        else:
            made = postgres_url()
            if made is None:
                raise SystemExit("set QPR_TEST_POSTGRES_URL to a PostgreSQL database the bench may create a schema in")
            url, drop = made
        try:
            result = run_sustained(url, args.annotators, args.minutes, args.think_s, args.processes,
                                   log=lambda line: print(line, flush=True))
        finally:
            if drop:
                drop()
    write_json(result | {"db": args.db}, out)
    print(json.dumps({k: v for k, v in result.items() if k != "rss_mb"}, indent=1))


if __name__ == "__main__":
    main()
