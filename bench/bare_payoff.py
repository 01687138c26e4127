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

Beside it, on the same corpus and queries: BM25 (what the project serves before any training),
all-MiniLM-L6-v2 (``bench.quality.MiniLMRetriever``, ``minilm_h1``) and, given ``--general``, the
general encoder (the product's cold-start bundle, ``qpr.bundles.general``) as a project of these
bare questions serves it before any judgment (``qpr rebase`` without adaptation: its encoder and
fusion over the corpus; ``general_h1``). A general bundle distilled on BANKING77 is refused: it
has been taught these very questions; build one with ``qpr general --domains`` and the other six sets.

Intervals: a two-level bootstrap over draws, then training seeds within each draw
(``bench.payoff.bootstrap_ci``), of the served model's H@1 and of its difference to MiniLM and BM25 on
the same draw's queries.

    python -m bench.bare_payoff --draws 3 --seeds 3        # resumable: every cell kept in --work
    python -m bench.bare_payoff --draws 5 --seeds 3 --general runs/general-nobanking --keep-recorded
                                 # the general encoder beside the recorded rows, nothing trained again

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
from qpr.bundles.general import rebase
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


def bare_questions(corpus: pd.DataFrame) -> pd.DataFrame:
    """``corpus`` as a file of bare questions makes it: no clusters, no splits."""
    return corpus.assign(cluster=None, split="none").astype({"cluster": "string"})


def fair_general(general: Bundle) -> Bundle:
    """``general``, refused if BANKING77 was among the sets it was distilled on."""
    domains = (general.manifest.training or {}).get("domains")
    if domains is None or "banking77" in domains:
        raise SystemExit(f"the general bundle {general.version} was trained on {domains or 'unknown sets'}: its H@1 on "
                         "BANKING77's held-out queries would not be a cold start's; build one without it "
                         "(python -m qpr general --domains insuranceqa covid-faq squad semeval2016 wikianswers quora-lite)")
    return general


def general_h1(general: Bundle, truth: pd.DataFrame, draw: int) -> float:
    """H@1 of the general encoder as a project of draw ``draw``'s bare questions serves it before
    any judgment (``qpr rebase``, no adaptation)."""
    corpus, queries = draw_split(truth, draw)
    return h1(ServedModel(rebase(general, bare_questions(corpus))).current().default, truth, queries)


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
        bare = Bundle.lexical_of(bare_questions(corpus), data=f"banking77 bare, draw {draw}")
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


def recorded_draws(result: dict) -> list[dict]:
    """The draws' cells as ``run_draw`` gives them, read back from a recorded result's rows (which
    keep every cell; each seed's training time is the row's mean): for adding the general encoder
    to rows whose models are gone."""
    rows = result["rows"]
    draws = []
    for d in range(rows[0]["draws"]):
        cells = {"bm25_h1": rows[0]["bm25_h1_per_draw"][d], "minilm_h1": rows[0]["minilm_h1_per_draw"][d]}
        if "general_h1_per_draw" in rows[0]:
            cells["general_h1"] = rows[0]["general_h1_per_draw"][d]
        for row in rows:
            cells[str(row["budget"])] = {"judged": row["judgments"][d], "clusters": row["clusters_formed"][d],
                                         "served_h1": row["served_h1_per_cell"][d],
                                         "train_s": [row["train_seconds_mean"]] * row["seeds"]}
        draws.append(cells)
    return draws


def summarise(draws: list[dict], error: float, seeds: int, budgets: tuple[int, ...]) -> list[dict]:
    """One row per budget: the served model's H@1, and its difference to MiniLM and BM25 (and the
    general encoder, where every draw measured it), with two-level bootstrap intervals (draws, then
    seeds)."""
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
        if all("general_h1" in d for d in draws):
            general = np.array([[d["general_h1"]] * seeds for d in draws])
            rows[-1] |= {"general_h1": float(general.mean()), "general_h1_per_draw": general[:, 0].tolist(),
                         "served_minus_general_ci95": bootstrap(served - general)}
    return rows


def markdown(result: dict) -> str:
    def interval(pair) -> str:
        return f"[{pair[0]:+.3f}, {pair[1]:+.3f}]"

    def shown(r: dict) -> dict:
        row = {
            "judgments": r["budget"], "clusters formed (per draw)": ", ".join(map(str, r["clusters_formed"])),
            "served H@1 [95% CI]": f"{r['served_h1_mean']:.3f} [{r['served_h1_ci95'][0]:.3f}, {r['served_h1_ci95'][1]:.3f}]",
            "BM25 H@1": f"{r['bm25_h1']:.3f}", "MiniLM H@1": f"{r['minilm_h1']:.3f}",
            "served - MiniLM": f"{r['served_h1_mean'] - r['minilm_h1']:+.3f} {interval(r['served_minus_minilm_ci95'])}",
            "served - BM25": f"{r['served_h1_mean'] - r['bm25_h1']:+.3f} {interval(r['served_minus_bm25_ci95'])}"}
        if "general_h1" in r:
            row |= {"general H@1": f"{r['general_h1']:.3f}",
                    "served - general": f"{r['served_h1_mean'] - r['general_h1']:+.3f} {interval(r['served_minus_general_ci95'])}"}
        return row

    columns = ["judgments", "clusters formed (per draw)", "served H@1 [95% CI]", "BM25 H@1", "MiniLM H@1", "served - MiniLM",
               "served - BM25"]
    if "general_h1" in result["rows"][0]:
        columns[5:5] = ["general H@1"]
        columns.append("served - general")
    table = markdown_table([shown(r) for r in result["rows"]], [(c, c) for c in columns])
    first = result["rows"][0]
    return (f"{result['data']}; {first['draws']} draws x {first['seeds']} training seeds, annotator error "
            f"{first['annotator_error']:g} (near pairs mostly); {result['machine']}, {result['date']}, "
            f"{result['seconds']:.0f} s. Generated by `python -m bench.bare_payoff`.\n\n{table}\n\n"
            f"The general encoder: {result['general']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=3)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--error", type=float, default=0.05)
    parser.add_argument("--budgets", type=int, nargs="+", default=list(BUDGETS), help="judgments, increasing")
    parser.add_argument("--work", type=Path, default=ROOT / "runs" / "bare-payoff")
    parser.add_argument("--general", type=Path, help="a general bundle built without BANKING77 (`qpr general --domains`), "
                        "measured beside the others")
    parser.add_argument("--keep-recorded", action="store_true", help="read the draws from the recorded rows (their models "
                        "may be gone) and only add --general to them; the draws, seeds and budgets must be the recorded ones")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()

    def log(line: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} {line}", flush=True)

    truth = load_domain("banking77")
    general = fair_general(Bundle.load(args.general)) if args.general else None
    log(f"bare questions: banking77, {len(truth) - QUERIES} questions + {QUERIES} held-out queries per draw, "
        f"budgets {args.budgets}, {args.draws} draws x {args.seeds} seeds, error {args.error:g}")
    recorded = json.loads(RESULTS.read_text()).get(KEY) if args.keep_recorded else None
    if args.keep_recorded:
        if general is None:
            raise SystemExit("--keep-recorded only adds --general to the recorded rows: give --general")
        if recorded is None:
            raise SystemExit(f"{RESULTS} records no bare-questions rows to keep: run without --keep-recorded")
        setting = [(row["budget"], row["draws"], row["seeds"], row["annotator_error"]) for row in recorded["rows"]]
        if setting != [(budget, args.draws, args.seeds, args.error) for budget in args.budgets]:
            raise SystemExit(f"the recorded rows' (budget, draws, seeds, error) are {setting}: give those")
        draws = recorded_draws(recorded)
    else:
        draws = [run_draw(args.work, truth, draw, args.seeds, args.error, tuple(args.budgets), log) for draw in range(args.draws)]
    measured = "not measured (no --general)"
    if general is not None:
        for draw, cells in enumerate(draws):
            cells["general_h1"] = general_h1(general, truth, draw)
            log(f"draw {draw}: general encoder {cells['general_h1']:.3f}")
        measured = (f"`qpr general` distilled on {', '.join(general.manifest.training['domains'])} (not BANKING77; "
                    f"version {general.version}), served as `qpr rebase` makes it of the bare questions, without "
                    f"adaptation; measured {date.today().isoformat()} on {machine()}")
    result = {"data": f"BANKING77 train + test ({len(truth)} questions, 77 intents) less {QUERIES} held-out queries per draw, "
                      "uploaded as bare questions", "rows": summarise(draws, args.error, args.seeds, tuple(args.budgets)),
              "general": measured, "machine": machine(), "date": date.today().isoformat(),
              "seconds": time.monotonic() - started}
    if recorded:  # the served models' figures are the recorded run's
        result |= {key: recorded[key] for key in ("machine", "date", "seconds")}
    results = json.loads(RESULTS.read_text())  # read just before writing: other parts write this file too
    write_json(results | {KEY: result}, RESULTS)
    replace_marked_section(DOC, MARKER, markdown(result))
    log(f"results {RESULTS}, doc {DOC}")


if __name__ == "__main__":
    main()
