"""The audit reading of the payoff cache (issue 57): a cluster's true pair precision."""

from __future__ import annotations

import numpy as np

from bench.payoff_audits import pair_precision


def test_pair_precision_is_the_share_of_member_pairs_with_one_true_label():
    assert pair_precision(np.array(["a", "a"])) == 1.0
    assert pair_precision(np.array(["a", "b"])) == 0.0
    assert pair_precision(np.array(["a", "a", "b"])) == 1 / 3
    assert pair_precision(np.array(["a", "a", "b", "b"])) == 2 / 6
