"""The workflow's two training steps, one place for every caller: the in-process retrain
(``workflows.retraining.retrain``), the background worker (``workflows.background_training``) and
the simulated loop (``workflows.simulated_loop``).

A step takes the corrected clusters an export handed over (``annotations.export.Export``: its
``corpus`` and its ``labels``, so that every model names the judgments it learned from) and
returns a new bundle; comparing it with the served one and deciding are ``workflows.retraining``'s.
"""

from __future__ import annotations

import pandas as pd

from qpr.bundles.bundle import Bundle
from qpr.bundles.training import retrain_bundle, train_bundle
from qpr.model.encoder import EncoderConfig
from qpr.model.text import TextConfig
from qpr.training.train import TrainConfig


def continue_training(bundle: Bundle, corpus: pd.DataFrame, labels: dict | None = None, **options) -> Bundle:
    """A new bundle whose encoder continues ``bundle``'s on ``corpus``, with ``labels`` in its
    manifest. ``options`` are ``qpr.bundles.training.retrain_bundle``'s (``max_epochs``, ``bm25``,
    ``fuse``, ``progress``, ``on_epoch``, ``on_batch``, ``return_on_interrupt``, ``judged``: the
    export's judged pairs, trained on directly; ``cluster_weights``: its clusters' purity)."""
    return retrain_bundle(bundle, corpus, labels=labels, **options)


def train_new(corpus: pd.DataFrame, train: TrainConfig, text: TextConfig, encoder: EncoderConfig,
              labels: dict | None = None, **options) -> Bundle:
    """A new bundle trained from scratch on ``corpus`` (a project that BM25 alone served so far, or
    the simulated loop's cold rounds), with ``labels`` in its manifest. ``options`` are
    ``qpr.bundles.training.train_bundle``'s (``index_config``, ``data``, ``fuse``, ``progress``,
    ``on_epoch``, ``on_batch``, ``return_on_interrupt``)."""
    return train_bundle(corpus, train, text, encoder, labels=labels, **options)
