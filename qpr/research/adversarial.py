"""Unsupervised domain adaptation by an adversarial domain classifier with gradient reversal
(Ganin & Lempitsky; the AskUbuntu paper's transfer experiment).

The encoder is trained on the source domain's clusters with the usual metric-learning loss and,
at the same time, a small classifier learns to tell source questions' vectors from unlabeled
target questions' vectors. The classifier's gradient reaches the encoder through a gradient
reversal layer (identity forward, gradient times -``weight`` backward), so the encoder is pushed
towards vectors from which the domain cannot be told. No target label is used.

The vocabulary is built from the source training questions and the target texts, so target
words get their own rows; ``weight=0`` trains the same model without the adversary, which
separates the adversary's effect from the vocabulary's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from qpr.model.encoder import EncoderConfig, QuestionEncoder, encode_ids
from qpr.errors import QPRError
from qpr.evaluation.metrics import pair_auc
from qpr.model.losses import make_loss
from qpr.model.text import TextConfig, Vocabulary, tokenize
from qpr.training.loop import descend, fit
from qpr.training.sampling import cluster_disjoint_batches, cluster_members, epoch_pairs, validation_pairs
from qpr.training.train import TrainConfig, TrainResult


class GradientReversal(torch.autograd.Function):
    """Identity in the forward pass; multiplies the gradient by ``-weight`` in the backward pass."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: float) -> torch.Tensor:
        ctx.weight = weight
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return -ctx.weight * grad, None


def reverse_gradient(x: torch.Tensor, weight: float) -> torch.Tensor:
    return GradientReversal.apply(x, weight)


class DomainClassifier(nn.Module):
    """Vector -> logit that it comes from the target domain (one hidden ReLU layer)."""

    def __init__(self, dim: int, hidden: int = 128) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).squeeze(1)


@dataclass(frozen=True)
class AdversarialConfig:
    """``weight``: the reversed gradient's scale (0: no adversary); ``hidden``: the classifier's width."""

    weight: float = 0.1
    hidden: int = 128
    classifier_lr: float = 1e-3

    def __post_init__(self) -> None:
        if self.weight < 0:
            raise QPRError(f"the adversary's weight must be >= 0, got {self.weight}")


def train_adversarial(
    corpus: pd.DataFrame,
    target_texts: Sequence[str],
    config: TrainConfig = TrainConfig(),
    adversarial: AdversarialConfig = AdversarialConfig(),
    text_config: TextConfig = TextConfig(),
    encoder_config: EncoderConfig = EncoderConfig(),
    on_epoch=None,
) -> TrainResult:
    """Train an encoder on ``corpus``'s train clusters with the adversary against ``target_texts``.

    Each batch of source pairs is joined by as many random target questions; the classifier sees
    the source anchors' and the target questions' vectors. Early stopping on source val ROC AUC,
    as ``qpr.training.train.train``. Each history row also records the classifier's domain accuracy.
    """
    clusters = cluster_members(corpus, "train")
    targets = [t for t in target_texts if isinstance(t, str) and tokenize(t)]
    if not clusters or not targets:
        raise QPRError("adversarial training needs source training clusters and target texts")
    torch.manual_seed(config.seed)
    rng = np.random.default_rng(config.seed)
    train_texts = corpus.loc[corpus["split"] == "train", "question"].tolist()
    vocab = Vocabulary.build(train_texts + targets, text_config)
    encoder = QuestionEncoder(vocab.size, encoder_config)
    classifier = DomainClassifier(encoder_config.output_dim, adversarial.hidden)
    loss_fn = make_loss(config.loss, smoothing=config.smoothing, margin=config.margin, distance=config.distance,
                        negatives=config.negatives)
    optimizer = torch.optim.Adam([*encoder.parameters(), *loss_fn.parameters()], lr=config.lr)
    classifier_optimizer = torch.optim.Adam(classifier.parameters(), lr=adversarial.classifier_lr)
    val_a, val_b, val_labels = validation_pairs(corpus, config.val_pairs, config.seed)
    token_ids = [vocab.encode(q) for q in corpus["question"]]
    target_ids = [vocab.encode(t) for t in targets]
    anchors = positives = np.array([], dtype=np.int64)  # the current epoch's pairs
    domain_tally: list[tuple[int, int]] = []  # (right, seen) per batch of the current epoch

    def epoch_batches(epoch: int) -> list[np.ndarray]:
        nonlocal anchors, positives
        domain_tally.clear()
        anchors, positives, owner = epoch_pairs(clusters, rng)
        return cluster_disjoint_batches(owner, config.batch_size, rng)

    def step(batch: np.ndarray) -> float:
        a = encode_ids(encoder, [token_ids[anchors[i]] for i in batch])
        p = encode_ids(encoder, [token_ids[positives[i]] for i in batch])
        pick = rng.integers(0, len(target_ids), len(batch))
        t = encode_ids(encoder, [target_ids[i] for i in pick])
        metric_loss = loss_fn(a, p)
        features = reverse_gradient(torch.cat([a, t]), adversarial.weight)
        domain = torch.cat([torch.zeros(len(a)), torch.ones(len(t))])
        logits = classifier(features)
        descend(metric_loss + F.binary_cross_entropy_with_logits(logits, domain), optimizer, classifier_optimizer)
        domain_tally.append((int(((logits > 0).float() == domain).sum()), len(domain)))
        return metric_loss.item()

    def report(batches: list, losses: list[float]) -> dict:
        right, seen = sum(r for r, _ in domain_tally), sum(n for _, n in domain_tally)
        # The loss is the epoch's sum of the batches' metric losses (not their mean, as elsewhere).
        return {"loss": sum(losses), "val_auc": pair_auc(encoder, vocab, val_a, val_b, val_labels),
                "domain_accuracy": right / max(seen, 1)}

    # A Ctrl-C propagates: the benchmark runs many of these and must not record a cut-short one.
    fitted = fit(encoder, config.max_epochs, epoch_batches, step, report, score="val_auc", patience=config.patience,
                 on_epoch=on_epoch, return_on_interrupt=False)
    return TrainResult.of(encoder, vocab, fitted)
