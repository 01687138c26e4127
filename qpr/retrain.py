"""Training a servable bundle, retraining it on corrected clusters, and swapping it in safely.

``train_bundle`` is train -> index -> hybrid fusion (fitted on val) -> held-out metrics in one call. ``retrain`` continues a served
bundle's encoder (same vocabulary and layer sizes) on a corrected corpus, and ``compare`` scores
the old and the new bundle on the same held-out clusters. ``ServedModel`` holds what the app
serves: readers take a consistent snapshot without waiting, and a retrained bundle replaces it
only through ``confirm`` (one reference swap under a lock), so searches keep working throughout.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, replace
from typing import Callable

import pandas as pd

from qpr.bundle import Bundle
from qpr.encoder import EncoderConfig, QuestionEncoder
from qpr.errors import QPRError
from qpr.evaluate import evaluate
from qpr.hybrid import HybridRetriever, fit_fusion
from qpr.index import IndexConfig
from qpr.service import BM25Retriever, DenseRetriever, Retriever
from qpr.text import TextConfig, Vocabulary
from qpr.train import TrainConfig, train

HELD_OUT = ("val", "test")
METRIC_COLUMNS = ["model", "version", "split", "H1", "H10", "MRR", "queries"]


def held_out_splits(corpus: pd.DataFrame) -> list[str]:
    """The held-out splits of ``corpus`` that have clustered questions to query."""
    clustered = corpus[corpus["cluster"].notna()]
    return [split for split in HELD_OUT if (clustered["split"] == split).any()]


def train_bundle(
    corpus: pd.DataFrame,
    config: TrainConfig,
    text_config: TextConfig = TextConfig(),
    encoder_config: EncoderConfig = EncoderConfig(),
    index_config: IndexConfig = IndexConfig(),
    warm_start: tuple[QuestionEncoder, Vocabulary] | None = None,
    data: str = "",
    progress: bool = True,
    on_epoch: Callable[[dict], None] | None = None,
) -> Bundle:
    """Train an encoder on ``corpus`` (``qpr.train.train``), index every question, fit the hybrid
    scorer on the val clusters (``qpr.hybrid``; skipped, with the reason in the manifest, when val
    cannot support it), and record the training run and the val/test metrics of the encoder
    (``metrics``) and of the hybrid (``hybrid_metrics``) in the manifest. ``data`` names the source."""
    result = train(corpus, config, text_config, encoder_config, warm_start=warm_start, on_epoch=on_epoch, progress=progress)
    info = {"config": asdict(config), "data": data, "warm_start": warm_start is not None} | result.summary()
    bundle = Bundle.create(result.encoder, result.vocab, corpus, index_config, train_info=info)
    bm25 = BM25Retriever(bundle.corpus)
    try:
        bundle = bundle.with_fusion(fit_fusion(bundle, bm25=bm25).to_dict())
    except QPRError as err:
        bundle.manifest["fusion_skipped"] = str(err)
    splits = held_out_splits(corpus)
    bundle.manifest["metrics"] = {split: evaluate(DenseRetriever(bundle), corpus, split) for split in splits}
    if "fusion" in bundle.manifest:
        hybrid = HybridRetriever(bundle, bm25=bm25)
        bundle.manifest["hybrid_metrics"] = {split: evaluate(hybrid, corpus, split) for split in splits}
    return bundle


def serving_retriever(bundle: Bundle, bm25: BM25Retriever | None = None) -> Retriever:
    """What a bundle answers queries with: the hybrid when it carries a fitted fusion (measured
    better than either part: docs/QUALITY.md), else the encoder alone."""
    return HybridRetriever(bundle, bm25=bm25) if "fusion" in bundle.manifest else DenseRetriever(bundle)


def retrain(
    bundle: Bundle,
    corpus: pd.DataFrame,
    max_epochs: int | None = None,
    progress: bool = True,
    on_epoch: Callable[[dict], None] | None = None,
) -> Bundle:
    """A new bundle whose encoder continues ``bundle``'s on ``corpus`` (e.g. corrected clusters).

    Training settings are the ones the bundle was trained with (``max_epochs`` may override);
    vocabulary, layer sizes and index settings stay the same, so old and new are comparable.
    """
    settings = bundle.manifest.get("training", {}).get("config", {})
    known = {name: value for name, value in settings.items() if name in TrainConfig.__dataclass_fields__}
    config = TrainConfig(**known)
    if max_epochs is not None:
        config = replace(config, max_epochs=max_epochs)
    index_config = IndexConfig(**bundle.index.settings())
    return train_bundle(
        corpus, config, bundle.vocab.config, bundle.encoder.config, index_config,
        warm_start=(bundle.encoder, bundle.vocab), data="corrected clusters", progress=progress, on_epoch=on_epoch,
    )


def compare(old: Bundle, new: Bundle, corpus: pd.DataFrame) -> pd.DataFrame:
    """H@1 / H@10 / MRR of both bundles, each as it is served (``serving_retriever``), on the
    held-out clusters of ``corpus`` (the same queries and the same relevance labels for both), one
    row per model and split (``METRIC_COLUMNS``)."""
    splits = held_out_splits(corpus)
    if not splits:
        raise QPRError("the corpus has no val or test clusters: nothing held out to compare the models on")
    rows = [
        {"model": name, "version": bundle.version, "split": split} | evaluate(serving_retriever(bundle), corpus, split)
        for name, bundle in (("current", old), ("retrained", new))
        for split in splits
    ]
    return pd.DataFrame(rows, columns=METRIC_COLUMNS)


@dataclass(frozen=True)
class Served:
    """One consistent view of what is served: a bundle and the retrievers over its corpus.

    ``default`` answers searches (``serving_retriever``); ``dense`` and ``bm25`` are its parts,
    shown for comparison, and ``dense`` ranks the annotation queue (encoder distances).
    """

    bundle: Bundle
    dense: DenseRetriever
    bm25: BM25Retriever
    default: Retriever

    @classmethod
    def of(cls, bundle: Bundle) -> "Served":
        bm25 = BM25Retriever(bundle.corpus)
        return cls(bundle, DenseRetriever(bundle), bm25, serving_retriever(bundle, bm25))


@dataclass(frozen=True)
class Candidate:
    """A retrained model waiting for the user's decision, with its comparison to the served one."""

    served: Served
    comparison: pd.DataFrame


class ServedModel:
    """The served bundle and at most one retrained candidate; thread-safe.

    Readers call ``current()`` once per request and use that snapshot throughout, so a swap in
    the middle of a request cannot mix two models.
    """

    def __init__(self, bundle: Bundle) -> None:
        self._lock = threading.Lock()
        self._served = Served.of(bundle)
        self._candidate: Candidate | None = None

    def current(self) -> Served:
        with self._lock:
            return self._served

    def candidate(self) -> Candidate | None:
        with self._lock:
            return self._candidate

    def propose(self, bundle: Bundle, comparison: pd.DataFrame) -> Candidate:
        """Hold ``bundle`` as the candidate (replacing an earlier one); retrievers are built here,
        outside the lock, so the later swap is instant."""
        candidate = Candidate(Served.of(bundle), comparison)
        with self._lock:
            self._candidate = candidate
        return candidate

    def confirm(self, version: str) -> Served:
        """Serve the candidate of ``version``; refuses if that is not the candidate any more."""
        with self._lock:
            if self._candidate is None or self._candidate.served.bundle.version != version:
                raise QPRError(f"no retrained model {version!r} is waiting to be confirmed; retrain first")
            self._served, self._candidate = self._candidate.served, None
            return self._served

    def discard(self) -> None:
        with self._lock:
            self._candidate = None
