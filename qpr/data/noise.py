"""Label noise with ground truth: split clusters (false negatives) or join unrelated ones (false positives).

``inject_false_negatives`` picks exactly ``round(rate * n)`` of the n clusters of a split that
have ``min_size``+ questions (seeded) and splits each into two random halves; the second half
gets a new cluster id ``<cluster>~b``. Every pair across a split is a known false negative.
With the default ``min_size`` 3 a cluster of 3 leaves a half of one question, something real
clusters never have and a strategy can profit from (docs/LOOP_PAYOFF.md); ``min_size`` 4 keeps
both halves at 2+ questions.

``inject_false_positives`` makes the other kind: unrelated clusters joined under one label, as
distant supervision does when many questions share a generic answer. It picks
``round(rate * n)`` of the n clusters (2+ questions) of a split, pairs them at random and gives
each pair's second cluster (the guest) the first one's id. Every pair across a join is a known
false positive.

Both touch only the clusters of ``split`` (default "train"), so evaluation stays clean; the
honest-evaluation bench passes "test" to put the noise into the benchmark's own labels.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from qpr.errors import QPRError

SPLIT_SUFFIX = "~b"


def eligible_clusters(corpus: pd.DataFrame, min_size: int = 3, split: str = "train") -> list[str]:
    """Clusters of ``split`` with ``min_size``+ questions, sorted (the candidates for noise)."""
    rows = corpus[(corpus["split"] == split) & corpus["cluster"].notna()]
    sizes = rows.groupby("cluster").size()
    return sorted(sizes[sizes >= min_size].index)


def _chosen(corpus: pd.DataFrame, rate: float, min_size: int, split: str, rng: np.random.Generator) -> list[str]:
    if not 0.0 <= rate <= 1.0:
        raise QPRError(f"noise rate must be between 0 and 1, got {rate}")
    candidates = eligible_clusters(corpus, min_size, split)
    return list(rng.choice(candidates, size=int(round(rate * len(candidates))), replace=False)) if candidates else []


def inject_false_negatives(
    corpus: pd.DataFrame, rate: float, seed: int = 0, min_size: int = 3, split: str = "train"
) -> tuple[pd.DataFrame, list[str]]:
    """A noisy copy of ``corpus`` and the sorted list of clusters that were split.

    Each chosen cluster of n questions keeps ceil(n/2) random members; the other floor(n/2) move
    to ``<cluster>~b``. ``rate`` 0 returns an unchanged copy.
    """
    rng = np.random.default_rng(seed)
    chosen = sorted(_chosen(corpus, rate, min_size, split, rng))
    noisy = corpus.copy()
    cluster = noisy["cluster"].to_numpy(dtype=object, na_value=None)
    for name in chosen:
        rows = np.flatnonzero(cluster == name)
        moved = rng.permutation(rows)[(len(rows) + 1) // 2 :]
        cluster[moved] = name + SPLIT_SUFFIX
    noisy["cluster"] = pd.array(cluster, dtype="string")
    return noisy, chosen


def inject_false_positives(
    corpus: pd.DataFrame, rate: float, seed: int = 0, split: str = "train"
) -> tuple[pd.DataFrame, list[tuple[str, str]]]:
    """A noisy copy of ``corpus`` and the (host, guest) cluster pairs that were joined.

    ``round(rate * n)`` clusters of 2+ questions are drawn and paired at random (an odd one out
    stays as it is); the guest's questions take the host's id. ``rate`` 0 returns an unchanged copy.
    """
    rng = np.random.default_rng(seed)
    chosen = _chosen(corpus, rate, 2, split, rng)
    joins = sorted(zip(chosen[0::2], chosen[1::2]))
    noisy = corpus.copy()
    cluster = noisy["cluster"].to_numpy(dtype=object, na_value=None)
    for host, guest in joins:
        cluster[cluster == guest] = host
    noisy["cluster"] = pd.array(cluster, dtype="string")
    return noisy, joins
