"""The Annotate tab: spot-check a cluster, a typed query or the corpus-wide task, one retrieved
question at a time (a page's state is an ``ui.annotate_session.AnnotateSession``); queues leave out
items with a negligible chance of meaning the same (``annotations.task``)."""

from __future__ import annotations

import time
from dataclasses import replace

import gradio as gr
import pandas as pd

from qpr.errors import QPRError
from qpr.serving.served_model import Served
from ui.annotate_session import MEMBER_COLUMNS, QUEUE_COLUMNS, UNDO_STEPS, AnnotateSession
from ui.common import AppContext
from ui.display import plain, shows_errors, text_table
from ui.guidelines import guidelines_panel
from workflows.annotation_queues import CorpusTasks, Queue, building_note, cluster_queue, query_queue, task_queue
from workflows.judging import judge, undo
from workflows.project import Project

LABEL_BUTTONS = (("same", "Same meaning", "1 / S"), ("different", "Different", "2 / D"), ("unsure", "Unsure", "3 / U"))
SHOWN_AHEAD = 30  # queue rows sent to the page: a 2,000-pair task's table cost 0.8 s per judgment


def _keys_back(tab: "AnnotateTab", *args, **kwargs) -> dict:
    """After a refused input: the judging keys as the session still shown allows."""
    return tab.buttons_for(next((a for a in [*args, *kwargs.values()] if isinstance(a, AnnotateSession)), None))


class AnnotateTab:
    """Layout and handlers of the Annotate tab; handlers take the identity inputs (typed name,
    login request, Hugging Face profile) after their own and return the whole view."""

    def __init__(self, ctx: AppContext) -> None:
        self.ctx = ctx
        self.task_size = ctx.task_size
        self._tasks = CorpusTasks()  # the corpus-wide task per served bundle version

    def render(self, name: gr.Textbox) -> None:
        """Lay out the tab (inside a gr.Blocks); ``name`` is the page's 'Your name' box."""
        with gr.Tab("Annotate"):
            self.session = gr.State()
            gr.Markdown("Work through the corpus-wide task, or let the app pick a cluster (or give one, or a query). For "
                        "each question retrieved from **another** cluster, say whether it means the same as the query. "
                        "Keys: **1/S** same, **2/D** different, **3/U** unsure, **K** skip, **Z** undo. On bare questions (no "
                        "clusters yet) both buttons propose groups of near questions: 'same meaning' links form clusters.")
            with gr.Row(equal_height=True):
                task_button = gr.Button("Corpus-wide task", variant="primary", elem_id="annotate-task")
                next_button = gr.Button("Next cluster (the app picks)", elem_id="annotate-next")
                pick = gr.Textbox(label="…or a cluster id", scale=2, elem_id="annotate-pick")
                pick_button = gr.Button("Check cluster", elem_id="annotate-pick-button")
                typed = gr.Textbox(label="…or a query", scale=2, elem_id="annotate-typed")
                typed_button = gr.Button("Check query", elem_id="annotate-typed-button")
            self.status = gr.Markdown(elem_id="annotate-status")
            self.progress = gr.Markdown(elem_id="annotate-progress")
            with gr.Row():
                self.members = gr.Dataframe(pd.DataFrame(columns=MEMBER_COLUMNS), label="The cluster's questions",
                                            datatype=["number", "str"], interactive=False, wrap=True)
                with gr.Column():
                    self.query = gr.Textbox(label="Query", interactive=False, lines=2, elem_id="annotate-query")
                    self.candidate = gr.Textbox(label="Retrieved from another cluster: same meaning?", interactive=False,
                                                lines=2, elem_id="annotate-candidate")
                    self.details = gr.Markdown()
                    with gr.Row():  # off until a queue shows an item (``buttons_for``)
                        label_buttons = {label: gr.Button(f"{text} ({keys})", elem_id=f"judge-{label}", interactive=False,
                                                          variant="primary" if label == "same" else "secondary")
                                         for label, text, keys in LABEL_BUTTONS}
                        skip = gr.Button("Skip (K)", elem_id="judge-skip", interactive=False)
                        undo = gr.Button("Undo last (Z)", elem_id="judge-undo")  # on: Z always answers
                    with gr.Row():
                        block = gr.Number(value=5, minimum=1, maximum=50, precision=0, label="Next n items", scale=1)
                        block_button = gr.Button("All of these are the same", elem_id="judge-block", interactive=False, scale=2)
                        done = gr.Button("Done with this queue", elem_id="judge-done", interactive=False, scale=2)
            with gr.Accordion("Guidelines: when two questions mean the same", open=False):
                guidelines_panel(self.ctx)
            self.queue = gr.Dataframe(label=f"The next {SHOWN_AHEAD} in the queue, most suspicious first (same meaning: the "
                                            "estimated probability, 0 to 1, else the retriever's own score or distance, as "
                                            "the header says; suspicion: how much closer than the query's own cluster-mates)",
                                      value=pd.DataFrame(columns=QUEUE_COLUMNS), datatype=["str"] * 3 + ["number"] * 2, interactive=False, wrap=True)
            self.ticket = gr.HTML(elem_id="annotate-ticket", container=False)  # renewed by every answer (ui/shortcuts.js)
        self.buttons = [*label_buttons.values(), skip, block_button, done, undo]
        view = [self.session, self.status, self.members, self.query, self.candidate, self.details, self.queue, self.progress,
                *self.buttons, self.ticket]

        def wire(triggers, handler, inputs) -> None:
            # Keys wait for this answer's new ticket (ui/shortcuts.js); start_* get the session to keep its keys if refused.
            gr.on(triggers, handler, inputs, view)

        wire([task_button.click], self.start_task, [name, self.session])
        wire([next_button.click], self.start_cluster, [gr.State(""), name, self.session])
        wire([pick_button.click, pick.submit], self.start_cluster, [pick, name, self.session])
        wire([typed_button.click, typed.submit], self.start_query, [typed, name, self.session])
        for label, button in label_buttons.items():
            wire([button.click], self.judge, [gr.State(label), self.session, name])
        wire([block_button.click], self.judge_block, [block, self.session, name])
        wire([skip.click], self.skip, [self.session, name])
        wire([done.click], self.done, [self.session, name])
        wire([undo.click], self.undo, [self.session, name])

    def buttons_for(self, session: AnnotateSession | None) -> dict:
        """The judging buttons on when there is an item to judge (undo always: with nothing of this
        page's to undo it says so), and a new ticket: the page's keys work again (ui/shortcuts.js)."""
        judging = session is not None and session.current() is not None
        return {button: gr.Button(interactive=True if button is self.buttons[-1] else judging) for button in self.buttons} | {
            self.ticket: f'<span hidden data-answered="{time.monotonic_ns()}"></span>'}

    def _show(self, project: Project, queue: Queue, who: str) -> dict:
        served = project.served()
        corpus = served.corpus  # the served labels: a cluster as corrected, outsiders as corrected
        shown = corpus[corpus["cluster"] == queue.cluster] if queue.cluster else corpus[corpus["qid"] == queue.group]
        return self.view(project, AnnotateSession(served.bundle.version, queue.cluster, text_table(shown, MEMBER_COLUMNS),
                                                  queue.rows, message=queue.message, group=queue.group), who)

    @shows_errors(keep=_keys_back)
    def start_cluster(self, cluster: str, name: str, request: gr.Request, profile: gr.OAuthProfile | None,
                      shown: AnnotateSession | None = None) -> dict:
        """A spot-check queue for ``cluster`` (or for a cluster the app picks when it is empty; on a
        project of bare questions, the next group of near questions to build a cluster from)."""
        who = self.ctx.annotator(name, request, profile)
        project = self.ctx.current()
        return self._show(project, cluster_queue(project, who, cluster), who)

    @shows_errors(keep=_keys_back)
    def start_query(self, query: str, name: str, request: gr.Request, profile: gr.OAuthProfile | None,
                    shown: AnnotateSession | None = None) -> dict:
        """A spot-check queue of what the encoder retrieves for a typed query."""
        who = self.ctx.annotator(name, request, profile)
        project = self.ctx.current()
        return self._show(project, query_queue(project, who, query), who)

    @shows_errors(keep=_keys_back)
    def start_task(self, name: str, request: gr.Request, profile: gr.OAuthProfile | None,
                   shown: AnnotateSession | None = None) -> dict:
        """The corpus-wide task's pairs this annotator has not judged yet, most worth checking first
        (on a project of bare questions, which has no task yet: the next group to build a cluster from)."""
        who = self.ctx.annotator(name, request, profile)
        project = self.ctx.current()
        version = project.served().bundle.version  # the task's, read before it is built
        queue = task_queue(project, who, self._tasks, self.task_size)
        if not queue.task:
            return self._show(project, queue, who)
        return self.view(project, AnnotateSession(version, queue=queue.rows, message=queue.message, task_size=queue.task_size,
                                                  task_done=queue.task_done, pace_before=queue.pace), who)

    @shows_errors(keep=_keys_back)
    def judge(self, label: str, session: AnnotateSession | None, name: str, request: gr.Request,
              profile: gr.OAuthProfile | None) -> dict:
        """Record ``label`` for the current (query, candidate) item and move to the next one."""
        who = self.ctx.annotator(name, request, profile)
        project = self.ctx.current()
        return self.view(project, self._record(project, label, session, who), who)

    @shows_errors(keep=_keys_back)
    def judge_block(self, n: float, session: AnnotateSession | None, name: str, request: gr.Request,
                    profile: gr.OAuthProfile | None) -> dict:
        """Record "same" for the current item and the next ``n - 1`` (a block seen in the queue table)."""
        who = self.ctx.annotator(name, request, profile)
        if n is None or int(n) < 1:
            raise QPRError("Say how many of the next items are the same (1 or more).")
        project = self.ctx.current()
        for _ in range(int(n)):
            if session is None or session.current() is None:
                break
            session = self._record(project, "same", session, who)
        return self.view(project, session, who)

    def _record(self, project: Project, label: str, session: AnnotateSession | None, who: str) -> AnnotateSession:
        row = session.current() if session else None
        if row is None:
            raise QPRError("Nothing to judge: pick a cluster or check a query first.")
        return session.after_judging(judge(project, who, row, label, session.version, self.ctx.role_of(who)), label)

    @shows_errors(keep=_keys_back)
    def skip(self, session: AnnotateSession | None, name: str, request: gr.Request, profile: gr.OAuthProfile | None) -> dict:
        """Leave the current item unjudged and show the next."""
        who = self.ctx.annotator(name, request, profile)
        if session is None or session.current() is None:
            raise QPRError("Nothing to skip: pick a cluster or check a query first.")
        return self.view(self.ctx.current(), session.skipped(), who)

    @shows_errors(keep=_keys_back)
    def done(self, session: AnnotateSession | None, name: str, request: gr.Request, profile: gr.OAuthProfile | None) -> dict:
        """Stop this queue here; what is left stays unjudged."""
        who = self.ctx.annotator(name, request, profile)
        return self.view(self.ctx.current(), (session or AnnotateSession()).finished(), who)

    @shows_errors(keep=_keys_back)
    def undo(self, session: AnnotateSession | None, name: str, request: gr.Request, profile: gr.OAuthProfile | None) -> dict:
        """Withdraw this page's last judgment still in force (a bounded number back), name it, return to it."""
        who = self.ctx.annotator(name, request, profile)
        project = self.ctx.current()
        session = session or AnnotateSession()
        withdrawn = undo(project, who, [judgment for judgment, _ in session.judged])
        if withdrawn is None:
            message = (f"Nothing to undo on this page: undo reaches the last {UNDO_STEPS} judgments made on this page and "
                       "still in force (a reload starts a new page). Re-judge older ones on the My work tab.")
            return self.view(project, replace(session, judged=(), message=message), who)
        return self.view(project, session.after_undo(withdrawn), who)

    def view(self, project: Project, session: AnnotateSession, who: str) -> dict:
        """The tab's outputs for ``session`` in ``project`` (the page's): itself, status, members,
        the current item and its details, the rest of the queue, the annotator's progress and the keys."""
        row = session.current()
        status = " · ".join(part for part in (session.heading, session.message) if part)
        shown = {self.session: session, self.status: status, self.members: session.members,
                 self.progress: self._progress(project, session, who)} | self.buttons_for(session)
        if row is None:
            finished = ("Group finished: press 'Next cluster' for the next group." if session.group is not None else
                        "Queue finished: pick the next cluster or check a query.") if len(session.queue) else ""
            return shown | {self.query: "", self.candidate: "", self.details: finished, self.queue: pd.DataFrame(columns=QUEUE_COLUMNS)}
        queue = session.queue
        served = project.served()
        scored, scores = served.readable(served.model_retriever, queue["distance"])
        text = served.bundle.corpus.set_index("qid")["question"]
        queue = queue.assign(**{scored: scores.round(3), "suspicion": queue["suspicion"].round(3),
                                "query": queue["query_qid"].map(text).where(queue["query_qid"].notna(), queue["query_text"])})
        score = f"{scored} {scores[session.position]:.3f}"
        cluster = plain(row["cluster"]) if pd.notna(row["cluster"]) else "none"
        return shown | {
            self.query: row["query_text"] if pd.isna(row["query_qid"]) else _question(served, int(row["query_qid"])),
            self.candidate: row["question"],
            self.details: f"Candidate {session.position + 1} of {len(queue)} · its cluster: **{cluster}** · "
                          f"rank {int(row['rank'])} · {score} · suspicion {row['suspicion']:.3f}",
            self.queue: text_table(queue.iloc[session.position:session.position + SHOWN_AHEAD],
                                   [*QUEUE_COLUMNS[:3], scored, QUEUE_COLUMNS[-1]]),
        }

    @staticmethod
    def _progress(project: Project, session: AnnotateSession, who: str) -> str:
        progress = project.store.judgments.progress(who)  # in the page's project
        counts = f"Judged today: **{progress['today']}** · left in this queue: **{session.left}** · labelled in total: **{progress['total']}**"
        if session.group is not None:
            return f"{building_note(project)} · {counts}"
        if not session.task_size:
            return counts
        done, pace = session.task_done, session.pace
        left = (f" · about {(session.task_size - done) * pace / 60:.0f} min left at your pace ({pace:.0f} s a judgment)"
                if pace else "")
        return f"Task: **{done:,} of {session.task_size:,}** judged{left} · {counts}"


def _question(served: Served, qid: int) -> str:
    corpus = served.bundle.corpus
    found = corpus.loc[corpus["qid"] == qid, "question"]
    return str(found.iloc[0]) if len(found) else f"(question {qid} is not in the served corpus)"
