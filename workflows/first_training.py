"""A demo that starts on BM25 and trains its encoder meanwhile: the trained model is then served
through the same steps as a confirmed retrain (``workflows.retraining.confirm``): compared with
what is served on the same held-out clusters, saved, swapped in under ``ServedModel``'s lock
(searches in flight keep their snapshot), recorded in the store as decided by ``FIRST_TRAINING``.

``start`` runs it in a daemon thread, so the app answers from its first second; nobody has to
press anything. If a retrained model is waiting for someone's decision when the training ends,
that decision is not taken away: the trained model is recorded as served from the next start and
saved (``Project.home``: the demo's cache, so the next start serves it) but not swapped in now.
Either way the swap is recorded before the bundle is saved where a start finds it, so a start
never serves a trained demo the record does not name (``workflows.swap_recovery``).
"""

from __future__ import annotations

import threading
from typing import Callable

from qpr.bundles.bundle import Bundle
from qpr.bundles.training import compare_bundles
from qpr.errors import QPRError
from workflows.project import Project
from workflows.retraining import Confirmed, confirm, retried

FIRST_TRAINING = "the demo's first training"  # who the swap is recorded as decided by


def serve_when_trained(target: Project, train: Callable[[], Bundle], log: Callable[[str], None]) -> Confirmed | None:
    """Train (``train()``), then serve the result in place of ``target.model``'s bundle (module
    doc); returns the swap, or None when a waiting candidate kept it from being swapped in."""
    served = target.model.current()
    bundle = train()
    if target.model.candidate() is not None:
        target.store.corpora.register(bundle.version, bundle.corpus)
        retried(lambda: target.store.swaps.record(FIRST_TRAINING, bundle.version, served.bundle.version, []))
        path = target.home.save(bundle)
        log(f"trained the demo model {bundle.version} (saved in {path}, served from the next start); not served now: "
            "a retrained model waits for a decision")
        return None
    comparison = compare_bundles(served.bundle, bundle, bundle.corpus, served.bm25)
    target.model.propose(bundle, comparison, served.bm25)
    confirmed = confirm(target, FIRST_TRAINING)
    log(f"serving the trained demo model {bundle.version} in place of {confirmed.replaced} (saved in {confirmed.path})")
    return confirmed


def start(target: Project, train: Callable[[], Bundle], log: Callable[[str], None]) -> threading.Thread:
    """``serve_when_trained`` in a daemon thread (it dies with the app; a restart trains again
    unless the model was saved); a QPRError is logged, and BM25 keeps serving."""
    def run() -> None:
        try:
            serve_when_trained(target, train, log)
        except QPRError as err:
            log(f"the demo keeps serving BM25: its training failed: {err}")
    thread = threading.Thread(target=run, name="qpr-first-training", daemon=True)
    thread.start()
    return thread
