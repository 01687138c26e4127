import numpy as np
import pytest

from qpr.errors import QPRError
from qpr.evaluation.ranking import (
    auc_at_fpr,
    average_precision,
    order_by_scores,
    precision_at,
    reciprocal_rank,
    rerank_by_scores,
    rerank_metrics,
)


def test_single_query_metrics_by_hand():
    ranked = [False, True, False, True, True, False]  # relevant at ranks 2, 4, 5
    assert average_precision(ranked) == pytest.approx((1 / 2 + 2 / 4 + 3 / 5) / 3)
    assert reciprocal_rank(ranked) == 0.5
    assert precision_at(ranked, 1) == 0.0
    assert precision_at(ranked, 5) == pytest.approx(3 / 5)
    assert precision_at([True, True], 5) == pytest.approx(2 / 5)  # missing ranks count as misses


def test_rerank_metrics_over_queries_by_hand():
    queries = [
        [True, False, False, False, False],   # AP 1, RR 1, P@1 1, P@5 1/5
        [False, False, True, False, True],    # AP (1/3 + 2/5)/2, RR 1/3, P@1 0, P@5 2/5
        [False, False, False, False, False],  # no relevant candidate
    ]
    skip = rerank_metrics(queries, empty="skip")
    assert skip["queries"] == 2 and skip["queries_without_relevant"] == 1
    assert skip["P@1"] == pytest.approx(0.5)
    assert skip["P@5"] == pytest.approx((1 / 5 + 2 / 5) / 2)
    assert skip["MAP"] == pytest.approx((1 + (1 / 3 + 2 / 5) / 2) / 2)
    assert skip["MRR"] == pytest.approx((1 + 1 / 3) / 2)
    zero = rerank_metrics(queries)
    assert zero["queries"] == 3
    assert zero["MAP"] == pytest.approx((1 + (1 / 3 + 2 / 5) / 2) / 3)
    assert zero["MRR"] == pytest.approx((1 + 1 / 3) / 3)


def test_rerank_by_scores_orders_by_score_and_breaks_ties_by_input_order():
    assert order_by_scores([0.1, 0.9, 0.5, 0.9]).tolist() == [1, 3, 2, 0]
    relevance = [[False, False, True]]
    assert rerank_by_scores([[0.0, 0.0, 1.0]], relevance)["P@1"] == 1.0  # relevant one scored highest
    assert rerank_by_scores([[0.0, 0.0, 0.0]], relevance)["MRR"] == pytest.approx(1 / 3)  # all tied: input order
    with pytest.raises(QPRError):
        rerank_by_scores([[0.0, 1.0]], relevance)


def test_auc05_plain_normalised_area_by_hand():
    # 2 positives, 20 negatives. Positive at the top, then one negative: the ROC curve holds
    # TPR 0.5 from FPR 0 to 0.05 (= 1/20), so the area up to 0.05 is 0.025 and AUC(0.05) 0.5.
    labels = [1, 0, 1] + [0] * 19
    scores = [0.9, 0.8, 0.7] + [0.1] * 19
    assert auc_at_fpr(labels, scores) == pytest.approx(0.5)
    # sklearn's McClish-standardised value of the same curve: 0.5 * (1 + (0.025 - a) / (0.05 - a)), a = 0.05**2 / 2.
    a = 0.05**2 / 2
    assert auc_at_fpr(labels, scores, mcclish=True) == pytest.approx(0.5 * (1 + (0.025 - a) / (0.05 - a)))


def test_auc05_ties_give_a_diagonal_and_the_cut_interpolates():
    # Second positive ties with the first negative: the curve goes from (0, 0.5) straight to
    # (0.05, 1): a trapezoid of area 0.05 * (0.5 + 1) / 2, i.e. AUC(0.05) 0.75.
    labels = [1, 1, 0] + [0] * 19
    scores = [0.9, 0.5, 0.5] + [0.1] * 19
    assert auc_at_fpr(labels, scores) == pytest.approx(0.75)
    # 10 negatives: the same tie spans FPR 0 to 0.1, so at 0.05 the TPR is 0.75 -> area 0.05 * (0.5 + 0.75) / 2.
    labels = [1, 1, 0] + [0] * 9
    scores = [0.9, 0.5, 0.5] + [0.1] * 9
    assert auc_at_fpr(labels, scores) == pytest.approx(0.625)


def test_auc05_extremes_and_full_range():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 500)
    assert auc_at_fpr(labels, labels.astype(float)) == pytest.approx(1.0)
    assert auc_at_fpr(labels, -labels.astype(float)) == pytest.approx(0.0)
    scores = rng.normal(size=500) + labels
    from sklearn.metrics import roc_auc_score

    assert auc_at_fpr(labels, scores, max_fpr=1.0) == pytest.approx(roc_auc_score(labels, scores))
    with pytest.raises(QPRError):
        auc_at_fpr([1, 1], [0.1, 0.2])
