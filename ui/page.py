"""The whole page: a header with who is annotating and the page's project, and the tabs, each
from its own module.

Each page opens a project of its own: the one its URL names (``?project=<slug>``), else the
default one (``AppContext.open`` on load); choosing another in the header's list loads the page
again with that URL, so every tab starts over on the chosen project and a bookmark keeps it.

``QPRPage(ctx).build()`` returns the ``gr.Blocks`` to launch. Each tab object keeps its
components, and its handlers return ``{component: value}``; tests build the page and call the
handlers directly, without a browser.
"""

from __future__ import annotations

import gradio as gr

from qpr.errors import QPRError
from qpr.serving.slugs import DEMO
from ui.annotate_tab import AnnotateTab
from ui.clusters_tab import ClustersTab
from ui.common import NAME_PROMPT, AppContext
from ui.display import shows_errors
from ui.guidelines import GuidelinesTab
from ui.metrics_tab import MetricsTab
from ui.my_work_tab import MyWorkTab
from ui.projects_tab import ProjectsTab
from ui.retrain_tab import RetrainTab
from ui.review_tab import ReviewTab
from ui.search_tab import SearchTab
from ui.team_tab import TeamTab


# The header's project list opens the chosen project by loading the page with its URL.
OPEN_JS = ("(slug) => { const url = new URL(window.location); url.searchParams.set('project', slug); "
           "window.location.assign(url); }")


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
        self.team = TeamTab(ctx)

    def build(self) -> gr.Blocks:
        with gr.Blocks(title="Question paraphrase retrieval", fill_width=True) as demo:
            gr.Markdown("# Question paraphrase retrieval\nFind questions that mean the same, mark the ones filed "
                        "under the wrong cluster, retrain on the corrected clusters.")
            credit = gr.Markdown(elem_id="page-credit")  # the page's project's source and license, once it is open
            with gr.Row():
                name = gr.Textbox(label="Your name (needed to annotate)", visible=self.ctx.identity == "name", scale=2)
                if self.ctx.identity == "oauth":
                    gr.LoginButton()
                project = self.projects.render_choice()
                who = gr.Markdown(NAME_PROMPT if self.ctx.identity == "name" else "", elem_id="page-who")
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
            self.team.render(name)
            # In name mode the header follows the name box only: a load event computed with the box
            # still empty could answer after the name was typed and say "type your name" again.
            name.change(self.ctx.whoami, [name], [who])
            # The typed name survives a reload (this browser's storage), so judging goes on without retyping it.
            # Filled in the browser, and only into an empty box: a name typed as the page opened is kept.
            remembered = gr.BrowserState("", storage_key="qpr-annotator-name")
            demo.load(None, [remembered, name], [name], js="(saved, typed) => typed || saved")
            name.change(lambda typed: typed, [name], [remembered])
            opened = demo.load(self.open_page, None, [project])
            opened.then(self.credit, None, [credit])
            if self.ctx.identity != "name":
                opened.then(self.ctx.whoami, [name], [who])
                opened.then(self.backup_status, [name], [backup])
            else:
                name.change(self.backup_status, [name], [backup])
            # The tabs show the page's project: only once it is open.
            opened.then(self.search.relabel, [self.search.shown, self.search.compare], self.search.relabelled)
            opened.then(self.retrain.restore, None, self.retrain.decision_outputs)
            opened.then(self.projects.listed, None, self.projects.listing)
            # A person's choice from the list, not any change of the value: the page's own load sets
            # it, and Gradio's dropdown can report that as input too, which reloaded the page under
            # a test's click (CI: a click left waiting 30 s for that navigation to finish).
            project.select(None, [project], None, js=OPEN_JS)
            demo.unload(self.ctx.close_page)
        return demo

    def credit(self) -> str:
        """The page's project's source and license where its bundle names them (the BANKING77
        demo's: CC BY 4.0 asks for it); nothing for a project of the user's own."""
        return (self.ctx.current().served().bundle.manifest.card or {}).get("credit", "")

    def backup_status(self, name: str | None, request: gr.Request = None, profile: gr.OAuthProfile | None = None) -> str:
        """The header's line about the annotation database's last backup (``ServedProjects.backup_line``),
        for whoever may act on it: the database holds every project (its line counts all their
        judgments), so in login mode only who holds the demo's rights (the app's admins, or
        everyone signed in when there are none) sees it; with typed names, whoever typed one."""
        try:
            self.ctx.allowed("see the database's backups", ("owner",), name, request, profile, record=False, project=DEMO)
        except QPRError:
            return ""
        return self.ctx.backup_line()

    @shows_errors(action="open the project")
    def open_page(self, request: gr.Request, profile: gr.OAuthProfile | None = None) -> dict:
        """Open the project the page's URL names (``?project=``), else the default one, for the
        one behind ``request`` (``AppContext.open``: a project they may not read is refused)."""
        try:
            slug = self.ctx.open(request.query_params.get("project") if request else None, request, profile)
        except QPRError:
            self.ctx.open(self.ctx.pages.default, request, profile)  # the page opens on the default project; then why
            raise
        return self.projects.choice_update(slug, request, profile)
