"""How the Projects tab describes a project and its training: the served model and its clusters,
the training's state, its progress bar (rendering only; the facts come from the ``Project``)."""

from __future__ import annotations

from ui.display import plain
from workflows.background_training import ACTIVE, describe
from workflows.project import Project


def project_line(project: Project) -> str:
    """The page's project: its questions, its clusters (for bare questions, also those its
    annotators' judgments form so far, as the Annotate tab counts them) and what serves it."""
    served = project.model.current()
    bundle = served.bundle
    if bundle.lexical:
        how = "BM25 only (no encoder trained yet)"
    elif bundle.manifest.general is not None:
        how = f"the general model with BM25, not yet trained on its clusters ({plain(bundle.version)})"
    else:
        how = f"model {plain(bundle.version)}"
    clusters = served.corpus["cluster"].nunique()
    formed = f" ({project.clusters_formed():,} of 2+ questions formed by judgments so far)" if clusters == 0 else ""
    return (f"This page's project: **{plain(project.name)}**, {len(bundle.corpus):,} questions, "
            f"{clusters:,} clusters{formed}, {how}.")


def status_line(status: dict) -> str:
    """The background training's state, who started it and how far it is."""
    state = status["state"]
    if state == "none":
        return "No training yet."
    if state in ACTIVE:
        return f"Training (started by {plain(status.get('by', '?'))}): {plain(describe(status))}."
    return f"Last training: {plain(state)}: {plain(describe(status))}."


def progress_bar(status: dict) -> str:
    """An HTML progress bar of a running training (empty otherwise)."""
    if status["state"] not in ACTIVE:
        return ""
    steps, max_epochs = status.get("steps") or 0, status.get("max_epochs") or 1
    share = ((status.get("epoch") or 1) - 1 + (status.get("step", 0) / steps if steps else 0)) / max_epochs
    return f'<progress value="{100 * share:.0f}" max="100" style="width:100%"></progress> {100 * share:.0f}%'
