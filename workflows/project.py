"""One project a user owns, in one object (``Project``): its served model, its view of the
annotation store (every query scoped to it), where its bundles are saved and how the bundle it
serves is remembered after a restart (its ``home``), its training defaults and its background
training job. The front ends (the page's tabs, the HTTP API, ``qpr-annotations retrain``) look a
project up once and hand it to the use cases (``workflows.retraining``, ``workflows.labels``,
``workflows.judging``, ...), which take it first, read what they need from it, and never call back
up into them. An operation takes what the project serves once (``served``) and works on that
snapshot. The simulated loop (``qpr-annotations loop``, the benchmarks built on it) works on the
same object: each round a project of the store's, named "simulated loop", serving that round's
model, its files in the run folder (``workflows.simulated_loop.loop_project``): its candidate
pairs come from the served model and its export is the one the app trains on
(``workflows.retraining.export_for_training``). ``workflows.retraining.export_corrected``, the
store's export of a corpus, is left to the exports a person takes away (``export_to_download``,
``workflows.hub_export``, ``qpr-annotations export``: the judgments alone) and to the benchmarks
that bring their own pair scorer.

Homes: the demo keeps its bundles under the cache and the one it serves in a pointer file
(``DemoHome``); an uploaded project in its folder and its ``project.json`` (``ProjectHome``); the
command line in the one folder it was given, serving nothing after it exits (``FolderHome``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from annotations.grouping import progress
from annotations.store import AnnotationStore
from qpr.bundles.bundle import Bundle
from qpr.model.encoder import EncoderConfig
from qpr.model.text import TextConfig
from qpr.serving.projects import Projects
from qpr.serving.served_model import Served, ServedModel
from qpr.training.train import TrainConfig
from workflows.background_training import TrainingJob
from workflows.served_pointer import remember_served


@dataclass(frozen=True)
class TrainingDefaults:
    """What a project's first encoder is trained with (the Projects tab's 'Train' button)."""

    train: TrainConfig
    text: TextConfig
    encoder: EncoderConfig


# Sized for a few hundred to a few thousand questions: single-word windows (questions are short
# and such a corpus too small to learn longer patterns), 128 dimensions, small batches; early
# stopping on val ROC AUC. Trigrams on (the product default): on the tutorial corpus they raised
# val H@1 of the hybrid from 0.49 to 0.58 (53 queries; test 0.64 -> 0.61 on 56) for 0.7 s more
# training. The tutorial demo (``workflows.demos``) trains with these too.
SMALL_CORPUS = TrainingDefaults(
    TrainConfig(batch_size=32, max_epochs=20, patience=3, val_pairs=1000, seed=0),
    TextConfig(hash_bins=1000),
    EncoderConfig(embedding_dim=128, windows=(1,), channels=128, output_dim=128),
)


class Home(Protocol):
    """Where a project's decided bundles are saved (``where``), and how the one it serves is
    remembered."""

    def where(self, version: str) -> Path: ...

    def save(self, bundle: Bundle) -> Path: ...

    def remember(self, path: Path, who: str) -> None: ...


@dataclass(frozen=True)
class DemoHome:
    """The demo's: bundles under ``<cache>/bundles``, the served one in the cache's pointer file."""

    cache: Path

    def where(self, version: str) -> Path:
        return self.cache / "bundles" / version

    def save(self, bundle: Bundle) -> Path:
        return bundle.save(self.where(bundle.version))

    def remember(self, path: Path, who: str) -> None:
        remember_served(self.cache, path)


@dataclass(frozen=True)
class ProjectHome:
    """An uploaded project's: bundles in its folder, the served one in its ``project.json``."""

    projects: Projects
    slug: str

    def where(self, version: str) -> Path:
        return self.projects.bundle_path(self.slug, version)

    def save(self, bundle: Bundle) -> Path:
        return bundle.save(self.where(bundle.version))

    def remember(self, path: Path, who: str) -> None:
        self.projects.serve(self.slug, path.name, who, f"put the trained model {path.name} in service")


@dataclass(frozen=True)
class FolderHome:
    """The command line's: the bundle saved at ``folder``; nothing is served after it exits, so
    nothing is remembered."""

    folder: Path

    def where(self, version: str) -> Path:
        return self.folder

    def save(self, bundle: Bundle) -> Path:
        return bundle.save(self.folder)

    def remember(self, path: Path, who: str) -> None:
        """Nothing to remember: the command serves nothing once it exits."""


@dataclass(frozen=True)
class Project:
    """One project (module doc). ``training`` is None where no background worker trains (the
    command line, a demo's first training). ``built_in``: the demo, whose corpus is fixed and
    which has no roles of its own (its rights are the admins')."""

    slug: str
    name: str
    model: ServedModel
    store: AnnotationStore
    home: Home
    defaults: TrainingDefaults = SMALL_CORPUS
    training: TrainingJob | None = None
    built_in: bool = False

    def served(self) -> Served:
        """What the project serves now (a snapshot: an operation takes it once and works on it)."""
        return self.model.current()

    def versions(self) -> list[str]:
        """The project's bundle versions registered in the store: what its judgments point into."""
        return self.store.corpora.versions()["version"].tolist()

    def clusters_formed(self) -> int:
        """Clusters of 2+ questions the project's current judgments form over its served corpus
        (what a training would get: ``annotations.grouping.progress``)."""
        return progress(self.store, self.served().bundle.corpus)[0]


def open_project(projects: Projects, cache: Path, slug: str, model: ServedModel, store: AnnotationStore) -> Project:
    """Project ``slug`` of the app whose projects are ``projects`` and cache ``cache``, serving
    ``model``, seen in the store through ``store`` (scoped to it): the demo keeps its bundles in
    the cache, an uploaded project in its folder; both train in the background under
    ``<projects>/<slug>/training``."""
    built_in = projects.built_in(slug)
    home = DemoHome(cache) if built_in else ProjectHome(projects, slug)
    return Project(slug, projects.name(slug), model, store, home, SMALL_CORPUS,
                   TrainingJob(projects.folder(slug) / "training"), built_in)
