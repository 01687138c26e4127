"""Model swaps killed at each step, and what the app serves when started again
(``tests/reliability/test_swap_crash.py`` checks each point; ``python -m bench.reliability_ops
--parts swapcrash`` counts them for ``bench/results/reliability.json``).

Three swaps, each run in a child process that is SIGKILLed right after one of its steps
(``harness.killed_child``):

- "demo": "Use the trained model" in the demo project (``workflows.retraining.confirm``; the
  demo's pointer is ``served-bundle.json`` under the cache);
- "project": the same in an uploaded project (its pointer: ``project.json``'s "served");
- "first training": the demo's first training (``workflows.first_training``; its pointer is the
  bundle itself, saved where a start finds it, as ``workflows.demos`` does).

The steps: "recorded" (the swap in the store), "save" (the bundle), "remember" (the pointer;
the first training has none). Before the swap the app was started once (as a user's first start
registers what it serves), and the finished background training of the model swapped in waits
to be offered. After the kill the app is started again on the same cache and database: the demo
serves what ``ui.startup`` would (the remembered bundle, else the cached first training, else what
it served first), and ``AppContext`` is built, which repairs the swap
(``workflows.swap_recovery``). A point is consistent when the model served is the last recorded
swap's, a second start serves the same and records nothing more (the pointer was repaired on
disk, not only in memory), and the trained model is offered again exactly when it is not served.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import pandas as pd

from annotations.db import open_store
from harness.corpora import make_corpus
from harness.killed_child import run_until_killed
from qpr.bundles.bundle import Bundle
from qpr.data.upload import Upload
from qpr.model.encoder import EncoderConfig
from qpr.retrieval.index import IndexConfig
from qpr.serving.projects import Projects
from qpr.serving.served_model import ServedModel
from qpr.serving.slugs import DEMO
from qpr.training.train import TrainConfig, train
from ui.common import AppContext
from workflows.demos import cached_bundle
from workflows.background_training import BUNDLE, STATUS, TrainingJob
from workflows.first_training import serve_when_trained
from workflows.project import FolderHome, Project, open_project
from workflows.retraining import confirm
from workflows.served_pointer import remembered_bundle

# Every kill point: (swap, the step it is killed right after).
POINTS = (("demo", "recorded"), ("demo", "save"), ("demo", "remember"),
          ("project", "recorded"), ("project", "save"), ("project", "remember"),
          ("first training", "recorded"), ("first training", "save"))

# The child: the swap of argv's scenario, killed right after its step (``crash``).
CHILD = """
from harness.swap_crashes import crash
crash(pause, *sys.argv[1:])
"""


def small_trained(corpus: pd.DataFrame) -> Bundle:
    """A small encoder trained for a few seconds on ``corpus``: the model each swap puts in service."""
    result = train(corpus, TrainConfig(batch_size=16, max_epochs=2, patience=2, val_pairs=200),
                   encoder_config=EncoderConfig(embedding_dim=32, channels=32, output_dim=16), progress=False)
    return Bundle.create(result.encoder, result.vocab, corpus, IndexConfig("Flat"), train_info=result.summary())


def _url(folder: Path) -> str:
    return f"sqlite:///{folder / 'app.db'}"


def _first_trained(folder: Path) -> Path:
    return folder / "cache" / "demo-bundle" / "trained"  # where the demo's first training saves its model


def served_at_start(folder: Path, slug: str) -> Bundle:
    """The bundle a start serves for ``slug``: a project's ``project.json`` names it; the demo's is
    ``ui.startup``'s choice (the remembered bundle, else the cached first training, else the first)."""
    cache = folder / "cache"
    if slug != DEMO:
        return Projects(cache / "projects").served_bundle(slug)
    remembered = remembered_bundle(cache)
    if remembered is not None:
        return Bundle.load(remembered)
    return cached_bundle(_first_trained(folder), "the trained demo", lambda _: None) or Bundle.load(folder / "first")


def start(folder: Path, slug: str) -> dict:
    """Start the app on ``folder``'s cache and database with ``slug`` open; what it serves, the
    last recorded swap, how many there are, and whether the finished training is offered."""
    with open_store(_url(folder), project=DEMO) as database:
        ctx = AppContext(ServedModel(served_at_start(folder, DEMO)), database, cache=folder / "cache", project=slug)
        swaps = database.for_project(slug).swaps.frame()
        job = TrainingJob(ctx.projects.folder(slug) / "training").status()
        return {"served": ctx.model_of(slug).current().bundle.version,
                "recorded": None if swaps.empty else swaps.iloc[-1]["bundle_version"],
                "swaps": len(swaps), "offered": job["state"] == "done"}


def prepare(folder: Path, scenario: str, trained: Bundle) -> str:
    """``folder`` as a user leaves it before the swap of ``scenario``: the first bundle served,
    ``trained`` waiting (a finished background training, but for the first training), the app
    started once. Returns the project's slug."""
    corpus = trained.corpus
    Bundle.lexical_of(corpus, "the swap-crash demo").save(folder / "first")
    trained.save(folder / "trained")
    projects = Projects(folder / "cache" / "projects")
    slug = projects.create("Crash test", Upload("clusters", corpus, len(corpus)), "Carol") if scenario == "project" else DEMO
    if scenario != "first training":
        job = projects.folder(slug) / "training"
        trained.save(job / BUNDLE)
        (job / STATUS).write_text(json.dumps({"state": "done", "version": trained.version, "by": "Carol"}))
    start(folder, slug)
    return slug


def crash(pause: Callable[[str], None], folder: str, scenario: str, point: str, slug: str) -> None:
    """In the child: run ``scenario``'s swap on ``folder`` and ``pause`` (to be killed) right after ``point``."""
    folder = Path(folder)
    store = open_store(_url(folder), project=slug)
    model = ServedModel(served_at_start(folder, slug))
    trained = Bundle.load(folder / "trained")
    if scenario == "first training":
        project = Project(DEMO, "Demo", model, store, FolderHome(_first_trained(folder)), built_in=True)
    else:
        project = open_project(Projects(folder / "cache" / "projects"), folder / "cache", slug, model, store)
        model.propose(trained, pd.DataFrame())

    def then_pause(real: Callable) -> Callable:
        def step(*args, **kwargs):
            result = real(*args, **kwargs)
            pause(point)
            return result
        return step

    if point == "recorded":
        store.swaps.record = then_pause(store.swaps.record)
    else:
        setattr(type(project.home), point, then_pause(getattr(type(project.home), point)))
    if scenario == "first training":
        serve_when_trained(project, lambda: trained, print)
    else:
        confirm(project, "Carol")


def run_point(folder: Path, scenario: str, point: str, trained: Bundle) -> dict:
    """Kill ``scenario``'s swap of ``trained`` right after ``point`` in a fresh ``folder``, start
    the app again twice; what it served and whether that is consistent (module doc)."""
    folder.mkdir(parents=True)
    slug = prepare(folder, scenario, trained)
    run_until_killed(CHILD, [str(folder), scenario, point, slug], folder / "marker")
    after, again = start(folder, slug), start(folder, slug)
    served_trained = after["served"] == trained.version
    consistent = (after["served"] == after["recorded"] and again == after
                  and after["offered"] == (scenario != "first training" and not served_trained))
    return {"scenario": scenario, "point": point, "serves": "trained" if served_trained else "first",
            "swaps_recorded": after["swaps"], "offered_again": after["offered"], "consistent": consistent}


def run_swap_crashes(folder: Path, trained: Bundle | None = None) -> dict:
    """Every kill point (``POINTS``) under ``folder``, swapping in ``trained`` (None: one trained
    here on ``harness.corpora.make_corpus``): points tried, points consistent, each point's outcome."""
    trained = trained or small_trained(make_corpus())
    points = [run_point(folder / f"{scenario}-{point}".replace(" ", "-"), scenario, point, trained)
              for scenario, point in POINTS]
    return {"tried": len(points), "consistent": sum(p["consistent"] for p in points), "points": points}
