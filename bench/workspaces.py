"""Projects as workspaces, measured through the app's own context (``ui.common.AppContext``):
how many projects the size of BANKING77 it serves at once, the memory each costs, and how long a
page waits when it opens a project that is not loaded. Writes ``bench/results/workspaces.json``::

    {"projects_served_at_once", "rss_mb_per_project", "open_project_ms_p50",
     "bare_to_trainable_judgments", "browser_tests", "machine", "date", ...}

Each project is BANKING77's train.csv (its repeated questions left out, as ``bench.own_data``
does) imported as clusters, so served by BM25 as a new project is. The benchmark creates
``--projects`` of them in a temporary cache, then opens each on a page of its own
(``AppContext.open``, as a page opening ``?project=<slug>`` does) and checks that every one
answers a search while all are open. The memory per project is the growth of this process's
resident memory over those opens divided by their number (Linux ``/proc/self/statm``), next to
``qpr.serving.workspaces.estimated_mb``, the estimate the budget uses. Opening time: each
project unloaded (``Workspaces.drop``) then opened again, as after an unload or a restart (its
corpus already in the database), ``--repeats`` times; the first opens, which also register the
corpus in the database, are reported apart. ``bare_to_trainable_judgments`` belongs to another
measurement (the bare-questions queue): it is kept as the file has it (0 when absent).

    python -m bench.workspaces [--projects 6] [--repeats 3]    # also rewrites the table in docs/WORKSPACES.md
    python -m bench.workspaces --isolation                    # cross_project_leaks, views_checked

``--isolation`` runs the browser walk of two projects imported from one file
(tests/test_app_browser_isolation.py: two annotators judge overlapping pairs, every view of each
page is read for the other project's judgments) and records what it counted:
``cross_project_leaks`` (views that showed the other project's work) and ``views_checked``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
from gradio.context import LocalContext

from annotations.db import open_store
from bench.common import machine, markdown_table, replace_marked_section, write_json
from bench.own_data import key
from qpr.bundles.bundle import Bundle
from qpr.data.corpus import data_dir
from qpr.data.upload import read_upload
from qpr.serving.projects import Projects
from qpr.serving.served_model import ServedModel
from qpr.serving.workspaces import estimated_mb
from ui.common import AppContext

RESULTS = Path(__file__).resolve().parent / "results" / "workspaces.json"
DOC = Path(__file__).resolve().parents[1] / "docs" / "WORKSPACES.md"
ISOLATION_TEST = "tests/test_app_browser_isolation.py"
ISOLATION_REPORT = Path(__file__).resolve().parents[1] / "test-artifacts" / "isolation.json"
BROWSER_TESTS = ["tests/test_app_browser_workspaces.py", "tests/test_app_browser_bare.py", "tests/test_app_browser_clusters.py"]
QUERY = "my card has not arrived yet"


def rss_mb() -> float:
    """This process's resident memory now, in megabytes (Linux)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 1e6


def on_page(page: str | None) -> None:
    """Handle what follows as an event of page ``page`` (Gradio does this for every handler)."""
    LocalContext.request.set(SimpleNamespace(session_hash=page) if page else None)


def banking77(folder: Path) -> Path:
    """BANKING77's train.csv without its repeated questions, written under ``folder``."""
    banking = pd.read_csv(data_dir() / "intents/banking77/train.csv", dtype=str, keep_default_na=False)
    path = folder / "banking77-train.csv"
    banking[~banking["text"].map(key).duplicated()].to_csv(path, index=False)
    return path


def measure(n_projects: int, repeats: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="qpr-workspaces-") as tmp:
        tmp = Path(tmp)
        upload = read_upload(banking77(tmp), "clusters", columns={"question": "text", "cluster": "category"})
        projects = Projects(tmp / "cache" / "projects")
        slugs = [projects.create(f"Bank {n + 1}", upload, "bench") for n in range(n_projects)]
        store = open_store(f"sqlite:///{tmp / 'annotations.db'}", project="demo")
        # The built-in project is one small BM25 corpus here: the demo's model is not what is measured.
        ctx = AppContext(ServedModel(Bundle.lexical_of(upload.corpus.head(50).assign(qid=range(1, 51)))), store,
                         cache=tmp / "cache")
        gc.collect()
        before = rss_mb()
        first_ms = []
        for n, slug in enumerate(slugs):
            on_page(f"page-{n}")
            start = time.perf_counter()
            ctx.open(slug)
            first_ms.append((time.perf_counter() - start) * 1000)
        gc.collect()
        grown = rss_mb() - before
        answering = 0
        for n, slug in enumerate(slugs):  # every page searches its own project, all open at once
            on_page(f"page-{n}")
            hits = ctx.current().served().default.search(QUERY, 5)
            answering += ctx.project == slug and len(hits) == 5
        served_at_once = len([slug for slug in ctx.served.loaded() if slug in slugs])
        estimate = statistics.median(estimated_mb(ctx.served.get(slug).current()) for slug in slugs)
        reopen_ms = []
        for _ in range(repeats):
            for n, slug in enumerate(slugs):
                on_page(f"page-{n}")
                ctx.served.drop(slug)
                start = time.perf_counter()
                ctx.open(slug)
                reopen_ms.append((time.perf_counter() - start) * 1000)
        on_page(None)
        store.close()
    budget = ctx.served.budget_mb
    return {"projects_served_at_once": int(min(served_at_once, answering)),
            "rss_mb_per_project": round(grown / n_projects, 1),
            "open_project_ms_p50": round(statistics.median(reopen_ms), 1),
            "open_project_ms_first_p50": round(statistics.median(first_ms), 1),
            "open_project_ms_all": [round(ms, 1) for ms in reopen_ms],
            "estimated_mb_per_project": round(estimate, 1),
            "budget_mb": budget, "budget_fits_projects": int(budget // estimate),
            "project_questions": int(len(upload.corpus)), "project_clusters": int(upload.corpus["cluster"].nunique()),
            "projects_opened": n_projects, "reopens_per_project": repeats}


def isolation() -> dict:
    """The browser walk's counts (module doc), from a run of it now."""
    ISOLATION_REPORT.unlink(missing_ok=True)
    ran = subprocess.run([sys.executable, "-m", "pytest", ISOLATION_TEST, "-q", "-p", "no:cacheprovider"],
                         cwd=ISOLATION_REPORT.parents[1])
    counted = json.loads(ISOLATION_REPORT.read_text())
    return {"cross_project_leaks": counted["cross_project_leaks"], "views_checked": counted["views_checked"],
            "isolation_views": counted["views"], "isolation_test": ISOLATION_TEST,
            "isolation_test_passed": ran.returncode == 0, "isolation_date": datetime.now(timezone.utc).strftime("%Y-%m-%d")}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--projects", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--isolation", action="store_true", help="run the two-project browser walk only")
    args = parser.parse_args(argv)
    try:  # keep what another measurement wrote (bare_to_trainable_judgments)
        kept = json.loads(RESULTS.read_text())
    except (OSError, ValueError):
        kept = {}
    if args.isolation:
        result = kept | isolation()
        write_json(result, RESULTS)
        print(json.dumps({key: result[key] for key in ("cross_project_leaks", "views_checked")}))
        return
    measured = measure(args.projects, args.repeats)
    result = kept | measured | {"bare_to_trainable_judgments": kept.get("bare_to_trainable_judgments", 0),
                                "browser_tests": BROWSER_TESTS, "machine": f"2-core CPU machine ({machine()})",
                                "date": datetime.now(timezone.utc).strftime("%Y-%m-%d")}
    write_json(result, RESULTS)
    print(json.dumps(result, indent=2))
    row = {"what": f"BANKING77 ({measured['project_questions']:,} questions, {measured['project_clusters']} clusters), BM25",
           **measured}
    table = markdown_table([row], [("what", "project"), ("projects_served_at_once", "served at once (all answering)"),
                                   ("rss_mb_per_project", "RSS MB per project"),
                                   ("estimated_mb_per_project", "estimated MB (budget)"),
                                   ("budget_fits_projects", f"fit in {measured['budget_mb']:,.0f} MB"),
                                   ("open_project_ms_p50", "open ms p50"),
                                   ("open_project_ms_first_p50", "first open ms p50")])
    replace_marked_section(DOC, "workspaces", f"{table}\n\nMachine: {result['machine']}; {result['date']}; "
                           f"{args.projects} projects, each opened again {args.repeats} times after an unload.")


if __name__ == "__main__":
    main()
