"""Corrected clusters served at once, without retraining: each change of the labels is recorded
as the served bundle's next labels version (``annotations.corrections``) and then served
(``ServedModel.relabel``), in that order, so what is served is always a recorded version. What
the current judgments propose, and the served labels' history, are ``labels_overview``'s. Each
takes the ``workflows.project.Project`` whose labels it reads or serves."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from annotations.constraints import corrected_clusters
from annotations.corrections import apply_corrections, history, revert_decision, rollback
from workflows.project import Project


@dataclass(frozen=True)
class LabelsOverview:
    """The ``merges``, ``splits`` (each with the member's ``question``) and ``conflicts`` the
    current judgments propose, and the served labels' ``history``, newest first
    (``annotations.corrections.history``)."""

    merges: pd.DataFrame
    splits: pd.DataFrame
    conflicts: pd.DataFrame
    history: pd.DataFrame


def labels_overview(project: Project) -> LabelsOverview:
    """What ``project``'s current judgments propose for its served bundle, and its labels' history.
    The rules run over the bundle's own corpus (``annotations.constraints``), so every application
    starts from the same ground and re-derives all."""
    bundle = project.served().bundle
    result = corrected_clusters(project.store, bundle.corpus)
    question = bundle.corpus.set_index("qid")["question"]
    return LabelsOverview(result.merges, result.splits.assign(question=result.splits["qid"].map(question)),
                          result.conflicts, history(project.store, bundle.version))


def serve_corrections(project: Project, who: str) -> None:
    """Record and serve ``project``'s corrected clusters of the current judgments, on ``who``'s decision."""
    bundle = project.served().bundle
    number, result = apply_corrections(project.store, bundle.corpus, bundle.version, who)
    project.model.relabel(bundle.version, result.corpus, number)


def serve_rollback(project: Project, number: int, who: str) -> None:
    """Serve ``project``'s labels of the earlier version ``number`` again (recorded as a new version)."""
    version = project.served().bundle.version
    new, labels = rollback(project.store, version, number, who)
    project.model.relabel(version, labels, new)


def serve_revert(project: Project, who: str, cluster_a: str, cluster_b: str) -> None:
    """Undo for good ``project``'s served merge or split of ``cluster_a`` and ``cluster_b`` (a
    reviewer's reject, ``annotations.corrections.revert_decision``) and serve the result."""
    bundle = project.served().bundle
    number, result = revert_decision(project.store, bundle.corpus, bundle.version, who, cluster_a, cluster_b)
    project.model.relabel(bundle.version, result.corpus, number)


def serve_latest(project: Project) -> None:
    """Serve the newest labels version recorded for ``project``'s served bundle (after a restart or
    a switch of project); nothing to do when none was recorded."""
    bundle, labels = project.served().bundle, project.store.labels
    # Most starts have no labels version to serve: asking for its number first spares reading the
    # corpus; when there is one, its changes go onto the bundle's own corpus (the registered one).
    number = labels.latest_number(bundle.version)
    if number:
        project.model.relabel(bundle.version, labels.corpus(bundle.version, number, snapshot=bundle.corpus)[1], number)
