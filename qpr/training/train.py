"""Training the encoder on clusters: the CNN trainer's settings, its batches, step and validation.

Each epoch takes its pairs and batches from ``qpr.training.sampling`` (every training question with a
random other member of its cluster, or with ``pairs="all"`` every pair of each cluster, in
batches of ``batch_size`` in which no two pairs share a cluster). After each epoch the encoder is
scored by ROC AUC on held-out validation pairs. The fit loop (``qpr.training.loop``) keeps the best
epoch, stops after ``patience`` epochs without improvement, and on Ctrl-C returns the best epoch so far.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd
import torch

from qpr.training import distributed
from qpr.model.device import autocast, current_device
from qpr.model.encoder import EncoderConfig, QuestionEncoder, encode_ids
from qpr.errors import QPRError
from qpr.evaluation.metrics import pair_auc
from qpr.model.losses import judged_negative_loss, make_loss
from qpr.training.fixed_shape import FixedShape
from qpr.training.loop import FitResult, descend, fit, mean_loss
from qpr.training.sampling import (
    JudgedPairs, all_pairs, cluster_disjoint_batches, cluster_members, epoch_pairs, neighbour_groups, unlabeled_rows, validation_pairs,
    view_pairs,
)
from qpr.model.text import TextConfig, Vocabulary
from qpr.model.word_vectors import word_vector_rows

# The weight of the judged-negative term against the in-batch loss (docs/LOOP_PAYOFF.md measured it).
JUDGED_WEIGHT = 1.0
# How often a judged-same pair is drawn per epoch by the fixed-shape sampler: a verified positive
# counts as much as two members of a cluster. Chosen as a prior; measured since (docs/LOOP_PAYOFF.md,
# "Weights"): 1 and 4 differ from 2 by -0.2 and +0.4 points of H@1, neither interval excluding zero.
JUDGED_REPEAT = 2
# Clusters whose estimated purity (annotations.purity) is below this are left out of a retrain while
# enough others remain: more of their pairs are wrong than right. Chosen as a prior; measured since
# (docs/LOOP_PAYOFF.md, "Weights"): 0 and 0.4 differ from 0.2 by -0.2 and +0.7 points, neither excluding zero.
MIN_PURITY = 0.2


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
    are not val/test queries, unlabeled ones included (``qpr.model.word_vectors``; needs gensim); a warm
    start keeps its own embeddings, so retraining a bundle trained with it needs no gensim.
    ``judged_weight`` weighs the term that trains on annotators' judged-different pairs
    (``qpr.model.losses.judged_negative_loss``) against the in-batch loss, when ``train`` is given
    judged pairs (0: the judgments only relabel clusters; default measured in docs/LOOP_PAYOFF.md).
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
    judged_weight: float = JUDGED_WEIGHT
    batches: str = "greedy"
    judged_repeat: int = JUDGED_REPEAT
    min_purity: float = MIN_PURITY
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
        if self.judged_weight < 0:
            raise QPRError(f"judged_weight must be 0 or more (0: judged pairs only relabel clusters), got {self.judged_weight}")
        if self.batches not in ("greedy", "fixed"):
            raise QPRError(f"unknown batches {self.batches!r}: use 'greedy' or 'fixed'")
        if self.batches == "fixed" and (self.batching != "random" or self.pairs != "partner" or self.unlabeled_dropout):
            raise QPRError("batches='fixed' draws partner pairs in random batches: use batching='random', pairs='partner' "
                           "and no unlabeled_dropout with it")
        if self.judged_repeat < 0 or not 0.0 <= self.min_purity <= 1.0:
            raise QPRError(f"judged_repeat must be 0 or more and min_purity in [0, 1], got {self.judged_repeat}, {self.min_purity}")
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

    @classmethod
    def of(cls, encoder: QuestionEncoder, vocab: Vocabulary, fitted: FitResult) -> "TrainResult":
        """``encoder`` and ``vocab`` with the fit loop's history, best epoch (scored by val ROC AUC)
        and stop reason."""
        return cls(encoder, vocab, fitted.history, fitted.best_epoch, fitted.best_score, fitted.seconds, fitted.stopped)

    def summary(self) -> dict:
        return {k: getattr(self, k) for k in ("history", "best_epoch", "best_auc", "seconds", "stopped")}


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
    on_batch: Callable[[int, int, int], None] | None = None,
    judged: pd.DataFrame | None = None,
    cluster_weights: pd.Series | None = None,
) -> TrainResult:
    """Train an encoder on the ``train`` clusters of ``corpus``; early-stop on ``val`` ROC AUC.

    ``warm_start`` continues from an existing encoder and keeps its vocabulary (retraining after
    annotation). ``batch_groups`` (a label per corpus row, aligned with ``corpus``) batches the
    pairs of a group together (``cluster_disjoint_batches``): the noise experiment passes the
    clean clusters, so that its injected false negatives meet in batches as they would where a
    large paraphrase family is spread over many clusters. ``on_epoch`` receives each history row
    as it is made; ``on_batch(epoch, batches done, batches in the epoch)`` after each batch (a
    background trainer's progress). Returns the best epoch's
    encoder. Ctrl-C stops after the current batch and returns the best epoch so far (or re-raises
    if no epoch finished); ``return_on_interrupt=False`` always re-raises, for callers that run
    many trainings and must not record a cut-short one as a result. ``judged``: annotators' judged
    pairs (the export's pairs table: ``qid1``, ``qid2``, ``is_duplicate``), trained on directly
    (``qpr.training.sampling.JudgedPairs``): "same" pairs as positives, "different" ones never as
    positives and, weighted by ``config.judged_weight``, as each question's hard negative.
    ``cluster_weights``: each training cluster's estimated purity (by name; ``batches="fixed"`` only).
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
    device = current_device()  # qpr.model.device: auto, cpu or cuda; the encoder comes back to the CPU
    encoder.to(device)
    loss_fn.to(device)
    # The loss may own parameters too (the cosine SDML's learned scale).
    optimizer = torch.optim.Adam([*encoder.parameters(), *loss_fn.parameters()], lr=config.lr)
    val_a, val_b, val_labels = validation_pairs(corpus, config.val_pairs, config.seed)
    token_ids = [vocab.encode(q) for q in corpus["question"]]
    unlabeled = unlabeled_rows(corpus, clusters) if config.unlabeled_dropout else np.array([], dtype=np.int64)
    unlabeled_ids = [token_ids[i] for i in unlabeled]
    # Unclustered rows never anchor a pair, so their (missing) group never matters.
    groups = None if batch_groups is None else batch_groups.astype(object).fillna("").to_numpy()
    pairs_judged = JudgedPairs.of(corpus, judged)
    workers = distributed.world()[1]
    use_negatives = len(pairs_judged.different) > 0 and config.judged_weight > 0
    shape = None
    if config.batches == "fixed":
        if batch_groups is not None:
            raise QPRError("batch_groups need batches='greedy'")
        shape = FixedShape.build(corpus, pairs_judged, config.batch_size, cluster_weights, config.judged_repeat,
                                 config.min_purity)

    # Under torchrun: every worker draws the same global batches, encodes its share through DDP,
    # and the loss sees the gathered global batch (qpr.training.distributed).
    model = distributed.wrap(encoder)
    schedule = None
    anchor_ids: list[list[int]] = []  # the current epoch's pairs, as token ids
    positive_ids: list[list[int]] = []
    negative_ids: list[list[int]] | None = None  # each pair's judged negative (its anchor's own text where none)
    has_negative = np.zeros(0, dtype=bool)

    def epoch_batches(epoch: int) -> list[np.ndarray]:
        nonlocal anchor_ids, positive_ids, negative_ids, has_negative
        if shape is not None:
            anchors, positives, negatives, batches = shape.epoch(rng)
            anchor_ids, positive_ids = [token_ids[i] for i in anchors], [token_ids[i] for i in positives]
            has_negative = negatives >= 0
            negative_ids = [token_ids[n if n >= 0 else a] for a, n in zip(anchors.tolist(), negatives.tolist())]
            return batches
        if config.pairs == "all":
            anchors, positives, owner = all_pairs(clusters, config.batch_size, rng)
        else:
            anchors, positives, owner = epoch_pairs(clusters, rng)
        anchors, positives, owner = pairs_judged.positive_pairs(anchors, positives, owner, clusters, rng)
        if config.batching == "neighbours":
            # Judged-same pairs outside every training cluster have no neighbour group: one each.
            of_cluster = neighbour_groups(encoder, token_ids, clusters, config.batch_size, config.seed + epoch)
            known = owner < len(clusters)
            group = np.where(known, of_cluster[np.minimum(owner, len(clusters) - 1)], of_cluster.max() + 1 + owner)
        else:
            group = None if groups is None else pd.factorize(groups[anchors], sort=True)[0]
        anchor_ids = [token_ids[i] for i in anchors]
        positive_ids = [token_ids[i] for i in positives]
        if use_negatives:
            negatives = pairs_judged.negatives(anchors, rng)
            has_negative = negatives >= 0
            negative_ids = [token_ids[n if n >= 0 else a] for a, n in zip(anchors.tolist(), negatives.tolist())]
        if len(unlabeled):
            # Each unlabeled question is a cluster (and a group) of its own.
            first, second = view_pairs(unlabeled_ids, config.unlabeled_dropout, rng)
            anchor_ids += first
            positive_ids += second
            if use_negatives:
                negative_ids += first
                has_negative = np.concatenate([has_negative, np.zeros(len(first), dtype=bool)])
            owner = np.concatenate([owner, owner.max() + 1 + np.arange(len(unlabeled))])
            if group is not None:
                group = np.concatenate([group, group.max() + 1 + np.arange(len(unlabeled))])
        return cluster_disjoint_batches(owner, config.batch_size, rng, group)

    def start_schedule(epoch: int, batches: int) -> None:
        nonlocal schedule
        if schedule is None and config.lr_schedule == "cosine":
            # Epochs hold about the same number of batches, so the first one sets the horizon;
            # past it (a later epoch with a few more batches) the rate stays at zero.
            horizon = batches * config.max_epochs
            schedule = torch.optim.lr_scheduler.LambdaLR(
                optimizer, lambda step: 0.5 * (1 + math.cos(math.pi * min(step / horizon, 1.0))))

    def step(mine: np.ndarray) -> float:
        with autocast(device):  # mixed precision on CUDA only; the losses take float32
            a = distributed.global_rows(encode_ids(model, [anchor_ids[i] for i in mine])).float()
            p = distributed.global_rows(encode_ids(model, [positive_ids[i] for i in mine])).float()
            objective = loss_fn(a, p)
            if use_negatives and workers == 1:
                rows = np.flatnonzero(has_negative[mine])
                if len(rows):  # only the rows that have a judged negative are encoded again
                    n = encode_ids(model, [negative_ids[i] for i in mine[rows]]).float()
                    objective = objective + config.judged_weight * judged_negative_loss(
                        a, p, torch.from_numpy(rows).to(a.device), n, config.distance)
            elif use_negatives:
                # Under torchrun every row is encoded (a placeholder where it has no judged negative),
                # so that each worker encodes alike and the shares gather into rows that line up.
                n = distributed.global_rows(encode_ids(model, [negative_ids[i] for i in mine])).float()
                rows = torch.from_numpy(np.flatnonzero(distributed.global_rows(
                    torch.from_numpy(has_negative[mine]).to(a.device)).cpu().numpy())).to(a.device)
                objective = objective + config.judged_weight * judged_negative_loss(a, p, rows, n[rows], config.distance)
        loss = descend(objective, optimizer)
        if schedule is not None:
            schedule.step()
        return loss

    def report(batches: list, losses: list[float]) -> dict:
        # steps and the largest batch, so that a comparison can check it trained alike
        return mean_loss(batches, losses) | {"val_auc": pair_auc(encoder, vocab, val_a, val_b, val_labels),
                                             "steps": len(batches), "batch_pairs": max((len(b) for b in batches), default=0)}

    fitted = fit(encoder, config.max_epochs, epoch_batches, step, report, score="val_auc", patience=config.patience,
                 shared=True, progress=progress, score_label="val ROC AUC", on_epoch=on_epoch, on_batch=on_batch,
                 on_epoch_start=start_schedule, return_on_interrupt=return_on_interrupt)
    return TrainResult.of(encoder.cpu(), vocab, fitted)
