"""How long `python app.py` takes to serve its default demo (BANKING77's real questions, read from
QPR_DATA_DIR): cold (empty bundle cache: BM25 serves while the encoder trains in the background)
and warm (the cached trained bundle is loaded).

Each start is timed from launching the process until the server answers HTTP 200 on its page
(``cold_start_s``, ``warm_start_s``). On the cold start also: until the Search tab's API
(``/search``, through ``gradio_client``) returns results for a question (``first_answer_s``), and
until the app logs that it serves the trained encoder (``trained_served_s``: the swap is done,
``workflows.first_training``). Every run uses a fresh temporary SQLite database; the cold run also
a fresh bundle cache. QPR_DEMO is left unset, as on a fresh clone.

    python -m bench.startup [--warm-runs 3] [--out bench/results/startup.json]

Writes the JSON result (seconds, machine, corpus size) and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from harness.app_process import ROOT, cold_start, start_app, stop_app
from qpr.data.banking77 import HUB_DATASET, banking77_corpus
from qpr.fsutil.atomic import atomic_path

TUTORIAL = {"QPR_DEMO": "tutorial"}


def timed_start(tmp: Path, cache: Path, name: str, demo: dict[str, str] | None = None) -> float:
    env = {"QPR_CACHE_DIR": str(cache), "QPR_DB_URL": f"sqlite:///{tmp / f'{name}.db'}"} | (demo or {})
    process, _, seconds = start_app(env, tmp / f"{name}.log")
    stop_app(process)
    return seconds


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
    print(f"| warm, the tutorial instead (median of {len(tutorial)}) | {result['tutorial_warm_start_s']} s | 566 questions | same |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
