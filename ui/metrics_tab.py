"""The Metrics tab: training curves, and H@1 / MRR of the served model or before and after a
retraining."""

from __future__ import annotations

import gradio as gr
import pandas as pd

from ui.common import AppContext

CURVE_COLUMNS = ["model", "epoch", "val ROC AUC", "loss"]


class MetricsTab:
    """Layout and handler of the Metrics tab."""

    def __init__(self, ctx: AppContext) -> None:
        self.ctx = ctx

    def render(self) -> None:
        """Lay out the tab (inside a gr.Blocks); it refreshes whenever it is opened."""
        with gr.Tab("Metrics") as tab:
            self.caption = gr.Markdown()
            with gr.Row():
                self.auc = gr.LinePlot(x="epoch", y="val ROC AUC", color="model", label="Validation ROC AUC per epoch",
                                       x_axis_format="d")
                self.loss = gr.LinePlot(x="epoch", y="loss", color="model", label="Training loss per epoch", x_axis_format="d")
            self.bars = gr.BarPlot(x="measure", y="value", color="model", label="H@1 and MRR", y_lim=[0, 1], x_label_angle=-30)
        tab.select(self.metrics, None, [self.auc, self.loss, self.bars, self.caption])

    def metrics(self) -> dict:
        """Training curves of the served model (and of the one it replaced, or of a retrained one
        waiting), and H@1 / MRR before and after the waiting or else the last confirmed retraining
        (a discarded one is not shown)."""
        model = self.ctx.model
        served, candidate, swap = model.current().bundle, model.candidate(), model.last_swap()
        bundles = [("replaced", swap.replaced if swap else None), ("served", served)]
        if candidate is not None:
            bundles.append(("retrained", candidate.served.bundle))
        curves = pd.DataFrame(
            [{"model": f"{name} {bundle.version}", "epoch": row["epoch"], "val ROC AUC": row["val_auc"], "loss": row["loss"]}
             for name, bundle in bundles if bundle is not None
             for row in bundle.manifest.get("training", {}).get("history", [])],
            columns=CURVE_COLUMNS,
        )
        if candidate is not None or swap is not None:
            comparison, which = ((candidate.comparison, "the retrained model waiting for your decision") if candidate
                                 else (swap.comparison, "the last confirmed retraining"))
            scores = comparison.assign(model=comparison["model"].map({"current": "before", "retrained": "after"}))
            caption = f"Before and after {which}, on the same held-out queries (corrected clusters)."
        else:
            # The served retriever's own scores: the hybrid's when the bundle has one.
            measured = served.manifest.get("hybrid_metrics") or served.manifest.get("metrics", {})
            scores = pd.DataFrame([{"model": "served", "split": split} | values for split, values in measured.items()])
            caption = "The served model on its held-out clusters (retrain to compare before and after)."
        bars = pd.DataFrame(
            [{"measure": f"{metric} {split} · {model}", "model": model, "value": row[metric]}
             for metric in ("H1", "MRR") for split in scores["split"].unique()
             for model, row in scores[scores["split"] == split].set_index("model").iterrows()],
            columns=["measure", "model", "value"],
        )
        return {self.auc: curves, self.loss: curves, self.bars: gr.BarPlot(value=bars, sort=list(bars["measure"])),
                self.caption: caption}
