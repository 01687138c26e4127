"""The My work tab: the annotator's own judgments (history included) with a text search, a
re-judgment of any one (``store.judgments.record``: the earlier label stays as history), a comment per
judgment, and a logout link in login mode (Gradio's ``/logout`` route)."""

from __future__ import annotations

import gradio as gr
import pandas as pd

from annotations.models import LABELS
from qpr.errors import QPRError
from ui.common import AppContext
from ui.display import plain, shows_errors, text_table, when

WORK_COLUMNS = ["id", "label", "status", "query", "candidate", "comment", "created_at"]


class MyWorkTab:
    """Layout and handlers of the My work tab."""

    def __init__(self, ctx: AppContext) -> None:
        self.ctx = ctx

    def render(self, name: gr.Textbox) -> None:
        """Lay out the tab (inside a gr.Blocks); ``name`` is the page's 'Your name' box."""
        with gr.Tab("My work") as tab:
            if self.ctx.identity == "auth":
                gr.Button("Log out", link="/logout", size="sm", elem_id="my-work-logout")
            with gr.Row(equal_height=True):
                self.search = gr.Textbox(label="Search my judgments (query or candidate text)", scale=3)
                self.history = gr.Checkbox(label="Include superseded and undone labels", value=False)
                show = gr.Button("Show", variant="primary")
            self.table = gr.Dataframe(pd.DataFrame(columns=WORK_COLUMNS), label="My judgments, newest first (click one to edit)",
                                      datatype="str",
                                      interactive=False, wrap=True, elem_id="my-work-table")
            with gr.Row(equal_height=True):
                self.judgment = gr.Textbox(label="Judgment id")
                self.label = gr.Radio(list(LABELS), label="New label")
                relabel = gr.Button("Re-judge")
            with gr.Row(equal_height=True):
                self.comment = gr.Textbox(label="Comment on this judgment", scale=3)
                save = gr.Button("Save comment")
            self.status = gr.Markdown(elem_id="my-work-status")
        listing = [self.search, self.history, name]
        gr.on([tab.select, show.click, self.search.submit], self.show, listing, [self.table, self.status])
        self.table.select(self.pick, None, [self.judgment, self.label, self.comment])
        relabel.click(self.rejudge, [self.judgment, self.label, *listing], [self.status, self.table])
        save.click(self.save_comment, [self.judgment, self.comment, *listing], [self.status, self.table])

    def _mine(self, who: str, search: str, history: bool) -> pd.DataFrame:
        judged = self.ctx.store.judgments.frame(annotator=who, current_only=not history)
        judged = judged.assign(
            query=judged["query_question"].fillna(judged["query_text"]), candidate=judged["candidate_question"],
            status=["current" if c else "undone" if pd.notna(w) else "superseded"
                    for c, w in zip(judged["is_current"], judged["withdrawn_at"])],
            comment=judged["id"].map(self.ctx.store.review.comments()),
            created_at=judged["created_at"].map(when),
        )
        words = (search or "").strip().casefold()
        if words:
            text = (judged["query"].fillna("") + "\n" + judged["candidate"].fillna("")).str.casefold()
            judged = judged[text.str.contains(words, regex=False)]
        return text_table(judged.iloc[::-1], WORK_COLUMNS)

    @shows_errors
    def show(self, search: str, history: bool, name: str, request: gr.Request, profile: gr.OAuthProfile | None) -> dict:
        """My judgments matching ``search`` (all when empty), newest first; or, in the tab and not
        as a pop-up (opening a tab is no action to refuse), why there are none to show."""
        try:
            who = self.ctx.annotator(name, request, profile)
        except QPRError as err:
            return {self.table: pd.DataFrame(columns=WORK_COLUMNS), self.status: str(err)}
        return {self.table: self._mine(who, search, history), self.status: ""}

    def pick(self, event: gr.SelectData) -> dict:
        """The clicked judgment: its id, label and comment in the edit boxes."""
        row = dict(zip(WORK_COLUMNS, event.row_value))
        return {self.judgment: str(row["id"]), self.label: row["label"], self.comment: row["comment"] or ""}

    def _own(self, who: str, judgment: str) -> pd.Series:
        try:
            judgment_id = int(str(judgment).strip())
        except ValueError:
            raise QPRError("Type a judgment id, or click a row of your judgments.") from None
        rows = self.ctx.store.judgments.frame(annotator=who, current_only=False, ids=[judgment_id])
        if rows.empty:
            raise QPRError(f"Judgment {judgment_id} is not one of yours; click a row of your judgments.")
        return rows.iloc[0]

    @shows_errors
    def rejudge(self, judgment: str, label: str | None, search: str, history: bool, name: str, request: gr.Request,
                profile: gr.OAuthProfile | None) -> dict:
        """Give the item of ``judgment`` a new label (the old one stays as history)."""
        who = self.ctx.annotator(name, request, profile)
        old = self._own(who, judgment)
        if label not in LABELS:
            raise QPRError(f"Choose the new label: {', '.join(LABELS)}.")
        query_qid = None if pd.isna(old["query_qid"]) else int(old["query_qid"])
        new_id = self.ctx.store.judgments.record(who, int(old["candidate_qid"]), label, old["bundle_version"], query_qid=query_qid,
                                       query_text=None if query_qid is not None else old["query_text"],
                                       rank=None if pd.isna(old["rank"]) else int(old["rank"]),
                                       distance=None if pd.isna(old["distance"]) else float(old["distance"]),
                                       role=self.ctx.role_of(who))
        return {self.status: f"Judgment {old['id']} ({plain(old['label'])}) re-judged **{label}** as judgment {new_id}.",
                self.table: self._mine(who, search, history)}

    @shows_errors
    def save_comment(self, judgment: str, comment: str, search: str, history: bool, name: str, request: gr.Request,
                     profile: gr.OAuthProfile | None) -> dict:
        """Attach ``comment`` to one of my judgments."""
        who = self.ctx.annotator(name, request, profile)
        old = self._own(who, judgment)
        self.ctx.store.review.comment(who, int(old["id"]), comment)
        return {self.status: f"Comment saved on judgment {old['id']}.", self.table: self._mine(who, search, history)}
