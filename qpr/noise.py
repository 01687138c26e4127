"""Label noise with ground truth: split training clusters so their halves become false negatives.

The paper argues SDML tolerates false negatives (true paraphrases filed in different clusters).
``inject_false_negatives`` makes such noise on purpose: it picks exactly ``round(rate * n)`` of the
n train clusters with 3+ questions (seeded) and splits each into two random halves; the second half
gets a new cluster id ``<cluster>~b``. Every pair across a split is a known false negative.
Val/test clusters are never touched, so evaluation stays clean.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from qpr.errors import QPRError

SPLIT_SUFFIX = "~b"


def eligible_clusters(corpus: pd.DataFrame) -> list[str]:
    """Train clusters with 3+ questions, sorted (the candidates for splitting)."""
    train = corpus[(corpus["split"] == "train") & corpus["cluster"].notna()]
    sizes = train.groupby("cluster").size()
    return sorted(sizes[sizes >= 3].index)


def inject_false_negatives(corpus: pd.DataFrame, rate: float, seed: int = 0) -> tuple[pd.DataFrame, list[str]]:
    """A noisy copy of ``corpus`` and the sorted list of clusters that were split.

    Each chosen cluster of n questions keeps ceil(n/2) random members; the other floor(n/2) move
    to ``<cluster>~b``. ``rate`` 0 returns an unchanged copy.
    """
    if not 0.0 <= rate <= 1.0:
        raise QPRError(f"noise rate must be between 0 and 1, got {rate}")
    candidates = eligible_clusters(corpus)
    rng = np.random.default_rng(seed)
    chosen = sorted(rng.choice(candidates, size=int(round(rate * len(candidates))), replace=False)) if candidates else []
    noisy = corpus.copy()
    cluster = noisy["cluster"].to_numpy(dtype=object, na_value=None)
    for name in chosen:
        rows = np.flatnonzero(cluster == name)
        moved = rng.permutation(rows)[(len(rows) + 1) // 2 :]
        cluster[moved] = name + SPLIT_SUFFIX
    noisy["cluster"] = pd.array(cluster, dtype="string")
    return noisy, chosen
