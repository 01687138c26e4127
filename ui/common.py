"""What every tab shares: the app's context (``AppContext``: which project each page has open, who
may do what, over the projects, their served models and the annotation database that
``workflows.served_projects.ServedProjects`` holds). A project itself, its model, its view of the
store and its home, is a ``workflows.project.Project``: a handler looks the page's up once
(``AppContext.current()``) and hands it to the workflows it calls; nothing here gives the page's
model or store apart from it. Which page has which project is ``ui.pages``'; roles
``ui.access``'; safe display ``ui.display``'s.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import gradio as gr

from qpr.errors import QPRError
from qpr.serving.slugs import DEMO
from ui.access import ProjectAccess, identify
from ui.display import plain
from ui.pages import PageProjects
from workflows.annotation_queues import corpus_task_size
from workflows.project_roles import admin_keys, no_project
from workflows.served_projects import ServedProjects

# Name mode is one team's setting: typed names are trusted, so projects have no roles.
NAME_MODE = "names are not verified: one team shares every project, with no roles; set QPR_AUTH for roles per project"
NAME_PROMPT = f"Anyone can search; type your name to annotate ({NAME_MODE})."


class AppContext(ProjectAccess, ServedProjects):
    """What the handlers act on: the projects, their served models and the annotation database
    (``workflows.served_projects.ServedProjects``: ``model`` serves the demo, ``store`` is the
    database, and ``examples``, ``cache`` and ``general`` are as it takes them), and who may do
    what (``ProjectAccess``).
    ``identity`` is how annotators are known: "name" (typed), "auth" (``QPR_AUTH`` login) or
    "oauth" (Hugging Face sign-in on Spaces); ``admins`` the app's admins (default
    ``QPR_ADMINS``'), ``task_size`` the corpus-wide task's (default ``QPR_TASK_SIZE``'s).

    Each page works on a project of its own (a workspace): ``project`` is the slug of the page
    whose request is being handled (``ui.pages``), ``current()`` that project whole (a
    ``workflows.project.Project``), and ``open`` changes it for that page only. Outside a page's
    request (tests, commands) it is the default project: ``project`` given here, else the demo,
    which ``model`` serves."""

    def __init__(self, model, store, identity: str = "name", examples: Iterable[str] = (), cache: Path | None = None,
                 admins: frozenset[str] | None = None, task_size: int | None = None, project: str = DEMO,
                 general=None) -> None:
        self.identity = identity
        self.admins = admin_keys() if admins is None else admins
        self.task_size = corpus_task_size(task_size)
        self.pages = PageProjects(DEMO)
        ServedProjects.__init__(self, model, store, examples, cache, general, owners_from_creators=identity != "name")
        self.open(project)  # a project that no longer loads fails here, at start

    # -- which project a page works on ----------------------------------------------------------

    @property
    def project(self) -> str:
        """The slug of the project the current page has open (``default_project`` outside a page)."""
        return self.pages.current()

    def open(self, slug: str | None, request: gr.Request | None = None, profile: gr.OAuthProfile | None = None) -> str:
        """Open project ``slug`` (the demo when empty) on the current page for the one behind
        ``request``, loading it if no page has it open, and return its slug; other pages keep
        theirs. Outside a page, it becomes the default project. Every tab acts on the page's
        project only, so this is where a page's access to a project is decided: one it may not
        read (``may_read``) is refused as one that does not exist."""
        slug = (slug or DEMO).strip()
        self.model_of(slug)  # first: loading settles who owns it (workflows.ownership)
        if not self.may_read(slug, self.who(request, profile)):
            raise QPRError(no_project(slug))
        self.pages.set(slug)
        return slug

    def close_page(self) -> None:
        """Forget the current page's project (its tab was closed or reloaded)."""
        self.pages.forget()

    def project_name(self, slug: str | None = None) -> str:
        """The display name of project ``slug`` (the page's by default)."""
        return self.projects.name(slug or self.project)

    def whoami(self, name: str | None, request: gr.Request | None, profile: gr.OAuthProfile | None) -> str:
        """The page header's line about who is annotating (``name``: the 'Your name' box)."""
        try:
            who = self.database.judgments.display_name(identify(self.identity, name, request, profile, "annotate"))  # as first written
        except QPRError:
            return NAME_PROMPT if self.identity == "name" else "Not signed in: you can search, but sign in to annotate."
        if self.identity == "name":
            return f"Annotating as **{plain(who)}** ({NAME_MODE})"
        return f"Annotating as **{plain(who)}**"


def reviewer(ctx: AppContext, name: str | None, request: gr.Request | None = None,
             profile: gr.OAuthProfile | None = None) -> str:
    """Who may review (adjudicate, apply merges, edit guidelines): an owner or reviewer of the
    page's project (``AppContext.privileged``)."""
    return ctx.privileged("review", name, request, profile, roles=("owner", "reviewer"))


def review_note(ctx: AppContext) -> str:
    """What the page says about who may review: what ``reviewer`` enforces."""
    if ctx.identity == "name":
        return "Anyone who types a name may review here; **names are not verified**, so decisions are signed, not authenticated."
    admins = "the app's admins (QPR_ADMINS)" if ctx.admins else "anyone signed in (no QPR_ADMINS are set)"
    return (f"Decisions here are recorded by a project's **owners and reviewers** (roles on the Team tab) and by the app's "
            f"admins; in the demo project, which has no roles, by {admins}. Annotators judge, but do not decide.")
