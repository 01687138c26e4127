"""The Review tab: agreement per annotator pair, tied items to adjudicate, and the merges, splits
(a cluster and ``qid:<member>``) and conflicts the judgments propose, each applied or rejected by a reviewer with its supporting
judgments one click away. Decisions go to the ``adjudications`` table (never as judgments)."""

from __future__ import annotations

import gradio as gr
import pandas as pd

from annotations.agreement import AGREEMENT_COLUMNS, agreement
from annotations.constraints import corrected_clusters
from annotations.repositories.review import ADJUDICATION_COLUMNS
from qpr.errors import QPRError
from ui.common import AppContext, review_note, reviewer
from ui.display import plain, shows_errors, text_table, when

DECISIONS = ["same", "different", "apply", "reject"]
EVIDENCE_COLUMNS = ["id", "annotator", "label", "query_qid", "query", "candidate_qid", "candidate", "created_at"]
ITEM_COLUMNS = ["item", "query", "candidate", "same", "different", "judgment_ids", "adjudicated"]
PAIR_COLUMNS = ["kind", "cluster_a", "cluster_b", "judgment_ids", "reason", "adjudicated"]


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
            self.decided = gr.Dataframe(pd.DataFrame(columns=ADJUDICATION_COLUMNS[1:]), label="Decisions in force", datatype="str",
                                        interactive=False, wrap=True, elem_id="review-decided")
        tables = [self.agreement, self.items, self.pairs, self.decided]
        gr.on([tab.select, refresh.click], self.overview, None, tables)
        self.items.select(self.pick_item, None, [self.item, self.cluster_a, self.cluster_b, self.evidence])
        self.pairs.select(self.pick_pair, None, [self.item, self.cluster_a, self.cluster_b, self.evidence])
        decide.click(self.decide, [self.item, self.cluster_a, self.cluster_b, self.decision, self.note, name],
                     [self.status, *tables])

    def overview(self) -> dict:
        """Agreement, tied items, proposed merges and conflicts, and the decisions in force."""
        corpus = self.ctx.model.current().bundle.corpus
        result = corrected_clusters(self.ctx.store, corpus)
        decided = self.ctx.store.adjudications()
        on_item = dict(zip(decided["item_key"].dropna(), decided.loc[decided["item_key"].notna(), "decision"]))
        pairs_decided = decided[decided["kind"] == "cluster_pair"]
        on_pair = {(a, b): d for a, b, d in zip(pairs_decided["cluster_a"], pairs_decided["cluster_b"], pairs_decided["decision"])}
        text = corpus.set_index("qid")["question"]
        # Ties by the raw counts, so an item stays listed (with its decision) once adjudicated.
        ties = result.items[result.items["same"] == result.items["different"]]
        items = pd.DataFrame({
            "item": [f"qid:{q}:{c}" for q, c in zip(ties["query_qid"], ties["candidate_qid"])],
            "query": ties["query_qid"].map(text).to_numpy(), "candidate": ties["candidate_qid"].map(text).to_numpy(),
            "same": ties["same"].to_numpy(), "different": ties["different"].to_numpy(),
            "judgment_ids": ties["judgment_ids"].map(_ids).to_numpy(),
        }, columns=ITEM_COLUMNS[:-1])
        items["adjudicated"] = items["item"].map(on_item)
        merges = result.merges.assign(kind="merge", reason=lambda f: "proposed merge into " + f["into"].astype(str))
        splits = result.splits.assign(kind="split", cluster_a=result.splits["cluster"],
                                      cluster_b="qid:" + result.splits["qid"].astype(str),
                                      reason=lambda f: "proposed split: the member leaves " + f["cluster"].astype(str))
        pairs = pd.concat([merges, splits.drop(columns=["cluster", "qid"]), result.conflicts[result.conflicts["kind"] != "tie"]],
                          ignore_index=True)
        listed = {(min(a, b), max(a, b)) for a, b in zip(pairs["cluster_a"], pairs["cluster_b"])}
        gone = [{"kind": "decided", "cluster_a": a, "cluster_b": b, "judgment_ids": [], "reason": f"no longer proposed ({d})"}
                for (a, b), d in on_pair.items() if (a, b) not in listed]
        pairs = pd.concat([pairs, pd.DataFrame(gone, columns=PAIR_COLUMNS[:-1])], ignore_index=True)
        pairs = pairs.assign(judgment_ids=pairs["judgment_ids"].map(_ids), adjudicated=[
            on_pair.get((min(a, b), max(a, b))) for a, b in zip(pairs["cluster_a"], pairs["cluster_b"])])
        shown = decided.assign(created_at=decided["created_at"].map(when))
        return {self.agreement: text_table(agreement(self.ctx.store).round(3)), self.items: text_table(items, ITEM_COLUMNS),
                self.pairs: text_table(pairs.reindex(columns=PAIR_COLUMNS)),
                self.decided: text_table(shown.drop(columns=["id"]))}

    def evidence_for(self, judgment_ids: str) -> pd.DataFrame:
        """The judgments named by a comma-separated id list, with their question texts."""
        ids = [int(i) for i in str(judgment_ids).replace(" ", "").split(",") if i]
        judged = self.ctx.store.judgments(current_only=False, ids=ids)
        judged = judged.assign(query=judged["query_question"].fillna(judged["query_text"]), candidate=judged["candidate_question"],
                               created_at=judged["created_at"].map(when))
        return text_table(judged, EVIDENCE_COLUMNS)

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
        if decision not in DECISIONS:
            raise QPRError("Choose a decision: same or different for an item, apply or reject for a cluster pair.")
        if decision in ("same", "different"):
            self.ctx.store.record_adjudication(who, decision, item=item, note=note)
            target = f"item {item.strip()}"
        else:
            self.ctx.store.record_adjudication(who, decision, cluster_a=cluster_a, cluster_b=cluster_b, note=note)
            target = f"clusters {cluster_a.strip()} and {cluster_b.strip()}"
        return {self.status: f"Recorded **{decision}** on {plain(target)} by {plain(who)}."} | self.overview()


def _ids(ids) -> str:
    return ", ".join(str(i) for i in ids)
