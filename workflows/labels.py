"""Corrected clusters served at once, without retraining: each change of the labels is recorded
as the served bundle's next labels version (``annotations.corrections``) and then served
(``ServedModel.relabel``), in that order, so what is served is always a recorded version."""

from __future__ import annotations

from annotations.corrections import apply_corrections, revert_decision, rollback
from annotations.store import AnnotationStore
from qpr.serving.served_model import ServedModel


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
    number = store.latest_label_number(bundle.version)
    if number:
        model.relabel(bundle.version, store.labels(bundle.version, number, snapshot=bundle.corpus)[1], number)
