"""Corrected clusters served at once, without retraining: each change of the labels is recorded
as the served bundle's next labels version (``annotations.corrections``) and then served
(``ServedModel.relabel``), in that order, so what is served is always a recorded version. What
the current judgments propose, and the served labels' history, are ``labels_overview``'s."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from annotations.constraints import corrected_clusters
from annotations.corrections import apply_corrections, history, revert_decision, rollback
from annotations.store import AnnotationStore
from qpr.serving.served_model import Served, ServedModel


@dataclass(frozen=True)
class LabelsOverview:
    """The ``merges``, ``splits`` (each with the member's ``question``) and ``conflicts`` the
    current judgments propose, and the served labels' ``history``, newest first
    (``annotations.corrections.history``)."""

    merges: pd.DataFrame
    splits: pd.DataFrame
    conflicts: pd.DataFrame
    history: pd.DataFrame


def labels_overview(store: AnnotationStore, served: Served) -> LabelsOverview:
    """What ``store``'s current judgments propose for ``served``'s bundle and its labels' history.
    The rules run over the bundle's own corpus (``annotations.constraints``), so every application
    starts from the same ground and re-derives all."""
    corpus = served.bundle.corpus
    result = corrected_clusters(store, corpus)
    question = corpus.set_index("qid")["question"]
    return LabelsOverview(result.merges, result.splits.assign(question=result.splits["qid"].map(question)),
                          result.conflicts, history(store, served.bundle.version))


def serve_corrections(model: ServedModel, store: AnnotationStore, who: str) -> None:
    """Record and serve the corrected clusters of the current judgments, on ``who``'s decision."""
    bundle = model.current().bundle
    number, result = apply_corrections(store, bundle.corpus, bundle.version, who)
    model.relabel(bundle.version, result.corpus, number)


def serve_rollback(model: ServedModel, store: AnnotationStore, number: int, who: str) -> None:
    """Serve the labels of the earlier version ``number`` again (recorded as a new version)."""
    version = model.current().bundle.version
    new, labels = rollback(store, version, number, who)
    model.relabel(version, labels, new)


def serve_revert(model: ServedModel, store: AnnotationStore, who: str, cluster_a: str, cluster_b: str) -> None:
    """Undo for good the served merge or split of ``cluster_a`` and ``cluster_b`` (a reviewer's
    reject, ``annotations.corrections.revert_decision``) and serve the result."""
    bundle = model.current().bundle
    number, result = revert_decision(store, bundle.corpus, bundle.version, who, cluster_a, cluster_b)
    model.relabel(bundle.version, result.corpus, number)


def serve_latest(model: ServedModel, store: AnnotationStore) -> None:
    """Serve the newest labels version recorded for ``model``'s bundle (after a restart or a switch
    of project); nothing to do when none was recorded."""
    bundle = model.current().bundle
    # Most starts have no labels version to serve: asking for its number first spares reading the
    # corpus; when there is one, its changes go onto the bundle's own corpus (the registered one).
    number = store.labels.latest_number(bundle.version)
    if number:
        model.relabel(bundle.version, store.labels.corpus(bundle.version, number, snapshot=bundle.corpus)[1], number)
