"""A general-purpose encoder: the CNN trained on several question sets at once, optionally
distilled from a pretrained sentence encoder, and adapted to a new corpus without labels.

One training step is one batch of one of three kinds:

- **pairs** of cluster-mates from the labelled sources, an SDML batch (``qpr.model.losses.SDMLLoss``). Every epoch draws at most
  ``per_source`` pairs from each source (``source_pairs``), so a large set (Quora, WikiAnswers)
  cannot drown a small one (COVID FAQ); batches hold one pair per cluster, a source's pairs
  together (harder negatives than another domain's questions);
- **distillation** on unlabelled questions: the student's vector of a question regresses onto
  the teacher's (loss ``1 - cos``, ``regression_loss``), so the student learns the teacher's
  space itself, not only which questions it finds alike. A student with a teacher has the
  teacher's width and unit vectors (``student_config``), and its SDML batches use the cosine
  distance with a learned scale;
- **views**: two word-dropout views of an unlabelled question as a positive pair with SDML's
  usual targets (self-supervised; the adaptation to a user's corpus, which has no teacher).

A new student of a teacher starts its word embeddings from the teacher's vectors of single words
(``word_student``), which the teacher-specific code supplies (``qpr.bundles.general.distilled_student``).
Batches of the three kinds are shuffled together. Regression replaced an earlier distillation by
SDML with the teacher's similarities as soft targets: at the same budget (banking77 left out,
the other sets' questions, 8 epochs) H@1 0.797 against 0.664 (docs/OUT_OF_DOMAIN.md). The
teacher is an input (its vectors, one row per unlabelled question), so this module needs no
transformer library; ``bench/out_of_domain.py``
and ``python -m qpr general`` compute them with all-MiniLM-L6-v2 (the benchmark extra).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components
from sklearn.decomposition import PCA

from qpr.model.encoder import EncoderConfig, QuestionEncoder, encode_ids
from qpr.errors import QPRError
from qpr.model.losses import SDMLLoss
from qpr.training.loop import descend, fit
from qpr.training.sampling import cluster_disjoint_batches, cluster_members, epoch_pairs, view_pairs
from qpr.model.text import TextConfig, Vocabulary
from qpr.model.word_vectors import embedding_rows


@dataclass(frozen=True)
class GeneralConfig:
    """Settings of ``train_general``: pairs per labelled source and epoch, unlabelled questions
    distilled (or viewed) per epoch, the word dropout of the two views, and the optimiser's
    (SDML smoothing 0.3, Adam).

    ``min_steps`` raises ``epochs`` until training takes at least that many batches: a small
    corpus has only a few batches per epoch (1,000 questions in batches of 64: 16), so an epoch
    count that suits 100,000 questions barely moves the encoder on it."""

    per_source: int = 4000
    unlabelled_per_epoch: int = 8000
    epochs: int = 2
    batch_size: int = 256
    lr: float = 1e-3
    view_dropout: float = 0.1
    smoothing: float = 0.3
    seed: int = 0
    min_steps: int = 0

    def __post_init__(self) -> None:
        if self.batch_size < 2 or self.epochs < 1:
            raise QPRError(f"batch_size must be at least 2 and epochs at least 1: {self}")
        if self.per_source < 0 or self.unlabelled_per_epoch < 0 or self.min_steps < 0:
            raise QPRError(f"per_source, unlabelled_per_epoch and min_steps must not be negative: {self}")
        if not 0.0 <= self.view_dropout < 1.0:
            raise QPRError(f"view_dropout must be in [0, 1): {self}")


@dataclass
class Unlabelled:
    """Questions without clusters; ``teacher`` (one unit-length row per question) makes them
    distillation material, without it they train as self-supervised views."""

    questions: list[str]
    teacher: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.teacher is not None and len(self.teacher) != len(self.questions):
            raise QPRError(f"{len(self.teacher)} teacher vectors for {len(self.questions)} questions: one row each")


@dataclass
class GeneralResult:
    encoder: QuestionEncoder
    vocab: Vocabulary
    history: list[dict] = field(default_factory=list)
    seconds: float = 0.0


def regression_loss(student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """Mean ``1 - cos(student_i, teacher_i)`` over the batch: 0 when every student vector points
    where its teacher's does (the scale is free; a distilled student normalizes its output)."""
    return (1.0 - F.cosine_similarity(student, teacher, dim=1)).mean()


def student_config(encoder_config: EncoderConfig, teacher: np.ndarray | None) -> EncoderConfig:
    """``encoder_config`` for a student of ``teacher``: its output as wide as the teacher's vectors
    and on the unit sphere (the index's Euclidean ranking is then the cosine ranking the
    regression trains); unchanged without a teacher."""
    if teacher is None:
        return encoder_config
    return replace(encoder_config, output_dim=int(teacher.shape[1]), normalize=True)


def word_student(questions: Sequence[str], teacher_words: Sequence[str], encode_words: Callable[[list[str]], np.ndarray],
                 text_config: TextConfig = TextConfig(), encoder_config: EncoderConfig = EncoderConfig(),
                 seed: int = 0) -> tuple[QuestionEncoder, Vocabulary]:
    """A new student (``student_config``) whose embeddings start from the teacher's vectors of
    single words (``encode_words``: words -> one unit row each, each word encoded alone, as
    model2vec starts a static model). The vocabulary is ``questions``' tokens, then
    ``teacher_words`` not among them, so a word the training questions never use still carries the
    teacher's meaning. The vectors are reduced to the embedding width by PCA and scaled to the
    random rows' spread; hash bins (unseen words, character n-grams) start as the mean of the words
    that map to them (``qpr.model.word_vectors.embedding_rows``); punctuation keeps its random row.
    Measured against random starting rows at the same budget, left-out H@1: SemEval 0.318 -> 0.400,
    WikiAnswers 0.554 -> 0.795, banking77 0.798 -> 0.907 (docs/OUT_OF_DOMAIN.md)."""
    built = Vocabulary.build(questions, text_config)
    known = set(built.tokens)
    tokens = built.tokens + [w for w in dict.fromkeys(teacher_words) if w not in known]
    vocab = Vocabulary(tokens, replace(text_config, vocab_size=max(text_config.vocab_size, len(tokens))))
    words = [t for t in tokens if t.isalnum()]
    if len(words) < 2:
        raise QPRError(f"{len(words)} word(s) in the training questions: a student needs more questions to start from")
    vectors = np.asarray(encode_words(words), dtype=np.float64)
    config = student_config(encoder_config, vectors)
    # As many components as the words and the teacher's width allow, the rest zero (a tiny corpus).
    components = min(config.embedding_dim, len(words), vectors.shape[1])
    reduced = np.zeros((len(words), config.embedding_dim))
    reduced[:, :components] = PCA(components, random_state=seed).fit_transform(vectors)
    reduced[:, :components] = (reduced[:, :components] - reduced[:, :components].mean(axis=0)) / reduced[:, :components].std()
    torch.manual_seed(seed)
    encoder = QuestionEncoder(vocab.size, config)
    ids, rows = embedding_rows(words, reduced.astype(np.float32), vocab)
    with torch.no_grad():
        encoder.embedding.weight[torch.from_numpy(ids)] = torch.from_numpy(rows)
    return encoder, vocab


def source_pairs(
    sources: dict[str, pd.DataFrame], per_source: int, rng: np.random.Generator
) -> list[tuple[list[str], list[str], np.ndarray]]:
    """Per source, at most ``per_source`` (anchor, positive) text pairs of its ``train``
    clusters (``epoch_pairs``, then a random subset) and each pair's cluster number."""
    out = []
    for corpus in sources.values():
        clusters = cluster_members(corpus, "train")
        if not clusters:
            continue
        anchors, positives, owner = epoch_pairs(clusters, rng)
        pick = rng.permutation(len(anchors))[:per_source]
        texts = corpus["question"].to_numpy()
        out.append((list(texts[anchors[pick]]), list(texts[positives[pick]]), owner[pick]))
    return out


def _epoch_batches(sources, unlabelled, config, rng) -> list[tuple[str, list, list, np.ndarray | None]]:
    """The epoch's batches, shuffled: (kind, anchor texts, positive texts, teacher rows or None)."""
    batches = []
    for anchors, positives, owner in source_pairs(sources, config.per_source, rng):
        for batch in cluster_disjoint_batches(owner, config.batch_size, rng):
            batches.append(("pairs", [anchors[i] for i in batch], [positives[i] for i in batch], None))
    if unlabelled is not None and config.unlabelled_per_epoch:
        picked = rng.permutation(len(unlabelled.questions))[: config.unlabelled_per_epoch]
        kind = "views" if unlabelled.teacher is None else "distill"
        for start in range(0, len(picked) - 1, config.batch_size):
            rows = picked[start : start + config.batch_size]
            if len(rows) < 2:
                continue
            texts = [unlabelled.questions[i] for i in rows]
            batches.append((kind, texts, texts, None if unlabelled.teacher is None else unlabelled.teacher[rows]))
    return [batches[i] for i in rng.permutation(len(batches))]


def train_general(
    sources: dict[str, pd.DataFrame],
    unlabelled: Unlabelled | None = None,
    config: GeneralConfig = GeneralConfig(),
    text_config: TextConfig = TextConfig(),
    encoder_config: EncoderConfig = EncoderConfig(),
    warm_start: tuple[QuestionEncoder, Vocabulary] | None = None,
    progress: bool = True,
) -> GeneralResult:
    """Train (or, with ``warm_start``, continue) a CNN on the ``train`` clusters of ``sources``
    (name -> corpus) and on ``unlabelled`` questions (module doc), for ``config.epochs`` epochs
    (more when ``config.min_steps`` needs them).

    There is no early stopping: a general encoder has no validation set of the domains it will
    serve. The vocabulary is built from every training question (labelled and unlabelled). A new
    encoder distilled from a teacher takes ``student_config(encoder_config, teacher)``; SDML uses
    the cosine distance (with a learned scale) whenever the encoder normalizes its vectors.
    """
    if not any(cluster_members(c, "train") for c in sources.values()) and not (unlabelled and unlabelled.questions):
        raise QPRError("nothing to train on: give sources with train clusters of 2+ questions, or unlabelled questions")
    torch.manual_seed(config.seed)
    rng = np.random.default_rng(config.seed)
    if warm_start is None:
        texts = [q for c in sources.values() for q in c.loc[c["split"] == "train", "question"]]
        vocab = Vocabulary.build(texts + (unlabelled.questions if unlabelled else []), text_config)
        encoder = QuestionEncoder(vocab.size, student_config(encoder_config, unlabelled.teacher if unlabelled else None))
    else:
        encoder, vocab = copy.deepcopy(warm_start[0]), warm_start[1]
    if unlabelled is not None and unlabelled.teacher is not None and unlabelled.teacher.shape[1] != encoder.config.output_dim:
        raise QPRError(f"teacher vectors of {unlabelled.teacher.shape[1]} dimensions for an encoder of "
                       f"{encoder.config.output_dim}: a student must be as wide as its teacher")
    loss_fn = SDMLLoss(smoothing=config.smoothing, distance="cosine" if encoder.config.normalize else "squared")
    optimizer = torch.optim.Adam([*encoder.parameters(), *loss_fn.parameters()], lr=config.lr)
    # The first epoch's batches are drawn ahead: their number sets how many epochs min_steps needs.
    first_epoch = _epoch_batches(sources, unlabelled, config, rng)
    epochs = max(config.epochs, math.ceil(config.min_steps / max(len(first_epoch), 1)))

    def step(batch: tuple[str, list, list, np.ndarray | None]) -> float:
        kind, anchors, positives, teacher = batch
        if kind == "distill":
            student = encode_ids(encoder, [vocab.encode(t) for t in anchors])
            loss = regression_loss(student, torch.from_numpy(teacher).float().to(student.device))  # on the encoder's device
        else:
            if kind == "views":
                first, second = view_pairs([vocab.encode(t) for t in anchors], config.view_dropout, rng)
            else:
                first, second = [vocab.encode(t) for t in anchors], [vocab.encode(t) for t in positives]
            loss = loss_fn(encode_ids(encoder, first), encode_ids(encoder, second))
        return descend(loss, optimizer)

    def report(batches: list, losses: list[float]) -> dict:
        """The mean loss of each kind of batch, as ``loss_<kind>``."""
        totals: dict[str, list[float]] = {}
        for (kind, *_), loss in zip(batches, losses):
            totals.setdefault(kind, []).append(loss)
        return {f"loss_{k}": float(np.mean(v)) for k, v in totals.items()}

    # No score: every epoch runs and the last is kept. A Ctrl-C propagates: the benchmarks run
    # many of these and must not record a cut-short one.
    fitted = fit(encoder, epochs, lambda epoch: first_epoch if epoch == 1 else _epoch_batches(sources, unlabelled, config, rng),
                 step, report, progress=progress, return_on_interrupt=False)
    return GeneralResult(encoder, vocab, fitted.history, fitted.seconds)


def agreeing_pairs(dense_top: np.ndarray, bm25_top: np.ndarray) -> np.ndarray:
    """Pseudo-pairs for a corpus without clusters: row i and its nearest other question j where
    the encoder's and BM25's nearest agree (``dense_top[i] == bm25_top[i] == j``, -1: none), as an
    ``(n, 2)`` array of row positions, each unordered pair once."""
    rows = np.flatnonzero((dense_top == bm25_top) & (dense_top >= 0))
    pairs = np.sort(np.stack([rows, dense_top[rows]], axis=1), axis=1)
    return np.unique(pairs, axis=0) if len(pairs) else pairs.reshape(0, 2)


def pseudo_corpus(questions: Sequence[str], pairs: np.ndarray) -> pd.DataFrame:
    """A training corpus (``qpr.data.corpus.COLUMNS``, split "train") whose clusters are the connected
    components of ``pairs`` over ``questions``; questions in no pair are left out."""
    n = len(questions)
    graph = coo_matrix((np.ones(len(pairs)), (pairs[:, 0], pairs[:, 1])), shape=(n, n))
    _, component = connected_components(graph, directed=False)
    used = np.unique(pairs.ravel())
    return pd.DataFrame({"qid": used.astype("int64") + 1, "question": [questions[i] for i in used],
                         "cluster": pd.array(component[used].astype(str), dtype="string"), "split": "train"})
