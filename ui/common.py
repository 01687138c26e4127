"""What every tab shares: the app's context (``AppContext``: which project each page has open,
the projects and their served models, the annotation database, who may do what). A project
itself, its model, its view of the store and its home, is a ``workflows.project.Project``.
Which page has which project is ``ui.pages``'; roles ``ui.access``'; safe display ``ui.display``'s.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import gradio as gr

from annotations.names import annotator_key, annotator_name
from annotations.store import AnnotationStore
from annotations.task import TASK_SIZE
from qpr.bundles.bundle import Bundle
from qpr.errors import QPRError
from qpr.serving.projects import Projects
from qpr.serving.served_model import ServedModel
from qpr.serving.slugs import DEMO
from qpr.serving.workspaces import Workspaces
from qpr.settings import settings
from ui.access import ProjectAccess, identify, no_project
from ui.display import plain
from ui.pages import PageProjects, example_queries
from workflows.demos import cache_dir
from workflows.labels import serve_latest
from workflows.ownership import owner_from_creator
from workflows.project import Project, open_project
from workflows.swap_recovery import reconcile

# Name mode is one team's setting: typed names are trusted, so projects have no roles.
NAME_MODE = "names are not verified: one team shares every project, with no roles; set QPR_AUTH for roles per project"
NAME_PROMPT = f"Anyone can search; type your name to annotate ({NAME_MODE})."


class AppContext(ProjectAccess):
    """What the handlers act on. ``identity`` is how annotators are known: "name" (typed),
    "auth" (``QPR_AUTH`` login) or "oauth" (Hugging Face sign-in on Spaces); ``examples`` are
    the demo's queries for the Search tab (a project's are drawn from its questions);
    ``cache`` holds saved bundles, exports and the projects; ``general`` (a general bundle, or
    None) serves a project's new upload until it is trained (``qpr.serving.projects``).

    Each page works on a project of its own (a workspace): ``project`` and ``model`` are the
    project and served model of the page whose request is being handled (``ui.pages``), and
    ``open`` changes them for that page only. The served models of all open projects are kept
    in ``served`` (``qpr.serving.workspaces``: loaded on first open, the least recently opened
    unloaded past ``QPR_MAX_SERVED_MB``). Outside a page's request (tests, commands) they are
    the default project's: ``project`` given here, else the demo, which ``model`` serves."""

    def __init__(self, model: ServedModel, store: AnnotationStore, identity: str = "name",
                 examples: Iterable[str] = (), cache: Path | None = None, admins: frozenset[str] | None = None,
                 task_size: int | None = None, project: str = DEMO, general: Bundle | None = None) -> None:
        self.database = store  # the annotation database; each project sees it through its own scope
        self.identity = identity
        self.cache = Path(cache) if cache is not None else cache_dir()
        self.admins = admin_keys(settings().admins) if admins is None else admins
        self.task_size = task_size or settings().task_size or TASK_SIZE
        self.general = general
        self.projects = Projects(self.cache / "projects", general)
        self.served = Workspaces(self._load, settings().max_served_mb, pinned=[DEMO])
        self.pages = PageProjects(DEMO)
        self._examples: dict[str, tuple[str, ...]] = {DEMO: tuple(examples)} if examples else {}
        self._serve(DEMO, model)
        self.open(project)  # a project that no longer loads fails here, at start

    # -- which project a page works on ----------------------------------------------------------

    @property
    def project(self) -> str:
        """The slug of the project the current page has open (``default_project`` outside a page)."""
        return self.pages.current()

    @property
    def model(self) -> ServedModel:
        """The served model of the current page's project (loaded if it was not served)."""
        return self.served.get(self.project)

    @property
    def store(self) -> AnnotationStore:
        """The annotation store as the current page's project sees it (every query scoped to it)."""
        return self.database.for_project(self.project)

    def current(self) -> Project:
        """The current page's project, whole (``workflows.project.Project``)."""
        return self.project_of(self.project)

    def project_of(self, slug: str) -> Project:
        """Project ``slug`` (its model loaded if no page has it open); QPRError if there is none."""
        return open_project(self.projects, self.cache, slug, self.model_of(slug), self.database.for_project(slug))

    @property
    def examples(self) -> tuple[str, ...]:
        """Queries for the Search tab: the ones the app was started with for the default project,
        else five of the project's held-out questions."""
        slug = self.project
        if slug in self._examples:
            return self._examples[slug]
        bundle = self.model.current().bundle
        key = f"{slug}/{bundle.version}"
        if key not in self._examples:
            self._examples[key] = example_queries(bundle)
        return self._examples[key]

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

    def model_of(self, slug: str) -> ServedModel:
        """The served model of project ``slug`` (loaded if no page has it open); QPRError if there
        is no such project."""
        if not self.projects.exists(slug):
            raise QPRError(no_project(slug))
        return self.served.get(slug)

    def close_page(self) -> None:
        """Forget the current page's project (its tab was closed or reloaded)."""
        self.pages.forget()

    def _load(self, slug: str) -> ServedModel:
        if self.identity != "name":  # a project made with typed names gets its creator as owner
            owner_from_creator(self.projects, self.database.for_project(slug), slug)
        model = ServedModel(self.projects.served_bundle(slug))
        self._serve(slug, model, register=False)
        return model

    def _serve(self, slug: str, model: ServedModel, register: bool = True) -> None:
        """Give project ``slug`` its bundle versions kept on disk (those registered before the
        store was scoped by project), repair a swap a crash cut short (``workflows.swap_recovery``),
        register ``model``'s corpus in it (so judgments can point
        into it), serve its newest labels version, and (``register``) serve it for the project."""
        store = self.database.for_project(slug)
        store.claim_versions(self.projects.bundle_versions(slug))
        reconcile(open_project(self.projects, self.cache, slug, model, store))  # a swap cut short by a crash
        served = model.current().bundle
        store.register_corpus(served.version, served.corpus, served.manifest["data_fingerprint"])
        serve_latest(model, store)
        if register:
            self.served.put(slug, model)

    def project_name(self, slug: str | None = None) -> str:
        """The display name of project ``slug`` (the page's by default)."""
        return self.projects.name(slug or self.project)

    def serve_new_version(self, slug: str) -> None:
        """After an upload to project ``slug``: serve its new bundle to every page that has it
        open; a model still waiting for a decision there is dropped."""
        self._serve(slug, ServedModel(self.projects.served_bundle(slug)))

    def whoami(self, name: str | None, request: gr.Request | None, profile: gr.OAuthProfile | None) -> str:
        """The page header's line about who is annotating (``name``: the 'Your name' box)."""
        try:
            who = self.database.display_name(identify(self.identity, name, request, profile, "annotate"))  # as first written
        except QPRError:
            return NAME_PROMPT if self.identity == "name" else "Not signed in: you can search, but sign in to annotate."
        if self.identity == "name":
            return f"Annotating as **{plain(who)}** ({NAME_MODE})"
        return f"Annotating as **{plain(who)}**"


def admin_keys(names: Iterable[str]) -> frozenset[str]:
    """``QPR_ADMINS``' names (``qpr.settings``) as annotator identities."""
    return frozenset(annotator_key(annotator_name(name)) for name in names)


def identity_mode(auth: list[tuple[str, str]] | None) -> str:
    """"auth" with QPR_AUTH logins, "oauth" on Hugging Face Spaces (``Settings.space``), else "name"."""
    if auth:
        return "auth"
    return "oauth" if settings().space else "name"


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
