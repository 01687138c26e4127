"""The retraining workflow, written once: export -> retrain -> compare -> confirm or discard ->
record -> remember.

1. **Export** (``export_corrected``, the one export entry point of the app, the command line and
   the simulated loop): a corpus' corrected clusters are written for the user (cluster file,
   pairs, manifest; atomically, ``annotations.export``) and handed over in memory
   (``annotations.export.Export``): nothing is read back from disk. What a project trains on
   (``export_for_training``: the Retrain tab, the background training, the simulated loop) is
   its served corpus exported so, weighing the served model's own pair probabilities, and
   refused with too few clusters to train on.
2. **Retrain** on them, in this process (``retrain``, through ``qpr.bundles.training.retrain_bundle``: the
   served encoder continued, training on the judged pairs themselves too and weighing each cluster
   by its estimated purity) or in a background worker (``start_training``,
   ``workflows.background_training``). The new bundle's ``provenance`` names the export it learned
   from, in one schema (``Export.provenance``).
3. **Compare** old and new on the same held-out clusters and hold the new model as the candidate
   (``ServedModel.propose``); nothing changes for searches yet. A worker's result is compared
   when it is offered (``offer_trained``).
4. **Confirm** (``confirm``): swap it in, **record** the swap in the store, save the bundle and
   **remember** it for a restart, in that order. The record comes first because it is what a
   restart goes by (``workflows.swap_recovery``): a process killed after it finds the pointer
   repaired from the record at the next start if the bundle was saved, else the record taken
   back. A record, save or remember that still fails after ``ATTEMPTS`` tries takes the swap back
   (``ServedModel.undo``; a recorded swap is recorded back), so the model served is always the
   one recorded and remembered; the candidate waits again (``kept_or_taken_back``).
   Or **discard** (``discard``): drop the candidate, the served model stays.

Callers (the Retrain and Projects tabs, the simulated loop, the command line) read their inputs,
call one of these functions and show the result. Each use case takes the
``workflows.project.Project`` it acts on: its served model, its store, where its bundles are saved
and how a swap is remembered, its training defaults and background job (``export_corrected``,
which ``qpr-annotations export`` and the benchmarks that bring their own pair scorer call without
a served model, takes the store and a corpus).
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import pandas as pd
from sqlalchemy.exc import SQLAlchemyError

from annotations.export import Export, write_export
from annotations.pair_scores import PairScorer
from annotations.store import AnnotationStore
from qpr.bundles.bundle import Bundle, serving_retriever
from qpr.bundles.training import compare_bundles, retrain_bundle, verdict
from qpr.data.upload import MIN_TRAIN_CLUSTERS
from qpr.errors import QPRError, one_line
from qpr.retrieval.lexical import BM25Retriever
from qpr.serving.served_model import Candidate, Served, ServedModel
from workflows.background_training import ACTIVE, TrainingJob, describe
from workflows.judgment_effect import changed_top_results
from workflows.project import Project

ATTEMPTS = 3  # tries of a record or a remember before the swap is taken back
RETRY_PAUSE_S = 0.5  # between those tries; the store already retries a busy database itself
FAILURES = (SQLAlchemyError, OSError, QPRError)  # a database or a disk that refused a write: worth a retry


@dataclass(frozen=True)
class Offer:
    """A trained model waiting for a decision, as a person is shown it: its ``version``, its
    ``comparison`` with the served model on the same held-out clusters (``compare_bundles``), what
    that says in words (``said``) and whether the new model is worse beyond doubt (``worse``:
    ``qpr.bundles.training.verdict``), and how many ``judgments`` it learned from."""

    version: str
    comparison: pd.DataFrame
    said: str
    worse: bool
    judgments: int

    @classmethod
    def of(cls, candidate: Candidate) -> "Offer":
        """``candidate`` as offered."""
        said, worse = verdict(candidate.comparison)
        bundle = candidate.served.bundle
        return cls(bundle.version, candidate.comparison, said, worse,
                   len((bundle.manifest.provenance or {}).get("judgment_ids", [])))


@dataclass(frozen=True)
class Proposal:
    """A retrained model waiting for a decision (``candidate``, with its comparison), the
    ``export`` it was trained on and the held-out queries whose first result it ``changed``
    (``workflows.judgment_effect.changed_top_results``)."""

    candidate: Candidate
    export: Export
    changed: pd.DataFrame

    @property
    def offer(self) -> Offer:
        """The retrained model as offered for a decision."""
        return Offer.of(self.candidate)


@dataclass(frozen=True)
class Confirmed:
    """A swap done, recorded and remembered: the ``bundle`` now served, saved at ``path``, the
    version it ``replaced``, and the ``comparison`` that justified it."""

    bundle: Bundle
    path: Path
    replaced: str
    comparison: pd.DataFrame


def export_corrected(store: AnnotationStore, corpus: pd.DataFrame, version: str, fmt: str, *, out: Path | None = None,
                     folder: Path | None = None, scorer: PairScorer | None = None) -> Export:
    """Export the corrected clusters of ``corpus`` (bundle ``version``'s, registered in ``store``)
    in format ``fmt``, recorded against that version: to the cluster file ``out`` (its name must
    end in ``.<fmt>``), or into ``folder`` under a time-stamped name (``corrected-<UTC
    time>.<fmt>``). Give exactly one of ``out`` and ``folder``. ``scorer``: the model's pair
    probabilities the corrected clusters weigh beside the judgments (``annotations.constraints``)."""
    if (out is None) == (folder is None):
        raise TypeError("export_corrected needs exactly one of out (a cluster file) and folder")
    if out is None:
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
        out = Path(folder) / f"corrected-{stamp}.{fmt}"
    return write_export(store, corpus, fmt, out, bundle_version=version, scorer=scorer)


def export_to_download(project: Project, fmt: str, folder: Path) -> Export:
    """Export the project's served corpus, corrected, for a person to download: into a new folder
    under ``folder`` whose name nobody can guess, since the app serves such files by their path to
    the page that asked (``export_corrected``)."""
    bundle = project.served().bundle
    return export_corrected(project.store, bundle.corpus, bundle.version, fmt, folder=Path(folder) / secrets.token_urlsafe(16))


def check_clusters(corpus: pd.DataFrame) -> None:
    """Refuse (QPRError) a corpus with too few clusters of 2 or more questions to train on and
    hold some out (``MIN_TRAIN_CLUSTERS``), before any training starts."""
    trainable = int((corpus["cluster"].value_counts() >= 2).sum())
    if trainable < MIN_TRAIN_CLUSTERS:
        raise QPRError(f"Only {trainable} cluster(s) of 2 or more questions so far; training needs at least "
                       f"{MIN_TRAIN_CLUSTERS} (split into train, val and test). Build {MIN_TRAIN_CLUSTERS - trainable} more "
                       "on the Annotate tab: 'Next cluster' proposes groups of near questions, and each 'same meaning' "
                       "there joins two questions into a cluster. Then train.")


def export_for_training(project: Project, fmt: str, *, folder: Path | None = None, out: Path | None = None,
                        served: Served | None = None) -> Export:
    """Export ``project``'s served corpus, corrected, as the training data of its next model: in
    format ``fmt``, into ``folder`` or to ``out`` (``export_corrected``), recorded against the
    served version, the corrected clusters weighing the served model's own calibrated pair
    probabilities beside the judgments (``PairScorer``; none for BM25 alone, whose judgments then
    decide). Refused (QPRError) with too few clusters to train on (``check_clusters``), after the
    export is written. ``served``: the snapshot the caller already took (default: taken here), so
    one operation works on one model throughout."""
    served = served or project.served()
    model = served.model_retriever
    scorer = PairScorer.of(model, served.bundle.corpus, served.calibrations.get(model.name))
    done = export_corrected(project.store, served.bundle.corpus, served.bundle.version, fmt, out=out, folder=folder,
                            scorer=scorer)
    check_clusters(done.corpus)
    return done


def retrain(project: Project, folder: Path, max_epochs: int | None, on_epoch: Callable[[dict], None] | None = None,
            on_stage: Callable[[str], None] = lambda stage: None, fmt: str = "parquet") -> Proposal:
    """Export ``project``'s corrected clusters (into ``folder``, as ``fmt``), continue its served
    encoder on them
    for at most ``max_epochs`` (None: as many as it was trained with), compare old and new on the
    same held-out clusters, list the held-out queries whose first result changed (with the
    judged questions among them), and hold the new model as the candidate. Refused for a model without
    an encoder, or corrected clusters too few to train on (``check_clusters``). ``on_epoch``
    gets each epoch's history row; ``on_stage`` is told "exporting", then "comparing". BM25 over
    the corrected corpus is built once and shared by the fusion fit, the comparison and the
    candidate's retrievers."""
    served = project.served()
    if served.bundle.lexical:
        raise QPRError("This project has no encoder yet: train one first (on the Projects tab, where it trains in "
                       "the background while BM25 serves, or with `qpr train`).")
    on_stage("exporting")
    done = export_for_training(project, fmt, folder=folder, served=served)
    bm25 = BM25Retriever(done.corpus)
    new = retrain_bundle(served.bundle, done.corpus, provenance=done.provenance, max_epochs=max_epochs, bm25=bm25,
                         progress=False, on_epoch=on_epoch, judged=done.pairs, cluster_weights=done.purity)
    on_stage("comparing")
    comparison = compare_bundles(served.bundle, new, done.corpus, bm25)
    changed = changed_top_results(serving_retriever(served.bundle, bm25), serving_retriever(new, bm25), done.corpus,
                                  done.pairs)
    return Proposal(project.model.propose(new, comparison, bm25), done, changed)


def start_training(project: Project, folder: Path, who: str, max_epochs: int | None = None) -> dict:
    """Export ``project``'s corrected clusters (into ``folder``) and train on them in its background
    job, on ``who``'s behalf: the served encoder continued, or (a model served by BM25 alone) a new
    one with the project's training defaults, for at most ``max_epochs`` (None: the defaults').
    Refused while a training runs, or with too few clusters to hold some out. Returns the job's
    status."""
    job, defaults = project.training, project.defaults
    status = job.status()
    if status["state"] in ACTIVE:
        raise QPRError(f"A training of this project is already running ({describe(status)}); it was started by "
                       f"{status.get('by', 'someone')}. Wait for it or cancel it.")
    served = project.served()
    done = export_for_training(project, "parquet", folder=folder, served=served)
    base = None if served.bundle.lexical else served.bundle.save(job.folder / "base")
    train = defaults.train if max_epochs is None else replace(defaults.train, max_epochs=max_epochs)
    return job.start(done.corpus, train, defaults.text, defaults.encoder, base, done.provenance, who, judged=done.pairs)


def offer_trained(project: Project, version: str) -> Candidate:
    """The finished background training's model ``version`` as ``project``'s candidate, compared
    with the served model on the same held-out clusters once (it stays the candidate after that).
    A result that cannot be compared (damaged, or nothing held out) is marked decided ("not
    offered") and the QPRError says why."""
    model, job = project.model, project.training
    candidate = model.candidate()
    if candidate is not None and candidate.served.bundle.version == version:
        return candidate
    try:
        served, new = model.current().bundle, job.result()
        bm25 = new.bm25
        comparison = compare_bundles(served, new, new.corpus, bm25)
    except QPRError as err:
        job.decided(f"not offered: {err}")
        raise
    return model.propose(new, comparison, bm25)


def waiting(project: Project) -> Offer | None:
    """The model waiting for a decision in ``project`` (a retrained one, or a background
    training's), as offered; None when none waits."""
    candidate = project.model.candidate()
    return None if candidate is None else Offer.of(candidate)


def confirm(project: Project, who: str) -> Confirmed:
    """Serve the project's candidate from now on, on ``who``'s decision: register its corpus,
    swap it in (refused, leaving everything as it was, if another confirmation or retraining
    replaced the candidate meanwhile), record the swap with the judgments it learned from, save
    the bundle, remember it for a restart and settle the background training it came from (if
    the project has one). A record, save or remember that fails takes the swap back (module doc)
    and raises a QPRError saying so."""
    model, store = project.model, project.store
    candidate = model.candidate()
    if candidate is None:
        raise QPRError("No retrained model is waiting: press 'Retrain' first.")
    bundle = candidate.served.bundle
    store.corpora.register(bundle.version, bundle.corpus)
    replaced = model.current().bundle.version
    model.confirm(bundle.version)
    judgment_ids = (bundle.manifest.provenance or {}).get("judgment_ids", [])
    kept_or_taken_back(model, bundle.version, replaced, "recorded",
                       lambda: store.swaps.record(who, bundle.version, replaced, judgment_ids))

    def recorded_back() -> None:  # recorded as served by now: a swap taken back is recorded back too
        store.swaps.record(who, replaced, bundle.version, [])

    path = kept_or_taken_back(model, bundle.version, replaced, "saved", lambda: project.home.save(bundle),
                              undo=recorded_back)
    kept_or_taken_back(model, bundle.version, replaced, "remembered for a restart",
                       lambda: project.home.remember(path, who), undo=recorded_back)
    settle(project.training, bundle.version, f"put in service by {who}")
    return Confirmed(bundle, path, replaced, candidate.comparison)


def discard(project: Project, who: str) -> Candidate | None:
    """Drop ``project``'s candidate (if any) on ``who``'s decision; the served model stays. Returns it."""
    candidate = project.model.candidate()
    project.model.discard()
    if candidate is not None:
        settle(project.training, candidate.served.bundle.version, f"discarded by {who}")
    return candidate


def settle(training: TrainingJob | None, version: str, what: str) -> None:
    """Mark the background training decided (``what`` says how) when its model ``version`` was
    the one decided on; nothing to settle without a background job (None: the command line)."""
    if training is None:
        return
    status = training.status()
    if status["state"] == "done" and status.get("version") == version:
        training.decided(what)


def kept_or_taken_back(model: ServedModel, version: str, replaced: str, what: str, action: Callable[[], object],
                       undo: Callable[[], object] = lambda: None) -> object:
    """``action``, a step after the swap to ``version`` (``what``: the message's word for it, e.g.
    "recorded"), retried; returns what it returned. If it still fails, the swap is taken back
    (``ServedModel.undo``, then ``undo``) and a QPRError says so. Anything else it raises (a bug)
    takes the swap back too and keeps its traceback."""
    try:
        return retried(action)
    except BaseException as err:
        model.undo(version)
        undo()
        if not isinstance(err, FAILURES):
            raise
        raise QPRError(f"The swap to {version} could not be {what} ({one_line(err)}), so it was taken back: {replaced} "
                       "is served and the retrained model still waits. Try again.") from err


def retried(action: Callable[[], object]) -> object:
    """``action()``, tried up to ``ATTEMPTS`` times ``RETRY_PAUSE_S`` apart while it fails as a
    database or a disk can (``FAILURES``); the last failure is raised. For writes that happen
    whole or not at all (a store transaction, an atomic file), so a try after a failure cannot
    do them twice."""
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return action()
        except FAILURES:
            if attempt == ATTEMPTS:
                raise
            time.sleep(RETRY_PAUSE_S)
