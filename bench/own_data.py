"""Own data, end to end through the app's code: import real shared sets as projects, then train
one in the background while searching it. Writes ``bench/results/own_data.json``::

    {"imports": [{"name", "kind", "rows", "seconds"}],
     "background_training": {"seconds", "served_during_training"}, "browser_test": "tests/..."}

Imports go through ``qpr.data.upload.read_upload`` and ``qpr.serving.projects.Projects.create``, as the
Projects tab calls them: BANKING77 (train.csv) as clusters, InsuranceQA as a question -> answer
log, and BANKING77's test questions as bare questions. BANKING77's train.csv repeats 6 questions (test.csv
1), which the import refuses by row; the benchmark imports copies without the later repeats (in a
temporary folder) and records that. The training is the Projects tab's: a worker process
(``workflows.background_training``) on the BANKING77 project with the demo's small settings and few
epochs; meanwhile the benchmark searches the served project (BM25) and records whether every
search answered and its slowest time.

    python -m bench.own_data [--epochs 2] [--repeats 3]    # also rewrites the table in docs/OWN_DATA.md
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd


from bench.common import machine, markdown_table, replace_marked_section, write_json
from workflows.background_training import TrainingJob, worker_alive
from qpr.bundles.training import compare_bundles
from qpr.data.corpus import data_dir
from qpr.errors import QPRError
from qpr.serving.projects import Projects
from qpr.serving.served_model import ServedModel
from qpr.model.text import tokenize
from qpr.data.upload import read_upload
from workflows.project import SMALL_CORPUS

RESULTS = Path(__file__).resolve().parent / "results" / "own_data.json"
DOC = Path(__file__).resolve().parents[1] / "docs" / "OWN_DATA.md"
BROWSER_TEST = "tests/test_app_browser_projects.py"
QUERIES = ["my card has not arrived yet", "how do I top up by card", "why was my transfer declined",
           "can I change my PIN", "exchange rate for euros"]


def key(question: str) -> str:
    """A question as the import compares them for repeats (its tokens)."""
    return " ".join(tokenize(question))


def timed_import(root: Path, name: str, path: Path, kind: str, columns: dict, repeats: int) -> dict:
    """Import ``path`` as project ``name`` ``repeats`` times (a fresh projects folder each under
    ``root``); the median seconds, and every run's."""
    runs = []
    for run in range(repeats):
        start = time.perf_counter()
        upload = read_upload(path, kind, columns=columns)
        Projects(root / f"run-{run}").create(name, upload, "bench")
        runs.append(time.perf_counter() - start)
    print(f"{name}: {kind}, {upload.rows} rows, {len(upload.corpus)} questions, {statistics.median(runs):.1f} s "
          f"(median of {repeats})", flush=True)
    return {"name": name, "kind": kind, "rows": upload.rows, "seconds": round(statistics.median(runs), 2),
            "seconds_each_run": [round(r, 2) for r in runs], "questions": len(upload.corpus)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3, help="imports of each file; the median is reported")
    args = parser.parse_args()
    shared = data_dir()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        banking = pd.read_csv(shared / "intents/banking77/train.csv", dtype=str, keep_default_na=False)
        try:
            read_upload(shared / "intents/banking77/train.csv", "clusters", columns={"question": "text", "cluster": "category"})
            refused = ""
        except QPRError as err:
            refused = str(err).splitlines()[0].split(", nothing")[0]
        deduplicated = banking[~banking["text"].map(key).duplicated()]
        deduplicated.to_csv(tmp / "banking77-train.csv", index=False)
        test = pd.read_csv(shared / "intents/banking77/test.csv", dtype=str, keep_default_na=False)
        test[~test["text"].map(key).duplicated()][["text"]].to_csv(tmp / "banking77-test-questions.csv", index=False)
        imports = [
            timed_import(tmp, "BANKING77", tmp / "banking77-train.csv", "clusters", {"question": "text", "cluster": "category"},
                         args.repeats),
            timed_import(tmp, "InsuranceQA", shared / "qa-logs/insuranceqa-v2/questions.jsonl", "qa-log",
                         {"answer": "answer_labels"}, args.repeats),
            timed_import(tmp, "BANKING77 test questions", tmp / "banking77-test-questions.csv", "questions",
                         {"question": "text"}, args.repeats),
        ]
        projects = Projects(tmp / "run-0")
        served = ServedModel(projects.served_bundle("banking77"))
        job = TrainingJob(projects.folder("banking77") / "training")
        corpus = served.current().bundle.corpus
        start = time.perf_counter()
        job.start(corpus, replace(SMALL_CORPUS.train, max_epochs=args.epochs), SMALL_CORPUS.text, SMALL_CORPUS.encoder, None, {}, "bench")
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
        while worker_alive(status.get("pid"), job.folder):  # the worker exits just after writing "done"
            time.sleep(0.1)
        print(f"training: {status['state']} in {seconds:.1f} s; {searches} searches meanwhile, {failures} failed, "
              f"slowest {1000 * slowest:.0f} ms", flush=True)
        comparison = []
        if status["state"] == "done":  # the comparison the app shows before anyone confirms
            trained = job.result()
            table = compare_bundles(served.current().bundle, trained, trained.corpus).round(3)
            comparison = table.astype(object).where(table.notna(), None).to_dict(orient="records")  # JSON has no NaN
    result = {
        "imports": imports,
        "background_training": {"seconds": round(seconds, 1), "served_during_training": searches > 0 and failures == 0},
        "browser_test": BROWSER_TEST,
        "details": {
            "training_state": status["state"], "training_message": status.get("message"), "epochs": args.epochs,
            "train_settings": "workflows.project SMALL_CORPUS", "searches_during_training": searches,
            "failed_searches": failures, "slowest_search_ms": round(1000 * slowest, 1),
            "comparison_before_after": comparison, "banking77_refused_as_is": refused,
            "banking77_rows_imported_after_dropping_repeats": int(len(deduplicated)),
            "seed": 0, "machine": machine(), "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        },
    }
    write_json(result, RESULTS)
    replace_marked_section(DOC, "own-data", report(result))
    print(f"wrote {RESULTS} and {DOC}")
    return 0


def report(result: dict) -> str:
    """The doc's table and lines, from the results."""
    details, training = result["details"], result["background_training"]
    rows = [row | {"runs": ", ".join(f"{r:.1f}" for r in row["seconds_each_run"])} for row in result["imports"]]
    return (markdown_table(rows, [("name", "import"), ("kind", "kind"), ("rows", "rows"),
                                               ("questions", "questions"), ("seconds", "seconds (median)"),
                                               ("runs", "each run, s")])
            + f"\n\nBackground training of the BANKING77 project ({details['epochs']} epochs at most, the demo's "
              f"small settings, seed {details['seed']}): **{training['seconds']:.1f} s**, ended {details['training_state']}; "
              f"{details['searches_during_training']} searches meanwhile, {details['failed_searches']} failed, slowest "
              f"{details['slowest_search_ms']:.0f} ms (served during training: {training['served_during_training']}). "
              f"BANKING77's train.csv as shipped is refused ({details['banking77_refused_as_is']}: repeated questions); "
              f"{details['banking77_rows_imported_after_dropping_repeats']} rows imported after dropping the repeats. "
              f"Machine: {details['machine']}. Date: {details['date']}."
            + ("\n\nThe comparison the app shows before anyone confirms (current = BM25, the project's first served "
               "model; retrained = the background-trained hybrid), on the project's held-out intent clusters:\n\n"
               + markdown_table(details["comparison_before_after"],
                                [("model", "model"), ("split", "split"), ("H1", "H@1"), ("MRR", "MRR"), ("queries", "queries"),
                                 ("H1_change", "H@1 change"), ("H1_change_low", "95% low"), ("H1_change_high", "95% high")])
               if details["comparison_before_after"] else ""))


if __name__ == "__main__":
    sys.exit(main())
