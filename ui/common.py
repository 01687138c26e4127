"""What every tab shares: the app's context (``AppContext``: the page's project and its served
model, the projects, the store, who may do what); the bundle served again after a restart is
``ui.served_pointer``'s.
Which page has which project is ``ui.pages``'; roles ``ui.access``'; safe display ``ui.display``'s.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import gradio as gr

from annotations.models import ROLES
from annotations.names import annotator_key, annotator_name
from annotations.store import AnnotationStore
from annotations.task import TASK_SIZE
from qpr.bundles.bundle import Bundle
from qpr.errors import QPRError
from qpr.serving.projects import DEMO, Projects
from qpr.serving.served_model import ServedModel
from qpr.serving.workspaces import Workspaces
from qpr.settings import settings
from ui.access import identify, role_for
from ui.demo import cache_dir
from ui.display import plain
from ui.pages import PageProjects, example_queries
from ui.served_pointer import remember_served
from workflows.background_training import TrainingJob
from workflows.labels import serve_latest

# Name mode is one team's setting: typed names are trusted, so projects have no roles.
NAME_MODE = "names are not verified: one team shares every project, with no roles; set QPR_AUTH for roles per project"
NAME_PROMPT = f"Anyone can search; type your name to annotate ({NAME_MODE})."


class AppContext:
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
        self.store = store
        self.identity = identity
        self.demo_examples = tuple(examples)
        self.cache = Path(cache) if cache is not None else cache_dir()
        self.admins = admin_keys(settings().admins) if admins is None else admins
        self.task_size = task_size or settings().task_size or TASK_SIZE
        self.general = general
        self.projects = Projects(self.cache / "projects", general)
        self.served = Workspaces(self._load, settings().max_served_mb, pinned=[DEMO])
        self.pages = PageProjects(DEMO)
        self._examples: dict[str, tuple[str, ...]] = {}
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
    def examples(self) -> tuple[str, ...]:
        """Queries for the Search tab: the demo's own, or five of the project's held-out questions."""
        slug = self.project
        if slug == DEMO and self.demo_examples:
            return self.demo_examples
        bundle = self.model.current().bundle
        key = f"{slug}/{bundle.version}"
        if key not in self._examples:
            self._examples[key] = example_queries(bundle)
        return self._examples[key]

    def open(self, slug: str | None) -> str:
        """Open project ``slug`` (the demo when empty) on the current page, loading it if no
        page has it open, and return its slug; other pages keep theirs. Outside a page, it
        becomes the default project."""
        slug = (slug or DEMO).strip()
        self.model_of(slug)
        self.pages.set(slug)
        return slug

    def model_of(self, slug: str) -> ServedModel:
        """The served model of project ``slug`` (loaded if no page has it open); QPRError if there
        is no such project."""
        if slug != DEMO and slug not in self.projects.names():
            raise QPRError(f"There is no project {slug!r}: choose one in the Project list at the top of the page "
                           "(or create it on the Projects tab).")
        return self.served.get(slug)

    def close_page(self) -> None:
        """Forget the current page's project (its tab was closed or reloaded)."""
        self.pages.forget()

    def _load(self, slug: str) -> ServedModel:
        model = ServedModel(self.projects.served_bundle(slug))
        self._serve(slug, model, register=False)
        return model

    def _serve(self, slug: str, model: ServedModel, register: bool = True) -> None:
        """Register ``model``'s corpus (so judgments can point into it), serve its newest labels
        version, and (``register``) serve it for project ``slug``."""
        served = model.current().bundle
        self.store.register_corpus(served.version, served.corpus, served.manifest["data_fingerprint"])
        self.serve_latest_labels(model)
        if register:
            self.served.put(slug, model)

    def serve_latest_labels(self, model: ServedModel | None = None) -> None:
        """Serve the newest labels version recorded for ``model``'s bundle (the page's model by
        default; corrections applied in the Clusters tab), so a restart or a reload of the
        project keeps them; nothing to do when none was applied."""
        serve_latest(model or self.model, self.store)

    def project_name(self, slug: str | None = None) -> str:
        """The display name of project ``slug`` (the page's by default)."""
        slug = slug or self.project
        return "Demo" if slug == DEMO else self.projects.names().get(slug, slug)

    def versions(self, slug: str | None = None) -> list[str]:
        """The bundle versions of project ``slug`` (the page's by default): what its judgments
        point into. The demo's are every registered version no project holds."""
        slug = slug or self.project
        if slug != DEMO:
            return [path.name for path in (self.projects.folder(slug) / "bundles").iterdir() if path.is_dir()]
        theirs = {path.name for path in self.projects.root.glob("*/bundles/*")}
        return [v for v in self.store.bundle_versions()["version"] if v not in theirs]

    def serve_new_version(self, slug: str) -> None:
        """After an upload to project ``slug``: serve its new bundle to every page that has it
        open; a model still waiting for a decision there is dropped."""
        self._serve(slug, ServedModel(self.projects.served_bundle(slug)))

    def training(self) -> TrainingJob:
        """The background training job of the active project."""
        return TrainingJob(self.projects.folder(self.project) / "training")

    def save_bundle(self, bundle: Bundle) -> Path:
        """Save ``bundle`` where the active project keeps its bundles (the demo: ``<cache>/bundles``)."""
        if self.project == DEMO:
            return bundle.save(self.cache / "bundles" / bundle.version)
        return bundle.save(self.projects.bundle_path(self.project, bundle.version))

    def remember(self, path: Path, who: str) -> None:
        """Serve the bundle saved at ``path`` again after a restart: the demo's pointer
        (``remember_served``) or the project's manifest."""
        if self.project == DEMO:
            remember_served(self.cache, path)
        else:
            self.projects.serve(self.project, path.name, who, f"put the trained model {path.name} in service")

    def annotator(self, name: str | None, request: gr.Request | None = None, profile: gr.OAuthProfile | None = None,
                  action: str = "record judgments") -> str:
        """Who may ``action`` (judge, by default) in the page's project: anyone identified, with
        any role there in login mode (``ui.access``)."""
        return self.allowed(action, ROLES, name, request, profile, record=False)

    def privileged(self, action: str, name: str | None, request: gr.Request | None = None,
                   profile: gr.OAuthProfile | None = None, roles: tuple[str, ...] = ("owner",)) -> str:
        """Who may ``action`` in the page's project (upload, train, use a model): in login mode,
        one holding one of ``roles`` there, and the action is recorded with that role."""
        return self.allowed(action, roles, name, request, profile)

    def allowed(self, action: str, roles: tuple[str, ...], name: str | None, request: gr.Request | None = None,
                profile: gr.OAuthProfile | None = None, record: bool = True) -> str:
        """The person doing ``action``, identified, and in login mode holding one of ``roles`` in
        the page's project (``ui.access``; ``record``: the action is logged with the role); name
        mode checks and records no role (one team)."""
        who = identify(self.identity, name, request, profile, action)
        if self.identity != "name":
            project = self.project
            role = role_for(self.store, self.admins, project, self.project_name(project), who, roles, action)
            if record:
                self.store.record_action(project, who, role, action)
        return who

    def role_of(self, who: str) -> str | None:
        """The role ``who`` judges under in the page's project, which each judgment records (login
        mode; ``ui.access``); None with typed names, which carry no role."""
        if self.identity == "name":
            return None
        project = self.project
        return role_for(self.store, self.admins, project, self.project_name(project), who, ROLES, "record judgments")

    def replacer(self, name: str | None, request: gr.Request | None = None, profile: gr.OAuthProfile | None = None) -> str:
        """Who may replace or discard the model the page's project serves (``privileged``)."""
        return self.privileged("use or discard a trained model", name, request, profile)

    def whoami(self, name: str | None, request: gr.Request | None, profile: gr.OAuthProfile | None) -> str:
        """The page header's line about who is annotating (``name``: the 'Your name' box)."""
        try:
            who = self.store.display_name(identify(self.identity, name, request, profile, "annotate"))  # as first written
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
    """What the page says about who may review."""
    if ctx.identity == "name":
        return "Anyone who types a name may review here; **names are not verified**, so decisions are signed, not authenticated."
    if ctx.admins:
        return "Only the app's admins (QPR_ADMINS) may record decisions here."
    return "Anyone signed in may record decisions here (set QPR_ADMINS to restrict it)."
