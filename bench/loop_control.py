"""Benchmark (issue 39): do annotators' judgments teach the model, against the right control?

Every retrain on corrected labels is paired with the retrain on the *uncorrected* labels: same
seed, same start (that seed's model trained on the noisy labels), same epochs. The difference of
their test H@1 is what the judgments bought, over ``--seeds`` seeds with a Student-t 95% interval.
This is the product's default retrain (``workflows.retraining.retrain``): the served encoder
continued for as many epochs as it was trained with, on the export's corrected clusters and, since
issue 39, on its judged pairs themselves (``qpr.training.sampling.JudgedPairs``).

Regimes (``REGIMES``: ``bench.payoff.REGIMES``' names, each at draw 0):

- ``banking77-auto`` (realistic errors, as a bare-questions project starts): BANKING77's
  train.csv queries clustered automatically (TF-IDF + LSA vectors, k-means with k = sqrt(n),
  knowing nothing of the intents), scored against the 77 intent labels as the truth. Its test.csv
  queries, with their true intents, are the val and test queries (half each): new user queries of
  the intents the project serves, as in the product.
- ``banking77-auto-fine``: the same with k = n / 10 (clusters of about 10 questions: purer, more split).
- ``quora-fp-0.4``: docs/LOOP_PAYOFF.md's slice of Quora-lite with 40% of the training clusters
  joined in random pairs (random false positives).

Per regime: a noisy model per seed (from scratch, 3 epochs); ``JUDGMENTS`` pairs picked by the
``suspicion`` order from the seed-0 noisy model's suspects (cross-cluster and core-member pairs),
judged by a simulated annotator who knows the truth, exported through the app's export; then per
seed, three warm starts of 3 epochs: uncorrected labels (the control), corrected clusters only,
corrected clusters plus the judged pairs at each weight of ``WEIGHTS``.

    python -m bench.loop_control               # resumable (models and rows kept in --work)
    python -m bench.loop_control --render-only

Adds its rows (``part`` "control") to bench/results/loop_payoff.json, keeping the other parts'
rows and keys, and writes the marked section ``loop-control`` of docs/LOOP_PAYOFF.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from annotations.db import open_store
from annotations.simulation.oracle import SimulatedAnnotator
from bench.common import ROOT, machine, markdown_table, replace_marked_section, write_json
from bench.loop_payoff import DOC, RESULTS, Work, config_for, suspects
from bench.payoff import REGIMES as PAYOFF_REGIMES
from qpr.data.corpus import data_dir
from qpr.fsutil.atomic import atomic_path
from qpr.research.cluster_quality import cluster_quality
from qpr.research.confidence import mean_ci
from workflows.simulated_loop import annotate, loop_project

MARKER = "loop-control"
JUDGMENTS = 1000
STRATEGY = "suspicion"
WEIGHTS = (1.0,)
REGIMES = tuple(PAYOFF_REGIMES)
# The judged term's design in ``qpr.model.losses.judged_negative_loss``: "" was the first (the judged
# negative as one more column of the whole unsmoothed softmax; its rows are kept under that name),
# "-pair" the current one (own positive against the judged negative only).
DESIGN = "-pair"


def regime_data(name: str, data: Path) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """(clean, noisy, suspect kind for ``bench.loop_payoff.suspects``) of regime ``name``: issue 57's
    regime of that name (``bench.payoff.REGIMES``) at draw 0, so a name means the same data in both."""
    clean, noisy = PAYOFF_REGIMES[name](data, 0)
    return clean, noisy, "fp" if name.startswith("quora-fp") else "both"


def judged_export(work: Work, model, noisy: pd.DataFrame, kind: str, budget: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Judge ``budget`` suspects of ``model`` (``STRATEGY`` order) into a fresh store and export;
    returns (corrected corpus, judged pairs as the export hands them over)."""
    folder = work.folder / ("export" if budget == JUDGMENTS else f"export-j{budget}")
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    annotator = SimulatedAnnotator(work.clean, "oracle", seed=1)
    with open_store(f"sqlite:///{(folder / 'annotations.db').resolve()}", project="demo") as store:
        done = annotate(loop_project(store, model.bundle, folder), annotator, STRATEGY, budget, folder / "corrected.parquet",
                        seed=1, pool=suspects(model, noisy, kind))
    return done.export.corpus, done.export.pairs


def paired(after: list[float], control: list[float]) -> dict:
    """corrected - uncorrected per seed: mean and 95% interval."""
    mean, low, high = mean_ci(np.subtract(after, control))
    return {"corrected_minus_uncorrected": mean, "corrected_minus_uncorrected_ci95": [low, high]}


def run_regime(name: str, args: argparse.Namespace, log: Callable[[str], None]) -> list[dict]:
    clean, noisy, kind = regime_data(name, args.data)
    work = Work(args.work / name, clean, log)
    work.folder.mkdir(parents=True, exist_ok=True)
    seeds = range(args.seeds)
    config = config_for("sdml", "random", 0)
    noisy_models = [work.model(f"noisy-s{s}", noisy, config_for("sdml", "random", s)) for s in seeds]
    corrected, judged = judged_export(work, noisy_models[0], noisy, kind, args.judgments)
    quality = {"before": cluster_quality(clean, noisy), "after": cluster_quality(clean, corrected)}
    log(f"{name}: {len(judged)} judged pairs; pair F1 {quality['before']['pair_f1']:.3f} -> {quality['after']['pair_f1']:.3f}")
    h1 = {"noisy": [m.test["H1"] for m in noisy_models]}
    h1["uncorrected"] = [work.model(f"uncorrected-s{s}", noisy, config, warm=noisy_models[s]).test["H1"] for s in seeds]
    # The product's retrain (clusters and judged pairs, default weight) first: a run cut short by
    # the clock still answers the main question.
    # DESIGN names the judged term's design in the variant (and so in its models' names).
    variants = [(f"clusters+judged{DESIGN} w{w:g}", judged, w) for w in args.weights[:1]]
    variants += [] if args.skip_clusters_only else [("clusters", None, 0.0)]
    variants += [(f"clusters+judged{DESIGN} w{w:g}", judged, w) for w in args.weights[1:]]
    if args.judged_on_uncorrected:
        # A design apart from the product's: the judged pairs alone teach, the clusters stay as they were.
        variants = [(f"uncorrected+judged{DESIGN} w{w:g}", judged, w) for w in args.weights]
    rows = []
    for variant, pairs, weight in variants:
        h1[variant] = []
        for s in seeds:
            # The warm start continues with the settings the noisy model was trained with; the
            # judged term's weight is the only one that differs.
            warm = noisy_models[s]
            training = warm.bundle.manifest.training
            start = replace(warm, bundle=warm.bundle.with_manifest(
                training=training | {"retrain": training.get("retrain", {}) | {"judged_weight": weight}}))
            # Models of another budget than the default are named by it (the default's keep their first names).
            budget = "" if args.judgments == JUDGMENTS else f"j{args.judgments}-"
            labels = noisy if variant.startswith("uncorrected") else corrected
            h1[variant].append(work.model(f"{budget}{variant.replace(' ', '_')}-s{s}", labels, config, warm=start,
                                          judged=pairs).test["H1"])
        row = {"part": "control", "regime": name, "variant": variant, "judged_weight": weight, "seeds": len(seeds),
               "judgments": len(judged), "start": "warm", "epochs": config.max_epochs,
               "pair_f1_before": quality["before"]["pair_f1"], "pair_f1_after": quality["after"]["pair_f1"],
               "errors_fixed": 1 - quality["after"]["label_errors"] / max(quality["before"]["label_errors"], 1),
               "H1_noisy_mean": float(np.mean(h1["noisy"])), "H1_uncorrected_mean": float(np.mean(h1["uncorrected"])),
               "H1_after_mean": float(np.mean(h1[variant])),
               "H1_per_seed": {k: h1[k] for k in ("noisy", "uncorrected", variant)}}
        row |= paired(h1[variant], h1["uncorrected"])
        gain = row["corrected_minus_uncorrected"]
        row["judgments_per_point"] = len(judged) / (100 * gain) if gain > 0 else None
        log(json.dumps(row))
        rows.append(row)
        # One file per invocation's settings, so invocations of one regime may run side by side.
        weights = "-".join(f"{w:g}" for w in args.weights)
        tag = ("-x" if args.skip_clusters_only else "") + ("-u" if args.judged_on_uncorrected else "")
        with atomic_path(work.folder / f"rows-j{args.judgments}-w{weights}{tag}.json") as tmp:
            tmp.write_text(json.dumps(rows))
    return rows


def merged(rows: list[dict], results_file: Path) -> dict:
    """The results file with its "control" rows replaced by ``rows`` (the other parts' rows and
    every key kept; a row carries the file's common keys, None where it does not measure them)."""
    results = json.loads(results_file.read_text()) if results_file.is_file() else {"runs": []}
    keys = list(dict.fromkeys(k for r in results["runs"] for k in r)) if results["runs"] else []
    common = [k for k in keys if all(k in r for r in results["runs"] if r.get("part") != "control")]
    others = [r for r in results["runs"] if r.get("part") != "control"]
    results["runs"] = others + [dict.fromkeys(common) | row for row in rows]
    return results


def markdown(results: dict) -> str:
    """The generated section: setting and the paired table."""
    rows = [r for r in results["runs"] if r.get("part") == "control"]
    about = results.get("control", {})
    table = markdown_table([r | {
        "f1": f"{r['pair_f1_before']:.3f} -> {r['pair_f1_after']:.3f}",
        "diff": f"{r['corrected_minus_uncorrected']:+.4f} [{r['corrected_minus_uncorrected_ci95'][0]:+.4f}, "
                f"{r['corrected_minus_uncorrected_ci95'][1]:+.4f}]",
        "per_point": "" if r["judgments_per_point"] is None else f"{r['judgments_per_point']:.0f}"} for r in rows], [
        ("regime", "regime"), ("variant", "retrain on"), ("judgments", "judged pairs"), ("seeds", "seeds"),
        ("f1", "pair F1 of the labels"), ("H1_noisy_mean", "H@1 noisy start"), ("H1_uncorrected_mean", "H@1 uncorrected"),
        ("H1_after_mean", "H@1 corrected"), ("diff", "corrected - uncorrected [95% CI]"),
        ("per_point", "judgments per point of H@1")])
    wins = [f"{r['regime']}, {r['variant']} ({r['judgments']:,} judgments)" for r in rows
            if r["corrected_minus_uncorrected_ci95"][0] > 0]
    # What the judged pairs add over the corrected clusters alone: the same seeds, paired.
    own = []
    for r in rows:
        alone = next((c for c in rows if c["variant"] == "clusters" and (c["regime"], c["judgments"]) == (r["regime"], r["judgments"])), None)
        if alone and r["variant"].startswith("clusters+judged"):
            mean, low, high = mean_ci(np.subtract(r["H1_per_seed"][r["variant"]], alone["H1_per_seed"]["clusters"]))
            own.append(f"{r['regime']}, {r['variant']}: {mean:+.4f} [{low:+.4f}, {high:+.4f}]")
    return (f"Machine: {about.get('machine', '?')}; written {about.get('date', '?')}; {about.get('seconds', 0):,} s for the "
            f"last invocation (resumed work not counted). Encoder: the `--quick` 64-d CNN, batch 128, 3 epochs from "
            f"scratch for the noisy start, then 3 more (warm) for every retrain; {STRATEGY} order, simulated annotator "
            f"always right.\n\n{table}\n\n- Interval above zero: {'; '.join(wins) if wins else 'in no regime'}.\n"
            f"- What the judged pairs add to the corrected clusters alone (paired by seed): "
            f"{'; '.join(own) if own else 'not measured'}.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=data_dir())
    parser.add_argument("--regimes", nargs="+", choices=REGIMES, default=list(REGIMES))
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--judgments", type=int, default=JUDGMENTS)
    parser.add_argument("--weights", nargs="+", type=float, default=list(WEIGHTS), help="judged-term weights to retrain with")
    parser.add_argument("--skip-clusters-only", action="store_true", help="no retrain on the corrected clusters alone")
    parser.add_argument("--judged-on-uncorrected", action="store_true",
                        help="only retrains on the uncorrected clusters plus the judged pairs (no merge applied)")
    parser.add_argument("--work", type=Path, default=ROOT / "runs" / "loop-control")
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--doc", type=Path, default=DOC)
    parser.add_argument("--render-only", action="store_true", help="only redo the doc section from --results")
    parser.add_argument("--collect", action="store_true",
                        help="no training: merge the rows finished so far in --work (e.g. by runs per regime in parallel)")
    args = parser.parse_args()
    if args.render_only:
        results = json.loads(args.results.read_text())
    else:
        start = time.perf_counter()
        log = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
        if not args.collect:
            for name in args.regimes:
                run_regime(name, args, log)
        done = sorted(path for name in REGIMES for path in (args.work / name).glob("rows*.json"))
        # A variant measured again (same regime and budget) counts once, as last written.
        by_key = {(r["regime"], r["variant"], r["judgments"]): r
                  for path in sorted(done, key=lambda p: p.stat().st_mtime) for r in json.loads(path.read_text())}
        rows = list(by_key.values())
        results = merged(rows, args.results)
        results["control"] = {"machine": machine(), "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                              "seconds": round(time.perf_counter() - start), "strategy": STRATEGY}
        write_json(results, args.results)
    replace_marked_section(args.doc, MARKER, markdown(results))
    print(f"results {args.results}, doc {args.doc}", file=sys.stderr)


if __name__ == "__main__":
    main()
