"""The app's projects and the models serving them, in one object (``ServedProjects``): which
projects there are (``qpr.serving.projects.Projects``, under ``<cache>/projects``; the built-in
demo among them), the served models of those open (``qpr.serving.workspaces.Workspaces``: loaded on
first open, the least recently opened unloaded past ``QPR_MAX_SERVED_MB``; the demo, which cannot
be loaded again from disk, pinned), and the annotation database, which each project sees through
its own scope. A project whole is ``project_of``'s ``workflows.project.Project``.

Loading a project's model settles it first: a project with no role under logins gets its creator
as owner (``workflows.ownership``), a swap a crash cut short is repaired
(``workflows.swap_recovery``), its bundle versions on disk are claimed, the served corpus is
registered (so judgments can point into it) and its newest labels version is served.

``project`` is the slug of the one being worked on, which ``current`` returns whole: the default
project here; the page (``ui.common.AppContext``) makes it the page's own. Callers look the
project up once (``current`` or ``project_of``) and hand the ``Project`` to the workflows.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from annotations.backup import backup_line
from annotations.store import AnnotationStore
from qpr.bundles.bundle import Bundle
from qpr.errors import QPRError
from qpr.serving.projects import Projects
from qpr.serving.served_model import ServedModel
from qpr.serving.slugs import DEMO
from qpr.serving.workspaces import Workspaces
from qpr.settings import settings
from workflows.labels import serve_latest
from workflows.ownership import owner_from_creator
from workflows.project import Project, open_project
from workflows.project_roles import no_project
from workflows.swap_recovery import reconcile


def example_queries(bundle: Bundle, n: int = 5) -> tuple[str, ...]:
    """``n`` questions of ``bundle``'s corpus to offer as searches: held-out (test) ones when it
    has them, so an example is not simply found as itself in training; else its first ones."""
    held_out = bundle.corpus[bundle.corpus["split"] == "test"]["question"]
    chosen = held_out.sample(min(n, len(held_out)), random_state=0) if len(held_out) else bundle.corpus["question"].head(n)
    return tuple(chosen)


class ServedProjects:
    """The projects, their served models and the annotation database (module doc). ``model``
    serves the demo; ``examples`` are its queries for the Search tab (a project's are drawn from
    its questions); ``cache`` (default ``QPR_CACHE_DIR``) holds saved bundles, exports and the
    projects; ``general`` (a general bundle, or None) serves a project's new upload until it is
    trained (``qpr.serving.projects``); ``owners_from_creators``: the app runs with logins, so a
    project nobody holds a role in gets its creator as owner when it is loaded."""

    project = DEMO  # the project worked on (module doc)

    def __init__(self, model: ServedModel, database: AnnotationStore, examples: Iterable[str] = (),
                 cache: Path | None = None, general: Bundle | None = None, owners_from_creators: bool = False) -> None:
        self.database = database  # the annotation database; each project sees it through its own scope
        self.cache = Path(cache) if cache is not None else settings().cache_dir
        self.general = general
        self.owners_from_creators = owners_from_creators
        self.projects = Projects(self.cache / "projects", general)
        self.served = Workspaces(self._load, settings().max_served_mb, pinned=[DEMO])
        self._examples: dict[str, tuple[str, ...]] = {DEMO: tuple(examples)} if examples else {}
        self._serve(DEMO, model)

    def current(self) -> Project:
        """``project``, whole (``workflows.project.Project``: its served model, loaded if it was
        not served, and its view of the store)."""
        return self.project_of(self.project)

    def project_of(self, slug: str) -> Project:
        """Project ``slug`` (its model loaded if it was not served); QPRError if there is none."""
        return open_project(self.projects, self.cache, slug, self.model_of(slug), self.database.for_project(slug))

    def model_of(self, slug: str) -> ServedModel:
        """The served model of project ``slug`` (loaded if it was not served); QPRError if there is
        no such project."""
        if not self.projects.exists(slug):
            raise QPRError(no_project(slug))
        return self.served.get(slug)

    def examples_of(self, slug: str) -> tuple[str, ...]:
        """Queries for the Search tab: the ones the app was started with for the demo, else five of
        project ``slug``'s held-out questions (drawn once per served bundle)."""
        if slug in self._examples:
            return self._examples[slug]
        bundle = self.served.get(slug).current().bundle
        key = f"{slug}/{bundle.version}"
        if key not in self._examples:
            self._examples[key] = example_queries(bundle)
        return self._examples[key]

    def serve_new_version(self, slug: str) -> None:
        """After an upload to project ``slug``: serve its new bundle to every page that has it
        open; a model still waiting for a decision there is dropped."""
        self._serve(slug, ServedModel(self.projects.served_bundle(slug)))

    def backup_line(self) -> str:
        """When the annotation database (every project's) was last backed up, or how to back it up."""
        return backup_line(self.database.engine.url)

    def _load(self, slug: str) -> ServedModel:
        if self.owners_from_creators:  # a project made with typed names gets its creator as owner
            owner_from_creator(self.projects, self.database.for_project(slug), slug)
        model = ServedModel(self.projects.served_bundle(slug))
        self._serve(slug, model, register=False)
        return model

    def _serve(self, slug: str, model: ServedModel, register: bool = True) -> None:
        """Give project ``slug`` its bundle versions kept on disk (those registered before the
        store was scoped by project), repair a swap a crash cut short (``workflows.swap_recovery``),
        register ``model``'s corpus in it (so judgments can point into it), serve its newest labels
        version, and (``register``) serve it for the project."""
        project = open_project(self.projects, self.cache, slug, model, self.database.for_project(slug))
        project.store.corpora.claim_versions(self.projects.bundle_versions(slug))
        reconcile(project)  # a swap cut short by a crash
        served = project.served().bundle
        project.store.corpora.register(served.version, served.corpus, served.manifest.data_fingerprint)
        serve_latest(project)
        if register:
            self.served.put(slug, model)
