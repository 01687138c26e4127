"""What the Metrics tab reports of a project: the training curves of its served model (and of the
one it replaced, or of a retrained one waiting for a decision), H@1 / MRR before and after the
waiting or else the last confirmed retraining, or of the served model alone (``model_scores``),
and the label errors the judgments so far found with what the next 500 are expected to fix
(``label_outlook``: ``annotations.simulation.outlook``). ``ui.metrics_tab`` draws them.
"""

from __future__ import annotations

import pandas as pd

from annotations.simulation.outlook import describe, outlook
from workflows.project import Project

CURVE_COLUMNS = ["model", "epoch", "val ROC AUC", "loss"]
BAR_COLUMNS = ["measure", "model", "value"]


def model_scores(project: Project) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """Training curves of ``project``'s served bundle (and of the one it replaced, or of a retrained
    one waiting; ``CURVE_COLUMNS``), H@1 / MRR before and after the waiting or else the last
    confirmed retraining, or of the served model alone (``BAR_COLUMNS``; a discarded retraining is
    not shown), and a caption saying which."""
    model = project.model
    served, candidate, swap = model.current().bundle, model.candidate(), model.last_swap()
    bundles = [("replaced", swap.replaced if swap else None), ("served", served)]
    if candidate is not None:
        bundles.append(("retrained", candidate.served.bundle))
    curves = pd.DataFrame(
        [{"model": f"{name} {bundle.version}", "epoch": row["epoch"], "val ROC AUC": row["val_auc"], "loss": row["loss"]}
         for name, bundle in bundles if bundle is not None
         for row in bundle.manifest.training.get("history", [])],
        columns=CURVE_COLUMNS,
    )
    if candidate is not None or swap is not None:
        comparison, which = ((candidate.comparison, "the retrained model waiting for your decision") if candidate
                             else (swap.comparison, "the last confirmed retraining"))
        scores = comparison.assign(model=comparison["model"].map({"current": "before", "retrained": "after"}))
        caption = f"Before and after {which}, on the same held-out queries (corrected clusters)."
    else:
        # The served retriever's own scores: the hybrid's when the bundle has one.
        measured = served.manifest.hybrid_metrics or served.manifest.metrics
        scores = pd.DataFrame([{"model": "served", "split": split} | values for split, values in measured.items()],
                              columns=["model", "split", "H1", "MRR"])  # none: nothing held out (bare questions)
        caption = "The served model on its held-out clusters (retrain to compare before and after)."
    bars = pd.DataFrame(
        [{"measure": f"{metric} {split}", "model": label, "value": row[metric]}
         for metric in ("H1", "MRR") for split in scores["split"].unique()
         for label, row in scores[scores["split"] == split].set_index("model").iterrows()],
        columns=BAR_COLUMNS,
    )
    return curves, bars, caption


def label_outlook(project: Project) -> str:
    """The label errors ``project``'s judgments found so far and what the next 500 are expected to
    fix, with the assumptions (``annotations.simulation.outlook``)."""
    return describe(outlook(project.store.judgments.frame()))
