"""Benchmark (issue 57): what a team's judgments buy on a project of bare questions built from
nothing, beside what it could serve without any (BM25, MiniLM).

Per **draw** d: BANKING77 (train + test files, ``qpr.data.sources``) less ``QUERIES`` questions held
out as the team's future queries (drawn with seed d) is uploaded as bare questions (a lexical
bundle, ``Bundle.lexical_of``: what the Projects tab makes of a file with no clusters when the app
has no general bundle). A simulated annotator who knows the 77 intents, wrong on ``--error`` of
its answers (on near pairs mostly, ``annotations.simulation.oracle``), works the app's
cluster-building queue (``annotations.grouping.next_group``, as "Next cluster" proposes on such a
project; group order seeded by d) up to each budget. At each budget the project's first model is
trained through the Projects tab's own path (``workflows.retraining.start_training``: the corrected
clusters exported with the served model's pair scores, a background worker of
``workflows.background_training`` with the project's defaults ``workflows.project.SMALL_CORPUS``,
training seed s, through a ``workflows.project.Project``), and the model the app then serves (``ServedModel(bundle).current().default``) is
scored on the held-out queries: H@1 = the first result has the query's intent (the query itself is
not in the corpus). The annotator then goes on judging toward the next budget in the same store.

Beside it, on the same corpus and queries: BM25 (what the project serves before any training) and
all-MiniLM-L6-v2 (``bench.quality.MiniLMRetriever``, ``minilm_h1``). The general encoder (the
product's cold-start bundle, ``qpr.bundles.general``) is not measured here: none is built on this
machine (a build takes about 40 minutes, bench/results/cold_build.json), and an honest one for this
comparison must leave BANKING77 out of its distillation.

Intervals: a two-level bootstrap over draws, then training seeds within each draw
(``bench.payoff.bootstrap_ci``), of the served model's H@1 and of its difference to MiniLM and BM25 on
the same draw's queries.

    python -m bench.bare_payoff --draws 3 --seeds 3        # resumable: every cell kept in --work

Writes the ``bare_questions`` key of bench/results/loop_payoff.json (other keys kept) and the marked
section ``bare-questions`` of docs/LOOP_PAYOFF.md.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from datetime import date
from pathlib import Path

import numpy as np
import pandas as pd

from annotations.db import open_store
from annotations.grouping import next_group
from annotations.simulation.oracle import SimulatedAnnotator
from bench.common import ROOT, machine, markdown_table, replace_marked_section, write_json
from bench.payoff import bootstrap_ci
from bench.quality import MiniLMRetriever
from qpr.bundles.bundle import Bundle
from qpr.data.sources import load_domain
from qpr.evaluation.metrics import hit_matrix
from qpr.retrieval.lexical import BM25Retriever
from qpr.serving.served_model import ServedModel
from workflows.background_training import TrainingJob
from workflows.project import SMALL_CORPUS, FolderHome, Project
from workflows.retraining import start_training

QUERIES = 1000  # held-out questions per draw: the team's future queries
BUDGETS = (250, 500, 1000)
RESULTS = ROOT / "bench" / "results" / "loop_payoff.json"
DOC = ROOT / "docs" / "LOOP_PAYOFF.md"
MARKER = "bare-questions"
KEY = "bare_questions"
POLL_S = 2.0


def draw_split(truth: pd.DataFrame, draw: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the bare corpus, the held-out queries with their intents) of draw ``draw``."""
    queries = truth.sample(QUERIES, random_state=draw)
    corpus = truth.drop(queries.index).reset_index(drop=True)
    return corpus, queries.reset_index(drop=True)


def h1(retriever, truth: pd.DataFrame, queries: pd.DataFrame) -> float:
    """Share of ``queries`` whose first result has the query's intent (``truth``'s cluster)."""
    return float(hit_matrix(retriever, truth, queries)[:, 0].mean())


def judge_until(store, retriever, bare: pd.DataFrame, oracle: SimulatedAnnotator, version: str, budget: int,
                draw: int) -> int:
    """Judge the cluster-building queue's groups until ``budget`` judgments are recorded in
    ``store`` (the last group cut to fit); the judgments recorded."""
    judged = len(store.judgments.frame(annotator=oracle.name))
    while judged < budget:
        rows = next_group(store, retriever, bare, oracle.name, seed=draw)
        if rows.empty:
            break  # the queue ran dry: fewer judgments than the budget (recorded in the row)
        judged += len(oracle.judge(store, rows.head(budget - judged), version))
    return judged


def first_model(served: ServedModel, store, folder: Path, seed: int, log) -> tuple[Bundle, float]:
    """The project's first model trained as the Projects tab trains it (module doc): a ``Project``
    serving ``served`` with the project defaults but training seed ``seed``; (bundle, seconds)."""
    defaults = replace(SMALL_CORPUS, train=replace(SMALL_CORPUS.train, seed=seed))
    project = Project("bare", "bare questions", served, store, FolderHome(folder), defaults, TrainingJob(folder / "training"))
    started = time.monotonic()
    start_training(project, folder / "exports", "bench")
    while (status := project.training.status())["state"] in ("starting", "running"):
        time.sleep(POLL_S)
    if status["state"] != "done":
        raise SystemExit(f"the training in {project.training.folder} ended {status['state']}: {status.get('message')}")
    log(f"  trained in {time.monotonic() - started:.0f} s")
    return project.training.result(), time.monotonic() - started


def run_draw(work: Path, truth: pd.DataFrame, draw: int, seeds: int, error: float, budgets: tuple[int, ...], log) -> dict:
    """Every cell of draw ``draw`` (kept in ``work``, so a run resumes)."""
    done = work / f"draw{draw}-e{error:g}.json"
    cells = json.loads(done.read_text()) if done.is_file() else {}
    corpus, queries = draw_split(truth, draw)
    folder = work / f"draw{draw}-e{error:g}"
    if (folder / "bare" / "manifest.json").is_file():  # its version (a time) is what the judgments point into
        bare = Bundle.load(folder / "bare")
    else:
        bare = Bundle.lexical_of(corpus.assign(cluster=None, split="none").astype({"cluster": "string"}),
                                 data=f"banking77 bare, draw {draw}")
        bare.save(folder / "bare")
    if "bm25_h1" not in cells:
        cells["bm25_h1"] = h1(BM25Retriever(bare.corpus), truth, queries)
        cells["minilm_h1"] = h1(MiniLMRetriever(bare.corpus, folder / "minilm.npy"), truth, queries)
        log(f"draw {draw}: BM25 {cells['bm25_h1']:.3f}, MiniLM {cells['minilm_h1']:.3f}")
        write_json(cells, done)
    store = open_store(f"sqlite:///{folder / 'judgments.db'}", project="bare")
    served = ServedModel(bare)
    store.corpora.register(bare.version, bare.corpus)
    retriever = BM25Retriever(bare.corpus)
    oracle = SimulatedAnnotator(truth, name="annotator", error_rate=error, seed=draw, near=True)
    try:
        for budget in budgets:
            key = str(budget)
            if key in cells and len(cells[key]["served_h1"]) >= seeds:
                continue
            judged = judge_until(store, retriever, bare.corpus, oracle, bare.version, budget, draw)
            row = cells.get(key, {"judged": judged, "served_h1": [], "train_s": []})
            log(f"draw {draw}: {judged} judgments")
            for seed in range(len(row["served_h1"]), seeds):
                bundle, seconds = first_model(served, store, folder / f"b{budget}-s{seed}", seed, log)
                row["served_h1"].append(h1(ServedModel(bundle).current().default, truth, queries))
                row["train_s"].append(round(seconds, 1))
                row["clusters"] = int((bundle.corpus["cluster"].value_counts() >= 2).sum())
                log(f"draw {draw}, {budget} judgments, seed {seed}: served H@1 {row['served_h1'][-1]:.3f}")
                cells[key] = row
                write_json(cells, done)
    finally:
        store.close()
    return cells


def summarise(draws: list[dict], error: float, seeds: int, budgets: tuple[int, ...]) -> list[dict]:
    """One row per budget: the served model's H@1, and its difference to MiniLM and BM25, with
    two-level bootstrap intervals (draws, then seeds)."""
    rows = []

    def bootstrap(cells: np.ndarray) -> list[float]:
        return bootstrap_ci(cells, np.random.default_rng(0))

    for budget in budgets:
        served = np.array([d[str(budget)]["served_h1"][:seeds] for d in draws])
        minilm = np.array([[d["minilm_h1"]] * seeds for d in draws])
        bm25 = np.array([[d["bm25_h1"]] * seeds for d in draws])
        rows.append({
            "regime": "banking77-bare", "design": "product", "annotator_error": error, "budget": budget,
            "judgments": [d[str(budget)]["judged"] for d in draws], "draws": len(draws), "seeds": seeds,
            "clusters_formed": [d[str(budget)]["clusters"] for d in draws],
            "served_h1_mean": float(served.mean()), "served_h1_ci95": bootstrap(served),
            "bm25_h1": float(bm25.mean()), "minilm_h1": float(minilm.mean()),
            "served_minus_minilm_ci95": bootstrap(served - minilm), "served_minus_bm25_ci95": bootstrap(served - bm25),
            "served_h1_per_cell": served.tolist(), "minilm_h1_per_draw": minilm[:, 0].tolist(),
            "bm25_h1_per_draw": bm25[:, 0].tolist(),
            "train_seconds_mean": float(np.mean([d[str(budget)]["train_s"][:seeds] for d in draws])),
        })
    return rows


def markdown(result: dict) -> str:
    def interval(pair) -> str:
        return f"[{pair[0]:+.3f}, {pair[1]:+.3f}]"

    table = markdown_table([{
        "judgments": r["budget"], "clusters formed (per draw)": ", ".join(map(str, r["clusters_formed"])),
        "served H@1 [95% CI]": f"{r['served_h1_mean']:.3f} [{r['served_h1_ci95'][0]:.3f}, {r['served_h1_ci95'][1]:.3f}]",
        "BM25 H@1": f"{r['bm25_h1']:.3f}", "MiniLM H@1": f"{r['minilm_h1']:.3f}",
        "served - MiniLM": f"{r['served_h1_mean'] - r['minilm_h1']:+.3f} {interval(r['served_minus_minilm_ci95'])}",
        "served - BM25": f"{r['served_h1_mean'] - r['bm25_h1']:+.3f} {interval(r['served_minus_bm25_ci95'])}",
    } for r in result["rows"]], [(c, c) for c in ("judgments", "clusters formed (per draw)", "served H@1 [95% CI]", "BM25 H@1",
                                                  "MiniLM H@1", "served - MiniLM", "served - BM25")])
    first = result["rows"][0]
    return (f"{result['data']}; {first['draws']} draws x {first['seeds']} training seeds, annotator error "
            f"{first['annotator_error']:g} (near pairs mostly); {result['machine']}, {result['date']}, "
            f"{result['seconds']:.0f} s. Generated by `python -m bench.bare_payoff`.\n\n{table}\n\n"
            f"The general encoder is not in this table: {result['general']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=3)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--error", type=float, default=0.05)
    parser.add_argument("--budgets", type=int, nargs="+", default=list(BUDGETS), help="judgments, increasing")
    parser.add_argument("--work", type=Path, default=ROOT / "runs" / "bare-payoff")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()

    def log(line: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} {line}", flush=True)

    truth = load_domain("banking77")
    log(f"bare questions: banking77, {len(truth) - QUERIES} questions + {QUERIES} held-out queries per draw, "
        f"budgets {args.budgets}, {args.draws} draws x {args.seeds} seeds, error {args.error:g}")
    draws = [run_draw(args.work, truth, draw, args.seeds, args.error, tuple(args.budgets), log) for draw in range(args.draws)]
    result = {"data": f"BANKING77 train + test ({len(truth)} questions, 77 intents) less {QUERIES} held-out queries per draw, "
                      "uploaded as bare questions", "rows": summarise(draws, args.error, args.seeds, tuple(args.budgets)),
              "general": "no general bundle is built on this machine (about 40 min, bench/results/cold_build.json), and a "
                         "fair one here must be distilled without BANKING77; not measured",
              "machine": machine(), "date": date.today().isoformat(), "seconds": time.monotonic() - started}
    results = json.loads(RESULTS.read_text())  # read just before writing: other parts write this file too
    write_json(results | {KEY: result}, RESULTS)
    replace_marked_section(DOC, MARKER, markdown(result))
    log(f"results {RESULTS}, doc {DOC}")


if __name__ == "__main__":
    main()
