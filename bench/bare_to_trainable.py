"""Benchmark (issue 38): how many judgments turn a project of bare questions into a trainable one?

BANKING77 (train + test files, the shared intent set: ``qpr.data.sources``) is uploaded as bare
questions (no cluster). A simulated annotator (``annotations.simulation.oracle``) that knows the
77 intents works through the cluster-building queue (``annotations.grouping.next_group``, ranked by
BM25: the app's retriever when it has no general encoder) group by group, answering every proposed
question, until the judgments form ``MIN_TRAIN_CLUSTERS`` clusters of 2+ questions (what training
needs, ``annotations.grouping.progress``). Each seed is one order of seed questions; the oracle
answers right, or wrong on a seeded share ``--error-rate`` of its answers.

    python -m bench.bare_to_trainable            # 5 seeds; writes bare_to_trainable_judgments (the
        # median) into bench/results/workspaces.json (other keys kept), every run into bare_to_trainable.json
    python -m bench.bare_to_trainable --error-rate 0.1   # an annotator wrong on 10% of answers:
        # into bare_to_trainable_errors_0.1.json only
    python -m bench.bare_to_trainable --quick    # 2 seeds on 2,000 questions, printed only
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from datetime import date
from pathlib import Path

import numpy as np
from scipy import stats

from annotations.db import open_store
from annotations.grouping import next_group, progress
from annotations.constraints import corrected_clusters
from annotations.simulation.oracle import SimulatedAnnotator
from bench.common import ROOT, machine, write_json
from qpr.data.sources import cap_corpus, load_domain
from qpr.retrieval.lexical import BM25Retriever

RESULTS = ROOT / "bench" / "results" / "workspaces.json"
KEY = "bare_to_trainable_judgments"
DETAIL = ROOT / "bench" / "results" / "bare_to_trainable.json"  # every run, the interval, the machine


def judgments_to_trainable(truth, seed: int, error_rate: float, folder: Path) -> dict:
    """One run: the judgments (and groups) the oracle made until the project could train."""
    bare = truth.assign(cluster=None, split="none").astype({"cluster": "string"})
    store = open_store(f"sqlite:///{folder / f'seed{seed}-{error_rate}.db'}", project="demo")
    version = f"banking77-bare-{seed}"
    store.corpora.register(version, bare)
    retriever = BM25Retriever(bare)
    oracle = SimulatedAnnotator(truth, name="oracle", error_rate=error_rate, seed=seed)
    judged = groups = 0
    formed, needed = progress(store, bare)
    while formed < needed:
        rows = next_group(store, retriever, bare, oracle.name, seed=seed)
        if rows.empty:
            raise SystemExit(f"seed {seed}: the queue ran dry at {formed} cluster(s)")
        oracle.judge(store, rows, version)
        judged, groups = judged + len(rows), groups + 1
        formed, needed = progress(store, bare)
    built = corrected_clusters(store, bare).corpus
    built = built.assign(intent=truth.set_index("qid")["cluster"].reindex(built["qid"]).to_numpy())
    intents = built[built["cluster"].notna()]
    pure = intents.groupby("cluster")["intent"].nunique().eq(1).mean()  # share of formed clusters of one intent
    return {"seed": seed, "error_rate": error_rate, "judgments": judged, "groups": groups, "clusters": formed,
            "pure_share": float(pure)}


def interval(values: list[int]) -> tuple[float, float, float]:
    """Mean and 95% t-interval."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, mean, mean
    half = stats.t.ppf(0.975, len(values) - 1) * statistics.stdev(values) / np.sqrt(len(values))
    return mean, mean - half, mean + half


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--error-rate", type=float, default=0.0)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    truth = load_domain("banking77")
    if args.quick:
        truth, args.seeds = cap_corpus(truth, 2000), 2
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.seeds):
            runs.append(judgments_to_trainable(truth, seed, args.error_rate, Path(tmp)))
            print(json.dumps(runs[-1]), flush=True)
    mean, low, high = interval([r["judgments"] for r in runs])
    print(f"{len(truth)} questions, {args.seeds} seeds: {mean:.1f} judgments (95% interval {low:.1f} to {high:.1f})")
    if args.quick:
        return
    detail = {
        "data": "banking77 (train + test), uploaded without clusters", "questions": len(truth),
        "retriever": "BM25", "error_rate": args.error_rate, "runs": runs, KEY: statistics.median(r["judgments"] for r in runs),
        "mean": mean, "ci95": [low, high], "machine": machine(), "date": date.today().isoformat(),
    }
    if args.error_rate:  # a side measure: its own file; the dashboards' key is the perfect annotator's
        write_json(detail, DETAIL.with_name(f"bare_to_trainable_errors_{args.error_rate:g}.json"))
        return
    write_json(detail, DETAIL)
    # The dashboards' file is shared with other benchmarks: read, set this key only, write atomically.
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    write_json(results | {KEY: int(round(detail[KEY]))}, RESULTS)

if __name__ == "__main__":
    main()
