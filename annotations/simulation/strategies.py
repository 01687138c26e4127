"""Which question pairs to show annotators when there is budget for ``B`` judgments.

``candidate_pool`` lists every pair of training questions from two different clusters that the
current encoder retrieves (each training question queries its top ``k``), once per unordered
pair, with the encoder distance and the suspicion score of the spot-check queue
(``annotations.queue``): how much closer the pair is than the query cluster's own members are
to each other. ``within_pool`` lists the other kind of suspect, a question that may not belong
to its own cluster (a false positive): each member of a training cluster of 3+ against the
cluster's core (the member nearest the cluster's mean vector), scored by how much farther than
the cluster's median member it lies. ``select`` takes ``B`` pairs from a pool (or from both
pools at once) by a strategy:

- ``random``: uniformly at random (seeded), the baseline;
- ``nearest``: smallest encoder distance first;
- ``suspicion``: largest suspicion first (the only informed order for ``within_pool``) (the queue's order, over the whole corpus at once
  instead of one cluster at a time). A pair retrieved in both directions counts with its larger
  suspicion. The reference distance adapts to each cluster: a candidate 0.3 away from a cluster
  whose members sit 0.1 apart is not suspicious, next to one whose members sit 0.5 apart it is.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from annotations.errors import AnnotationError
from annotations.queue import hit_rows, reference_distances
from qpr.retrieval.base import Retriever
from qpr.retrieval.dense import DenseRetriever

STRATEGIES = ("random", "nearest", "suspicion")
POOL_DTYPES = {"query_qid": "int64", "candidate_qid": "int64", "distance": "float64", "rank": "int64", "suspicion": "float64"}
POOL_COLUMNS = list(POOL_DTYPES)
# Ties in any order are broken by the pair's ids, so a selection never depends on row order.
ORDER = {
    "nearest": (["distance", "query_qid", "candidate_qid"], [True, True, True]),
    "suspicion": (["suspicion", "distance", "query_qid", "candidate_qid"], [False, True, True, True]),
}


def candidate_pool(
    retriever: Retriever, corpus: pd.DataFrame, k: int = 20, exclude: set[tuple[int, int]] = frozenset()
) -> pd.DataFrame:
    """Cross-cluster pairs of ``corpus``' training questions within each other's top ``k``.

    Queries and candidates are the questions with split "train" and a cluster; ``retriever`` may
    index more (candidates outside the training clusters are not paraphrases annotation can
    merge into training data, so they are left out). ``exclude`` holds pairs not to list (e.g.
    ``annotations.queue.judged_pairs`` of earlier judgments; give both orders). Returns
    ``POOL_COLUMNS`` sorted by (query_qid, candidate_qid), one row per unordered pair: the
    direction with the larger suspicion, its rank in that query's results, and the distance.
    """
    train = corpus[(corpus["split"] == "train") & corpus["cluster"].notna()]
    if train.empty:
        raise AnnotationError("the corpus has no training clusters to look for false negatives in")
    distances, qids = retriever.search_ids(train["question"].tolist(), k)
    queries = pd.DataFrame({"query_qid": train["qid"].to_numpy(), "query_text": pd.NA})
    hits = hit_rows(queries, distances, qids, corpus)
    hits["query_cluster"] = hits["query_qid"].map(train.set_index("qid")["cluster"]).astype("string")
    hits["suspicion"] = hits["query_cluster"].map(reference_distances(hits)).astype(float) - hits["distance"]
    across = hits["cluster"].ne(hits["query_cluster"]).fillna(False).to_numpy(bool)
    pairs = hits[across & hits["candidate_qid"].isin(train["qid"]).to_numpy(bool)]
    ends = pairs[["query_qid", "candidate_qid"]]
    pairs = _ordered(pairs.assign(left=ends.min(axis=1), right=ends.max(axis=1)), "suspicion")
    pairs = pairs.drop_duplicates(["left", "right"])
    if exclude:
        done = [(int(q), int(c)) in exclude for q, c in zip(pairs["query_qid"], pairs["candidate_qid"])]
        pairs = pairs[~np.asarray(done, dtype=bool)]
    pool = pairs[POOL_COLUMNS].sort_values(["query_qid", "candidate_qid"]).reset_index(drop=True)
    return pool.astype({"query_qid": "int64", "candidate_qid": "int64", "rank": "int64"})


def within_pool(
    retriever: DenseRetriever, corpus: pd.DataFrame, exclude: set[tuple[int, int]] = frozenset()
) -> pd.DataFrame:
    """(core, member) pairs of ``corpus``' training clusters of 3+ questions, ``POOL_COLUMNS``.

    The core is the member whose vector (``retriever.encode``) is nearest the cluster's mean; every
    other member is a candidate, with its squared distance to the core, its ``rank`` by that
    distance within the cluster (1: nearest) and ``suspicion = distance - median`` of the
    cluster's candidate distances: positive for members farther out than the cluster's typical
    one. A "different" judgment of such a pair names the candidate as the member that does not
    belong (the split judgment of ``annotations.constraints``). ``exclude`` as in ``candidate_pool``.
    """
    train = corpus[(corpus["split"] == "train") & corpus["cluster"].notna()]
    train = train[train.groupby("cluster")["qid"].transform("size") >= 3].sort_values(["cluster", "qid"])
    if train.empty:
        return pd.DataFrame({c: pd.Series(dtype=t) for c, t in POOL_DTYPES.items()})
    vectors = retriever.encode(train["question"].tolist())
    cluster = pd.factorize(train["cluster"])[0]
    means = np.zeros((cluster.max() + 1, vectors.shape[1]))
    np.add.at(means, cluster, vectors)
    means /= np.bincount(cluster)[:, None]
    to_mean = ((vectors - means[cluster]) ** 2).sum(axis=1)
    frame = pd.DataFrame({"qid": train["qid"].to_numpy(), "cluster": cluster, "to_mean": to_mean})
    core_row = frame.groupby("cluster")["to_mean"].idxmin().to_numpy()
    core_of = core_row[cluster]
    pairs = frame.assign(query_qid=frame["qid"].to_numpy()[core_of],
                         distance=((vectors - vectors[core_of]) ** 2).sum(axis=1))
    pairs = pairs[np.arange(len(frame)) != core_of].rename(columns={"qid": "candidate_qid"})
    pairs["rank"] = pairs.groupby("cluster")["distance"].rank(method="first").astype("int64")
    pairs["suspicion"] = pairs["distance"] - pairs.groupby("cluster")["distance"].transform("median")
    if exclude:
        pairs = pairs[[(int(q), int(c)) not in exclude for q, c in zip(pairs["query_qid"], pairs["candidate_qid"])]]
    pool = pairs[POOL_COLUMNS].sort_values(["query_qid", "candidate_qid"]).reset_index(drop=True)
    return pool.astype(POOL_DTYPES)


def select(pool: pd.DataFrame, strategy: str, budget: int, seed: int = 0) -> pd.DataFrame:
    """The ``budget`` pairs of ``pool`` that ``strategy`` shows first (fewer if the pool is
    smaller), in the order they would be shown."""
    if strategy not in STRATEGIES:
        raise AnnotationError(f"unknown strategy {strategy!r}; use one of {', '.join(STRATEGIES)}")
    if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)) or budget < 0:
        raise AnnotationError(f"the budget is a number of judgments (0 or more), got {budget!r}")
    if strategy == "random":
        canonical = pool.sort_values(["query_qid", "candidate_qid"], kind="stable")
        shown = canonical.iloc[np.random.default_rng(seed).permutation(len(canonical))]
    else:
        shown = _ordered(pool, strategy)
    return shown.head(int(budget)).reset_index(drop=True)


def _ordered(frame: pd.DataFrame, strategy: str) -> pd.DataFrame:
    columns, ascending = ORDER[strategy]
    return frame.sort_values(columns, ascending=ascending, kind="stable")
