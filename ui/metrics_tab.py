"""The Metrics tab: training curves, H@1 / MRR of the served model or before and after a
retraining, and what the next 500 judgments are expected to fix (``workflows.metrics_report``).

The plots are drawn with matplotlib and sent as images. Gradio's native plots redraw a new value
inside the colour domain of their first one, so after a swap the new models' lines vanished and
the legend kept the old names until a reload; an image is drawn whole every time.
"""

from __future__ import annotations

import gradio as gr
import pandas as pd
from matplotlib.figure import Figure

from ui.common import AppContext
from workflows.metrics_report import label_outlook, model_scores
from workflows.project import Project


class MetricsTab:
    """Layout and handler of the Metrics tab."""

    def __init__(self, ctx: AppContext) -> None:
        self.ctx = ctx

    def render(self) -> None:
        """Lay out the tab (inside a gr.Blocks); it refreshes whenever it is opened."""
        with gr.Tab("Metrics") as tab:
            self.caption = gr.Markdown()
            with gr.Row():
                self.auc = gr.Plot(label="Validation ROC AUC per epoch", elem_id="metrics-auc")
                self.loss = gr.Plot(label="Training loss per epoch", elem_id="metrics-loss")
            self.bars = gr.Plot(label="H@1 and MRR", elem_id="metrics-bars")
            self.outlook = gr.Markdown(elem_id="metrics-outlook")
        tab.select(self.metrics, None, [self.auc, self.loss, self.bars, self.caption, self.outlook])

    @staticmethod
    def tables(project: Project) -> tuple[pd.DataFrame, pd.DataFrame, str]:
        """What the tab plots: ``project``'s training curves and scores, and a caption saying which
        (``workflows.metrics_report.model_scores``)."""
        return model_scores(project)

    def metrics(self) -> dict:
        """The tab's plots, caption and label-error outlook, drawn afresh."""
        project = self.ctx.current()
        curves, bars, caption = self.tables(project)
        return {self.auc: line_figure(curves, "val ROC AUC"), self.loss: line_figure(curves, "loss"),
                self.bars: bar_figure(bars), self.caption: caption, self.outlook: label_outlook(project)}


def line_figure(curves: pd.DataFrame, measure: str) -> Figure:
    """One line per model of ``measure`` against the epoch."""
    figure = Figure(figsize=(6, 3.2), layout="constrained")
    axes = figure.subplots()
    for model, rows in curves.groupby("model", sort=False):
        axes.plot(rows["epoch"], rows[measure], marker="o", markersize=3, label=model)
    axes.set_xlabel("epoch")
    axes.set_ylabel(measure)
    axes.xaxis.get_major_locator().set_params(integer=True)
    if len(curves):
        below_axes(figure, curves["model"].nunique())
    return figure


def bar_figure(bars: pd.DataFrame) -> Figure:
    """Grouped bars: one group per measure, one bar per model, values written on the bars."""
    figure = Figure(figsize=(10, 3.2), layout="constrained")
    axes = figure.subplots()
    measures = list(dict.fromkeys(bars["measure"]))
    models = list(dict.fromkeys(bars["model"]))
    width = 0.8 / max(len(models), 1)
    for i, model in enumerate(models):
        values = bars[bars["model"] == model].set_index("measure")["value"].reindex(measures)
        drawn = axes.bar([m + (i - (len(models) - 1) / 2) * width for m in range(len(measures))], values, width, label=model)
        axes.bar_label(drawn, fmt="%.3f", fontsize="small")
    axes.set_xticks(range(len(measures)), measures)
    axes.set_ylim(0, 1.05)
    axes.set_ylabel("value")
    if models:
        below_axes(figure, len(models))
    return figure


def below_axes(figure: Figure, entries: int) -> None:
    """The legend under the plot, outside the axes: inside, the page's plot title (drawn over the
    image's top corner) covered it, and lines or bars did too."""
    figure.legend(loc="outside lower center", ncols=max(entries, 1), fontsize="small")
