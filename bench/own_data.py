"""Own data, end to end through the app's code: import real shared sets as projects, then train
one in the background while searching it. Writes ``bench/results/own_data.json``::

    {"imports": [{"name", "kind", "rows", "seconds"}],
     "background_training": {"seconds", "served_during_training"}, "browser_test": "tests/..."}

Imports go through ``qpr.upload.read_upload`` and ``qpr.projects.Projects.create``, as the
Projects tab calls them: BANKING77 (train.csv) as clusters, InsuranceQA as a question -> answer
log, and BANKING77's test questions as bare questions. BANKING77's train.csv repeats 6 questions (test.csv
1), which the import refuses by row; the benchmark imports copies without the later repeats (in a
temporary folder) and records that. The training is the Projects tab's: a worker process
(``qpr.background_training``) on the BANKING77 project with the demo's small settings and few
epochs; meanwhile the benchmark searches the served project (BM25) and records whether every
search answered and its slowest time.

    python bench/own_data.py [--epochs 2]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from qpr.background_training import TrainingJob  # noqa: E402
from qpr.data import data_dir  # noqa: E402
from qpr.errors import QPRError  # noqa: E402
from qpr.projects import Projects  # noqa: E402
from qpr.serving import ServedModel  # noqa: E402
from qpr.text import tokenize  # noqa: E402
from qpr.upload import read_upload  # noqa: E402
from ui.demo import DEMO_ENCODER, DEMO_TEXT, DEMO_TRAIN  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "own_data.json"
BROWSER_TEST = "tests/test_app_browser_projects.py"
QUERIES = ["my card has not arrived yet", "how do I top up by card", "why was my transfer declined",
           "can I change my PIN", "exchange rate for euros"]


def key(question: str) -> str:
    """A question as the import compares them for repeats (its tokens)."""
    return " ".join(tokenize(question))


def timed_import(projects: Projects, name: str, path: Path, kind: str, columns: dict) -> dict:
    start = time.perf_counter()
    upload = read_upload(path, kind, columns=columns)
    projects.create(name, upload, "bench")
    seconds = time.perf_counter() - start
    print(f"{name}: {kind}, {upload.rows} rows, {len(upload.corpus)} questions, {seconds:.1f} s", flush=True)
    return {"name": name, "kind": kind, "rows": upload.rows, "seconds": round(seconds, 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    shared = data_dir()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        banking = pd.read_csv(shared / "intents/banking77/train.csv", dtype=str, keep_default_na=False)
        try:
            read_upload(shared / "intents/banking77/train.csv", "clusters", columns={"question": "text", "cluster": "category"})
            refused = ""
        except QPRError as err:
            refused = str(err).splitlines()[0]
        deduplicated = banking[~banking["text"].map(key).duplicated()]
        deduplicated.to_csv(tmp / "banking77-train.csv", index=False)
        test = pd.read_csv(shared / "intents/banking77/test.csv", dtype=str, keep_default_na=False)
        test[~test["text"].map(key).duplicated()][["text"]].to_csv(tmp / "banking77-test-questions.csv", index=False)
        projects = Projects(tmp / "projects")
        imports = [
            timed_import(projects, "BANKING77", tmp / "banking77-train.csv", "clusters", {"question": "text", "cluster": "category"}),
            timed_import(projects, "InsuranceQA", shared / "qa-logs/insuranceqa-v2/questions.jsonl", "qa-log",
                         {"answer": "answer_labels"}),
            timed_import(projects, "BANKING77 test questions", tmp / "banking77-test-questions.csv", "questions",
                         {"question": "text"}),
        ]
        served = ServedModel(projects.served_bundle("banking77"))
        job = TrainingJob(projects.folder("banking77") / "training")
        corpus = served.current().bundle.corpus
        start = time.perf_counter()
        job.start(corpus, replace(DEMO_TRAIN, max_epochs=args.epochs), DEMO_TEXT, DEMO_ENCODER, None, {}, "bench")
        searches, failures, slowest = 0, 0, 0.0
        while job.status()["state"] in ("starting", "running"):
            for query in QUERIES:
                began = time.perf_counter()
                try:
                    hits = served.current().default.search(query, 10)
                    failures += not hits
                except Exception:  # noqa: BLE001  (any failure means search was not served)
                    failures += 1
                searches += 1
                slowest = max(slowest, time.perf_counter() - began)
            time.sleep(0.5)
        seconds = time.perf_counter() - start
        status = job.status()
        print(f"training: {status['state']} in {seconds:.1f} s; {searches} searches meanwhile, {failures} failed, "
              f"slowest {1000 * slowest:.0f} ms", flush=True)
        metrics = job.result().manifest.get("hybrid_metrics", {}) if status["state"] == "done" else {}
    result = {
        "imports": imports,
        "background_training": {"seconds": round(seconds, 1), "served_during_training": searches > 0 and failures == 0},
        "browser_test": BROWSER_TEST,
        "details": {
            "training_state": status["state"], "training_message": status.get("message"), "epochs": args.epochs,
            "train_settings": "ui.demo DEMO_TRAIN/DEMO_TEXT/DEMO_ENCODER", "searches_during_training": searches,
            "failed_searches": failures, "slowest_search_ms": round(1000 * slowest, 1),
            "trained_hybrid_metrics": metrics, "banking77_refused_as_is": refused,
            "banking77_rows_imported_after_dropping_repeats": int(len(deduplicated)),
            "machine": f"{platform.machine()}, {__import__('os').cpu_count()} CPUs shared, Python {platform.python_version()}",
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        },
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
