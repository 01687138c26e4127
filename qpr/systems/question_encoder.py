"""The CNN and the LSTM (``qpr.model.encoder.QuestionEncoder`` over a ``Vocabulary``) as systems a
bundle holds: ``cnn-sdml`` and ``lstm`` in ``qpr.systems.registry``.

Their bundle files are ``vocab.json`` (the vocabulary) and ``model.safetensors`` (the weights, a
state dict in safetensors: read without unpickling anything, and the format the Hugging Face Hub
expects of a model). Bundles written before it hold ``encoder.pt`` instead (``torch.save`` of the
state dict); ``load`` still reads one, with ``torch.load(weights_only=True)``, which unpickles only
tensors and plain containers, never arbitrary objects, and the next ``save`` writes safetensors
(converting the bundle: the old file goes with the old folder). The manifest records the text and encoder configs and the vocabulary's rows, so ``load``
rebuilds the layers before reading the weights, and refuses a config or a weights file this
version cannot read with a QPRError saying what is wrong. Training is ``qpr.training.train.train``
on ``EncoderSettings``; a retrain continues the bundle's encoder with its vocabulary and layers.
"""

from __future__ import annotations

import pickle
import zipfile
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Mapping

import numpy as np
import torch
import safetensors.torch
from safetensors import SafetensorError

from qpr.data.corpus_file import CORPUS_FILE
from qpr.errors import QPRError, one_line
from qpr.model.encoder import EncoderConfig, QuestionEncoder
from qpr.model.text import TextConfig, Vocabulary
from qpr.systems.settings_dicts import dataclass_from
from qpr.training.train import TrainConfig, train

# Also what bundles/manifest.py tells a user whose bundle is damaged: the plain `train` builds a CNN.
REBUILD = "the bundle is damaged: rebuild it with `python -m qpr train` (or restore a copy)"
WEIGHTS = "model.safetensors"
LEGACY_WEIGHTS = "encoder.pt"  # what bundles from before safetensors hold in its place (module doc)
FILES = ("manifest.json", "vocab.json", WEIGHTS, "index.faiss", CORPUS_FILE)
LEGACY = {WEIGHTS: (LEGACY_WEIGHTS,)}
# The train command's options these systems read (argparse names), besides --seed.
OPTIONS = ("loss", "smoothing", "margin", "distance", "negatives", "batch_size", "lr", "lr_schedule", "batching",
           "pairs", "unlabeled_dropout", "word_vectors", "vocab_size", "hash_bins", "max_len", "min_count",
           "subword_ngrams", "windows", "normalize", "architecture", "pooling", "epochs", "patience")


@dataclass(frozen=True)
class EncoderSettings:
    """What ``python -m qpr train`` sets for a CNN or an LSTM: the training run, the text
    processing (the vocabulary) and the layers."""

    train: TrainConfig = field(default_factory=TrainConfig)
    text: TextConfig = field(default_factory=TextConfig)
    encoder: EncoderConfig = field(default_factory=EncoderConfig)


def settings_from(options: Mapping, architecture: str, pooling: str) -> EncoderSettings:
    """The settings of the train command's ``options`` (those given; a missing one takes its
    default) for an encoder of ``architecture``, pooled by ``pooling`` unless the options say."""
    options = dict(options)
    if "epochs" in options:
        options["max_epochs"] = options.pop("epochs")
    layers = {"pooling": pooling} | options | {"architecture": architecture}
    return EncoderSettings(dataclass_from(TrainConfig, options, "the train options"),
                           dataclass_from(TextConfig, options, "the train options"),
                           dataclass_from(EncoderConfig, layers, "the train options"))


def fit(corpus, settings: EncoderSettings, run) -> tuple[QuestionEncoder, Vocabulary, dict]:
    """Train (or, with ``run.warm_start`` = (encoder, vocabulary), continue) an encoder on
    ``corpus``; returns it, its vocabulary and the manifest's ``training`` entry."""
    result = train(corpus, settings.train, settings.text, settings.encoder, warm_start=run.warm_start,
                   on_epoch=run.on_epoch, progress=run.progress, return_on_interrupt=run.return_on_interrupt,
                   on_batch=run.on_batch, judged=run.judged, cluster_weights=run.cluster_weights)
    info = {"config": asdict(settings.train), "data": run.data, "warm_start": run.warm_start is not None}
    return result.encoder, result.vocab, info | result.summary()


def retrain(manifest, encoder: QuestionEncoder, vocab: Vocabulary,
            max_epochs: int | None) -> tuple[EncoderSettings, tuple[QuestionEncoder, Vocabulary]]:
    """The settings a bundle's encoder was trained with, its manifest's ``retrain`` settings put
    over them (a general bundle's, ``qpr.bundles.general.training_info``) and ``max_epochs`` over
    those; the same vocabulary and layers; and the encoder to continue from. A retrain draws
    fixed-shape batches (``qpr.training.fixed_shape``), so that what the corrections change is the
    labels, never the number of steps or the batch size: neighbour batches and word-dropout views
    of the first training are not used again."""
    training = manifest.training
    config = dataclass_from(TrainConfig, training.get("config", {}) | training.get("retrain", {}),
                            "the manifest's training config")
    if max_epochs is not None:
        config = replace(config, max_epochs=max_epochs)
    config = replace(config, batches="fixed", batching="random", pairs="partner", unlabeled_dropout=0.0)
    return EncoderSettings(config, vocab.config, encoder.config), (encoder, vocab)


def describe(encoder: QuestionEncoder, vocab: Vocabulary, vectors: np.ndarray) -> tuple[dict, bytes]:
    """What the manifest records of the encoder, and the bytes its version digests (the weights)."""
    described = {"text_config": asdict(vocab.config), "encoder_config": encoder.config.to_dict(),
                 "vocab_rows": encoder.vocab_rows}
    return described, safetensors.torch.save(_contiguous(encoder))


def save(encoder: QuestionEncoder, vocab: Vocabulary, folder: Path) -> None:
    vocab.save(folder / "vocab.json")
    safetensors.torch.save_file(_contiguous(encoder), folder / WEIGHTS)


def _contiguous(encoder: QuestionEncoder) -> dict[str, torch.Tensor]:
    # safetensors stores each tensor as one block of memory.
    return {name: tensor.contiguous() for name, tensor in encoder.state_dict().items()}


def load(folder: Path, manifest) -> tuple[QuestionEncoder, Vocabulary, int]:
    """The encoder and vocabulary saved in the bundle ``folder``, and the size of its vectors."""
    vocab = Vocabulary.load(folder / "vocab.json")
    try:
        # Strict, unlike dataclass_from: a layer this version does not know would load other weights.
        encoder_config = EncoderConfig(**manifest.encoder_config)
    except (TypeError, ValueError) as err:
        raise QPRError(f"{folder}/manifest.json: encoder_config is not one this version reads ({one_line(err)}); {REBUILD}") from err
    if vocab.size != manifest.vocab_rows:
        raise QPRError(f"{folder}: vocab.json gives {vocab.size} embedding rows, the manifest {manifest.vocab_rows}")
    encoder = QuestionEncoder(vocab.size, encoder_config)
    weights = _weights(folder)
    try:
        encoder.load_state_dict(weights)
    except (RuntimeError, TypeError, AttributeError) as err:
        raise QPRError(f"{folder}/{_weights_file(folder)} does not match the manifest's encoder config: {one_line(err)}") from err
    encoder.eval()
    return encoder, vocab, encoder_config.output_dim


def _weights_file(folder: Path) -> str:
    return WEIGHTS if (folder / WEIGHTS).is_file() else LEGACY_WEIGHTS


def _weights(folder: Path) -> dict:
    """The state dict in ``folder``: ``model.safetensors``, else an older bundle's ``encoder.pt``
    (module doc); QPRError saying what is wrong with a file that is not one."""
    if _weights_file(folder) == WEIGHTS:
        try:
            return safetensors.torch.load_file(folder / WEIGHTS)
        except (SafetensorError, OSError, ValueError) as err:
            raise QPRError(f"{folder}/{WEIGHTS} is not a readable safetensors file ({one_line(err)}); {REBUILD}") from err
    path = folder / LEGACY_WEIGHTS
    if not zipfile.is_zipfile(path):
        raise QPRError(f"{path} is not a PyTorch weights file (not a zip archive); {REBUILD}")
    try:
        weights = torch.load(path, weights_only=True, map_location="cpu")  # tensors and plain containers only (module doc); bundles load on the CPU
    except (RuntimeError, OSError, EOFError, ValueError, KeyError, IndexError, TypeError, AttributeError,
            pickle.UnpicklingError) as err:
        raise QPRError(f"{path} is not a readable PyTorch weights file ({one_line(err)}); {REBUILD}") from err
    if not isinstance(weights, dict):
        raise QPRError(f"{path} holds a {type(weights).__name__}, not encoder weights; {REBUILD}")
    return weights


def report(training: Mapping) -> str:
    """The line ``train`` prints about the run the manifest's ``training`` entry records."""
    return (f"trained {len(training['history'])} epoch(s) in {training['seconds']:.0f}s ({training['stopped']}); "
            f"best epoch {training['best_epoch']}, val ROC AUC {training['best_auc']:.4f}")
