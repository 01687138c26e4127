"""A demo that starts on BM25 and trains its encoder meanwhile: the trained model is then served
through the same steps as a confirmed retrain (``workflows.retraining.confirm``): compared with
what is served on the same held-out clusters, saved, swapped in under ``ServedModel``'s lock
(searches in flight keep their snapshot), recorded in the store as decided by ``FIRST_TRAINING``.

``start`` runs it in a daemon thread, so the app answers from its first second; nobody has to press
anything. When the app closes (Ctrl-C) it stops the training at its next batch and waits for it: a
process that exits while a thread is inside torch aborts ("terminate called without an active
exception") instead of ending cleanly. Nothing is saved then; the next start trains again. If a
retrained model is waiting for someone's decision when the training ends, that decision is not taken
away: the trained model is recorded as served from the next start and saved (``Project.home``: the
demo's cache, so the next start serves it) but not swapped in now. Either way the swap is recorded
before the bundle is saved where a start finds it, so a start never serves a trained demo the record
does not name (``workflows.swap_recovery``).
"""

from __future__ import annotations

import sys
import threading
import traceback
from dataclasses import dataclass
from typing import Callable

from qpr.bundles.bundle import Bundle
from qpr.bundles.training import compare_bundles
from qpr.errors import QPRError
from workflows.project import Project
from workflows.retraining import Confirmed, confirm, retried

FIRST_TRAINING = "the demo's first training"  # who the swap is recorded as decided by
STOP_WAIT_S = 120.0  # how long closing waits for the training to reach a batch (or finish what follows training)

OnBatch = Callable[[int, int, int], None]  # (epoch, batches done, batches in the epoch), after each step


class Closing(Exception):
    """Raised at a first training's next batch once the app is closing (``FirstTraining.stop``)."""


@dataclass(frozen=True)
class FirstTraining:
    """A first training running in its thread; ``stop`` ends it when the app closes."""

    thread: threading.Thread
    closing: threading.Event

    def join(self, timeout: float | None = None) -> None:
        """Wait for the training (and the swap after it) to end."""
        self.thread.join(timeout)

    def stop(self, wait_s: float = STOP_WAIT_S) -> bool:
        """Ask the training to stop at its next batch and wait up to ``wait_s`` for its thread;
        whether it ended."""
        self.closing.set()
        self.thread.join(wait_s)
        return not self.thread.is_alive()

    def where(self) -> str:
        """Where the training's thread is now (its stack, innermost call last), to say why a close
        that waited for it gave up; empty once the thread has ended."""
        frame = sys._current_frames().get(self.thread.ident)
        return "".join(traceback.format_stack(frame)) if frame is not None else ""


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


def start(target: Project, train: Callable[[OnBatch], Bundle], log: Callable[[str], None]) -> FirstTraining:
    """``serve_when_trained`` in a daemon thread; ``train(on_batch)`` must call ``on_batch`` after
    each step, which raises ``Closing`` once ``FirstTraining.stop`` was called (a restart then
    trains again, as it does when the model was not saved); a QPRError is logged, and BM25 keeps
    serving."""
    closing = threading.Event()

    def on_batch(*_: int) -> None:
        if closing.is_set():
            raise Closing

    def run() -> None:
        try:
            serve_when_trained(target, lambda: train(on_batch), log)
        except QPRError as err:
            log(f"the demo keeps serving BM25: its training failed: {err}")
        except Closing:
            log("the app is closing: the demo's first training stopped (the next start trains it again)")
    thread = threading.Thread(target=run, name="qpr-first-training", daemon=True)
    thread.start()
    return FirstTraining(thread, closing)
