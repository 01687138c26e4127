"""Benchmark (issue 57): why the judgments pay on one regime and not another, read off the payoff
bench's own cache (``bench.payoff``: every draw's noisy corpus, noisy model and judged export are
kept under ``--work``), nothing trained.

What paid on ``banking77-auto`` is the purity weights (docs/LOOP_PAYOFF.md): the retrain draws each
cluster in proportion to its estimated purity (``annotations.purity``, from the judged pairs inside
imported clusters). So per regime and draw this asks whether the judgments could tell the impure
clusters from the pure ones:

- how many of the judged pairs fall inside an imported cluster, and how many of those are truly
  the same meaning (a queue that only confirms true pairs inside clusters audits nothing);
- how many clusters got an audit, and how many audits each;
- the correlation, over the imported training clusters, of each cluster's *true* pair precision
  (against the clean labels) with its estimated purity (``corr_purity``), and with the noisy
  model's own coherence (``corr_coherence``: ``annotations.pair_scores.PairScorer.coherence``, the
  calibrated probability at the mean squared distance between its members), a signal that needs no
  judgment.

    python -m bench.payoff_audits --work runs/loop-payoff-57 --encoder quick --audit-orders purity coherence

(a draw whose export is not cached is left out, with a line saying so).

Writes bench/results/payoff_audits.json and the marked section ``payoff-audits`` of docs/LOOP_PAYOFF.md.
"""

from __future__ import annotations

import argparse
import json
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

from annotations.db import open_store
from bench.common import ROOT, machine, markdown_table, replace_marked_section, write_json
from annotations.rounds import AUDIT_ORDERS
from bench.payoff import REGIMES, export_folder, imported_clusters, noisy_scorer
from qpr.data.corpus import data_dir

RESULTS = ROOT / "bench" / "results" / "payoff_audits.json"
DOC = ROOT / "docs" / "LOOP_PAYOFF.md"
MARKER = "payoff-audits"


def pair_precision(truth: np.ndarray) -> float:
    """The share of a cluster's member pairs whose true labels (``truth``, one per member) agree."""
    n = len(truth)
    counts = pd.Series(truth).value_counts().to_numpy()
    return float((counts * (counts - 1)).sum() / (n * (n - 1)))


def draw_row(data: Path, work: Path, encoder: str, regime: str, draw: int, budget: int, error: float,
             audit_order: str = "purity") -> dict:
    """The audit figures of one cached draw (module doc), judged by the queue with ``audit_order``."""
    clean, noisy = REGIMES[regime](data, draw)
    folder = work / encoder / regime / f"draw{draw}"
    export = export_folder(folder, budget, error, audit_order)
    purity = pd.Series(json.loads((export / "export.json").read_text())["purity"], dtype=float)
    with open_store(f"sqlite:///{(export / 'annotations.db').resolve()}", project="demo") as store:
        judged = store.judgments.frame()
    noisy_of, true_of = noisy.set_index("qid")["cluster"], clean.set_index("qid")["cluster"]
    a, b = judged["query_qid"].astype("int64"), judged["candidate_qid"].astype("int64")
    inside = (noisy_of.reindex(a).to_numpy() == noisy_of.reindex(b).to_numpy()).astype(bool)
    truly = (true_of.reindex(a).to_numpy() == true_of.reindex(b).to_numpy()).astype(bool)
    audits = pd.Series(noisy_of.reindex(a[inside]).to_numpy()).value_counts()

    clusters = imported_clusters(noisy)
    precision = clusters.map(lambda qids: pair_precision(true_of.reindex(qids).to_numpy()))
    coherent = noisy_scorer(folder, noisy).coherence(clusters)
    estimated = purity.reindex(clusters.index)
    kept = estimated.notna()
    return {"encoder": encoder, "regime": regime, "draw": draw, "audit_order": audit_order, "budget": budget,
            "annotator_error": error,
            "judged": len(judged), "judged_inside": int(inside.sum()),
            "inside_truly_same": float(truly[inside].mean()) if inside.any() else None,
            "clusters": len(clusters), "impure_share": float((precision < 1).mean()),
            "mean_pair_precision": float(precision.mean()),
            "audited_clusters": len(audits), "audits_per_audited_median": float(audits.median()) if len(audits) else 0.0,
            # over the clusters the export kept under their imported names (a merged one has no estimate of its own)
            "corr_purity": float(np.corrcoef(estimated[kept].to_numpy(dtype=float), precision[kept].to_numpy(dtype=float))[0, 1]),
            "corr_coherence": float(np.corrcoef(coherent.to_numpy(dtype=float), precision.to_numpy(dtype=float))[0, 1])}


def markdown(results: dict) -> str:
    """The generated section: one row per regime and draw."""
    table = markdown_table([r | {"inside": f"{r['judged_inside']} of {r['judged']}",
                                 "truly": "" if r["inside_truly_same"] is None else f"{r['inside_truly_same']:.2f}"}
                            for r in results["rows"]], [
        ("regime", "regime"), ("encoder", "encoder"), ("audit_order", "audits by"), ("draw", "draw"), ("budget", "judgments"),
        ("inside", "judged pairs inside a cluster"), ("truly", "of those truly the same"),
        ("clusters", "training clusters"), ("impure_share", "impure share"), ("mean_pair_precision", "mean pair precision"),
        ("audited_clusters", "clusters audited"), ("audits_per_audited_median", "audits each (median)"),
        ("corr_purity", "corr(estimated purity, true precision)"),
        ("corr_coherence", "corr(model coherence, true precision)")])
    return f"Machine: {results['machine']}; written {results['date']}; read from the payoff bench's cache.\n\n{table}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=data_dir())
    parser.add_argument("--work", type=Path, default=ROOT / "runs" / "loop-payoff-57", help="bench.loop_payoff's --payoff-work")
    parser.add_argument("--encoder", default="quick")
    parser.add_argument("--regimes", nargs="+", choices=list(REGIMES), default=list(REGIMES))
    parser.add_argument("--draws", type=int, default=3)
    parser.add_argument("--budget", type=int, default=1000)
    parser.add_argument("--error", type=float, default=0.05)
    parser.add_argument("--audit-orders", nargs="+", choices=AUDIT_ORDERS, default=["purity"],
                        help="the queues whose cached exports to read (bench.payoff.QUEUES' designs: coherence)")
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--doc", type=Path, default=DOC)
    args = parser.parse_args()
    rows = []
    for regime in args.regimes:
        for order in args.audit_orders:
            for draw in range(args.draws):
                folder = args.work / args.encoder / regime / f"draw{draw}"
                if not (export_folder(folder, args.budget, args.error, order) / "export.json").is_file():
                    print(f"{regime} draw {draw}, audits by {order}: no cached export in {folder}, left out", flush=True)
                    continue
                rows.append(draw_row(args.data, args.work, args.encoder, regime, draw, args.budget, args.error, order))
                print(json.dumps(rows[-1]), flush=True)
    results = {"machine": machine(), "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "rows": rows}
    write_json(results, args.results)
    replace_marked_section(args.doc, MARKER, markdown(results))


if __name__ == "__main__":
    main()
