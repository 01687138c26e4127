"""The Projects tab: create a project from an uploaded file, upload a new version of the page's
project, and train its encoder in the background (the header's project list, built here, chooses
the page's project: ``ui.page``).

An upload is validated whole before anything is written (``workflows.project_versions``); a project
starts served by BM25 (``qpr.serving.projects``), so search and annotation work at once. Training runs in
a worker process (``workflows.background_training``) whose status file the page polls (``gr.Timer``),
so progress survives a page reload and an app restart. Starting it and offering its model are
steps of the retraining workflow (``workflows.retraining``): a finished model is compared with
the served one on the same held-out clusters and waits, as a retrained model does, for someone
to use it or discard it; this tab's buttons are the Retrain tab's ``confirm`` / ``discard``, and
it shows the decision with that tab's outputs.
"""

from __future__ import annotations

import threading

import gradio as gr
import pandas as pd

from qpr.errors import QPRError
from ui.access import identify
from ui.common import AppContext
from ui.display import plain, shows_errors, text_table
from ui.project_view import progress_bar, project_line, status_line
from ui.retrain_tab import RetrainTab, exports
from workflows.background_training import ACTIVE
from workflows.project import SMALL_CORPUS, Project
from workflows.project_versions import ProjectFile, add_version, create_project, upload_limit
from workflows.retraining import Offer, offer_trained, start_training

KIND_LABELS = [("Questions with a cluster column", "clusters"), ("Question → answer log", "qa-log"),
               ("Bare questions (no clusters yet)", "questions")]
POLL_S = 2.0
# After a project is created, the page's URL names it (without reloading), so a reload or a
# bookmark opens it again.
SHOW_URL_JS = ("(slug) => { if (slug) { const url = new URL(window.location); url.searchParams.set('project', slug); "
               "window.history.replaceState(null, '', url); } }")


class ProjectsTab:
    """Layout and handlers of the Projects tab; ``retrain`` is the Retrain tab, whose decision
    (use or discard a trained model) this tab shares."""

    def __init__(self, ctx: AppContext, retrain: RetrainTab) -> None:
        self.ctx = ctx
        self.retrain = retrain
        self._offering = threading.Lock()

    def render(self, name: gr.Textbox) -> None:
        """Lay out the tab (inside a gr.Blocks) and wire it; ``name`` is the page's 'Your name' box."""
        with gr.Tab("Projects"):
            self.active = gr.Markdown(elem_id="project-active")
            gr.Markdown(f"### Import a file\nCSV, TSV, JSONL or Parquet with a header, up to {upload_limit()[1]} "
                        "(QPR_MAX_UPLOAD_MB). Nothing is imported unless the whole file is fine; every problem is listed "
                        "with its row.", elem_id="project-import-note")
            with gr.Row():
                upload = gr.File(label="File", file_types=[".csv", ".tsv", ".jsonl", ".parquet"], type="filepath",
                                 elem_id="project-file")
                with gr.Column():
                    kind = gr.Radio(KIND_LABELS, value="clusters", label="What the file holds", elem_id="project-kind")
                    project_name = gr.Textbox(label="New project's name", elem_id="project-name")
                    drop = gr.Checkbox(label="Drop repeated questions (keep the first of each)", elem_id="project-drop-repeats")
            with gr.Accordion("Column names (when yours differ from question / cluster / answer)", open=False):
                with gr.Row():
                    columns = [gr.Textbox(label=f"{role} column", placeholder=role, elem_id=f"project-col-{role}")
                               for role in ("question", "cluster", "answer")]
            with gr.Row():
                create = gr.Button("Create project", variant="primary", elem_id="project-create")
                version = gr.Button("Upload as a new version of this page's project", elem_id="project-new-version")
            self.note = gr.Markdown(elem_id="project-note")
            self.opened = gr.Textbox(visible=False)  # a project just created, for the page's URL
            self.report = gr.Dataframe(label="Distant supervision: sample of kept and dropped clusters", visible=False,
                                       interactive=False, wrap=True, elem_id="project-report", elem_classes="qpr-report")
            gr.Markdown("### Train the encoder\nBM25 serves while the encoder trains in the background on the "
                        "corrected clusters; the trained model is served only when someone uses it.")
            with gr.Row():
                epochs = gr.Slider(1, 30, value=SMALL_CORPUS.train.max_epochs, step=1, label="Maximum epochs")
                start = gr.Button("Train in the background", variant="primary", elem_id="train-start")
                cancel = gr.Button("Cancel training", elem_id="train-cancel")
            self.progress = gr.HTML(elem_id="train-progress")
            self.status = gr.Markdown(elem_id="train-status")
            with gr.Row():  # on only while a trained model waits for a decision (``poll``)
                self.use = gr.Button("Use the trained model", elem_id="train-confirm", interactive=False)
                self.drop = gr.Button("Discard the trained model", elem_id="train-discard", interactive=False)
            # Ticks only while a training runs: a page polling all the time slowed other tabs' events.
            self.timer = gr.Timer(POLL_S, active=False)
        shown = [self.active, self.progress, self.status, self.timer, self.use, self.drop] + self.retrain.decision_outputs
        self.shown, self.listing = shown, shown + [self.choice]  # what ``poll``, and ``listed``, update
        create.click(self.create, [upload, kind, project_name, *columns, drop, name], [self.note, self.report, self.opened] + self.listing
                     ).then(None, [self.opened], None, js=SHOW_URL_JS)
        version.click(self.new_version, [upload, kind, *columns, drop, name], [self.note, self.report] + self.listing)
        start.click(self.start, [epochs, name], shown)
        cancel.click(self.cancel, [name], shown)
        self.use.click(self.retrain.confirm, [name], self.retrain.decision_outputs).then(self.poll, None, shown)
        self.drop.click(self.retrain.discard, [name], self.retrain.decision_outputs).then(self.poll, None, shown)
        self.timer.tick(self.poll, None, shown, show_progress="hidden")

    def render_choice(self) -> gr.Dropdown:
        """The header's list of projects (the page's project chosen), laid out where it is called;
        built with the projects anyone may read (with logins, the demo: the page's config and API
        description show no other), and filled for each page as it opens (``choice_update``)."""
        self.choice = gr.Dropdown(label="Project (this page only)", choices=self._choices(None, None), value=self.ctx.project,
                                  elem_id="page-project", scale=2)
        return self.choice

    def choice_update(self, slug: str | None = None, request: gr.Request | None = None,
                      profile: gr.OAuthProfile | None = None) -> dict:
        """The list of the projects the one behind ``request`` may read, re-read, with the page's
        project (or ``slug``) chosen."""
        return {self.choice: gr.Dropdown(choices=self._choices(request, profile), value=slug or self.ctx.project)}

    def _choices(self, request: gr.Request | None, profile: gr.OAuthProfile | None) -> list[tuple[str, str]]:
        return [(name, slug) for slug, name in self.ctx.readable(request, profile).items()]

    # -- importing -------------------------------------------------------------------------------

    @staticmethod
    def _file(path: str | None, kind: str, question: str | None, cluster: str | None, answer: str | None,
              drop: bool) -> ProjectFile:
        """The file chosen at ``path``; the three names choose its columns where given; ``drop``:
        repeated questions are dropped (the first kept) instead of refusing the file."""
        return ProjectFile(path, kind, {"question": question, "cluster": cluster, "answer": answer}, bool(drop))

    @shows_errors(action="create the project")
    def create(self, path: str | None, kind: str, project: str, question: str, cluster: str, answer: str, drop: bool,
               name: str | None, request: gr.Request = None, profile: gr.OAuthProfile | None = None) -> dict:
        """Validate the upload, create the project and open it on this page (BM25 until trained)."""
        who = identify(self.ctx.identity, name, request, profile, "create a project")  # needs no role in any project
        slug, upload = create_project(self.ctx.projects, self.ctx.database, project,
                                      self._file(path, kind, question, cluster, answer, drop), who)
        self.ctx.open(slug, request, profile)
        record = self.ctx.projects.manifest(slug)["versions"][-1]
        note = f"Created **{plain(self.ctx.project_name(slug))}**, open on this page: " + self._imported(record)
        return self._imported_view(note, upload) | self.listed(request, profile) | {self.opened: slug}

    @shows_errors(action="upload a new version")
    def new_version(self, path: str | None, kind: str, question: str, cluster: str, answer: str, drop: bool,
                    name: str | None,
                    request: gr.Request = None, profile: gr.OAuthProfile | None = None) -> dict:
        """Validate the upload and make it the served project's new corpus version; questions
        whose text is unchanged keep their qid, so their judgments still apply."""
        who = self.ctx.privileged("upload a new version of this project", name, request, profile)
        project = self.ctx.current()
        record, upload = add_version(project, self.ctx.projects, self._file(path, kind, question, cluster, answer, drop).read,
                                     who, self.ctx.serve_new_version)
        note = (f"Version {record['number']} of **{plain(project.name)}**: {record['kept']} question(s) kept "
                f"(their judgments still apply), {record['new']} new, {record['dropped']} gone. " + self._imported(record))
        # Listed anew: the project now serves its new version, a model ``project`` does not hold.
        return self._imported_view(note, upload) | self.listed(request, profile)

    @staticmethod
    def _imported(record: dict) -> str:
        text = (f"{record['rows']} row(s) read, {record['questions']} question(s) in {record['clusters']} cluster(s); "
                "served by BM25 until you train the encoder.")
        report = record.get("report")
        if report:
            text += (f"\n\nDistant supervision (questions grouped by their answer, then filtered by coherence ≥ "
                     f"{report['min_coherence']}): **{report['clusters_kept']} cluster(s) kept** "
                     f"({report['questions_kept']} questions), **{report['clusters_removed']} dropped** "
                     f"({report['questions_removed']} questions) as incoherent. A sample of each is below.")
        return text

    def _imported_view(self, note: str, upload) -> dict:
        note = f"{note} {upload.no_cluster} {upload.dropped}".strip()
        if upload.report is None:
            return {self.note: note, self.report: gr.Dataframe(value=pd.DataFrame(), visible=False)}
        sample = pd.concat([upload.kept_sample.assign(kept="kept"), upload.removed_sample.assign(kept="dropped")])
        return {self.note: note, self.report: gr.Dataframe(value=text_table(sample.round(3)), visible=True)}

    # -- training --------------------------------------------------------------------------------

    @shows_errors(action="start training")
    def start(self, epochs: float, name: str | None, request: gr.Request = None,
              profile: gr.OAuthProfile | None = None) -> dict:
        """Export the corrected clusters and train on them in a background worker: the served
        encoder continued, or (a project served by BM25 alone) a new one."""
        who = self.ctx.privileged("train this project's model", name, request, profile)
        project = self.ctx.current()
        start_training(project, exports(self.ctx, project), who, int(epochs))
        return self._poll(project, request, profile)

    @shows_errors(action="cancel the training")
    def cancel(self, name: str | None, request: gr.Request = None, profile: gr.OAuthProfile | None = None) -> dict:
        """Stop the running training; the served model is untouched."""
        who = self.ctx.privileged("cancel this project's training", name, request, profile)
        project = self.ctx.current()
        project.training.cancel(who)
        return self._poll(project, request, profile)

    def poll(self, request: gr.Request = None, profile: gr.OAuthProfile | None = None) -> dict:
        """The tab as the disk says: the served project, the training's progress, and a finished
        model offered for a decision (compared once; a page reload or restart offers it again),
        its buttons on for whoever may take the decision (in login mode, an owner or admin)."""
        return self._poll(self.ctx.current(), request, profile)

    def _poll(self, project: Project, request: gr.Request | None, profile: gr.OAuthProfile | None) -> dict:
        status = project.training.status()
        shown = {self.active: project_line(project), self.progress: progress_bar(status), self.status: status_line(status),
                 self.timer: gr.Timer(active=status["state"] in ACTIVE)}
        if status["state"] == "done":
            with self._offering:  # pages poll at once: compare and propose a finished model once
                shown |= self._offer(project, status, request, profile)
        waiting = project.model.candidate() is not None and self.ctx.may_replace(request, profile)
        return shown | {self.use: gr.Button(interactive=waiting), self.drop: gr.Button(interactive=waiting)}

    def listed(self, request: gr.Request = None, profile: gr.OAuthProfile | None = None) -> dict:
        """``poll`` with the project list re-read (on opening the page and after an import; not on
        every tick, which would reset a choice being made)."""
        return self.poll(request, profile) | self.choice_update(None, request, profile)

    def _offer(self, project: Project, status: dict, request: gr.Request | None, profile: gr.OAuthProfile | None) -> dict:
        try:
            offer = Offer.of(offer_trained(project, status.get("version")))
        except QPRError as err:  # a damaged result, or nothing held out to compare on
            return {self.status: f"Training finished, but the model cannot be compared: {plain(err)}"}
        note = (f"Trained model **{plain(status['version'])}** is ready, trained on this project's corrected clusters "
                f"and {offer.judgments} judgment(s); nothing changes until someone uses it. {offer.said} "
                "The full comparison is on the Retrain & export tab.")
        return self.retrain.offered(project, request, profile) | {self.status: note}
