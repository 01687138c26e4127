"""The annotation tutorial: a hand-written corpus and its bundle (``QPR_DEMO=tutorial``; the default
demo is BANKING77's real questions, ``ui.banking_demo``).

``demo_corpus.tsv`` (beside this file) is a hand-written cluster file: 566 questions on travel,
cooking, programming, health, finance, pets, sports, study, phones, home repair, gardening, cars,
music and careers, in 130 clusters of 2-8 paraphrases (typos, short and long forms, reordered
and reworded) plus 44 unclustered distractors. Some questions hold HTML or markdown (``<b>``,
``**bold**``, ``<script>``, ``<img ... onerror>``), one is Arabic and one has an emoji: the app
must show them as plain text. Clusters are split train/val/test ~80:10:10 (val and test are the
held-out clusters retraining is judged on).

``SPLIT_PARAPHRASES`` lists the deliberate mistakes in the corpus: pairs of clusters that mean the
same thing but carry two ids, the false negatives annotation should find and merge. Both sides
are in train so a merge changes what the encoder learns.

``demo_bundle()`` trains a small encoder on the corpus (a few seconds on 2 cores) and caches the
bundle under ``<cache>/demo-bundle/<key>``, the key covering the corpus content and the training
settings, so an edited corpus or new settings retrain and an unchanged one loads.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable

from qpr.bundles.bundle import Bundle
from qpr.data.corpus import fingerprint, read_cluster_file
from qpr.retrieval.hybrid import FEATURES
from qpr.errors import QPRError
from qpr.bundles.training import train_bundle
from qpr.fsutil.leftovers import recover
from qpr.settings import settings
from qpr.training.train import TrainConfig
from workflows.project import SMALL_CORPUS

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

# Queries worded unlike any corpus question, for the Search tab's examples.
EXAMPLE_QUERIES = (
    "how can I get my passport renewed?",
    "my dog barks the whole night",
    "cheap plane tickets tips",
    "undo my last commit in git",
    "why does my phone battery die so fast",
    "<b>how</b> do I fall asleep faster?",
)



def cache_dir() -> Path:
    """Where built bundles are kept: ``QPR_CACHE_DIR``, default ``runs`` under the working directory."""
    return settings().cache_dir


def bundle_key(corpus_fingerprint: str, train: TrainConfig = SMALL_CORPUS.train) -> str:
    """A short name that changes whenever the corpus, any demo training setting or the hybrid's
    features change."""
    settings = {"data": corpus_fingerprint, "train": asdict(train), "text": asdict(SMALL_CORPUS.text),
                "encoder": SMALL_CORPUS.encoder.to_dict(),
                "fusion": list(FEATURES)}
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


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


def demo_bundle(
    corpus_path: str | Path = DEMO_CORPUS,
    cache: str | Path | None = None,
    progress: bool = True,
    log: Callable[[str], None] = log_demo,
) -> Bundle:
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
    served = bundle.manifest.get("hybrid_metrics") or bundle.manifest["metrics"]
    metrics = ", ".join(f"{split} H@1 {m['H1']:.2f} MRR {m['MRR']:.2f}" for split, m in served.items())
    log(f"built the demo bundle {bundle.version} in {time.perf_counter() - start:.1f} s ({metrics}); cached in {path}")
    return bundle
