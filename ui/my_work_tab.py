"""The My work tab: the annotator's own judgments (history included) with a text search, a
re-judgment of any one (the earlier label stays as history), a comment per judgment
(``workflows.judging``), and a logout link in login mode (Gradio's ``/logout`` route)."""

from __future__ import annotations

import gradio as gr
import pandas as pd

from annotations.models import LABELS
from qpr.errors import QPRError
from ui.common import AppContext
from ui.display import plain, shows_errors, text_table, when
from workflows.judging import comment, my_judgments, rejudge
from workflows.project import Project

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

    @staticmethod
    def _mine(project: Project, who: str, search: str, history: bool) -> pd.DataFrame:
        judged = my_judgments(project, who, search, history)
        return text_table(judged.assign(created_at=judged["created_at"].map(when)).iloc[::-1], WORK_COLUMNS)

    @shows_errors
    def show(self, search: str, history: bool, name: str, request: gr.Request, profile: gr.OAuthProfile | None) -> dict:
        """My judgments matching ``search`` (all when empty), newest first; or, in the tab and not
        as a pop-up (opening a tab is no action to refuse), why there are none to show."""
        try:
            who = self.ctx.annotator(name, request, profile)
        except QPRError as err:
            return {self.table: pd.DataFrame(columns=WORK_COLUMNS), self.status: str(err)}
        return {self.table: self._mine(self.ctx.current(), who, search, history), self.status: ""}

    def pick(self, event: gr.SelectData) -> dict:
        """The clicked judgment: its id, label and comment in the edit boxes."""
        row = dict(zip(WORK_COLUMNS, event.row_value))
        return {self.judgment: str(row["id"]), self.label: row["label"], self.comment: row["comment"] or ""}

    @shows_errors
    def rejudge(self, judgment: str, label: str | None, search: str, history: bool, name: str, request: gr.Request,
                profile: gr.OAuthProfile | None) -> dict:
        """Give the item of ``judgment`` a new label (the old one stays as history)."""
        who = self.ctx.annotator(name, request, profile)
        project = self.ctx.current()
        old, new_id = rejudge(project, who, judgment, label, self.ctx.role_of(who))
        return {self.status: f"Judgment {old['id']} ({plain(old['label'])}) re-judged **{label}** as judgment {new_id}.",
                self.table: self._mine(project, who, search, history)}

    @shows_errors
    def save_comment(self, judgment: str, text: str, search: str, history: bool, name: str, request: gr.Request,
                     profile: gr.OAuthProfile | None) -> dict:
        """Attach ``text`` to one of my judgments."""
        who = self.ctx.annotator(name, request, profile)
        project = self.ctx.current()
        old = comment(project, who, judgment, text)
        return {self.status: f"Comment saved on judgment {old['id']}.", self.table: self._mine(project, who, search, history)}
