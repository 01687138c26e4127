"""The whole page: a header with who is annotating, and the tabs, each from its own module.

``QPRPage(ctx).build()`` returns the ``gr.Blocks`` to launch. Each tab object keeps its
components, and its handlers return ``{component: value}``; tests build the page and call the
handlers directly, without a browser.
"""

from __future__ import annotations

import gradio as gr

from annotations.backup import backup_line
from ui.annotate_tab import AnnotateTab
from ui.clusters_tab import ClustersTab
from ui.common import AppContext
from ui.guidelines import GuidelinesTab
from ui.metrics_tab import MetricsTab
from ui.my_work_tab import MyWorkTab
from ui.projects_tab import ProjectsTab
from ui.retrain_tab import RetrainTab
from ui.review_tab import ReviewTab
from ui.search_tab import SearchTab


class QPRPage:
    """The tabs over one ``AppContext``; ``build`` lays them out and wires them."""

    def __init__(self, ctx: AppContext) -> None:
        self.ctx = ctx
        self.search = SearchTab(ctx)
        self.annotate = AnnotateTab(ctx)
        self.clusters = ClustersTab(ctx)
        self.retrain = RetrainTab(ctx)
        self.metrics = MetricsTab(ctx)
        self.review = ReviewTab(ctx)
        self.my_work = MyWorkTab(ctx)
        self.guidelines = GuidelinesTab(ctx)
        self.projects = ProjectsTab(ctx, self.retrain)

    def build(self) -> gr.Blocks:
        with gr.Blocks(title="Question paraphrase retrieval", fill_width=True) as demo:
            gr.Markdown("# Question paraphrase retrieval\nFind questions that mean the same, mark the ones filed "
                        "under the wrong cluster, retrain on the corrected clusters.")
            with gr.Row():
                name = gr.Textbox(label="Your name (needed to annotate)", visible=self.ctx.identity == "name", scale=2)
                if self.ctx.identity == "oauth":
                    gr.LoginButton()
                who = gr.Markdown()
                backup = gr.Markdown(elem_id="backup-status")
            self.search.render()
            self.annotate.render(name)
            self.clusters.render(name)
            self.retrain.render(name)
            self.metrics.render()
            self.review.render(name)
            self.my_work.render(name)
            self.guidelines.render(name)
            self.projects.render(name)
            gr.on([demo.load, name.change], self.ctx.whoami, [name], [who])
            demo.load(self.search.relabel, [self.search.shown, self.search.compare], self.search.relabelled)
            demo.load(self.retrain.restore, None, self.retrain.decision_outputs)
            demo.load(self.projects.listed, None, self.projects.shown)
            demo.load(self.backup_status, None, [backup])
        return demo

    def backup_status(self) -> str:
        """The header's line about the annotation database's last backup (``annotations.backup``)."""
        return backup_line(self.ctx.store.engine.url)
