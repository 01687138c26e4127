"""IDF-weighted word embeddings and the residual retrievers FCRR and ConvRR (Cakaloglu et al.,
"Text Embeddings for Retrieval From a Large Knowledge Base").

``IdfEmbedder``: a text's vector is the mean of its words' vectors, each multiplied by the word's
IDF, L2-normalised. The paper used pretrained GloVe / ELMo, which cannot be had here: the word
vectors are skip-gram vectors trained on the task's own text (``qpr.model.word_vectors``, gensim).

Residual retrievers map a (fixed) embedding x to normalize(x + alpha * f(x)):
``FCRR``'s f is a stack of fully connected layers (2, the paper's choice), ``ConvRR``'s a 1-D
convolution over the embedding's components followed by a linear map back to its size. They are
trained with the triplet loss and hard negative mining (the in-batch hardest negative,
``qpr.model.losses.TripletLoss``), in batches that hold each target (paragraph, cluster) at most once.
The paper's text loses its values of alpha, the filter count, window and stride, the margin, the
learning rate and the batch size; the defaults here are ours (``ResidualConfig``).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from qpr.errors import QPRError
from qpr.model.losses import TripletLoss
from qpr.model.text import words
from qpr.training.loop import descend, fit, mean_loss
from qpr.training.sampling import cluster_disjoint_batches
from qpr.model.word_vectors import skipgram_vectors


class IdfEmbedder:
    """Mean of IDF-weighted word vectors, L2-normalised; words without a vector are skipped.

    ``idf(w) = log(N / df(w))`` over the ``documents`` given (the paper's definition); a word no
    document has gets the largest idf.
    """

    def __init__(self, vocab: Sequence[str], vectors: np.ndarray, documents: Sequence[str], use_idf: bool = True) -> None:
        df = Counter(w for doc in documents for w in set(words(doc)))
        n = max(len(documents), 1)
        self._set(vocab, vectors, {w: math.log(n / c) for w, c in df.items()}, math.log(n), use_idf)

    def _set(self, vocab: Sequence[str], vectors: np.ndarray, idf: dict[str, float], unseen_idf: float, use_idf: bool) -> None:
        self.index = {w: i for i, w in enumerate(vocab)}
        self.vectors = np.asarray(vectors, dtype=np.float32)
        self.idf, self.unseen_idf, self.use_idf = idf, unseen_idf, use_idf

    def arrays(self) -> dict[str, np.ndarray]:
        """What ``from_arrays`` rebuilds the embedder from: its words, their vectors and idf (only
        the idf of words with a vector is ever used), the idf of unseen words, and ``use_idf``."""
        vocab = list(self.index)
        return {"words": np.array(vocab, dtype=str), "vectors": self.vectors,
                "idf": np.array([self.idf.get(w, self.unseen_idf) for w in vocab], dtype=np.float64),
                "unseen_idf": np.float64(self.unseen_idf), "use_idf": np.bool_(self.use_idf)}

    @classmethod
    def from_arrays(cls, arrays) -> "IdfEmbedder":
        embedder = cls.__new__(cls)
        vocab = [str(w) for w in arrays["words"]]
        embedder._set(vocab, arrays["vectors"], dict(zip(vocab, arrays["idf"].tolist())), float(arrays["unseen_idf"]),
                      bool(arrays["use_idf"]))
        return embedder

    @classmethod
    def train(cls, corpus_texts: Sequence[str], documents: Sequence[str], dim: int = 300, seed: int = 0,
              use_idf: bool = True) -> "IdfEmbedder":
        """Skip-gram vectors (gensim) trained on ``corpus_texts``; IDF from ``documents``."""
        vocab, vectors = skipgram_vectors([" ".join(words(t)) for t in corpus_texts], dim, seed)
        return cls(vocab, vectors, documents, use_idf)

    @property
    def dim(self) -> int:
        return self.vectors.shape[1]

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            found = [(self.index[w], self.idf.get(w, self.unseen_idf) if self.use_idf else 1.0)
                     for w in words(text) if w in self.index]
            if found:
                ids, weights = zip(*found)
                out[row] = np.asarray(weights, dtype=np.float32) @ self.vectors[list(ids)] / len(ids)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.maximum(norms, 1e-12)


@dataclass(frozen=True)
class ResidualConfig:
    """Architecture and training settings of a residual retriever (values the paper's text lost
    are our choices)."""

    kind: str = "fcrr"  # "fcrr" | "convrr"
    layers: int = 2
    hidden: int = 300
    filters: int = 8
    window: int = 5
    stride: int = 1
    alpha: float = 0.5
    margin: float = 0.2
    lr: float = 1e-3
    weight_decay: float = 1e-5
    batch_size: int = 256
    max_epochs: int = 30
    patience: int = 4
    seed: int = 0

    def __post_init__(self) -> None:
        if self.kind not in ("fcrr", "convrr"):
            raise QPRError(f"unknown residual retriever {self.kind!r}: use 'fcrr' or 'convrr'")
        if min(self.layers, self.filters, self.window, self.stride, self.max_epochs, self.patience) < 1:
            raise QPRError(f"invalid residual config {self}")


class ResidualRetriever(nn.Module):
    """normalize(x + alpha * f(x)) with f fully connected (FCRR) or convolutional (ConvRR)."""

    def __init__(self, dim: int, config: ResidualConfig = ResidualConfig()) -> None:
        super().__init__()
        self.config = config
        if config.kind == "fcrr":
            sizes = [dim] + [config.hidden] * (config.layers - 1) + [dim]
            blocks: list[nn.Module] = []
            for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
                blocks.append(nn.Linear(a, b))
                if i < len(sizes) - 2:
                    blocks.append(nn.ReLU())
            self.body = nn.Sequential(*blocks)
        else:
            conv = nn.Conv1d(1, config.filters, config.window, stride=config.stride, padding=config.window // 2)
            out_len = (dim + 2 * (config.window // 2) - config.window) // config.stride + 1
            self.body = nn.Sequential(nn.Unflatten(1, (1, dim)), conv, nn.ReLU(), nn.Flatten(),
                                      nn.Linear(config.filters * out_len, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.normalize(x + self.config.alpha * self.body(x), dim=1)

    @torch.inference_mode()
    def transform(self, vectors: np.ndarray, chunk: int = 4096) -> np.ndarray:
        was = self.training
        self.eval()
        out = np.concatenate([self(torch.from_numpy(np.ascontiguousarray(vectors[i : i + chunk], dtype=np.float32))).numpy()
                              for i in range(0, len(vectors), chunk)])
        self.train(was)
        return out


@dataclass
class ResidualResult:
    model: ResidualRetriever
    history: list[dict] = field(default_factory=list)
    best_epoch: int = 0
    best_score: float = -1.0
    seconds: float = 0.0

    def summary(self) -> dict:
        return {"config": asdict(self.model.config), "history": self.history, "best_epoch": self.best_epoch,
                "best_score": self.best_score, "seconds": self.seconds}


def fit_residual(
    anchors: np.ndarray,
    targets: np.ndarray,
    owner: np.ndarray,
    config: ResidualConfig = ResidualConfig(),
    symmetric: bool = False,
    validate: Callable[[ResidualRetriever], float] | None = None,
) -> ResidualResult:
    """Train a residual retriever so that ``anchors[i]`` lands nearest ``targets[i]``.

    ``owner[i]`` names pair i's target (a paragraph, a cluster): a batch holds each at most once,
    so the hardest in-batch negative is never a true match. ``symmetric`` sends the targets
    through the model too (question-question retrieval); otherwise targets stay fixed (the
    paper's question-side model against fixed paragraph embeddings). ``validate`` scores the
    model after each epoch (higher is better) for early stopping; without it every epoch runs
    and the last is kept.
    """
    if len(anchors) != len(targets) or len(anchors) != len(owner):
        raise QPRError("anchors, targets and owner must have one row per pair")
    torch.manual_seed(config.seed)
    rng = np.random.default_rng(config.seed)
    model = ResidualRetriever(anchors.shape[1], config)
    loss_fn = TripletLoss(margin=config.margin, distance="euclidean", negatives="hard")
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    a_all, t_all = torch.from_numpy(anchors.astype(np.float32)), torch.from_numpy(targets.astype(np.float32))
    codes = np.unique(owner, return_inverse=True)[1]

    def step(batch: np.ndarray) -> float:
        index = torch.from_numpy(batch)
        a = model(a_all[index])
        t = model(t_all[index]) if symmetric else t_all[index]
        return descend(loss_fn(a, t), optimizer)

    def report(batches: list, losses: list[float]) -> dict:
        return mean_loss(batches, losses) | {"val": validate(model) if validate else float("nan")}

    # A Ctrl-C propagates: the benchmarks run many of these and must not record a cut-short one.
    fitted = fit(model, config.max_epochs, lambda epoch: cluster_disjoint_batches(codes, config.batch_size, rng), step,
                 report, score="val" if validate else None, patience=config.patience, return_on_interrupt=False)
    return ResidualResult(model, fitted.history, fitted.best_epoch, fitted.best_score, fitted.seconds)


def recall_at(ranks: np.ndarray, ks: Sequence[int] = (1, 2, 5, 10, 20, 50)) -> dict:
    """recall@k for each k (share of queries whose target's 1-based rank is at most k) and their
    mean ("recall_avg", the paper's "average among top 1, 2, 5, 10, 20, 50")."""
    ranks = np.asarray(ranks)
    out = {f"recall@{k}": float(np.mean(ranks <= k)) for k in ks}
    out["recall_avg"] = float(np.mean([out[f"recall@{k}"] for k in ks]))
    return out


def target_ranks(queries: np.ndarray, targets: np.ndarray, truth: np.ndarray, chunk: int = 2048) -> np.ndarray:
    """1-based rank of ``targets[truth[i]]`` among all targets by inner product with ``queries[i]``
    (ties count against the query: a tied wrong target ranks ahead)."""
    ranks = np.empty(len(queries), dtype=np.int64)
    for start in range(0, len(queries), chunk):
        scores = queries[start : start + chunk] @ targets.T
        own = scores[np.arange(len(scores)), truth[start : start + chunk]]
        ranks[start : start + chunk] = (scores >= own[:, None]).sum(axis=1)
    return ranks
