"""95% confidence intervals over a handful of training seeds.

Retraining results scatter from seed to seed by as much as the effects being measured
(docs/FEEDBACK_LOOP.md), so every comparison is run with several seeds and reported as a mean
with a Student-t interval (``mean_ci``). Models trained with the same seed are paired, so a
difference between two settings is the mean of the per-seed differences (``mean_ci`` of them).
The share of a gap recovered is a ratio of two such means; ``ratio_ci`` gives Fieller's interval,
which accounts for the uncertainty of the denominator too and is unbounded when the gap itself
cannot be told from zero.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from qpr.errors import QPRError

LEVEL = 0.95


def _values(values, at_least: int = 2) -> np.ndarray:
    array = np.asarray(values, dtype=float)
    if array.ndim != 1 or len(array) < at_least or not np.isfinite(array).all():
        raise QPRError(f"a confidence interval needs {at_least}+ finite values, got {values!r}")
    return array


def mean_ci(values, level: float = LEVEL) -> tuple[float, float, float]:
    """Mean of ``values`` (one per seed) and its Student-t ``level`` interval (low, high)."""
    array = _values(values)
    mean = float(array.mean())
    half = float(stats.t.ppf((1 + level) / 2, len(array) - 1) * array.std(ddof=1) / np.sqrt(len(array)))
    return mean, mean - half, mean + half


def ratio_ci(numerators, denominators, level: float = LEVEL) -> tuple[float, float | None, float | None]:
    """mean(numerators) / mean(denominators) (paired values, one pair per seed) and Fieller's
    ``level`` interval; (ratio, None, None) when the interval is unbounded, i.e. the denominator's
    mean is not clearly away from zero."""
    a_values, b_values = _values(numerators), _values(denominators)
    if len(a_values) != len(b_values):
        raise QPRError("ratio_ci needs one numerator per denominator")
    n = len(a_values)
    a, b = a_values.mean(), b_values.mean()
    if b == 0:
        raise QPRError("ratio_ci: the denominators average to zero; there is no ratio")
    covariance = np.cov(a_values, b_values, ddof=1) / n
    t2 = stats.t.ppf((1 + level) / 2, n - 1) ** 2
    # Solve (a - r b)^2 = t^2 var(a - r b) for r: a quadratic whose roots bound the interval.
    qa = b * b - t2 * covariance[1, 1]
    qb = -2 * (a * b - t2 * covariance[0, 1])
    qc = a * a - t2 * covariance[0, 0]
    if qa <= 0 or qb * qb - 4 * qa * qc < 0:
        return float(a / b), None, None
    root = np.sqrt(qb * qb - 4 * qa * qc)
    return float(a / b), float((-qb - root) / (2 * qa)), float((-qb + root) / (2 * qa))
