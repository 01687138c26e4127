"""The Review tab: agreement per annotator pair, tied items to adjudicate, and the merges, splits
(a cluster and ``qid:<member>``) and conflicts the judgments propose, each applied or rejected by a reviewer with its supporting
judgments one click away (``workflows.review_lists``). Decisions go to the ``adjudications`` table (never as judgments)."""

from __future__ import annotations

import gradio as gr
import pandas as pd

from annotations.agreement import AGREEMENT_COLUMNS
from ui.common import AppContext, review_note, reviewer
from ui.display import plain, shows_errors, text_table, when
from workflows.project import Project
from workflows.review_lists import (DECIDED_COLUMNS, DECISIONS, EVIDENCE_COLUMNS, ITEM_COLUMNS, PAIR_COLUMNS, evidence,
                                    record_decision, review_lists)


class ReviewTab:
    """Layout and handlers of the Review tab."""

    def __init__(self, ctx: AppContext) -> None:
        self.ctx = ctx

    def render(self, name: gr.Textbox) -> None:
        """Lay out the tab (inside a gr.Blocks); ``name`` is the page's 'Your name' box."""
        with gr.Tab("Review") as tab:
            gr.Markdown(review_note(self.ctx))
            refresh = gr.Button("Refresh")
            self.agreement = gr.Dataframe(pd.DataFrame(columns=AGREEMENT_COLUMNS), label="Agreement per annotator pair "
                                          "(current labels of shared items)", datatype="str", interactive=False, elem_id="review-agreement")
            self.items = gr.Dataframe(pd.DataFrame(columns=ITEM_COLUMNS), label="Tied items: annotators split evenly (click one)",
                                      datatype="str", interactive=False, wrap=True, elem_id="review-items")
            self.pairs = gr.Dataframe(pd.DataFrame(columns=PAIR_COLUMNS), label="Proposed merges and conflicts between clusters "
                                      "(click one)", datatype="str", interactive=False, wrap=True, elem_id="review-pairs")
            with gr.Row(equal_height=True):
                self.item = gr.Textbox(label="Item (qid:<query>:<candidate>)", scale=2, elem_id="review-item")
                self.cluster_a = gr.Textbox(label="Cluster A")
                self.cluster_b = gr.Textbox(label="Cluster B")
            self.evidence = gr.Dataframe(pd.DataFrame(columns=EVIDENCE_COLUMNS), label="Supporting judgments", datatype="str",
                                         interactive=False, wrap=True,
                                         elem_id="review-evidence")
            with gr.Row(equal_height=True):
                self.decision = gr.Radio(DECISIONS, label="Decision (same/different for an item; apply/reject for clusters)",
                                         elem_id="review-decision")
                self.note = gr.Textbox(label="Note (optional)", scale=2)
                decide = gr.Button("Record decision", variant="primary", elem_id="review-decide")
            self.status = gr.Markdown(elem_id="review-status")
            self.decided = gr.Dataframe(pd.DataFrame(columns=DECIDED_COLUMNS), label="Decisions in force", datatype="str",
                                        interactive=False, wrap=True, elem_id="review-decided")
        tables = [self.agreement, self.items, self.pairs, self.decided]
        gr.on([tab.select, refresh.click], self.overview, None, tables)
        self.items.select(self.pick_item, None, [self.item, self.cluster_a, self.cluster_b, self.evidence])
        self.pairs.select(self.pick_pair, None, [self.item, self.cluster_a, self.cluster_b, self.evidence])
        decide.click(self.decide, [self.item, self.cluster_a, self.cluster_b, self.decision, self.note, name],
                     [self.status, *tables])

    def overview(self) -> dict:
        """Agreement, tied items, proposed merges and conflicts, and the decisions in force."""
        return self._overview(self.ctx.current())

    def _overview(self, project: Project) -> dict:
        lists = review_lists(project)
        items, pairs = (frame.assign(judgment_ids=frame["judgment_ids"].map(_ids)) for frame in (lists.items, lists.pairs))
        decided = lists.decided.assign(created_at=lists.decided["created_at"].map(when))
        return {self.agreement: text_table(lists.agreement.round(3)), self.items: text_table(items, ITEM_COLUMNS),
                self.pairs: text_table(pairs), self.decided: text_table(decided)}

    def evidence_for(self, judgment_ids: str) -> pd.DataFrame:
        """The judgments named by a comma-separated id list, with their question texts."""
        judged = evidence(self.ctx.current(), [int(i) for i in str(judgment_ids).replace(" ", "").split(",") if i])
        return text_table(judged.assign(created_at=judged["created_at"].map(when)))

    def pick_item(self, event: gr.SelectData) -> dict:
        """A clicked tied item: its key in the Item box and its judgments shown."""
        row = dict(zip(ITEM_COLUMNS, event.row_value))
        return {self.item: row["item"], self.cluster_a: "", self.cluster_b: "",
                self.evidence: self.evidence_for(row["judgment_ids"])}

    def pick_pair(self, event: gr.SelectData) -> dict:
        """A clicked merge or conflict: its clusters in the boxes and its judgments shown."""
        row = dict(zip(PAIR_COLUMNS, event.row_value))
        return {self.item: "", self.cluster_a: row["cluster_a"], self.cluster_b: row["cluster_b"],
                self.evidence: self.evidence_for(row["judgment_ids"])}

    @shows_errors
    def decide(self, item: str, cluster_a: str, cluster_b: str, decision: str | None, note: str, name: str,
               request: gr.Request, profile: gr.OAuthProfile | None) -> dict:
        """Record the reviewer's decision on the item (same/different) or cluster pair (apply/reject)."""
        who = reviewer(self.ctx, name, request, profile)
        project = self.ctx.current()
        target = record_decision(project, who, decision, item, cluster_a, cluster_b, note)
        return {self.status: f"Recorded **{decision}** on {plain(target)} by {plain(who)}."} | self._overview(project)


def _ids(ids) -> str:
    return ", ".join(str(i) for i in ids)
