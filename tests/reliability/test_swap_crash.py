"""kill -9 right after each step of a model swap: "Use the trained model" in the demo and in an
uploaded project, and the demo's first training (``harness.swap_crashes``, whose module doc says
how a point is run and checked). After a restart on the same cache and database, the model
served is the last recorded swap's, a second restart agrees, and the trained model is offered
again only where it is not served (``workflows.swap_recovery``)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from annotations.db import open_store
from harness.swap_crashes import POINTS, run_point
from qpr.bundles.bundle import Bundle
from qpr.serving.served_model import ServedModel
from workflows.project import DemoHome, Project
from workflows.swap_recovery import reconcile


@pytest.mark.parametrize("scenario, point", POINTS)
def test_a_swap_killed_at_any_step_serves_what_it_recorded_after_a_restart(tiny_bundle, tmp_path, scenario, point):
    outcome = run_point(tmp_path / "app", scenario, point, tiny_bundle)
    assert outcome["consistent"], outcome
    # Killed before its bundle was saved, the swap is recorded back at the restart; after, it stands.
    taken_back = point == "recorded"
    assert outcome["serves"] == ("first" if taken_back else "trained"), outcome
    assert outcome["swaps_recorded"] == (2 if taken_back else 1), outcome


@pytest.fixture
def swapped(tiny_bundle, tmp_path):
    """A store recording the tiny bundle's swap in place of a BM25 bundle (``first``), the tiny
    bundle saved in a demo home, and a bundle of the same questions uploaded since (``later``)."""
    first, later = Bundle.lexical_of(tiny_bundle.corpus, "first"), Bundle.lexical_of(tiny_bundle.corpus, "uploaded later")
    store = open_store(f"sqlite:///{tmp_path / 'app.db'}", project="demo")
    for bundle in (first, tiny_bundle, later):
        store.corpora.register(bundle.version, bundle.corpus)
    store.swaps.record("Carol", tiny_bundle.version, first.version, [])
    DemoHome(tmp_path / "cache").save(tiny_bundle)
    yield store, first, later
    store.close()


def test_a_start_leaves_alone_a_model_served_on_purpose_since_the_swap(tiny_bundle, swapped, tmp_path):
    store, _, later = swapped
    project = Project("demo", "Demo", ServedModel(later), store, DemoHome(tmp_path / "cache"))
    assert reconcile(project) is None
    assert project.model.current().bundle is later and len(store.swaps.frame()) == 1


@dataclass(frozen=True)
class ReadOnlyHome(DemoHome):
    """A demo home whose pointer cannot be written."""

    def remember(self, path, who):
        raise OSError(30, "Read-only file system")


def test_a_pointer_that_cannot_be_repaired_still_serves_the_recorded_swap(tiny_bundle, swapped, tmp_path):
    store, first, _ = swapped
    project = Project("demo", "Demo", ServedModel(first), store, ReadOnlyHome(tmp_path / "cache"))
    assert "could not be remembered now ([Errno 30] Read-only file system)" in reconcile(project)
    assert project.model.current().bundle.version == tiny_bundle.version and len(store.swaps.frame()) == 1
