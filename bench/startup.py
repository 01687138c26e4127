"""How long `python app.py` takes to serve its default demo (BANKING77's real questions, read from
QPR_DATA_DIR): cold (empty bundle cache: BM25 serves while the encoder trains in the background)
and warm (the cached trained bundle is loaded).

Each start is timed from launching the process until the server answers HTTP 200 on its page
(``cold_start_s``, ``warm_start_s``). On the cold start also: until the Search tab's API
(``/search``, through ``gradio_client``) returns results for a question (``first_answer_s``), and
until the app logs that it serves the trained encoder (``trained_served_s``: the swap is done,
``workflows.first_training``). Every run uses a fresh temporary SQLite database; the cold run also
a fresh bundle cache. QPR_DEMO is left unset, as on a fresh clone.

A restart as a team has one (issue 54, item 7): ``--projects`` BANKING77-sized projects on disk
(its train.csv imported as clusters, as ``bench.workspaces`` makes them), each opened once through
the app's context on a database kept between starts (so their corpora are registered, as the
pages of the run before did), then the app started again on that database with logins
(``QPR_AUTH``) until HTTP answers (``warm_restart_s``), each restart paired with a warm start on a
fresh database with no project on disk so both see the same load (``warm_restart_baseline_s``). ``import_s``: what
importing the app costs before it does anything (``python -X importtime``), most of any start.

    python -m bench.startup [--warm-runs 3] [--projects 6] [--out bench/results/startup.json]

Writes the JSON result (seconds, machine, corpus size) and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from annotations.db import open_store
from bench.workspaces import banking77, on_page
from harness.app_process import ROOT, cold_start, start_app, stop_app
from qpr.data.banking77 import HUB_DATASET, banking77_corpus
from qpr.data.upload import read_upload
from qpr.fsutil.atomic import atomic_path
from qpr.serving.projects import Projects
from qpr.serving.served_model import ServedModel
from qpr.serving.slugs import DEMO
from workflows.demos import banking_demo
from ui.common import AppContext

TUTORIAL = {"QPR_DEMO": "tutorial"}
LOGINS = {"QPR_AUTH": "alice:alice-pw,bob:bob-pw,carol:carol-pw"}


def timed_start(tmp: Path, cache: Path, name: str, demo: dict[str, str] | None = None, db: str | None = None) -> float:
    env = {"QPR_CACHE_DIR": str(cache), "QPR_DB_URL": f"sqlite:///{tmp / f'{db or name}.db'}"} | (demo or {})
    process, _, seconds = start_app(env, tmp / f"{name}.log")
    stop_app(process)
    return seconds


def projects_opened(tmp: Path, cache: Path, n_projects: int, db: str) -> int:
    """``n_projects`` BANKING77 projects created under ``cache`` and each opened once on a page of
    its own through the app's context on database ``db`` (registering its corpus there); returns
    the questions each holds."""
    upload = read_upload(banking77(tmp), "clusters", columns={"question": "text", "cluster": "category"})
    projects = Projects(cache / "projects")
    slugs = [projects.create(f"Bank {n + 1}", upload, "alice") for n in range(n_projects)]
    store = open_store(f"sqlite:///{tmp / f'{db}.db'}", project=DEMO)
    try:
        ctx = AppContext(ServedModel(banking_demo(cache)), store, cache=cache)
        for n, slug in enumerate(slugs):
            on_page(f"page-{n}")
            ctx.open(slug)
        on_page(None)
    finally:
        store.close()
    return len(upload.corpus)


def import_seconds() -> float:
    """Seconds importing the app takes (``python -X importtime``'s cumulative time of ``ui.startup``)."""
    ran = subprocess.run([sys.executable, "-X", "importtime", "-c", "import ui.startup"], cwd=ROOT,
                         capture_output=True, text=True, check=True)
    line = next(line for line in ran.stderr.splitlines() if line.rstrip().endswith("| ui.startup"))
    return int(line.split("|")[1]) / 1e6


def machine() -> dict:
    cpu = platform.processor()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        names = [line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines() if line.startswith("model name")]
        cpu = names[0] if names else cpu
    return {
        "cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(), "system": platform.platform(),
        "load_average_at_start": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--warm-runs", type=int, default=3, help="warm starts to time (the median is reported)")
    parser.add_argument("--projects", type=int, default=6, help="projects on disk for the timed restarts")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "startup.json")
    args = parser.parse_args(argv)
    os.environ.pop("QPR_DEMO", None)  # the default demo, as on a fresh clone
    corpus = banking77_corpus()
    host = machine()
    with tempfile.TemporaryDirectory(prefix="qpr-startup-") as tmp_name:
        tmp = Path(tmp_name)
        first = cold_start(tmp, tmp / "cache")
        cold = first["http"]
        # Beside each warm start, the same machine serving the 566-question tutorial (trained on its
        # first start, then timed warm), in turn, so both see the same load: how much of a start is
        # the app itself rather than the corpus.
        timed_start(tmp, tmp / "cache", "tutorial-cold", TUTORIAL)
        warm, tutorial = [], []
        for i in range(args.warm_runs):
            warm.append(timed_start(tmp, tmp / "cache", f"warm{i}"))
            tutorial.append(timed_start(tmp, tmp / "cache", f"tutorial{i}", TUTORIAL))
        timed_start(tmp, tmp / "cache", "restart-first", db="restart")  # the demo registered in the kept database
        questions = projects_opened(tmp, tmp / "cache", args.projects, "restart")
        restart, paired, loads = [], [], []
        for i in range(args.warm_runs):
            restart.append(timed_start(tmp, tmp / "cache", f"restart{i}", LOGINS, db="restart"))
            (tmp / "cache" / "projects").rename(tmp / "projects-aside")  # the baseline: no project on disk
            paired.append(timed_start(tmp, tmp / "cache", f"paired{i}"))
            (tmp / "projects-aside").rename(tmp / "cache" / "projects")
            loads.append(round(os.getloadavg()[0], 1))
        imports = [import_seconds() for _ in range(args.warm_runs)]
    result = {
        "command": "python app.py",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "cold_start_s": round(cold, 2),
        "warm_start_s": round(statistics.median(warm), 2) if warm else None,
        "warm_runs_s": [round(s, 2) for s in warm],
        "first_answer_s": round(first["first_answer"], 2),
        "trained_served_s": round(first["trained"], 2),
        "corpus_questions": len(corpus),
        "tutorial_warm_start_s": round(statistics.median(tutorial), 2) if tutorial else None,
        "warm_restart_s": round(statistics.median(restart), 2) if restart else None,
        "warm_restart_runs_s": [round(s, 2) for s in restart],
        "warm_restart_baseline_s": round(statistics.median(paired), 2) if paired else None,
        "warm_restart_baseline_runs_s": [round(s, 2) for s in paired],
        "warm_restart_load_1min": loads,
        "projects_on_disk": args.projects,
        "project_questions": questions,
        "restart": f"{args.projects} BANKING77 projects ({questions} questions each) on disk, each opened once on the "
                   "kept database; restarted with logins (QPR_AUTH); baseline: a warm start on a fresh database "
                   "with no project on disk, run after each restart (1-minute load after each pair)",
        "import_s": round(statistics.median(imports), 2) if imports else None,
        "corpus": {"file": f"BANKING77 from QPR_DATA_DIR (intents/banking77; on a Space: the Hub data set {HUB_DATASET})",
                   "questions": len(corpus), "clusters": int(corpus["cluster"].nunique())},
        "cold_log": first["log"],
        "machine": host,
    }
    with atomic_path(args.out) as tmp_out:
        tmp_out.write_text(json.dumps(result, indent=2) + "\n")
    warm_text = f"{result['warm_start_s']:.1f} s" if warm else "not run"
    print("| start | seconds | corpus | machine |")
    print("| --- | --- | --- | --- |")
    print(f"| cold, until HTTP answers | {cold:.1f} s | {len(corpus)} questions | {host['cores']} cores, {host['cpu']} |")
    print(f"| cold, until the first search answers (BM25) | {first['first_answer']:.1f} s | | |")
    print(f"| cold, until the trained encoder is served | {first['trained']:.1f} s | | |")
    print(f"| warm (cached bundle, median of {len(warm)}) | {warm_text} | {len(corpus)} questions | {host['cores']} cores, {host['cpu']} |")
    print(f"| warm restart, {args.projects} projects on disk, kept database, logins (median of {len(restart)}) "
          f"| {result['warm_restart_s']} s | | same |")
    print(f"| warm, fresh database, no project on disk, after each restart (median of {len(paired)}) "
          f"| {result['warm_restart_baseline_s']} s | | same |")
    print(f"| importing the app | {result['import_s']} s | | same |")
    print(f"| warm, the tutorial instead (median of {len(tutorial)}) | {result['tutorial_warm_start_s']} s | 566 questions | same |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
