"""The app's default demo: BANKING77's 13,083 real customer questions (``qpr.data.banking77``, CC
BY 4.0, credited on the page and in the model card), served by BM25 from the first second while
their encoder trains in a background thread (``workflows.first_training``), then by the trained
hybrid, swapped in under ``ServedModel``'s lock. The trained bundle is cached under
``<cache>/demo-bundle/<key>`` (the key covers the corpus and the settings), so later starts serve
it at once. ``QPR_DEMO=tutorial`` serves the hand-written annotation tutorial instead (``ui.demo``).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Callable

import pandas as pd

from annotations.store import AnnotationStore
from qpr.bundles.bundle import Bundle
from qpr.bundles.training import train_bundle
from qpr.data.banking77 import CREDIT, HUB_DATASET, LICENSE, banking77_corpus
from qpr.data.corpus import fingerprint
from qpr.serving.served_model import ServedModel
from qpr.serving.slugs import DEMO
from qpr.training.train import TrainConfig
from ui.demo import bundle_key, cache_dir, cached_bundle, log_demo
from workflows import first_training
from workflows.project import SMALL_CORPUS, FolderHome, Project

DATA = f"BANKING77 ({HUB_DATASET})"  # the lexical demo bundle's ``data``: what says a training is pending
CARD = {"license": LICENSE, "datasets": [HUB_DATASET], "credit": CREDIT, "name": "qpr-banking77-demo"}
# The tutorial's layers; three epochs in bigger batches: on one thread of the shared 2-core machine
# (load average 6-7) they trained in 55 s, and the hybrid reached test H@1 0.85 against BM25's ~0.82.
TRAIN = TrainConfig(batch_size=64, max_epochs=3, patience=2, val_pairs=1000, seed=0)
# Worded unlike the corpus' questions, for the Search tab's examples.
EXAMPLES = (
    "my new card still has not come in the post",
    "someone stole my phone, what do I do?",
    "why was I charged twice for one purchase",
    "can I top up with apple pay?",
    "what exchange rate do you use for euros",
)


def cached_path(corpus: pd.DataFrame, cache: str | Path | None = None, train: TrainConfig = TRAIN) -> Path:
    """Where the demo's trained bundle of ``corpus`` is kept."""
    return Path(cache or cache_dir()) / "demo-bundle" / bundle_key(fingerprint(corpus), train)


def banking_demo(cache: str | Path | None = None, train: TrainConfig = TRAIN, log: Callable[[str], None] = log_demo) -> Bundle:
    """The trained demo bundle if it was cached, else BANKING77 as a lexical bundle (BM25 alone)
    whose training ``start_training`` begins once it is served."""
    corpus = banking77_corpus()
    cached = cached_bundle(cached_path(corpus, cache, train), "the trained BANKING77 demo", log)
    if cached is not None:
        return cached
    log(f"serving BANKING77's {len(corpus)} questions by BM25 while the encoder trains (first start only)")
    return Bundle.lexical_of(corpus, DATA).with_card(**CARD)


def start_training(model: ServedModel, store: AnnotationStore, cache: str | Path | None = None, train: TrainConfig = TRAIN,
                   log: Callable[[str], None] = log_demo) -> threading.Thread | None:
    """Train the encoder of the BANKING77 demo ``model`` serves by BM25, in the background, and
    serve it when trained (``workflows.first_training``); None when it serves anything else."""
    served = model.current().bundle
    if not (served.lexical and served.manifest.get("data") == DATA):
        return None
    path = cached_path(served.corpus, cache, train)

    def trained() -> Bundle:
        start = time.perf_counter()
        bundle = train_bundle(served.corpus, train, SMALL_CORPUS.text, SMALL_CORPUS.encoder, data=DATA,
                              progress=False).with_card(**CARD)
        scores = bundle.manifest.get("hybrid_metrics") or bundle.manifest["metrics"]
        log(f"trained the BANKING77 demo in {time.perf_counter() - start:.0f} s ("
            + ", ".join(f"{split} H@1 {m['H1']:.2f}" for split, m in scores.items()) + ")")
        return bundle

    demo = Project(DEMO, "Demo", model, store, FolderHome(path), built_in=True)
    return first_training.start(demo, trained, log)
