"""Training the encoder on clusters: pairs per epoch, cluster-disjoint batches, early stopping.

Each epoch pairs every training question with a random other member of its cluster (or, with
``pairs="all"``, takes every pair of each cluster) and packs the pairs into batches of
``batch_size`` in which no two pairs share a cluster (otherwise a true paraphrase would serve as a
negative). After each epoch the encoder is scored by ROC AUC on held-out validation pairs; the
best epoch is kept and training stops after ``patience`` epochs without improvement. Ctrl-C ends
training early and returns the best epoch so far.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

import faiss
import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from qpr.encoder import EncoderConfig, QuestionEncoder, encode_ids
from qpr.errors import QPRError
from qpr.evaluate import pair_auc
from qpr.losses import make_loss
from qpr.text import TextConfig, Vocabulary
from qpr.word_vectors import word_vector_rows


@dataclass(frozen=True)
class TrainConfig:
    """Training settings; defaults are the paper's (SDML, eps 0.3, N 512, Adam 1e-3).

    They are also what docs/REPRODUCTION.md measured best on Quora-lite at an equal 3-epoch
    budget: eps 0.3 of 0-0.4, N 512 of 32-1024, squared over Euclidean distance for SDML. The
    triplet baseline's ``negatives`` defaults to "hard", which beat random negatives by 28
    (Euclidean) and 30 (squared) points of val H@1 there.

    ``distance`` is the distance the loss uses ("squared" for SDML; the triplet baselines use
    either; "cosine" needs an encoder that normalizes its vectors). ``lr_schedule`` "cosine" decays
    the learning rate from ``lr`` to zero over ``max_epochs`` (paper: "constant"). ``batching``
    "neighbours" fills each batch with neighbouring clusters (``neighbour_groups``), so the
    in-batch negatives are hard ones (paper: "random"). ``pairs`` "partner" pairs each training
    question with one random cluster-mate per epoch; "all" takes every pair of each cluster once
    per epoch (``all_pairs``; the paper leaves this open). ``val_pairs`` positive and as many
    negative pairs score each epoch by ROC AUC. ``unlabeled_dropout`` p > 0 adds, every epoch, a
    self-supervised pair per question that is in no training pair and no val/test query: two
    views of it, each dropping every token with probability p (``view_pairs``; 0: off).
    ``word_vectors`` starts the embeddings from skip-gram vectors trained on the questions that
    are not val/test queries, unlabeled ones included (``qpr.word_vectors``; needs gensim); a warm
    start keeps its own embeddings, so retraining a bundle trained with it needs no gensim.
    """

    loss: str = "sdml"
    smoothing: float = 0.3
    margin: float = 0.5
    distance: str = "squared"
    negatives: str = "hard"
    batch_size: int = 512
    lr: float = 1e-3
    lr_schedule: str = "constant"
    batching: str = "random"
    pairs: str = "partner"
    max_epochs: int = 10
    patience: int = 2
    val_pairs: int = 5000
    unlabeled_dropout: float = 0.0
    word_vectors: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        if self.batch_size < 2:
            raise QPRError(f"batch_size must be at least 2 (in-batch negatives), got {self.batch_size}")
        if self.max_epochs < 1 or self.patience < 1:
            raise QPRError("max_epochs and patience must be at least 1")
        if self.lr_schedule not in ("constant", "cosine"):
            raise QPRError(f"unknown lr_schedule {self.lr_schedule!r}: use 'constant' or 'cosine'")
        if self.batching not in ("random", "neighbours"):
            raise QPRError(f"unknown batching {self.batching!r}: use 'random' or 'neighbours'")
        if self.pairs not in ("partner", "all"):
            raise QPRError(f"unknown pairs {self.pairs!r}: use 'partner' or 'all'")
        if not 0.0 <= self.unlabeled_dropout < 1.0:
            raise QPRError(f"unlabeled_dropout must be in [0, 1) (0: off), got {self.unlabeled_dropout}")


@dataclass
class TrainResult:
    """The best encoder, its vocabulary, and one history row per finished epoch."""

    encoder: QuestionEncoder
    vocab: Vocabulary
    history: list[dict] = field(default_factory=list)
    best_epoch: int = 0
    best_auc: float = float("nan")
    seconds: float = 0.0
    stopped: str = "max_epochs"  # "max_epochs" | "early_stopping" | "interrupted"

    def summary(self) -> dict:
        return {k: v for k, v in asdict(self).items() if k not in ("encoder", "vocab")}


def cluster_members(corpus: pd.DataFrame, split: str) -> list[np.ndarray]:
    """Row positions of the questions of each cluster of 2+ questions in ``split``."""
    rows = corpus[(corpus["split"] == split) & corpus["cluster"].notna()]
    groups = [g.to_numpy() for _, g in rows.groupby("cluster", sort=True).groups.items()]
    return [g for g in groups if len(g) >= 2]


def epoch_pairs(clusters: list[np.ndarray], rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pair each member of each cluster with a uniformly random other member.

    Returns (anchor rows, positive rows, cluster index of each pair).
    """
    anchors, positives, owner = [], [], []
    for c, members in enumerate(clusters):
        n = len(members)
        # An offset in 1..n-1 from each member's own position picks any other member uniformly.
        partner = (np.arange(n) + rng.integers(1, n, size=n)) % n
        anchors.append(members)
        positives.append(members[partner])
        owner.append(np.full(n, c))
    return np.concatenate(anchors), np.concatenate(positives), np.concatenate(owner)


def all_pairs(
    clusters: list[np.ndarray], batch_size: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every unordered pair of each cluster once, each in a random direction; large clusters capped.

    A batch holds one pair per cluster, so a cluster with more pairs than the epoch has batches
    would stretch the epoch into near-empty batches (Quora-lite's largest training cluster has
    5,778 pairs): such a cluster gives a random subset of pairs. Its cap is the fixed point of
    cap = ceil(sum of min(pairs, cap) / pairs a batch can hold), the fewest batches the capped
    epoch needs (capping shrinks the epoch, hence the fixed point; a batch holds at most
    ``batch_size`` pairs and one per cluster, so fewer clusters than ``batch_size`` hold fewer).
    On Quora-lite 69 clusters are capped at 267 pairs.
    Returns (anchor rows, positive rows, cluster index of each pair), as ``epoch_pairs`` does.
    """
    sizes = np.array([len(members) for members in clusters])
    pair_counts = sizes * (sizes - 1) // 2
    per_batch = min(batch_size, len(clusters))
    cap = math.ceil(pair_counts.sum() / per_batch)
    while (smaller := math.ceil(np.minimum(pair_counts, cap).sum() / per_batch)) < cap:
        cap = smaller
    anchors, positives, owner = [], [], []
    for c, (members, total) in enumerate(zip(clusters, pair_counts)):
        take = min(total, cap)
        # Pair t of the row-major upper triangle, drawn without building all n(n-1)/2 pairs.
        t = rng.choice(total, take, replace=False) if take < total else np.arange(total)
        n = len(members)
        row_start = np.arange(n) * n - np.arange(n) * (np.arange(n) + 1) // 2
        first = np.searchsorted(row_start, t, side="right") - 1
        second = t - row_start[first] + first + 1
        swap = rng.random(len(t)) < 0.5
        anchors.append(members[np.where(swap, second, first)])
        positives.append(members[np.where(swap, first, second)])
        owner.append(np.full(len(t), c))
    return np.concatenate(anchors), np.concatenate(positives), np.concatenate(owner)


def unlabeled_rows(corpus: pd.DataFrame, clusters: list[np.ndarray]) -> np.ndarray:
    """Rows of the questions that anchor no training pair and are not val/test questions (those
    are the queries), one row per distinct text: the material for self-supervised pairs."""
    paired = np.zeros(len(corpus), dtype=bool)
    paired[np.concatenate(clusters)] = True
    rows = np.flatnonzero(~paired & ~corpus["split"].isin(["val", "test"]).to_numpy())
    _, first = np.unique(corpus["question"].to_numpy()[rows].astype(str), return_index=True)
    return np.sort(rows[first])


def view_pairs(id_lists: list[list], dropout: float, rng: np.random.Generator) -> tuple[list[list], list[list]]:
    """Two views of each token-id list, each keeping every token with probability 1 - ``dropout``
    (at least one token), as (first views, second views)."""
    def view(ids: list) -> list:
        keep = rng.random(len(ids)) >= dropout
        if not keep.any():
            keep[rng.integers(len(ids))] = True
        return [token for token, kept in zip(ids, keep) if kept]

    return [view(ids) for ids in id_lists], [view(ids) for ids in id_lists]


def batch_units(
    owner: np.ndarray, batch_size: int, rng: np.random.Generator, group: np.ndarray | None = None
) -> list[list[int]]:
    """Pair indices in random order, cut into units that go into a batch whole.

    Without ``group`` each pair is a unit of its own. With ``group`` (one label per pair) a unit
    is one round of a group: the k-th pair of each of the group's clusters, cut at random into
    chunks of at most ``batch_size``. So a unit's clusters are distinct and alike, and a group's
    later rounds are placed independently, in other batches, beside other groups' units.
    """
    order = rng.permutation(len(owner))
    if group is None:
        return [[pair] for pair in order.tolist()]
    frame = pd.DataFrame({"pair": order, "owner": owner[order], "group": group[order]})
    frame["round"] = frame.groupby("owner").cumcount()
    frame["chunk"] = frame.groupby(["group", "round"]).cumcount() // batch_size
    units = [pairs.tolist() for _, pairs in frame.groupby(["group", "round", "chunk"])["pair"]]
    return [units[i] for i in rng.permutation(len(units))]


def cluster_disjoint_batches(
    owner: np.ndarray, batch_size: int, rng: np.random.Generator, group: np.ndarray | None = None
) -> list[np.ndarray]:
    """Shuffle pair indices into batches of at most ``batch_size`` with distinct ``owner`` values.

    Greedy first fit of ``batch_units``: each unit goes to the first open batch with room for it
    that holds none of its clusters, so a big cluster spreads over several batches. With ``group``
    the clusters of one group share batches. Batches of a single pair (no negative) are dropped.
    """
    batches: list[list[int]] = []
    seen: list[set] = []
    first_open = 0
    for unit in batch_units(owner, batch_size, rng, group):
        clusters = owner[unit].tolist()
        b = first_open
        while b < len(batches) and (len(batches[b]) + len(unit) > batch_size or not seen[b].isdisjoint(clusters)):
            b += 1
        if b == len(batches):
            batches.append([])
            seen.append(set())
        batches[b].extend(unit)
        seen[b].update(clusters)
        while first_open < len(batches) and len(batches[first_open]) >= batch_size:
            first_open += 1
    order = rng.permutation(len(batches))
    return [np.asarray(batches[i]) for i in order if len(batches[i]) >= 2]


def neighbour_groups(
    encoder: QuestionEncoder, token_ids: list[list[int]], clusters: list[np.ndarray], batch_size: int, seed: int
) -> np.ndarray:
    """A group label per training cluster: k-means (FAISS) over the clusters' mean vectors under
    the current encoder, with about ``batch_size`` clusters per group.

    Batching a group's pairs together makes a batch's negatives the clusters the encoder finds
    most alike: harder negatives than random ones (and, with label noise, more false negatives,
    which SDML's smoothing is meant to absorb).
    """
    k = len(clusters) // batch_size
    if k < 2:
        return np.zeros(len(clusters), dtype=np.int64)
    rows = np.concatenate(clusters)
    owner = np.repeat(np.arange(len(clusters)), [len(c) for c in clusters])
    was_training = encoder.training
    encoder.eval()
    with torch.inference_mode():
        vectors = encode_ids(encoder, [token_ids[i] for i in rows], chunk_size=512).numpy()
    encoder.train(was_training)
    centroids = np.zeros((len(clusters), vectors.shape[1]), dtype=np.float32)
    np.add.at(centroids, owner, vectors)
    centroids /= np.bincount(owner)[:, None]
    kmeans = faiss.Kmeans(centroids.shape[1], k, niter=10, seed=seed)
    kmeans.train(centroids)
    return kmeans.index.search(centroids, 1)[1].ravel()


def validation_pairs(corpus: pd.DataFrame, n: int, seed: int) -> tuple[list[str], list[str], np.ndarray]:
    """Up to ``n`` positive pairs from val clusters and as many negatives (questions of two
    different val clusters), as (texts a, texts b, labels 1/0)."""
    clusters = cluster_members(corpus, "val")
    if len(clusters) < 2:
        # Negatives pair questions of two different val clusters, so one cluster is not enough.
        raise QPRError(
            f"{len(clusters)} validation cluster(s) (split 'val' with 2+ questions); early stopping on ROC AUC "
            "needs at least 2: give more clusters the 'val' split"
        )
    rng = np.random.default_rng(seed)
    a, b, owner = epoch_pairs(clusters, rng)
    pick = rng.permutation(len(a))[:n]
    a, b, owner = a[pick], b[pick], owner[pick]
    all_rows = np.concatenate(clusters)
    row_owner = np.concatenate([np.full(len(c), i) for i, c in enumerate(clusters)])
    neg = rng.integers(0, len(all_rows), size=len(a))
    clash = row_owner[neg] == owner
    while clash.any():  # redraw the few negatives that hit the anchor's own cluster
        neg[clash] = rng.integers(0, len(all_rows), size=int(clash.sum()))
        clash = row_owner[neg] == owner
    texts = corpus["question"].to_numpy()
    return (
        list(texts[np.concatenate([a, a])]),
        list(texts[np.concatenate([b, all_rows[neg]])]),
        np.concatenate([np.ones(len(a)), np.zeros(len(a))]),
    )


def train(
    corpus: pd.DataFrame,
    config: TrainConfig = TrainConfig(),
    text_config: TextConfig = TextConfig(),
    encoder_config: EncoderConfig = EncoderConfig(),
    warm_start: tuple[QuestionEncoder, Vocabulary] | None = None,
    batch_groups: pd.Series | None = None,
    on_epoch: Callable[[dict], None] | None = None,
    progress: bool = True,
    return_on_interrupt: bool = True,
) -> TrainResult:
    """Train an encoder on the ``train`` clusters of ``corpus``; early-stop on ``val`` ROC AUC.

    ``warm_start`` continues from an existing encoder and keeps its vocabulary (retraining after
    annotation). ``batch_groups`` (a label per corpus row, aligned with ``corpus``) batches the
    pairs of a group together (``cluster_disjoint_batches``): the noise experiment passes the
    clean clusters, so that its injected false negatives meet in batches as they would where a
    large paraphrase family is spread over many clusters. ``on_epoch`` receives each history row
    as it is made. Returns the best epoch's
    encoder. Ctrl-C stops after the current batch and returns the best epoch so far (or re-raises
    if no epoch finished); ``return_on_interrupt=False`` always re-raises, for callers that run
    many trainings and must not record a cut-short one as a result.
    """
    clusters = cluster_members(corpus, "train")
    if not clusters:
        raise QPRError("no training clusters: need questions with split 'train' in clusters of 2+")
    if batch_groups is not None and config.batching != "random":
        raise QPRError("batch_groups and batching='neighbours' both decide what shares a batch: use one")
    normalized = (warm_start[0].config if warm_start else encoder_config).normalize
    if config.distance == "cosine" and not normalized:
        # The index ranks by Euclidean distance, which is a cosine ranking only on unit vectors.
        raise QPRError("the cosine distance needs an encoder with normalize=True (CLI: --normalize)")
    torch.manual_seed(config.seed)
    rng = np.random.default_rng(config.seed)
    if warm_start is None:
        train_texts = corpus.loc[corpus["split"] == "train", "question"]
        vocab = Vocabulary.build(train_texts, text_config)
        encoder = QuestionEncoder(vocab.size, encoder_config)
        if config.word_vectors:
            queries = corpus["split"].isin(["val", "test"])
            ids, rows = word_vector_rows(corpus.loc[~queries, "question"], vocab, encoder_config.embedding_dim, config.seed)
            with torch.no_grad():
                encoder.embedding.weight[torch.from_numpy(ids)] = torch.from_numpy(rows)
    else:
        encoder, vocab = copy.deepcopy(warm_start[0]), warm_start[1]
    loss_fn = make_loss(
        config.loss, smoothing=config.smoothing, margin=config.margin, distance=config.distance, negatives=config.negatives
    )
    # The loss may own parameters too (the cosine SDML's learned scale).
    optimizer = torch.optim.Adam([*encoder.parameters(), *loss_fn.parameters()], lr=config.lr)
    val_a, val_b, val_labels = validation_pairs(corpus, config.val_pairs, config.seed)
    token_ids = [vocab.encode(q) for q in corpus["question"]]
    unlabeled = unlabeled_rows(corpus, clusters) if config.unlabeled_dropout else np.array([], dtype=np.int64)
    unlabeled_ids = [token_ids[i] for i in unlabeled]
    # Unclustered rows never anchor a pair, so their (missing) group never matters.
    groups = None if batch_groups is None else batch_groups.astype(object).fillna("").to_numpy()

    result = TrainResult(encoder=copy.deepcopy(encoder), vocab=vocab, best_auc=-1.0)
    best_state = copy.deepcopy(encoder.state_dict())
    start = time.perf_counter()
    stale = 0
    schedule = None
    try:
        for epoch in range(1, config.max_epochs + 1):
            encoder.train()
            if config.pairs == "all":
                anchors, positives, owner = all_pairs(clusters, config.batch_size, rng)
            else:
                anchors, positives, owner = epoch_pairs(clusters, rng)
            if config.batching == "neighbours":
                group = neighbour_groups(encoder, token_ids, clusters, config.batch_size, config.seed + epoch)[owner]
            else:
                group = None if groups is None else pd.factorize(groups[anchors], sort=True)[0]
            anchor_ids = [token_ids[i] for i in anchors]
            positive_ids = [token_ids[i] for i in positives]
            if len(unlabeled):
                # Each unlabeled question is a cluster (and a group) of its own.
                first, second = view_pairs(unlabeled_ids, config.unlabeled_dropout, rng)
                anchor_ids += first
                positive_ids += second
                owner = np.concatenate([owner, len(clusters) + np.arange(len(unlabeled))])
                if group is not None:
                    group = np.concatenate([group, group.max() + 1 + np.arange(len(unlabeled))])
            batches = cluster_disjoint_batches(owner, config.batch_size, rng, group)
            if schedule is None and config.lr_schedule == "cosine":
                # Epochs hold about the same number of batches, so the first one sets the horizon;
                # past it (a later epoch with a few more batches) the rate stays at zero.
                horizon = len(batches) * config.max_epochs
                schedule = torch.optim.lr_scheduler.LambdaLR(
                    optimizer, lambda step: 0.5 * (1 + math.cos(math.pi * min(step / horizon, 1.0))))
            total = 0.0
            bar = tqdm(batches, desc=f"epoch {epoch}/{config.max_epochs}", disable=not progress, leave=False)
            for batch in bar:
                a = encode_ids(encoder, [anchor_ids[i] for i in batch])
                p = encode_ids(encoder, [positive_ids[i] for i in batch])
                loss = loss_fn(a, p)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                if schedule is not None:
                    schedule.step()
                total += loss.item()
                bar.set_postfix(loss=f"{loss.item():.4f}", val_auc=f"{result.best_auc:.4f}" if result.history else "-")
            auc = pair_auc(encoder, vocab, val_a, val_b, val_labels)
            row = {"epoch": epoch, "loss": total / max(len(batches), 1), "val_auc": auc,
                   "seconds": time.perf_counter() - start}
            result.history.append(row)
            if progress:
                tqdm.write(f"epoch {epoch}: loss {row['loss']:.4f}  val ROC AUC {auc:.4f}")
            if on_epoch:
                on_epoch(row)
            if auc > result.best_auc + 1e-4:
                result.best_auc, result.best_epoch, stale = auc, epoch, 0
                best_state = copy.deepcopy(encoder.state_dict())
            else:
                stale += 1
                if stale >= config.patience:
                    result.stopped = "early_stopping"
                    break
    except KeyboardInterrupt:
        if not result.history or not return_on_interrupt:
            raise
        result.stopped = "interrupted"
    result.encoder.load_state_dict(best_state)
    result.encoder.eval()
    result.seconds = time.perf_counter() - start
    return result
