"""The app's two demos, each the built-in project with a corpus and training defaults of its own;
which one a start serves is ``QPR_DEMO`` (``workflows.app_start``). Both keep their trained bundle
under ``<cache>/demo-bundle/<key>``, the key covering the corpus content and every training
setting (``bundle_key``), so an edited corpus or new settings train again and an unchanged one
loads.

**BANKING77** (the default): 13,083 real customer questions (``qpr.data.banking77``, CC BY 4.0,
credited on the page and in the model card), served by BM25 from the first second while their
encoder trains in a background thread (``start_banking_training``, through
``workflows.first_training``), then by the trained hybrid, swapped in under ``ServedModel``'s lock.
Its defaults are ``BANKING77``.

**The annotation tutorial** (``QPR_DEMO=tutorial``): ``demo_corpus.tsv`` (beside this file) is a
hand-written cluster file: 566 questions on travel, cooking, programming, health, finance, pets,
sports, study, phones, home repair, gardening, cars, music and careers, in 130 clusters of 2-8
paraphrases (typos, short and long forms, reordered and reworded) plus 44 unclustered distractors.
Some questions hold HTML or markdown (``<b>``, ``**bold**``, ``<script>``, ``<img ... onerror>``),
one is Arabic and one has an emoji: the app must show them as plain text. Clusters are split
train/val/test ~80:10:10 (val and test are the held-out clusters retraining is judged on).
``SPLIT_PARAPHRASES`` lists its deliberate mistakes: pairs of clusters that mean the same thing
but carry two ids, the false negatives annotation should find and merge. Both sides are in train
so a merge changes what the encoder learns. ``demo_bundle`` trains a small encoder on it (a few
seconds on 2 cores) with the defaults of a small corpus (``workflows.project.SMALL_CORPUS``).
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Callable

import pandas as pd

from annotations.store import AnnotationStore
from qpr.bundles.bundle import Bundle
from qpr.bundles.training import train_bundle
from qpr.data.banking77 import CREDIT, HUB_DATASET, LICENSE, banking77_corpus
from qpr.data.corpus import fingerprint, read_cluster_file
from qpr.errors import QPRError
from qpr.fsutil.leftovers import recover
from qpr.retrieval.hybrid import FEATURES
from qpr.serving.served_model import ServedModel
from qpr.serving.slugs import DEMO
from qpr.settings import settings
from qpr.training.train import TrainConfig
from workflows import first_training
from workflows.project import SMALL_CORPUS, FolderHome, Project, TrainingDefaults

DEMO_CORPUS = Path(__file__).resolve().with_name("demo_corpus.tsv")

SPLIT_PARAPHRASES = (
    ("travel-passport-renew", "travel-renewing-passport"),
    ("travel-lost-luggage", "travel-missing-suitcase"),
    ("cook-rice-fluffy", "cook-perfect-rice"),
    ("prog-git-undo-commit", "prog-git-take-back-commit"),
    ("health-fall-asleep", "health-insomnia-tips"),
    ("fin-credit-score", "fin-better-credit-rating"),
    ("pets-cat-scratching", "pets-cat-clawing-couch"),
    ("sport-offside", "sport-football-offside"),
    ("study-focus", "study-concentration"),
    ("phone-battery-drain", "phone-battery-life"),
    ("home-leaky-faucet", "home-dripping-tap"),
)

# Queries worded unlike any tutorial question, for the Search tab's examples.
EXAMPLE_QUERIES = (
    "how can I get my passport renewed?",
    "my dog barks the whole night",
    "cheap plane tickets tips",
    "undo my last commit in git",
    "why does my phone battery die so fast",
    "<b>how</b> do I fall asleep faster?",
)

BANKING_DATA = f"BANKING77 ({HUB_DATASET})"  # the lexical demo bundle's ``data``: what says a training is pending
BANKING_CARD = {"license": LICENSE, "datasets": [HUB_DATASET], "credit": CREDIT, "name": "qpr-banking77-demo"}
# The tutorial's layers; three epochs in bigger batches: on one thread of the shared 2-core machine
# (load average 6-7) they trained in 55 s, and the hybrid reached test H@1 0.85 against BM25's ~0.82.
BANKING77 = TrainingDefaults(TrainConfig(batch_size=64, max_epochs=3, patience=2, val_pairs=1000, seed=0),
                             SMALL_CORPUS.text, SMALL_CORPUS.encoder)
# Worded unlike BANKING77's questions, for the Search tab's examples.
BANKING_EXAMPLES = (
    "my new card still has not come in the post",
    "someone stole my phone, what do I do?",
    "why was I charged twice for one purchase",
    "can I top up with apple pay?",
    "what exchange rate do you use for euros",
)


def cache_dir() -> Path:
    """Where built bundles are kept: ``QPR_CACHE_DIR``, default ``runs`` under the working directory."""
    return settings().cache_dir


def bundle_key(corpus_fingerprint: str, train: TrainConfig = SMALL_CORPUS.train) -> str:
    """A short name that changes whenever the corpus, any demo training setting or the hybrid's
    features change."""
    parts = {"data": corpus_fingerprint, "train": asdict(train), "text": asdict(SMALL_CORPUS.text),
             "encoder": SMALL_CORPUS.encoder.to_dict(), "fusion": list(FEATURES)}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def log_demo(message: str) -> None:
    """What the demo tells the terminal it was started from."""
    print(f"[qpr demo] {message}", file=sys.stderr, flush=True)


def cached_bundle(path: Path, what: str, log: Callable[[str], None] = log_demo) -> Bundle | None:
    """The bundle a demo cached at ``path`` (a save killed mid-swap is finished first, not
    retrained), or None when there is none or it no longer loads (``log`` says why ``what`` is
    trained again)."""
    if (path / "manifest.json").is_file() or recover(path, wait=0):
        try:
            bundle = Bundle.load(path)
            log(f"loaded {what} {bundle.version} from {path}")
            return bundle
        except QPRError as err:
            log(f"training {what} again: {err}")
    return None


# -- the annotation tutorial ----------------------------------------------------------------------

def demo_bundle(corpus_path: str | Path = DEMO_CORPUS, cache: str | Path | None = None, progress: bool = True,
                log: Callable[[str], None] = log_demo) -> Bundle:
    """The bundle trained on ``corpus_path``: loaded from the cache if built before, else trained
    (with progress bars when ``progress``), saved atomically and returned."""
    corpus = read_cluster_file(corpus_path)
    path = Path(cache or cache_dir()) / "demo-bundle" / bundle_key(fingerprint(corpus))
    cached = cached_bundle(path, "the demo bundle", log)
    if cached is not None:
        return cached
    log(f"training the demo model on {len(corpus)} questions from {corpus_path} (first start only)...")
    start = time.perf_counter()
    bundle = train_bundle(corpus, SMALL_CORPUS.train, SMALL_CORPUS.text, SMALL_CORPUS.encoder, data=str(corpus_path),
                          progress=progress)
    bundle.save(path)
    served = bundle.manifest.hybrid_metrics or bundle.manifest.metrics
    metrics = ", ".join(f"{split} H@1 {m['H1']:.2f} MRR {m['MRR']:.2f}" for split, m in served.items())
    log(f"built the demo bundle {bundle.version} in {time.perf_counter() - start:.1f} s ({metrics}); cached in {path}")
    return bundle


# -- BANKING77 ------------------------------------------------------------------------------------

def banking_path(corpus: pd.DataFrame, cache: str | Path | None = None, train: TrainConfig = BANKING77.train) -> Path:
    """Where the BANKING77 demo's trained bundle of ``corpus`` is kept."""
    return Path(cache or cache_dir()) / "demo-bundle" / bundle_key(fingerprint(corpus), train)


def banking_demo(cache: str | Path | None = None, train: TrainConfig = BANKING77.train,
                 log: Callable[[str], None] = log_demo) -> Bundle:
    """The trained demo bundle if it was cached, else BANKING77 as a lexical bundle (BM25 alone)
    whose training ``start_banking_training`` begins once it is served."""
    corpus = banking77_corpus()
    cached = cached_bundle(banking_path(corpus, cache, train), "the trained BANKING77 demo", log)
    if cached is not None:
        return cached
    log(f"serving BANKING77's {len(corpus)} questions by BM25 while the encoder trains (first start only)")
    return Bundle.lexical_of(corpus, BANKING_DATA).with_card(**BANKING_CARD)


def start_banking_training(model: ServedModel, store: AnnotationStore, cache: str | Path | None = None,
                           train: TrainConfig = BANKING77.train,
                           log: Callable[[str], None] = log_demo) -> first_training.FirstTraining | None:
    """Train the encoder of the BANKING77 demo ``model`` serves by BM25, in the background, and
    serve it when trained (``workflows.first_training``); None when it serves anything else."""
    served = model.current().bundle
    if not (served.lexical and served.manifest.data == BANKING_DATA):
        return None
    defaults = replace(BANKING77, train=train)

    def trained(on_batch: first_training.OnBatch) -> Bundle:
        start = time.perf_counter()
        bundle = train_bundle(served.corpus, defaults.train, defaults.text, defaults.encoder, data=BANKING_DATA,
                              progress=False, on_batch=on_batch).with_card(**BANKING_CARD)
        scores = bundle.manifest.hybrid_metrics or bundle.manifest.metrics
        log(f"trained the BANKING77 demo in {time.perf_counter() - start:.0f} s ("
            + ", ".join(f"{split} H@1 {m['H1']:.2f}" for split, m in scores.items()) + ")")
        return bundle

    demo = Project(DEMO, "Demo", model, store, FolderHome(banking_path(served.corpus, cache, train)), defaults,
                   built_in=True)
    return first_training.start(demo, trained, log)
