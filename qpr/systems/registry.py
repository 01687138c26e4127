"""Every encoder system a bundle can hold, by the name its manifest records: one ``System`` each.

A ``System`` says how the train command builds its settings and which of its options it reads,
how it is fitted on a corpus and retrained from a bundle, what a bundle of it holds (files,
manifest entries) and how it is saved and loaded. The command line (``qpr.cli``), the bundle
(``qpr.bundles.bundle``) and its training (``qpr.bundles.training``) look systems up here and
never branch on a name, so a new system is one entry in ``REGISTRY`` (and the module that
implements it).

Registered: the CNN (``cnn-sdml``, the default) and the LSTM (``qpr.systems.question_encoder``),
the other papers' systems (``film``, ``idf-embed``, ``fcrr``, ``convrr``:
``qpr.systems.seed_encoders``), the optional ``transformer`` (``qpr.systems.transformer``) and the
``static`` student of MiniLM (``qpr.systems.static``).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import pandas as pd

from qpr.data.corpus_file import CORPUS_FILE
from qpr.errors import QPRError
from qpr.model.encoder import QuestionEncoder
from qpr.systems import question_encoder
from qpr.systems.seed_encoders import (ARRAYS, LEGACY_WEIGHTS, WEIGHTS, FilmEncoder, IdfEncoder, ResidualEncoder, SeedSettings,
                                       fit_film_encoder, fit_idf_encoder, fit_residual_encoder)
from qpr.systems.settings_dicts import dataclass_from
from qpr.systems import static
from qpr.systems.transformer import (DEFAULT_BASE, EXTRA, FILES as TRANSFORMER_FILES, SYSTEM as TRANSFORMER,
                                     TransformerEncoder, TransformerSettings, fit_transformer)

# What every bundle with an encoder holds besides the encoder's own files (bundles/manifest.py).
ENCODED = ("manifest.json", "index.faiss", CORPUS_FILE)
DEFAULT = "cnn-sdml"  # the system of ``train`` without --system, and of bundles older than the manifest's field


@dataclass(frozen=True)
class Run:
    """How one fit runs; each system reads what applies to it. ``data`` names the corpus in the
    manifest; ``warm_start`` is what a retrain continues from (``System.retrain``); ``progress``
    shows bars; ``on_epoch(row)`` and ``on_batch(epoch, done, total)`` follow the training (a
    background trainer's progress); ``return_on_interrupt`` keeps the best epoch on Ctrl-C
    (``qpr.training.train.train``); ``log(row)`` sees FILM's iterations; ``judged`` pairs are
    trained on directly by the CNN / LSTM (``qpr.training.sampling.JudgedPairs``), which also weigh
    each cluster by ``cluster_weights`` (its estimated purity, ``qpr.training.fixed_shape``)."""

    data: str = ""
    warm_start: Any = None
    progress: bool = True
    on_epoch: Callable[[dict], None] | None = None
    on_batch: Callable[[int, int, int], None] | None = None
    return_on_interrupt: bool = True
    log: Callable[[dict], None] | None = None
    judged: Any = None  # annotators' judged pairs (the export's pairs table), for the systems that train on them
    cluster_weights: Any = None  # each cluster's estimated purity (a Series by name), for the same systems


@dataclass(frozen=True)
class System:
    """One system: its name in manifests and on the command line, and what it takes to train,
    describe, save and load it. ``settings``, ``retrain`` and ``fit`` speak of one settings
    dataclass (``EncoderSettings``, ``SeedSettings``, ``TransformerSettings``)."""

    name: str
    about: str  # one line for ``train --help``
    options: tuple[str, ...]  # the train command's options it reads (argparse names), besides --seed
    files: tuple[str, ...]  # every file a bundle of it holds
    manifest_fields: Mapping[str, type]  # what its ``load`` reads from the manifest besides every bundle's fields
    settings: Callable[[Mapping], Any]  # its settings from the train options that were given
    fit: Callable[[pd.DataFrame, Any, Run], tuple]  # -> (encoder, vocabulary or None, manifest's ``training``)
    # (the bundle's Manifest, encoder, vocab, max_epochs) -> (settings, warm start): a retrain of its encoder
    retrain: Callable[[Any, Any, Any, int | None], tuple]
    # (encoder, vocab, the corpus' vectors) -> (its manifest entries, the bytes the bundle's version digests)
    describe: Callable[[Any, Any, np.ndarray], tuple[dict, bytes]]
    save: Callable[[Any, Any, Path], None]  # (encoder, vocab, folder being written)
    # (bundle folder, its ``qpr.bundles.manifest.Manifest``) -> (encoder, vocab, vector size)
    load: Callable[[Path, Any], tuple]
    report: Callable[[Mapping], str]  # the line ``train`` prints about the manifest's ``training``
    distributed: bool = False  # whether it trains under torchrun (qpr.training.distributed)
    # A file of ``files`` -> the names older bundles hold in its place, which ``load`` still reads.
    legacy: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


def _neural(name: str, architecture: str, pooling: str, about: str) -> System:
    q = question_encoder
    return System(name, about, q.OPTIONS, q.FILES, {"vocab_rows": int},
                  lambda options: q.settings_from(options, architecture, pooling),
                  q.fit, q.retrain, q.describe, q.save, q.load, q.report, distributed=True, legacy=q.LEGACY)


# The seed systems and the transformer have no vocabulary: their encoders describe, save and load themselves
# (``qpr.bundles.bundle.TextEncoder``), and the corpus' vectors stand for their state in the version's digest.
def _describe_text_encoder(encoder, vocab, vectors: np.ndarray) -> tuple[dict, bytes]:
    return {"encoder_config": encoder.settings()}, vectors.tobytes()


def _save_text_encoder(encoder, vocab, folder: Path) -> None:
    encoder.save(folder)


def _loader(encoder_class) -> Callable[[Path, Any], tuple]:
    def load(folder: Path, manifest) -> tuple:
        encoder = encoder_class.load(folder, manifest.encoder_config)
        return encoder, None, encoder.output_dim
    return load


def _timed(name: str, fit: Callable[[pd.DataFrame, Any, Run], tuple]) -> Callable[[pd.DataFrame, Any, Run], tuple]:
    """``fit`` (-> encoder, its summary) made a System's: its run timed and recorded with its settings."""
    def timed(corpus: pd.DataFrame, settings, run: Run) -> tuple:
        start = time.perf_counter()
        encoder, summary = fit(corpus, settings, run)
        info = {"system": name, "settings": asdict(settings), "data": run.data, "seconds": time.perf_counter() - start,
                "fit": summary}
        return encoder, None, info
    return timed


def _recorded(kind: type, continues: bool) -> Callable[[Any, Any, Any, int | None], tuple]:
    """A System's ``retrain`` that reads back the ``kind`` settings the manifest recorded, its
    ``epochs`` bounded by ``max_epochs``, and continues the bundle's encoder when ``continues``
    (else fits a new one)."""
    def retrain(manifest, encoder, vocab, max_epochs: int | None) -> tuple:
        recorded = manifest.training.get("settings", {})
        settings = dataclass_from(kind, recorded, "the manifest's training settings")
        if max_epochs is not None:
            settings = replace(settings, epochs=max_epochs)
        return settings, encoder if continues else None
    return retrain


def _seed(name: str, encoder_class, fit: Callable[[pd.DataFrame, SeedSettings, Run], tuple], files: tuple[str, ...],
          options: tuple[str, ...], about: str) -> System:
    """A seed system (``qpr.systems.seed_encoders``): ``fit`` -> (encoder, its summary), loaded by ``encoder_class``."""
    return System(name, about, options, ENCODED + files, {"system": str},
                  lambda given: dataclass_from(SeedSettings, given, "the train options"), _timed(name, fit),
                  _recorded(SeedSettings, continues=False), _describe_text_encoder, _save_text_encoder,
                  _loader(encoder_class), lambda training: f"trained {name} in {training['seconds']:.0f}s",
                  legacy={WEIGHTS: (LEGACY_WEIGHTS,)} if WEIGHTS in files else {})


def _transformer_report(training: Mapping) -> str:
    fit = training["fit"]
    return (f"fine-tuned {training['settings']['base'] or DEFAULT_BASE} in {training['seconds']:.0f}s "
            f"({fit['stopped']}); best epoch {fit['best_epoch']} (0: the base model), val nearest-neighbour accuracy "
            f"{fit['best_val_nn_accuracy']:.4f}")


FILM_OPTIONS = ("film_rank", "film_iterations", "word_dim")
BY_EPOCHS = ("epochs", "patience")
REGISTRY: dict[str, System] = {system.name: system for system in (
    _neural("cnn-sdml", "cnn", "max", "the CNN encoder trained with --loss (default)"),
    _neural("lstm", "lstm", "mean", "a bi-directional LSTM encoder trained with --loss"),
    # FILM's and the skip-gram vectors' options are refused by none of the four (one settings dataclass).
    _seed("film", FilmEncoder, lambda corpus, settings, run: fit_film_encoder(corpus, settings, run.log), (ARRAYS,),
          FILM_OPTIONS, "FILM's projection of TF-IDF vectors (docs/SEEDS.md)"),
    _seed("idf-embed", IdfEncoder, lambda corpus, settings, run: fit_idf_encoder(corpus, settings), (ARRAYS,),
          FILM_OPTIONS, "IDF-weighted skip-gram word vectors (docs/SEEDS.md; needs gensim)"),
    _seed("fcrr", ResidualEncoder, lambda corpus, settings, run: fit_residual_encoder("fcrr", corpus, settings),
          (ARRAYS, WEIGHTS), FILM_OPTIONS + BY_EPOCHS,
          "a fully connected residual retriever over IDF-weighted word vectors (docs/SEEDS.md; needs gensim)"),
    _seed("convrr", ResidualEncoder, lambda corpus, settings, run: fit_residual_encoder("convrr", corpus, settings),
          (ARRAYS, WEIGHTS), FILM_OPTIONS + BY_EPOCHS,
          "a convolutional residual retriever over IDF-weighted word vectors (docs/SEEDS.md; needs gensim)"),
    System(TRANSFORMER, f"a sentence-transformers model fine-tuned with SDML (slower, optional: pip install -r {EXTRA}; "
           "docs/OUT_OF_DOMAIN.md prices it)",
           ("smoothing", "distance", "batch_size", "lr", "max_len", "base", "steps_per_epoch") + BY_EPOCHS,
           ENCODED + TRANSFORMER_FILES, {"system": str},
           lambda given: dataclass_from(TransformerSettings, given, "the train options"),
           _timed(TRANSFORMER, lambda corpus, settings, run: fit_transformer(corpus, settings, run.warm_start,
                                                                             run.progress, run.on_batch)),
           _recorded(TransformerSettings, continues=True), _describe_text_encoder, _save_text_encoder,
           _loader(TransformerEncoder), _transformer_report),
    System(static.SYSTEM, "a static student of MiniLM: token vectors averaged, the fastest encoder (needs the bench extra to "
           "build, not to serve; docs/OUT_OF_DOMAIN.md)", ("epochs", "batch_size", "lr"), ENCODED + static.FILES, {"system": str},
           lambda given: dataclass_from(static.StaticSettings, given, "the train options"),
           _timed(static.SYSTEM, lambda corpus, settings, run: static.fit(corpus, settings, run.warm_start, run.progress)),
           _recorded(static.StaticSettings, continues=True), _describe_text_encoder, _save_text_encoder,
           _loader(static.StaticEncoder), lambda training: f"distilled the static student in {training['seconds']:.0f}s"),
)}


def system_named(name: str, where: str = "") -> System:
    """The registered system ``name``; QPRError naming the known ones if there is none (``where``
    says where the name was read, e.g. a bundle's manifest)."""
    if name not in REGISTRY:
        raise QPRError(f"{where}unknown system {name!r}; this version knows {', '.join(REGISTRY)}")
    return REGISTRY[name]


def system_of(encoder) -> str:
    """The system name of ``encoder``: the QuestionEncoder's by its architecture, else its own."""
    if isinstance(encoder, QuestionEncoder):
        return "lstm" if encoder.config.architecture == "lstm" else "cnn-sdml"
    return encoder.system


def train_options() -> tuple[str, ...]:
    """Every train option some system reads and another may not, in the order they are registered."""
    return tuple(dict.fromkeys(name for system in REGISTRY.values() for name in system.options))
