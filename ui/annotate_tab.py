"""The Annotate tab: spot-check a cluster (or a typed query) one retrieved question at a time.

An ``AnnotateSession`` is what one browser tab is working through: the queue of (query,
candidate) items, how far it got, and the cluster's members. It lives in a ``gr.State``; the
handlers take it and return a new one.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import gradio as gr
import pandas as pd

from annotations.queue import next_cluster, spot_check
from qpr.errors import QPRError
from ui.common import AppContext, plain, shows_errors, text_table

LABEL_BUTTONS = (("same", "Same meaning", "1 / S"), ("different", "Different", "2 / D"), ("unsure", "Unsure", "3 / U"))
QUEUE_COLUMNS = ["question", "cluster", "same meaning", "suspicion"]
MEMBER_COLUMNS = ["qid", "question"]
UNDO_STEPS = 10  # how far back one page's undo reaches

# The Annotate tab's keyboard shortcuts (ui/shortcuts.js), given to ``launch(head=...)``.
SHORTCUTS = f"<script>\n{Path(__file__).with_name('shortcuts.js').read_text()}</script>\n"


@dataclass(frozen=True)
class AnnotateSession:
    """A spot-check queue being worked through: items of the served bundle ``version``, the
    ``cluster`` checked (None for a typed query) and its ``members``, the ``position`` of the
    current item, the last ``message`` shown, and ``judged``: (judgment id, position) of the last
    ``UNDO_STEPS`` judgments this page recorded, the only ones its undo may withdraw."""

    version: str | None = None
    cluster: str | None = None
    members: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=MEMBER_COLUMNS))
    queue: pd.DataFrame = field(default_factory=pd.DataFrame)
    position: int = 0
    message: str = ""
    judged: tuple[tuple[int, int], ...] = ()

    @property
    def left(self) -> int:
        return max(len(self.queue) - self.position, 0)

    @property
    def heading(self) -> str:
        """What this page is checking, shown above every message."""
        if self.version is None:
            return ""
        return f"Spot-checking cluster **{plain(self.cluster)}**" if self.cluster is not None else "Checking what your query retrieves"

    def current(self) -> pd.Series | None:
        """The item to judge now, or None when the queue is finished or empty."""
        return self.queue.iloc[self.position] if self.left else None

    def after_judging(self, judgment: int, label: str) -> "AnnotateSession":
        """This session once the current item got ``label`` as judgment ``judgment``."""
        judged = (*self.judged, (judgment, self.position))[-UNDO_STEPS:]
        return replace(self, position=self.position + 1, judged=judged, message=f"Recorded judgment #{judgment}: {label}.")

    def after_undo(self, withdrawn: dict) -> "AnnotateSession":
        """This session once judgment ``withdrawn`` (a store row) was withdrawn: back at its item."""
        position = dict(self.judged)[int(withdrawn["id"])]
        judged = tuple(pair for pair in self.judged if pair[0] != withdrawn["id"])
        message = (f"Withdrew judgment #{withdrawn['id']} ({withdrawn['label']}) of \u201c{withdrawn['candidate_question']}\u201d; "
                   "judge it again.")
        return replace(self, position=position, judged=judged, message=message)


class AnnotateTab:
    """Layout and handlers of the Annotate tab. Handlers take the identity inputs last
    (typed name, login request, Hugging Face profile) and return the whole view."""

    def __init__(self, ctx: AppContext) -> None:
        self.ctx = ctx

    def render(self, name: gr.Textbox) -> None:
        """Lay out the tab (inside a gr.Blocks); ``name`` is the page's 'Your name' box."""
        with gr.Tab("Annotate"):
            self.session = gr.State()
            gr.Markdown("The app picks a cluster (or give one, or a query). For each question retrieved from "
                        "**another** cluster, say whether it means the same as the query. Keys: **1/S** same, "
                        "**2/D** different, **3/U** unsure, **Z** undo.")
            with gr.Row(equal_height=True):
                next_button = gr.Button("Next cluster (the app picks)", variant="primary", elem_id="annotate-next")
                pick = gr.Textbox(label="…or a cluster id", scale=2, elem_id="annotate-pick")
                pick_button = gr.Button("Check cluster", elem_id="annotate-pick-button")
                typed = gr.Textbox(label="…or a query", scale=2, elem_id="annotate-typed")
                typed_button = gr.Button("Check query", elem_id="annotate-typed-button")
            self.status = gr.Markdown(elem_id="annotate-status")
            self.progress = gr.Markdown(elem_id="annotate-progress")
            with gr.Row():
                self.members = gr.Dataframe(label="The cluster's questions", datatype=["number", "str"], interactive=False, wrap=True)
                with gr.Column():
                    self.query = gr.Textbox(label="Query", interactive=False, lines=2, elem_id="annotate-query")
                    self.candidate = gr.Textbox(label="Retrieved from another cluster: same meaning?", interactive=False,
                                                lines=2, elem_id="annotate-candidate")
                    self.details = gr.Markdown()
                    with gr.Row():
                        # Off until a queue shows an item (``buttons_for``).
                        label_buttons = {label: gr.Button(f"{text} ({keys})", elem_id=f"judge-{label}", interactive=False,
                                                          variant="primary" if label == "same" else "secondary")
                                         for label, text, keys in LABEL_BUTTONS}
                        undo = gr.Button("Undo last (Z)", elem_id="judge-undo", interactive=False)
            self.queue = gr.Dataframe(label="Queue, most suspicious first (same meaning: the encoder's estimated probability, 0 "
                                            "to 1; suspicion: how much closer than the query's own cluster-mates)",
                                      datatype=["str", "str", "number", "number"],
                                      interactive=False, wrap=True)
        self.buttons = [*label_buttons.values(), undo]
        view = [self.session, self.status, self.members, self.query, self.candidate, self.details, self.queue, self.progress]

        def wire(triggers, handler, inputs) -> None:
            # Keys and buttons are off from the click until the new item shows (queue=False: at
            # once, not behind other events), so a key pressed meanwhile cannot judge a stale item.
            gr.on(triggers, self.busy, None, self.buttons, queue=False).then(
                handler, inputs, view).then(self.buttons_for, [self.session], self.buttons, queue=False)

        wire([next_button.click], self.start_cluster, [gr.State(""), name])
        wire([pick_button.click, pick.submit], self.start_cluster, [pick, name])
        wire([typed_button.click, typed.submit], self.start_query, [typed, name])
        for label, button in label_buttons.items():
            wire([button.click], self.judge, [gr.State(label), self.session, name])
        wire([undo.click], self.undo, [self.session, name])

    def busy(self) -> dict:
        """Every judging button off, while an event is on its way."""
        return {button: gr.Button(interactive=False) for button in self.buttons}

    def buttons_for(self, session: AnnotateSession | None) -> dict:
        """The judging buttons on when there is an item to judge, undo when this page judged something."""
        judging = session is not None and session.current() is not None
        undoing = session is not None and bool(session.judged)
        return {button: gr.Button(interactive=undoing if button is self.buttons[-1] else judging) for button in self.buttons}

    @shows_errors
    def start_cluster(self, cluster: str, name: str, request: gr.Request, profile: gr.OAuthProfile | None) -> dict:
        """A spot-check queue for ``cluster`` (or for a cluster the app picks when it is empty)."""
        who = self.ctx.annotator(name, request, profile)
        served = self.ctx.model.current()
        corpus = served.bundle.corpus
        cluster = (cluster or "").strip() or next_cluster(self.ctx.store, corpus, who, retriever=served.dense)
        queue = spot_check(self.ctx.store, served.dense, corpus, who, cluster=cluster)
        members = text_table(corpus[corpus["cluster"] == cluster], MEMBER_COLUMNS)
        return self.view(AnnotateSession(served.bundle.version, cluster, members, queue, message=_queue_message(queue)), who)

    @shows_errors
    def start_query(self, query: str, name: str, request: gr.Request, profile: gr.OAuthProfile | None) -> dict:
        """A spot-check queue of what the encoder retrieves for a typed query."""
        who = self.ctx.annotator(name, request, profile)
        served = self.ctx.model.current()
        queue = spot_check(self.ctx.store, served.dense, served.bundle.corpus, who, query_text=query)
        return self.view(AnnotateSession(served.bundle.version, queue=queue, message=_queue_message(queue)), who)

    @shows_errors
    def judge(self, label: str, session: AnnotateSession | None, name: str, request: gr.Request,
              profile: gr.OAuthProfile | None) -> dict:
        """Record ``label`` for the current (query, candidate) item and move to the next one."""
        who = self.ctx.annotator(name, request, profile)
        row = session.current() if session else None
        if row is None:
            raise QPRError("Nothing to judge: pick a cluster or check a query first.")
        judgment = self.ctx.store.record(
            who, int(row["candidate_qid"]), label, session.version,
            query_qid=None if pd.isna(row["query_qid"]) else int(row["query_qid"]),
            query_text=None if pd.isna(row["query_text"]) else str(row["query_text"]),
            rank=int(row["rank"]), distance=float(row["distance"]),
        )
        return self.view(session.after_judging(judgment, label), who)

    @shows_errors
    def undo(self, session: AnnotateSession | None, name: str, request: gr.Request, profile: gr.OAuthProfile | None) -> dict:
        """Withdraw the last judgment this page recorded that is still in force (at most
        ``UNDO_STEPS`` back), name it, and go back to its item."""
        who = self.ctx.annotator(name, request, profile)
        session = session or AnnotateSession()
        withdrawn = self.ctx.store.undo_last(who, among=[judgment for judgment, _ in session.judged])
        if withdrawn is None:
            message = (f"Nothing to undo on this page: undo reaches the last {UNDO_STEPS} judgments made here and still in force.")
            return self.view(replace(session, judged=(), message=message), who)
        return self.view(session.after_undo(withdrawn), who)

    def view(self, session: AnnotateSession, who: str) -> dict:
        """The tab's outputs for ``session``: the session itself, status, members, the current
        item and its details, the rest of the queue and the annotator's progress."""
        progress = self.ctx.store.progress(who)
        row = session.current()
        status = " · ".join(part for part in (session.heading, session.message) if part)
        shown = {self.session: session, self.status: status, self.members: session.members,
                 self.progress: f"Judged today: **{progress['today']}** · left in this queue: **{session.left}** · "
                                f"labelled in total: **{progress['total']}**"}
        if row is None:
            finished = "Queue finished: pick the next cluster or check a query." if len(session.queue) else ""
            return shown | {self.query: "", self.candidate: "", self.details: finished,
                            self.queue: pd.DataFrame(columns=QUEUE_COLUMNS)}
        queue = session.queue
        cluster = plain(row["cluster"]) if pd.notna(row["cluster"]) else "none"
        served = self.ctx.model.current()
        alike = served.probability(served.dense, queue["distance"])
        shown_queue = queue.assign(**{"same meaning": alike.round(2) if alike is not None else queue["distance"].round(3),
                                      "suspicion": queue["suspicion"].round(3)})
        score = (f"same meaning (encoder) {shown_queue['same meaning'].iloc[session.position]:.2f}" if alike is not None
                 else f"distance {row['distance']:.3f}")
        return shown | {
            self.query: row["query_text"] if pd.isna(row["query_qid"]) else self._question(int(row["query_qid"])),
            self.candidate: row["question"],
            self.details: f"Candidate {session.position + 1} of {len(queue)} · its cluster: **{cluster}** · "
                          f"rank {int(row['rank'])} · {score} · suspicion {row['suspicion']:.3f}",
            self.queue: text_table(shown_queue.iloc[session.position:], QUEUE_COLUMNS),
        }

    def _question(self, qid: int) -> str:
        corpus = self.ctx.model.current().bundle.corpus
        found = corpus.loc[corpus["qid"] == qid, "question"]
        return str(found.iloc[0]) if len(found) else f"(question {qid} is not in the served corpus)"


def _queue_message(queue: pd.DataFrame) -> str:
    if queue.empty:
        return "Everything retrieved here is judged already (by you): nothing left to check."
    return f"{len(queue)} retrieved question(s) to check."
