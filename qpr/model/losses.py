"""Metric-learning losses over a batch of N paraphrase pairs with in-batch negatives.

Both losses take ``anchors`` and ``positives`` of shape ``(N, d)`` where row i of each is a
paraphrase pair and every ``positives[j]``, j != i, is a negative for ``anchors[i]``. Batches must
therefore hold at most one pair per cluster (``qpr.training.train`` builds them that way).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

Distance = Literal["euclidean", "squared", "cosine"]

# Initial inverse temperature of the cosine SDML softmax; learned from there. Cosine distances lie
# in [0, 2], so without a scale the softmax could never become confident.
COSINE_SCALE = 20.0
MAX_COSINE_SCALE = 100.0


def pairwise_distances(a: torch.Tensor, b: torch.Tensor, distance: Distance = "squared") -> torch.Tensor:
    """``(N, M)`` matrix of distances between rows of ``a`` and rows of ``b``.

    "cosine" is 1 - cosine similarity.
    """
    if distance == "cosine":
        return 1.0 - F.normalize(a, dim=1) @ F.normalize(b, dim=1).T
    # ||a||^2 + ||b||^2 - 2ab^T is one matrix product; the broadcast difference would build an
    # (N, M, d) tensor that dominates a training step. Rounding can dip just below zero: clamp.
    squared = (a.pow(2).sum(1, keepdim=True) + b.pow(2).sum(1) - 2.0 * a @ b.T).clamp_min(0.0)
    if distance == "squared":
        return squared
    if distance == "euclidean":
        # The epsilon keeps the gradient of sqrt finite when two vectors coincide.
        return (squared + 1e-12).sqrt()
    raise ValueError(f"unknown distance {distance!r}: use 'euclidean', 'squared' or 'cosine'")


class SDMLLoss(nn.Module):
    """Smoothed Deep Metric Learning (Bonadiman et al. 2019, eq. 3-4).

    For each anchor, a softmax over the negative distances to all N positives in the batch is
    compared by KL divergence with a smoothed target: ``1 - smoothing`` on its own paraphrase plus
    ``smoothing / N`` on every candidate. With N=3 and smoothing 0.3 the target row is
    0.8 / 0.1 / 0.1 (the paper's Figure 1). ``smoothing=0`` is plain cross-entropy.

    With the paper's distances the vectors' norms set the softmax's sharpness. With "cosine" they
    cannot, so the distances are multiplied by a learned scale (an inverse temperature, stored as
    its log, starting at ``COSINE_SCALE``, at most ``MAX_COSINE_SCALE``); the trainer optimises it
    with the encoder.

    >>> loss = SDMLLoss(smoothing=0.3)
    >>> anchors, positives = torch.randn(4, 8), torch.randn(4, 8)
    >>> loss(anchors, positives).ndim
    0
    """

    def __init__(self, smoothing: float = 0.3, distance: Distance = "squared") -> None:
        super().__init__()
        if not 0.0 <= smoothing < 1.0:
            raise ValueError(f"smoothing must be in [0, 1), got {smoothing}")
        self.smoothing = smoothing
        self.distance = distance
        self.log_scale = nn.Parameter(torch.tensor(math.log(COSINE_SCALE))) if distance == "cosine" else None

    def targets(self, n: int, device: torch.device | None = None) -> torch.Tensor:
        """The smoothed ``(n, n)`` target distribution."""
        eye = torch.eye(n, device=device)
        return (1.0 - self.smoothing) * eye + self.smoothing / n

    def forward(self, anchors: torch.Tensor, positives: torch.Tensor) -> torch.Tensor:
        """The KL divergence from the smoothed target rows (``targets(N)``) to the softmax over
        negative distances."""
        distances = pairwise_distances(anchors, positives, self.distance)
        if self.log_scale is not None:
            # Capped (as CLIP caps its logit scale) so a run of easy batches cannot inflate it without bound.
            distances = distances * self.log_scale.clamp(max=math.log(MAX_COSINE_SCALE)).exp()
        log_probs = F.log_softmax(-distances, dim=1)
        return F.kl_div(log_probs, self.targets(len(anchors), anchors.device), reduction="batchmean")


class TripletLoss(nn.Module):
    """Triplet loss ``max(0, d(a, p) - d(a, n) + margin)`` with an in-batch negative per anchor.

    ``negatives="random"`` picks a uniformly random other pair's positive; ``"hard"`` picks the
    closest one (hardest negative). The paper's baselines: margin 0.5, euclidean or squared distance.
    """

    def __init__(
        self,
        margin: float = 0.5,
        distance: Distance = "euclidean",
        negatives: Literal["random", "hard"] = "random",
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        if negatives not in ("random", "hard"):
            raise ValueError(f"unknown negatives {negatives!r}: use 'random' or 'hard'")
        self.margin = margin
        self.distance = distance
        self.negatives = negatives
        self.generator = generator

    def forward(self, anchors: torch.Tensor, positives: torch.Tensor) -> torch.Tensor:
        n = len(anchors)
        if n < 2:
            raise ValueError("a triplet loss needs at least 2 pairs in the batch for a negative")
        dist = pairwise_distances(anchors, positives, self.distance)
        rows = torch.arange(n, device=dist.device)
        if self.negatives == "hard":
            negative = dist.masked_fill(torch.eye(n, dtype=torch.bool, device=dist.device), float("inf")).argmin(dim=1)
        else:
            # A random offset in 1..n-1 picks any other row with equal probability.
            offset = torch.randint(1, n, (n,), generator=self.generator).to(dist.device)
            negative = (rows + offset) % n
        return F.relu(dist[rows, rows] - dist[rows, negative] + self.margin).mean()


def judged_negative_loss(anchors: torch.Tensor, positives: torch.Tensor, rows: torch.Tensor, negatives: torch.Tensor,
                         distance: Distance = "squared") -> torch.Tensor:
    """Cross-entropy that each anchor of ``rows`` picks its own positive over the question an
    annotator judged *different* from it (``negatives``, row k the judged negative of anchor
    ``rows[k]``): a two-way softmax over the negative distances (own positive, judged negative).

    It is the term that makes the very pairs the model confused a training signal (issue 39);
    ``qpr.training.train`` adds it to the in-batch loss with the weight ``TrainConfig.judged_weight``.
    Only the pair is contrasted: the batch's other positives are the in-batch loss's business (an
    earlier design appended the judged negative as a column of the whole unsmoothed softmax, which
    counted those rows' in-batch negatives twice without SDML's smoothing and lost H@1:
    docs/LOOP_PAYOFF.md). Summed over ``rows`` and divided by the batch size, as the in-batch loss
    averages its rows: at weight 1 a judged row counts as much as any other row of the batch.
    Zero when no anchor of the batch has a judged negative.

    >>> a, p = torch.randn(4, 8), torch.randn(4, 8)
    >>> judged_negative_loss(a, p, torch.tensor([1]), torch.randn(1, 8)).ndim
    0
    """
    if len(rows) == 0:
        return anchors.sum() * 0.0  # keeps the graph whole, so the caller can always add it
    own = pairwise_distances(anchors[rows], positives[rows], distance).diagonal()
    judged = pairwise_distances(anchors[rows], negatives, distance).diagonal()
    logits = -torch.stack([own, judged], dim=1)
    return F.cross_entropy(logits, torch.zeros(len(rows), dtype=torch.long, device=anchors.device), reduction="sum") / len(anchors)


def make_loss(name: str, *, smoothing: float, margin: float, distance: Distance, negatives: str) -> nn.Module:
    """The loss a training config names: ``"sdml"`` or ``"triplet"``."""
    if name == "sdml":
        return SDMLLoss(smoothing=smoothing, distance=distance)
    if name == "triplet":
        return TripletLoss(margin=margin, distance=distance, negatives=negatives)
    raise ValueError(f"unknown loss {name!r}: use 'sdml' or 'triplet'")
