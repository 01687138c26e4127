import math

import pytest
import torch
import torch.nn.functional as F

from qpr.model.losses import SDMLLoss, TripletLoss, pairwise_distances


def test_smoothed_targets_match_figure_1():
    targets = SDMLLoss(smoothing=0.3).targets(3)
    expected = torch.tensor([[0.8, 0.1, 0.1], [0.1, 0.8, 0.1], [0.1, 0.1, 0.8]])
    torch.testing.assert_close(targets, expected)


def test_pairwise_distances_match_cdist():
    a, b = torch.randn(5, 4), torch.randn(3, 4)
    torch.testing.assert_close(pairwise_distances(a, b, "euclidean"), torch.cdist(a, b), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(pairwise_distances(a, b, "squared"), torch.cdist(a, b) ** 2, atol=1e-4, rtol=1e-4)


def test_cosine_distance_is_one_minus_cosine_similarity():
    a, b = torch.randn(5, 4), torch.randn(3, 4)
    expected = 1 - F.cosine_similarity(a.unsqueeze(1), b.unsqueeze(0), dim=2)
    torch.testing.assert_close(pairwise_distances(a, b, "cosine"), expected, atol=1e-5, rtol=1e-5)


def test_cosine_sdml_scales_distances_by_a_learned_temperature():
    anchors, positives = torch.randn(6, 5), torch.randn(6, 5)
    loss_fn = SDMLLoss(smoothing=0.0, distance="cosine")
    (scale,) = list(loss_fn.parameters())
    logits = -scale.exp() * pairwise_distances(anchors, positives, "cosine")
    expected = F.cross_entropy(logits, torch.arange(6))
    loss = loss_fn(anchors, positives)
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    loss.backward()
    assert scale.grad is not None and scale.grad.item() != 0.0
    assert list(SDMLLoss(distance="squared").parameters()) == []  # the paper's loss has no extra parameter


def test_sdml_value_by_hand():
    # Anchors at 0 and 1 on a line, positives at 0 and 2: squared distances [[0, 4], [1, 1]].
    anchors, positives = torch.tensor([[0.0], [1.0]]), torch.tensor([[0.0], [2.0]])
    eps = 0.2
    total = 0.0
    for row, distances in enumerate([[0.0, 4.0], [1.0, 1.0]]):
        z = sum(math.exp(-d) for d in distances)
        probs = [math.exp(-d) / z for d in distances]
        targets = [(1 - eps) * (i == row) + eps / 2 for i in range(2)]
        total += sum(t * math.log(t / p) for t, p in zip(targets, probs))
    loss = SDMLLoss(smoothing=eps)(anchors, positives)
    assert loss.item() == pytest.approx(total / 2, rel=1e-5)


def test_sdml_without_smoothing_is_cross_entropy():
    anchors, positives = torch.randn(6, 5), torch.randn(6, 5)
    logits = -torch.cdist(anchors, positives) ** 2
    expected = F.cross_entropy(logits, torch.arange(6))
    assert SDMLLoss(smoothing=0.0)(anchors, positives).item() == pytest.approx(expected.item(), rel=1e-4)


def test_triplet_hard_and_random_by_hand():
    # Squared distances [[0, 4, 1], [1, 1, 0], [9, 1, 4]] (anchors 0, 1, 2; positives 0, 2, 1).
    anchors, positives = torch.tensor([[0.0], [1.0], [3.0]]), torch.tensor([[0.0], [2.0], [1.0]])
    hard = TripletLoss(margin=0.5, distance="squared", negatives="hard")(anchors, positives)
    # Hardest negatives: row 0 -> col 2 (1), row 1 -> col 2 (0), row 2 -> col 1 (1).
    expected = (max(0, 0 - 1 + 0.5) + max(0, 1 - 0 + 0.5) + max(0, 4 - 1 + 0.5)) / 3
    assert hard.item() == pytest.approx(expected)
    # With two pairs the only possible random negative is the other pair's positive.
    two = TripletLoss(margin=0.5, distance="euclidean", negatives="random")(anchors[:2], positives[:2])
    assert two.item() == pytest.approx((max(0, 0 - 2 + 0.5) + max(0, 1 - 1 + 0.5)) / 2)


@pytest.mark.parametrize(
    "loss", [SDMLLoss(0.3), TripletLoss(distance="euclidean", negatives="random"), TripletLoss(distance="squared", negatives="hard")]
)
def test_gradients_flow_to_both_sides(loss):
    anchors = torch.randn(8, 4, requires_grad=True)
    positives = torch.randn(8, 4, requires_grad=True)
    loss(anchors, positives).backward()
    assert anchors.grad.abs().sum() > 0 and positives.grad.abs().sum() > 0
    assert torch.isfinite(anchors.grad).all()


def test_euclidean_gradient_is_finite_for_identical_vectors():
    x = torch.ones(3, 2, requires_grad=True)
    TripletLoss(distance="euclidean", negatives="hard")(x, x.detach().clone()).backward()
    assert torch.isfinite(x.grad).all()


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError):
        SDMLLoss(smoothing=1.0)
    with pytest.raises(ValueError):
        TripletLoss(negatives="semi")
    with pytest.raises(ValueError):
        TripletLoss()(torch.randn(1, 2), torch.randn(1, 2))
