"""The seed systems (docs/SEEDS.md) as encoders a bundle holds and the app serves: FILM,
IDF-weighted word vectors, and the residual retrievers FCRR and ConvRR over them.

Each maps question texts to unit-length float32 vectors, as the CNN / LSTM encoder does, so the
bundle's FAISS index, ``DenseRetriever``, the hybrid and the app work on them unchanged (on unit
vectors the index's squared Euclidean ranking is the cosine ranking every one of them is trained
for). FCRR and ConvRR are no pair scorers: they map one question's IDF-weighted embedding to a
vector (``x + alpha f(x)``, normalised), trained siamese on cluster pairs, so they serve as
encoders too; no system here needs a reranking stage.

Every encoder has ``system``, ``output_dim``, ``encode(texts)``, ``settings()`` (what the bundle's
manifest records as ``encoder_config``), ``save(folder)`` and ``load(folder, settings)``, which
rebuilds one from a bundle folder; ``qpr.systems.registry`` registers them. Their files:
``encoder.npz`` (numbers and words as arrays, never a pickle) and, for the residual retrievers,
``model.safetensors`` (torch weights; bundles saved before it hold ``encoder.pt``, still read with
``torch.load(weights_only=True)``: tensors only, and converted on the next save). ``fit_film_encoder``, ``fit_idf_encoder`` and
``fit_residual_encoder`` train one on a corpus's training clusters. The word-vector systems need
gensim (the ``bench`` extra), as ``--word-vectors`` does; FILM does not.
"""

from __future__ import annotations

import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
import safetensors.torch
import torch
from safetensors import SafetensorError

from qpr.errors import QPRError, one_line
from qpr.systems.film import FilmConfig, FilmModel, fit_film
from qpr.systems.residual import IdfEmbedder, ResidualConfig, ResidualRetriever, fit_residual
from qpr.retrieval.lexical import restored_tfidf_vectorizer
from qpr.evaluation.metrics import nearest_neighbour_accuracy
from qpr.systems.settings_dicts import recorded_settings
from qpr.training.sampling import cluster_members, validation_questions

SYSTEMS = ("film", "idf-embed", "fcrr", "convrr")  # the other papers' systems (docs/SEEDS.md)
ARRAYS, WEIGHTS, LEGACY_WEIGHTS = "encoder.npz", "model.safetensors", "encoder.pt"
VAL_QUESTIONS = 4000  # val questions the residual retrievers' early stopping scores (nearest-neighbour accuracy)


@dataclass(frozen=True)
class SeedSettings:
    """What ``python -m qpr train --system ...`` sets for a seed system: FILM's rank and
    iterations, the word vectors' size, the residual nets' epochs and patience, and the seed."""

    film_rank: int = 128
    film_iterations: int = 60
    word_dim: int = 300
    epochs: int = 30
    patience: int = 4
    seed: int = 0

    def __post_init__(self) -> None:
        if min(self.film_rank, self.film_iterations, self.word_dim, self.epochs, self.patience) < 1:
            raise QPRError(f"FILM's rank and iterations, the word vectors' size, epochs and patience must be at least 1: {self}")


class FilmEncoder:
    """FILM's TF-IDF vectorizer and orthonormal projection (``qpr.systems.film``)."""

    system = "film"

    def __init__(self, model: FilmModel) -> None:
        self.model = model

    @property
    def output_dim(self) -> int:
        return self.model.projection.shape[1]

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        return self.model.encode(list(texts))

    def settings(self) -> dict:
        return asdict(self.model.config)

    def save(self, folder: Path) -> None:
        vectorizer = self.model.vectorizer
        np.savez(folder / ARRAYS, terms=np.array(vectorizer.get_feature_names_out(), dtype=str), idf=vectorizer.idf_,
                 projection=self.model.projection)

    @classmethod
    def load(cls, folder: Path, settings: dict) -> "FilmEncoder":
        arrays = _arrays(folder, ("terms", "idf", "projection"))
        if not len(arrays["terms"]) == len(arrays["idf"]) == arrays["projection"].shape[0]:
            raise QPRError(f"{folder}/{ARRAYS}: terms, idf and projection rows differ in number; {_REBUILD}")
        vectorizer = restored_tfidf_vectorizer(arrays["terms"], arrays["idf"])
        return cls(FilmModel(vectorizer, arrays["projection"], _config(FilmConfig, settings, folder)))


class IdfEncoder:
    """The IDF-weighted mean of skip-gram word vectors (``qpr.systems.residual.IdfEmbedder``)."""

    system = "idf-embed"

    def __init__(self, embedder: IdfEmbedder) -> None:
        self.embedder = embedder

    @property
    def output_dim(self) -> int:
        return self.embedder.dim

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        return self.embedder.encode(list(texts))

    def settings(self) -> dict:
        return {"word_dim": self.embedder.dim}

    def save(self, folder: Path) -> None:
        np.savez(folder / ARRAYS, **self.embedder.arrays())

    @classmethod
    def load(cls, folder: Path, settings: dict) -> "IdfEncoder":
        return cls(_embedder(folder))


class ResidualEncoder:
    """An FCRR or ConvRR (``qpr.systems.residual.ResidualRetriever``) over IDF-weighted word vectors."""

    def __init__(self, embedder: IdfEmbedder, model: ResidualRetriever) -> None:
        self.embedder, self.model = embedder, model.eval()
        self.system = model.config.kind

    @property
    def output_dim(self) -> int:
        return self.embedder.dim

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        return self.model.transform(self.embedder.encode(list(texts)))

    def settings(self) -> dict:
        return asdict(self.model.config) | {"word_dim": self.embedder.dim}

    def save(self, folder: Path) -> None:
        np.savez(folder / ARRAYS, **self.embedder.arrays())
        safetensors.torch.save_file({k: v.contiguous() for k, v in self.model.state_dict().items()}, folder / WEIGHTS)

    @classmethod
    def load(cls, folder: Path, settings: dict) -> "ResidualEncoder":
        embedder = _embedder(folder)
        model = ResidualRetriever(embedder.dim, _config(ResidualConfig, settings, folder))
        path = folder / WEIGHTS if (folder / WEIGHTS).is_file() else folder / LEGACY_WEIGHTS
        try:
            if path.name == WEIGHTS:
                weights = safetensors.torch.load_file(path)
            elif not zipfile.is_zipfile(path):
                raise ValueError("not a zip archive")
            else:
                weights = torch.load(path, weights_only=True)  # tensors and plain containers only (module doc)
            model.load_state_dict(weights)
        except (SafetensorError, RuntimeError, OSError, EOFError, ValueError, KeyError, TypeError, AttributeError) as err:
            raise QPRError(f"{path} is not the weights of this {model.config.kind} ({one_line(err)}); {_REBUILD}") from err
        return cls(embedder, model)


_REBUILD = "the bundle is damaged: rebuild it with `python -m qpr train --system ...` (or restore a copy)"


# The fits below train one system each on a corpus's training clusters (docs/SEEDS.md has each
# system's recipe) and return (encoder, training summary for the manifest).
def fit_film_encoder(corpus: pd.DataFrame, settings: SeedSettings = SeedSettings(), log=None) -> tuple[FilmEncoder, dict]:
    """FILM with ``settings``' rank, iterations and seed; ``log`` sees each iteration."""
    config = FilmConfig(rank=settings.film_rank, max_iter=settings.film_iterations, seed=settings.seed)
    model = fit_film(corpus.reset_index(drop=True), config, log)
    return FilmEncoder(model), model.summary()


def fit_idf_encoder(corpus: pd.DataFrame, settings: SeedSettings = SeedSettings()) -> tuple[IdfEncoder, dict]:
    """IDF-weighted skip-gram vectors of ``settings.word_dim`` dimensions (``fit_idf_embedder``)."""
    embedder = fit_idf_embedder(corpus.reset_index(drop=True), settings.word_dim, settings.seed)
    return IdfEncoder(embedder), {"seed": settings.seed}


def fit_residual_encoder(kind: str, corpus: pd.DataFrame,
                         settings: SeedSettings = SeedSettings()) -> tuple[ResidualEncoder, dict]:
    """The residual retriever ``kind`` ("fcrr" or "convrr") over IDF-weighted skip-gram vectors,
    trained for up to ``settings.epochs`` (``fit_qpr_residual``)."""
    corpus = corpus.reset_index(drop=True)
    embedder = fit_idf_embedder(corpus, settings.word_dim, settings.seed)
    config = ResidualConfig(kind=kind, seed=settings.seed, max_epochs=settings.epochs, patience=settings.patience)
    result = fit_qpr_residual(corpus, embedder, config)
    return ResidualEncoder(embedder, result.model), result.summary()


def fit_idf_embedder(corpus: pd.DataFrame, dim: int, seed: int) -> IdfEmbedder:
    """Skip-gram vectors trained on every question that is not a val/test query (no label is
    read), IDF over all the corpus's questions."""
    not_query = ~corpus["split"].isin(["val", "test"])
    return IdfEmbedder.train(corpus.loc[not_query, "question"].tolist(), corpus["question"].tolist(), dim=dim, seed=seed)


def fit_qpr_residual(corpus: pd.DataFrame, embedder: IdfEmbedder, config: ResidualConfig):
    """A residual retriever trained siamese on ``corpus``'s training clusters (each question with a
    random cluster-mate), early-stopped on nearest-neighbour accuracy among up to ``VAL_QUESTIONS``
    val questions (every epoch runs when there are no val clusters). Returns ``fit_residual``'s result."""
    corpus = corpus.reset_index(drop=True)
    clusters = cluster_members(corpus, "train")
    if not clusters:
        raise QPRError(f"{config.kind} needs training clusters: questions with split 'train' in clusters of 2+")
    vectors = embedder.encode(corpus["question"].tolist())
    rng = np.random.default_rng(config.seed)
    anchors = np.concatenate(clusters)
    partners = np.concatenate([m[(np.arange(len(m)) + rng.integers(1, len(m), len(m))) % len(m)] for m in clusters])
    owner = np.repeat(np.arange(len(clusters)), [len(c) for c in clusters])
    val_rows, val_owner = validation_questions(corpus, VAL_QUESTIONS)
    validate = None
    if len(val_rows):

        def validate(model: ResidualRetriever) -> float:
            return nearest_neighbour_accuracy(model.transform(vectors[val_rows]), val_owner)

    return fit_residual(vectors[anchors], vectors[partners], owner, config, symmetric=True, validate=validate)


def _arrays(folder: Path, names: Sequence[str]) -> dict[str, np.ndarray]:
    path = folder / ARRAYS
    try:
        with np.load(path, allow_pickle=False) as stored:
            missing = [name for name in names if name not in stored.files]
            if missing:
                raise QPRError(f"{path} lacks {', '.join(missing)}; {_REBUILD}")
            return {name: stored[name] for name in names}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as err:
        raise QPRError(f"{path} is not a readable encoder file ({one_line(err)}); {_REBUILD}") from err


def _embedder(folder: Path) -> IdfEmbedder:
    arrays = _arrays(folder, ("words", "vectors", "idf", "unseen_idf", "use_idf"))
    if not len(arrays["words"]) == len(arrays["idf"]) == len(arrays["vectors"]):
        raise QPRError(f"{folder}/{ARRAYS}: words, vectors and idf differ in number; {_REBUILD}")
    return IdfEmbedder.from_arrays(arrays)


def _config(kind, settings: dict, folder: Path):
    return recorded_settings(kind, settings, f"{folder}/manifest.json: encoder_config", _REBUILD)
