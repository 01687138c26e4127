"""Seed-level confidence intervals: the t interval and Fieller's ratio interval, checked against
values computed by hand and against the delta-free case."""

import numpy as np
import pytest
from scipy import stats

from qpr.research.confidence import mean_ci, ratio_ci
from qpr.errors import QPRError


def test_mean_ci_is_the_student_t_interval():
    mean, low, high = mean_ci([1, 2, 3, 4, 5])
    half = stats.t.ppf(0.975, 4) * np.std([1, 2, 3, 4, 5], ddof=1) / np.sqrt(5)  # 2.776 * 1.581 / 2.236
    assert mean == 3.0
    assert (low, high) == pytest.approx((3 - half, 3 + half))
    assert half == pytest.approx(1.963, abs=1e-3)


def test_ratio_ci_with_an_exact_denominator_is_the_numerators_interval_scaled():
    numerators = [0.1, 0.3, 0.2, 0.25, 0.15]
    ratio, low, high = ratio_ci(numerators, [0.5] * 5)
    _, n_low, n_high = mean_ci(numerators)
    assert ratio == pytest.approx(0.4)
    assert (low, high) == pytest.approx((n_low / 0.5, n_high / 0.5))


def test_ratio_ci_is_wider_when_the_denominator_scatters_and_unbounded_when_it_may_be_zero():
    numerators = [0.1, 0.3, 0.2, 0.25, 0.15]
    _, low, high = ratio_ci(numerators, [0.6, 0.4, 0.5, 0.45, 0.55])  # against the numerators
    _, fixed_low, fixed_high = ratio_ci(numerators, [0.5] * 5)
    assert low < fixed_low and high > fixed_high
    ratio, low, high = ratio_ci(numerators, [0.5, -0.4, 0.3, -0.2, 0.1])
    assert ratio == pytest.approx(0.2 / 0.06) and low is None and high is None


def test_bad_input_is_refused():
    with pytest.raises(QPRError, match="2\\+ finite values"):
        mean_ci([0.5])
    with pytest.raises(QPRError, match="finite"):
        mean_ci([0.5, float("nan")])
    with pytest.raises(QPRError, match="one numerator per denominator"):
        ratio_ci([1, 2], [1, 2, 3])
