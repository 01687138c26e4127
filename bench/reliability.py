"""The reliability figures, from one command: ``python -m bench.reliability``.

- bad inputs and kills: runs the suite's own cases (``tests/reliability/test_bad_input.py`` and
  ``test_kill.py``) through pytest with a plugin that records each case's outcome. A bad-input case
  passes only if the input is refused with a one-line ``QPRError`` and nothing changed; a failure
  that is an exception other than an assertion counts as a traceback, an assertion failure
  (including "DID NOT RAISE") as silently accepted. A kill case passes only if the last good
  bundle (or export, or every acknowledged judgment) is intact and no partial file is visible.
- load: 32 threads x 100 ``store.judgments.record`` in one process on SQLite and on PostgreSQL
  (``QPR_TEST_POSTGRES_URL``, a fresh schema): per-write p99 and lost judgments (acknowledged ids
  not in the table), and 20 clients searching the running app (``bench.search_load``).
- access: anonymous names, undo of another's judgment, ``../`` through the app's file routes,
  and ``qpr train --out`` at a folder that is not a bundle.

Writes ``bench/results/reliability.json`` (atomically; its ``ops`` part, from
``bench.reliability_ops``, is kept) and the figures section of ``docs/RELIABILITY.md``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
import uuid
from datetime import datetime, timezone
from pathlib import Path

from sqlalchemy import create_engine, make_url, text

from annotations.db import open_store
from annotations.errors import AnnotationError
from bench.common import ROOT, machine, replace_marked_section, write_json
from bench.search_load import run_search_load, with_app
from bench.write_load import run_load
from harness.db_outages import VERSION, small_corpus

USER_THINK_MS = 1000.0  # people read results between searches: 20 people searching about once a second each
RESULTS = ROOT / "bench" / "results" / "reliability.json"
DOC = ROOT / "docs" / "RELIABILITY.md"

PLUGIN = '''
import json, os
OUT = os.environ["QPR_RELIABILITY_OUTCOMES"]
rows = []
def pytest_runtest_logreport(report):
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        kind = None
        if report.failed:
            text = str(report.longrepr)
            kind = "assertion" if ("AssertionError" in text or "DID NOT RAISE" in text or "Failed:" in text) else "exception"
        rows.append({"id": report.nodeid, "outcome": report.outcome, "kind": kind})
def pytest_sessionfinish(session):
    with open(OUT, "w") as f:
        json.dump(rows, f)
'''


def run_cases(path: str, tmp: Path) -> list[dict]:
    (tmp / "reliability_outcomes_plugin.py").write_text(PLUGIN)
    out = tmp / f"{Path(path).stem}.json"
    env = os.environ | {"QPR_RELIABILITY_OUTCOMES": str(out), "OMP_NUM_THREADS": "1",
                        "PYTHONPATH": f"{tmp}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "reliability_outcomes_plugin",
                    path], cwd=ROOT, env=env, capture_output=True, timeout=600)
    return [r for r in json.loads(out.read_text()) if r["outcome"] != "skipped"]


def bad_inputs(tmp: Path) -> dict:
    rows = run_cases("tests/reliability/test_bad_input.py", tmp)
    return {"tried": len(rows), "clear_errors": sum(r["outcome"] == "passed" for r in rows),
            "tracebacks": sum(r["kind"] == "exception" for r in rows),
            "silently_accepted": sum(r["kind"] == "assertion" for r in rows),
            "failed_cases": [r["id"] for r in rows if r["outcome"] != "passed"]}


def kills(tmp: Path) -> dict:
    rows = run_cases("tests/reliability/test_kill.py", tmp)
    return {"tried": len(rows), "last_good_intact": sum(r["outcome"] == "passed" for r in rows),
            "partial_files_left": sum(r["outcome"] != "passed" for r in rows),
            "failed_cases": [r["id"] for r in rows if r["outcome"] != "passed"]}


def postgres_url() -> tuple[str, callable] | None:
    base = os.environ.get("QPR_TEST_POSTGRES_URL")
    if not base:
        return None
    schema = f"reliability_bench_{uuid.uuid4().hex[:12]}"
    admin = create_engine(base)
    with admin.begin() as connection:
        connection.execute(text(f'CREATE SCHEMA "{schema}"'))

    def drop() -> None:
        with admin.begin() as connection:
            connection.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()

    url = make_url(base).update_query_dict({"options": f"-csearch_path={schema}"}).render_as_string(hide_password=False)
    return url, drop


def access(tmp: Path, app_url: str | None) -> dict:

    anonymous = impersonations = 0
    with open_store(f"sqlite:///{tmp / 'access.db'}", project="demo") as store:
        store.corpora.register(VERSION, small_corpus())
        names = ["", "   ", "\u200b", "\u200b\u200d", "\ufeff", "\x00", "ann\x00", "\t\n", None, 7, "\ud800"]
        for name in names:
            try:
                store.judgments.record(name, 2, "same", VERSION, query_qid=1)
                anonymous += 1
            except AnnotationError:
                pass
        alice = store.judgments.record("Alice", 3, "same", VERSION, query_qid=1)
        for other in ("bob", "Bob", "alice\u200bx", "Mallory"):
            store.judgments.undo_last(other)
            store.judgments.undo_last(other, among=[alice])
        impersonations = int(alice not in set(store.judgments.frame()["id"]))
    escapes = tried_escapes = 0
    if app_url:
        for path in ["gradio_api/file=../../../../etc/passwd", "gradio_api/file=/etc/passwd",
                     "gradio_api/file=..%2F..%2F..%2F..%2Fetc%2Fpasswd", "file=../../../../etc/passwd",
                     "gradio_api/file=runs/../../../../etc/passwd", "gradio_api/file=%2e%2e/%2e%2e/%2e%2e/etc/passwd",
                     "static/../../../../etc/passwd", "gradio_api/file=app.py", "gradio_api/file=../app.py"]:
            tried_escapes += 1
            try:
                with urllib.request.urlopen(app_url + path, timeout=10) as response:
                    body = response.read()
                escapes += int(b"root:" in body or b"def main" in body or b"import" in body)
            except (urllib.error.HTTPError, urllib.error.URLError):
                pass
    foreign = tmp / "not-a-bundle"
    foreign.mkdir()
    (foreign / "thesis.txt").write_text("years of work")
    before = hashlib.sha256((foreign / "thesis.txt").read_bytes()).hexdigest()
    cluster = tmp / "clusters.csv"
    cluster.write_text("qid,question,cluster\n1,how do i cook rice,a\n2,how to cook rice,a\n")
    result = subprocess.run([sys.executable, "-m", "qpr", "train", "--data", str(cluster), "--out", str(foreign)], cwd=ROOT,
                            capture_output=True, text=True, timeout=300, env=os.environ | {"OMP_NUM_THREADS": "1"})
    intact = (foreign / "thesis.txt").is_file() and hashlib.sha256((foreign / "thesis.txt").read_bytes()).hexdigest() == before
    return {"anonymous_writes_accepted": anonymous, "anonymous_names_tried": len(names),
            "impersonations_accepted": impersonations, "path_escapes": escapes, "path_escapes_tried": tried_escapes,
            "foreign_paths_destroyed": int(not intact), "foreign_out_exit": result.returncode}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "qpr-reliability-cache"),
                        help="where the demo bundle for the app is cached")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        print("bad inputs ...", flush=True)
        bad = bad_inputs(tmp)
        print(bad, "\nkills ...", flush=True)
        killed = kills(tmp)
        print(killed, "\nwriters on SQLite ...", flush=True)
        sqlite = run_load(f"sqlite:///{tmp / 'load.db'}")
        print(sqlite, "\nwriters on PostgreSQL ...", flush=True)
        pg = postgres_url()
        postgres = None
        if pg:
            try:
                postgres = run_load(pg[0])
            finally:
                pg[1]()
        print(postgres, "\nsearch load and access ...", flush=True)
        search, users, checks = with_app(Path(args.cache), lambda url, pid: (
            run_search_load(url, pid=pid), run_search_load(url, think_ms=USER_THINK_MS, pid=pid), access(tmp, url)))
    results = {
        "bad_inputs": {k: bad[k] for k in ("tried", "clear_errors", "tracebacks", "silently_accepted")},
        "kills": {k: killed[k] for k in ("tried", "last_good_intact", "partial_files_left")},
        "load": {"search_clients": search["search_clients"], "search_p99_ms": round(search["search_p99_ms"], 1),
                 "search_single_ms": round(search["search_single_ms"], 1),
                 "search_p99_ms_with_think": round(users["search_p99_ms"], 1),
                 "server_cpu_ms_per_search": round(search["server_cpu_ms_per_search"], 1),
                 "errors": search["errors"] + users["errors"] + sqlite["errors"]
                 + (postgres["errors"] if postgres else 0), "writers": sqlite["writers"],
                 "lost": sqlite["lost"] + (postgres["lost"] if postgres else 0),
                 "sqlite_p99_ms": round(sqlite["p99_ms"], 1),
                 "postgres_p99_ms": round(postgres["p99_ms"], 1) if postgres else None},
        "access": {k: checks[k] for k in ("anonymous_writes_accepted", "impersonations_accepted", "path_escapes",
                                          "foreign_paths_destroyed")},
        "detail": {"bad_input_failures": bad["failed_cases"], "kill_failures": killed["failed_cases"],
                   "sqlite": sqlite, "postgres": postgres, "search": search, "search_with_think": users,
                   "access": checks},
        "machine": machine(),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    if RESULTS.is_file():  # the operations figures come from bench.reliability_ops: kept as they are
        results |= {k: v for k, v in json.loads(RESULTS.read_text()).items() if k == "ops"}
    write_json(results, RESULTS)
    b, k, ld, a = results["bad_inputs"], results["kills"], results["load"], results["access"]
    replace_marked_section(DOC, "reliability-figures", f"""
Measured by `python -m bench.reliability` on {results['date']}; machine: {results['machine']}.
Raw figures: `bench/results/reliability.json`.

| what | figure |
|---|---|
| bad inputs tried / clear one-line errors / tracebacks / silently accepted | {b['tried']} / {b['clear_errors']} / {b['tracebacks']} / {b['silently_accepted']} |
| kills tried / last good intact / partial files left | {k['tried']} / {k['last_good_intact']} / {k['partial_files_left']} |
| {ld['writers']} writers x {sqlite['per_writer']} judgments, SQLite: p50 / p99 / max per write | {sqlite['p50_ms']:.0f} / {sqlite['p99_ms']:.0f} / {sqlite['max_ms']:.0f} ms |
| the same on PostgreSQL: p50 / p99 / max | {f"{postgres['p50_ms']:.0f} / {postgres['p99_ms']:.0f} / {postgres['max_ms']:.0f} ms" if postgres else "not run (no QPR_TEST_POSTGRES_URL)"} |
| judgments lost (acknowledged ids missing), both backends | {ld['lost']} |
| search alone (median) / {ld['search_clients']} clients back to back, p50 / p99 | {search['search_single_ms']:.0f} / {search['search_p50_ms']:.0f} / {search['search_p99_ms']:.0f} ms |
| {ld['search_clients']} clients with a think time (mean {USER_THINK_MS / 1000:.0f} s), p50 / p99 | {users['search_p50_ms']:.0f} / {users['search_p99_ms']:.0f} ms |
| the app's CPU per search (back to back) | {ld['server_cpu_ms_per_search']:.1f} ms |
| errors (writes and searches) | {ld['errors']} |
| anonymous writes accepted ({checks['anonymous_names_tried']} names) / impersonations accepted | {a['anonymous_writes_accepted']} / {a['impersonations_accepted']} |
| path escapes through the app ({checks['path_escapes_tried']} URLs) / foreign paths destroyed | {a['path_escapes']} / {a['foreign_paths_destroyed']} |
""")
    print(results["load"], results["access"])


if __name__ == "__main__":
    main()
