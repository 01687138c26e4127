"""The Metrics tab's plots keep their legends clear of the title the page draws over the image's
top corner (issue 38, bug 9): the legend sits under the axes, outside them."""

from __future__ import annotations

import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg

from ui.metrics_tab import bar_figure, line_figure


def test_legends_sit_below_the_axes():
    curves = pd.DataFrame({"model": ["served"] * 3 + ["replaced"] * 3, "epoch": [1, 2, 3] * 2,
                           "val_auc": [0.6, 0.7, 0.8, 0.5, 0.6, 0.65]})
    bars = pd.DataFrame({"model": ["served", "replaced"] * 2, "measure": ["H1", "H1", "MRR", "MRR"],
                         "value": [0.5, 0.4, 0.6, 0.5]})
    for figure in (line_figure(curves, "val_auc"), bar_figure(bars)):
        renderer = FigureCanvasAgg(figure).get_renderer()
        figure.draw(renderer)  # lays the figure out, as when the page draws it
        legend = figure.legends[0].get_window_extent(renderer)
        axes = figure.axes[0].get_window_extent(renderer)
        assert legend.y1 <= axes.y0, "the legend lies wholly under the axes"
        assert [t.get_text() for t in figure.legends[0].get_texts()] == ["served", "replaced"]
