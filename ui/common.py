"""What every tab shares: the app's context, who the annotator is and who may review, and the
bundle to serve again after a restart.

``AppContext`` is what the handlers act on (the active project's served model, the projects,
the annotation store, how annotators identify, the app's cache folder). How data is shown
safely is ``ui.display``'s.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import gradio as gr

from annotations.names import annotator_key, annotator_name
from annotations.store import AnnotationStore
from annotations.task import TASK_SIZE
from qpr.bundles.bundle import Bundle
from qpr.errors import QPRError
from qpr.fsutil.atomic import atomic_path
from qpr.serving.projects import DEMO, Projects
from qpr.serving.served_model import ServedModel
from qpr.settings import settings
from ui.demo import cache_dir
from ui.display import plain
from workflows.background_training import TrainingJob
from workflows.labels import serve_latest

SERVED_POINTER = "served-bundle.json"  # under the cache: the last bundle a user confirmed


@dataclass
class AppContext:
    """What the handlers act on. ``identity`` is how annotators are known: "name" (typed),
    "auth" (``QPR_AUTH`` login) or "oauth" (Hugging Face sign-in on Spaces); ``examples`` are
    queries for the Search tab; ``cache`` holds saved bundles, exports and the projects;
    ``general`` (a general bundle, or None) serves a project's new upload until it is trained
    (``qpr.serving.projects``).

    The app serves one project to everyone at a time: ``model`` is the active project's
    ``ServedModel`` (``project`` its slug; ``model`` given here serves the demo project), and
    ``switch`` changes it for all users at once. Each project's ServedModel is kept once built,
    so a retrained model waiting for a decision stays with its project."""

    model: ServedModel
    store: AnnotationStore
    identity: str = "name"
    examples: tuple[str, ...] = ()
    cache: Path = field(default_factory=cache_dir)
    admins: frozenset[str] = field(default_factory=lambda: admin_keys(settings().admins))
    task_size: int = field(default_factory=lambda: settings().task_size or TASK_SIZE)

    project: str = DEMO
    general: Bundle | None = None

    def __post_init__(self) -> None:
        self.cache = Path(self.cache)
        self.projects = Projects(self.cache / "projects", self.general)
        self._models = {DEMO: self.model}
        self._switch_lock = threading.Lock()
        if self.project != DEMO:
            self.model = self._models[self.project] = ServedModel(self.projects.served_bundle(self.project))
        served = self.model.current().bundle
        self.store.register_corpus(served.version, served.corpus)
        self.serve_latest_labels()

    def serve_latest_labels(self, model: ServedModel | None = None) -> None:
        """Serve the newest labels version recorded for ``model``'s bundle (the active model by
        default; corrections applied in the Clusters tab), so a restart or a switch of project
        keeps them; nothing to do when none was applied."""
        serve_latest(model or self.model, self.store)

    def project_name(self, slug: str | None = None) -> str:
        """The display name of project ``slug`` (the active one by default)."""
        slug = slug or self.project
        return "Demo" if slug == DEMO else self.projects.names().get(slug, slug)

    def switch(self, slug: str, who: str) -> None:
        """Serve project ``slug`` to everyone from now on (and after a restart), recorded as
        ``who``'s decision; its corpus is registered so judgments can point into it."""
        with self._switch_lock:
            model = self._models.get(slug) or ServedModel(self.projects.served_bundle(slug))
            served = model.current().bundle
            self.store.register_corpus(served.version, served.corpus)
            self.serve_latest_labels(model)
            self.projects.activate(slug, who)
            self._models[slug], self.model, self.project = model, model, slug

    def serve_new_version(self, slug: str) -> None:
        """After an upload to project ``slug``: serve its new bundle (if it is the active project,
        everyone sees it at once); a model still waiting for a decision there is dropped."""
        with self._switch_lock:
            bundle = self.projects.served_bundle(slug)
            self.store.register_corpus(bundle.version, bundle.corpus)
            model = ServedModel(bundle)
            self.serve_latest_labels(model)
            self._models[slug] = model
            if slug == self.project:
                self.model = model

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

    def annotator(self, name: str | None, request: gr.Request | None = None, profile: gr.OAuthProfile | None = None) -> str:
        """The annotator's name, or an error that says how to identify (anonymous users may only search)."""
        if self.identity == "auth":
            who, how = getattr(request, "username", None), "sign in"
        elif self.identity == "oauth":
            who, how = getattr(profile, "username", None), "sign in with Hugging Face (button at the top)"
        else:
            who, how = name, "type your name in the 'Your name' box"
        if not who or not str(who).strip():
            raise QPRError(f"To record judgments, {how}. Anyone can search without it.")
        return annotator_name(who)

    def privileged(self, action: str, name: str | None, request: gr.Request | None = None,
                   profile: gr.OAuthProfile | None = None) -> str:
        """Who may ``action`` (review, replace the served model): a named annotator; with logins
        and ``QPR_ADMINS`` set, one of those admins only (typed names are not verified, so name
        mode cannot reserve anything)."""
        who = self.annotator(name, request, profile)
        if self.identity != "name" and self.admins and annotator_key(who) not in self.admins:
            raise QPRError(f"Only the app's admins (QPR_ADMINS) may {action}; ask one of them.")
        return who

    def replacer(self, name: str | None, request: gr.Request | None = None, profile: gr.OAuthProfile | None = None) -> str:
        """Who may replace or discard the model everyone is served (``privileged``)."""
        return self.privileged("replace or discard the served model", name, request, profile)

    def whoami(self, name: str | None, request: gr.Request | None, profile: gr.OAuthProfile | None) -> str:
        """The page header's line about who is annotating (``name``: the 'Your name' box)."""
        try:
            who = self.store.display_name(self.annotator(name, request, profile))  # as they first wrote it
        except QPRError:
            if self.identity == "name":
                return "Anyone can search; type your name to annotate."
            return "Not signed in: you can search, but sign in to annotate."
        if self.identity == "name":
            return f"Annotating as **{plain(who)}** (names are not verified)"
        return f"Annotating as **{plain(who)}**"


def admin_keys(names: Iterable[str]) -> frozenset[str]:
    """``QPR_ADMINS``' names (``qpr.settings``) as annotator identities."""
    return frozenset(annotator_key(annotator_name(name)) for name in names)


def identity_mode(auth: list[tuple[str, str]] | None) -> str:
    """"auth" with QPR_AUTH logins, "oauth" on Hugging Face Spaces (``Settings.space``), else "name"."""
    if auth:
        return "auth"
    return "oauth" if settings().space else "name"


def remember_served(cache: Path, bundle_path: Path) -> None:
    """Note ``bundle_path`` as the confirmed bundle to serve after a restart (``SERVED_POINTER``
    under ``cache``, replaced atomically)."""
    with atomic_path(Path(cache) / SERVED_POINTER) as tmp:
        tmp.write_text(json.dumps({"bundle": str(Path(bundle_path).resolve())}) + "\n")


def remembered_bundle(cache: Path) -> Path | None:
    """The last confirmed bundle noted under ``cache``, if any and still there."""
    pointer = Path(cache) / SERVED_POINTER
    try:
        path = Path(json.loads(pointer.read_text())["bundle"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return path if path.is_dir() else None


def reviewer(ctx: AppContext, name: str | None, request: gr.Request | None = None,
             profile: gr.OAuthProfile | None = None) -> str:
    """Who may review (adjudicate, apply merges, edit guidelines): ``AppContext.privileged``."""
    return ctx.privileged("review", name, request, profile)


def review_note(ctx: AppContext) -> str:
    """What the page says about who may review."""
    if ctx.identity == "name":
        return "Anyone who types a name may review here; **names are not verified**, so decisions are signed, not authenticated."
    if ctx.admins:
        return "Only the app's admins (QPR_ADMINS) may record decisions here."
    return "Anyone signed in may record decisions here (set QPR_ADMINS to restrict it)."
