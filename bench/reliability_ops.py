"""The operations figures of the reliability suite: ``python -m bench.reliability_ops [--parts ...]``.

- csv: every OWASP payload as a question through the app's CSV export (cluster file and pairs
  file) and a TSV table: a payload is live if any cell holding it begins with a formula trigger
  as a spreadsheet parses the file; and each must read back as written;
- backup: a backup taken while a thread keeps recording judgments, restored into a new database,
  its judgment ids and count compared with the backup's (and every judgment acknowledged before
  the backup started must be in it);
- outages: ``bench.db_outages`` (PostgreSQL restarted, SQLite's disk full);
- hostile: ``bench.hostile_uploads`` at full size;
- restore: ``harness.tampered_backups``: backups that are valid SQLite but not ours (a trigger, a view,
  a changed CHECK, a foreign table set, wrong revisions, a contradictory history, rows written
  around a CHECK, a scrambled page) restored over a live database: refused in one line, the live
  file untouched, the next judgment recorded;
- parquet: ``bench.hostile_uploads --parquet``: Parquet bombs at full size, each in a fresh process
  through ``read_upload``, the same with the app's modules loaded, and ``read_cluster_file``;
- csvwriters: the places in the product's code that write CSV/TSV (``csv_writers``), and those
  not through the spreadsheet-safe writer;
- swapcrash: ``harness.swap_crashes``: a model swap (the demo's, an uploaded project's, the demo's
  first training) SIGKILLed right after each of its steps, the app started again twice on the same
  cache and database: points tried, and points where the model served is the last recorded swap's
  and the trained model is offered again only where it is not served;
- access: ``harness.access_walk``: every path that reads a project's data walked as a login with
  no role in it (written under ``access``, not ``ops``): paths checked, paths without a rule,
  reads allowed, and how many of 200 wrong passwords were tried;
- sustained: read from ``bench/results/sustained_<db>.json`` (``bench.sustained_load``, run apart:
  ten minutes per database).

Reads ``bench/results/reliability.json``, replaces the ``ops`` parts asked for (other keys stay),
writes it atomically; details go to ``bench/results/reliability_ops_detail.json``, and the
figures to the ``reliability-ops`` section of ``docs/RELIABILITY.md``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from annotations.backup import backup, judgment_ids, restore
from annotations.db import open_store
from annotations.export import export, pairs_path
from bench.common import ROOT, machine, replace_marked_section, write_json
from bench.db_outages import run_outages
from bench.hostile_uploads import run_hostile, run_parquet_bombs
from harness.access_walk import walk
from harness.corpora import make_corpus
from harness.csv_writers import PRODUCT, csv_writers
from harness.formula_payloads import OWASP_PAYLOADS, live_cells
from harness.swap_crashes import run_swap_crashes
from harness.tampered_backups import run_tampered
from qpr.bundles.bundle import Bundle
from qpr.bundles.training import train_bundle
from qpr.data.corpus import read_table, write_table
from qpr.model.encoder import EncoderConfig
from qpr.model.text import TextConfig
from qpr.training.train import TrainConfig

RESULTS = ROOT / "bench" / "results" / "reliability.json"
DETAIL = ROOT / "bench" / "results" / "reliability_ops_detail.json"
DOC = ROOT / "docs" / "RELIABILITY.md"
PARTS = ("csv", "backup", "outages", "hostile", "sustained", "restore", "parquet", "csvwriters", "swapcrash", "access")


def csv_payloads(tmp: Path) -> dict:
    """The payloads through the CSV export and a TSV table (module doc)."""
    corpus = pd.DataFrame({"qid": range(1, len(OWASP_PAYLOADS) + 1), "question": OWASP_PAYLOADS,
                           "cluster": [f"c{i // 2}" for i in range(len(OWASP_PAYLOADS))], "split": "train"})
    with open_store(f"sqlite:///{tmp / 'csv.db'}", project="demo") as store:
        store.corpora.register("v1", corpus)
        store.judgments.record("alice", 3, "same", "v1", query_qid=1)  # a merge, so the pairs file holds payloads too
        out = export(store, corpus, "csv", tmp / "export" / "clusters.csv", "v1")
    files = [(out, ","), (pairs_path(out), ","), (write_table(corpus, tmp / "table.tsv"), "\t")]
    live = {cell for path, sep in files for cell in live_cells(path, sep)}
    back = read_table(out).set_index("qid")["question"]
    restored = sum(back.loc[str(q)] == text for q, text in zip(corpus["qid"], corpus["question"]))
    return {"tried": len(OWASP_PAYLOADS), "live": len(live), "read_back_equal": restored,
            "files": [str(p.name) for p, _ in files]}


def access_bundle(tmp: Path) -> Bundle:
    """A small trained bundle for the access walk's demo (its data is beside the point)."""
    (tmp / "access").mkdir()
    return train_bundle(make_corpus(), TrainConfig(batch_size=16, max_epochs=1), TextConfig(), EncoderConfig(
        embedding_dim=32, windows=(1,), channels=32, output_dim=32), progress=False)


def backup_check(tmp: Path) -> dict:
    """Backup under a writer, restore, compare (module doc)."""
    url = f"sqlite:///{tmp / 'live.db'}"
    acknowledged, stop = [], threading.Event()
    with open_store(url, project="demo") as store:
        store.corpora.register("v1", pd.DataFrame({"qid": range(1, 201), "question": [f"question {i}" for i in range(1, 201)],
                                                  "cluster": [f"c{i // 4}" for i in range(200)], "split": "train"}))

        def write() -> None:
            i = 0
            while not stop.is_set():
                acknowledged.append(store.judgments.record(f"w{i % 5}", 2 + i % 198, "same", "v1", query_qid=1))
                i += 1

        thread = threading.Thread(target=write)
        thread.start()
        try:
            while len(acknowledged) < 200:
                stop.wait(0.01)
            before = set(acknowledged)
            done = backup(url, tmp / "backup.db")
            while len(acknowledged) < len(before) + 200:
                stop.wait(0.01)
        finally:
            stop.set()
            thread.join()
    copied = judgment_ids(tmp / "backup.db")
    restored = restore(tmp / "backup.db", f"sqlite:///{tmp / 'restored.db'}")
    with open_store(f"sqlite:///{tmp / 'restored.db'}", project="demo") as store:
        ids = store.judgments.frame(current_only=False)["id"].astype(int).tolist()
    final = judgment_ids(tmp / "live.db")
    return {"equal": ids == copied and restored.judgments == len(copied) == done.judgments and before <= set(copied),
            "acknowledged_before": len(before), "in_backup": len(copied), "in_live_after": len(final),
            "consistent_prefix": copied == [i for i in final if i <= copied[-1]]}


def sustained() -> dict:
    """The bar's figures over both databases' runs (the worse of the two where one number stands for both)."""
    runs = {db: json.loads(path.read_text()) for db in ("sqlite", "postgres")
            if (path := ROOT / "bench" / "results" / f"sustained_{db}.json").is_file()}
    if not runs:
        raise SystemExit("run python -m bench.sustained_load --db sqlite (and --db postgres) first")
    values = list(runs.values())
    return {"annotators": min(r["annotators"] for r in values), "minutes": min(r["minutes"] for r in values),
            "errors": sum(r["errors"] for r in values), "acknowledged": sum(r["acknowledged"] for r in values),
            "stored": sum(r["stored"] for r in values), "rss_growth_mb": max(r["rss_growth_mb"] for r in values),
            "judge_p99_ms": max(r["per_action"]["judge"]["p99_ms"] for r in values)}, {db: r for db, r in runs.items()}


def ops_section(ops: dict, detail: dict) -> str:
    """The figures section of docs/RELIABILITY.md for the operations parts measured so far."""
    when = ", ".join(f"{part} {stamp['date']}" for part, stamp in detail.get("measured", {}).items())
    machines = sorted({stamp["machine"].split(", 1-min load")[0] for stamp in detail.get("measured", {}).values()})
    lines = [f"Measured by `python -m bench.reliability_ops` ({when}) on a 2-core CPU machine ({'; '.join(machines)}). "
             "Raw figures: `bench/results/reliability.json` (`ops`), details in `bench/results/reliability_ops_detail.json` "
             "and `bench/results/sustained_<db>.json`.", "", "| what | figure |", "|---|---|"]
    if "csv_payloads_tried" in ops:
        lines.append(f"| OWASP payloads through the CSV export and a TSV table / live cells / read back equal | "
                     f"{ops['csv_payloads_tried']} / {ops['csv_payloads_live']} / {detail['csv']['read_back_equal']} |")
    if "backup_restored_equal" in ops:
        b = detail["backup"]
        lines.append(f"| backup under a writer: acknowledged before / in the backup / in the database after; restored equal | "
                     f"{b['acknowledged_before']} / {b['in_backup']} / {b['in_live_after']}; {ops['backup_restored_equal']} |")
    for run in detail.get("db_outages", {}).get("runs", []):
        lines.append(f"| {run['outage']}, {run['down_s']:.0f} s: acknowledged / lost / clear messages / other errors / "
                     f"recovered | {run['acknowledged']} / {run['lost']} / {run['clear_messages']} / "
                     f"{len(run['other_errors'])} / {run['recovered']} |")
    hostile = detail.get("hostile_uploads")
    if hostile:
        lines.append(f"| hostile uploads tried / refused cleanly / peak RSS (a process that only imports the reader: "
                     f"{hostile['baseline_rss_mb']:.0f} MB) / slowest refusal | {hostile['tried']} / {hostile['refused_cleanly']} / "
                     f"{hostile['peak_rss_mb']:.0f} MB / {hostile['max_seconds']:.2f} s |")
        for name, case in hostile["cases"].items():
            first = case["message"].split("\n- ")[-1][:110]
            lines.append(f"| &nbsp; {name} ({case['file_mb']} MB file) | {case['outcome']} in {case['seconds']:.2f} s, "
                         f"{case['peak_rss_mb']:.0f} MB: {first} |")
    tampered = detail.get("restore_tampered")
    if tampered and "restore_tampered_tried" in ops:
        lines.append(f"| tampered backups restored over a live database: tried / refused in one line with the live file "
                     f"untouched and the next judgment recorded | {ops['restore_tampered_tried']} / "
                     f"{ops['restore_tampered_refused']} |")
        for name, case in tampered["cases"].items():
            lines.append(f"| &nbsp; {name} | {case['outcome']}: {case['message'].split(' ', 1)[-1][:110]} |")
    bombs = detail.get("parquet_bombs")
    if bombs and "parquet_bombs_tried" in ops:
        base = bombs["baseline_rss_mb"]
        lines.append(f"| Parquet bombs tried / refused (runs) / largest peak RSS, any process / largest growth over the "
                     f"process's own start (read_upload alone {base['upload']:.0f} MB, with the app's modules "
                     f"{base['app']:.0f} MB) / slowest refusal | {bombs['tried']} / {bombs['refused']} ({bombs['runs']}) / "
                     f"{bombs['peak_rss_mb']:.0f} MB / {bombs['max_growth_mb']:.0f} MB / {bombs['max_seconds']:.2f} s |")
        for make in dict.fromkeys(key.split("/")[0] for key in bombs["cases"]):
            runs = {key.split("/")[1]: case for key, case in bombs["cases"].items() if key.startswith(make + "/")}
            first = next(iter(runs.values()))
            reason = first["message"].split("\n- ")[-1]
            lines.append(f"| &nbsp; {make} ({first['file_bytes']:,}-byte file) | "
                         + ", ".join(f"{reader} {case['outcome']} in {case['seconds']:.3f} s, {case['rss_before_mb']:.0f} -> "
                                     f"{case['peak_rss_mb']:.0f} MB" for reader, case in runs.items())
                         + f": {reason[:110]} |")
    crashes = detail.get("swap_crashes")
    if crashes and "swap_crash_points_tried" in ops:
        lines.append(f"| a model swap killed right after a step, the app started again: points tried / consistent (served = "
                     f"last recorded swap, offered again only if not served) | {ops['swap_crash_points_tried']} / "
                     f"{ops['swap_crash_consistent']} |")
        for case in crashes["points"]:
            step = {"recorded": "record", "save": "bundle save", "remember": "pointer write"}[case["point"]]
            lines.append(f"| &nbsp; {case['scenario']}, killed right after the {step} | serves the {case['serves']} model, "
                         f"{case['swaps_recorded']} swap(s) recorded, trained model offered again: "
                         f"{'yes' if case['offered_again'] else 'no'}; {'consistent' if case['consistent'] else 'NOT consistent'} |")
    if "csv_writers" in ops:
        lines.append(f"| CSV/TSV writers in the product's code / not through the spreadsheet-safe writer | "
                     f"{ops['csv_writers']} / {ops['csv_writers_unsafe']} |")
    for db, run in detail.get("sustained", {}).items():
        lines += ["", f"**Sustained load on {db}** ({run['annotators']} annotators, {run['minutes']:g} min, think time mean "
                  f"{run['think_s']:g} s, {run['date']}, {run['machine']}): errors {run['errors']}, judgments acknowledged "
                  f"{run['acknowledged']}, stored {run['stored']}, server RSS {run['rss_mb'][0][1]:.0f} -> "
                  f"{run['rss_mb'][-1][1]:.0f} MB (growth {run['rss_growth_mb']:+.0f} MB).", "",
                  "| action | calls | p50 ms | p99 ms | max ms |", "|---|---|---|---|---|"]
        lines += [f"| {a} | {v['calls']} | {v['p50_ms']:.0f} | {v['p99_ms']:.0f} | {v['max_ms']:.0f} |"
                  for a, v in run["per_action"].items()]
        samples = run["rss_mb"][:: max(len(run["rss_mb"]) // 12, 1)]
        samples += [run["rss_mb"][-1]] if samples[-1] != run["rss_mb"][-1] else []
        lines += ["", "Server RSS over time (s: MB): " + ", ".join(f"{t:.0f}: {m:.0f}" for t, m in samples) + "."]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)}")
    args = parser.parse_args()
    parts = args.parts.split(",")
    unknown = set(parts) - set(PARTS)
    if unknown:
        raise SystemExit(f"unknown part(s) {sorted(unknown)}; use {', '.join(PARTS)}")
    results = json.loads(RESULTS.read_text())
    detail = json.loads(DETAIL.read_text()) if DETAIL.is_file() else {}
    ops = results.get("ops", {})
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        if "csv" in parts:
            found = csv_payloads(tmp)
            ops |= {"csv_payloads_tried": found["tried"], "csv_payloads_live": found["live"]}
            detail["csv"] = found
        if "backup" in parts:
            found = backup_check(tmp)
            ops["backup_restored_equal"] = found["equal"]
            detail["backup"] = found
        if "sustained" in parts:
            ops["sustained"], detail["sustained"] = sustained()
        if "outages" in parts:
            found = run_outages()
            ops["db_outages"] = {k: found[k] for k in ("tried", "lost", "recovered")}
            detail["db_outages"] = found
        if "hostile" in parts:
            found = run_hostile()
            ops["hostile_uploads"] = {k: found[k] for k in ("tried", "refused_cleanly", "peak_rss_mb")}
            detail["hostile_uploads"] = found
        if "restore" in parts:
            found = run_tampered()
            ops |= {"restore_tampered_tried": found["tried"], "restore_tampered_refused": found["refused"]}
            detail["restore_tampered"] = found
        if "parquet" in parts:
            found = run_parquet_bombs()
            ops |= {"parquet_bombs_tried": found["tried"], "parquet_bombs_peak_rss_mb": found["peak_rss_mb"]}
            detail["parquet_bombs"] = found
        if "csvwriters" in parts:
            through, unsafe = csv_writers([ROOT / part for part in PRODUCT])
            ops |= {"csv_writers": len(through) + len(unsafe), "csv_writers_unsafe": len(unsafe)}
            detail["csv_writers"] = {"safe": through, "unsafe": unsafe}
        if "access" in parts:
            found = walk(access_bundle(tmp), tmp / "access")
            results["access"] = results.get("access", {}) | {k: found[k] for k in (
                "paths_checked", "paths_without_rule", "foreign_reads_allowed", "login_guesses_per_minute_allowed")}
            detail["access_walk"] = found
        if "swapcrash" in parts:
            found = run_swap_crashes(tmp / "swaps")
            ops |= {"swap_crash_points_tried": found["tried"], "swap_crash_consistent": found["consistent"]}
            detail["swap_crashes"] = found
    stamp = {"machine": machine(), "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
    for part in parts:
        detail.setdefault("measured", {})[part] = stamp
    order = ["csv_payloads_tried", "csv_payloads_live", "backup_restored_equal", "sustained", "db_outages", "hostile_uploads",
             "restore_tampered_tried", "restore_tampered_refused", "parquet_bombs_tried", "parquet_bombs_peak_rss_mb",
             "csv_writers", "csv_writers_unsafe", "swap_crash_points_tried", "swap_crash_consistent"]
    results["ops"] = {k: ops[k] for k in order if k in ops}
    write_json(results, RESULTS)
    write_json(detail, DETAIL)
    replace_marked_section(DOC, "reliability-ops", ops_section(results["ops"], detail))
    print(json.dumps(results["ops"], indent=1))


if __name__ == "__main__":
    main()
