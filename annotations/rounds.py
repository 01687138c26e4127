"""A queue that asks what pays (issue 57): one round of pairs to judge, of three kinds.

The older task (``annotations.task``'s ``suspicion`` order) shows cross-cluster pairs only, the
likeliest false negatives; on clusters made by a machine most of what is wrong is inside the
clusters, and a pair the model is already sure of teaches it little. A round here holds:

- **uncertain** (``UNCERTAIN_SHARE``): the retrieved pairs, across *and* within clusters, whose
  calibrated probability of the same meaning lies nearest ``target`` (the threshold fitted on the
  judged pairs, ``annotations.pair_scores``; 0.5 before any), at most ``PER_CLUSTER`` per cluster so
  that one confusing cluster does not take the round;
- **audit** (``AUDIT_SHARE``): random member pairs of the clusters most likely to be wrong, ranked
  by size x (1 - estimated purity) (``annotations.purity``): the largest and least pure first, a few
  each; their answers are the purity estimates that weigh those clusters in a retrain. Or
  (``audit_order`` "coherence", measured as a design, not the default) the least coherent first as
  the model sees them (``PairScorer.coherence``; an audited cluster by its estimated purity), so
  that the audits reach small mixed clusters, which the size ranks last;
- **random** (``RANDOM_SHARE``): uniformly drawn retrieved pairs, for unbiased error rates.

Rounds are meant to be judged with a re-scoring (or a retrain) between them: each round reads the
judgments so far (what is judged is not asked again; the audits move the purity estimates).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from annotations.merge import item_decisions
from annotations.pair_scores import PairScorer
from annotations.purity import audit_purity
from annotations.queue import hit_rows, judged_pairs
from qpr.retrieval.calibration import Calibration

UNCERTAIN_SHARE, AUDIT_SHARE, RANDOM_SHARE = 0.7, 0.2, 0.1
PER_CLUSTER = 3
AUDIT_ORDERS = ("purity", "coherence")
ROUND_COLUMNS = ["query_qid", "candidate_qid", "rank", "distance", "probability", "kind"]


def queue_round(retriever, corpus: pd.DataFrame, calibration: Calibration, size: int,
                judgments: pd.DataFrame | None = None, target: float = 0.5, k: int = 10, seed: int = 0,
                audit_order: str = "purity") -> pd.DataFrame:
    """Up to ``size`` pairs of ``corpus``' training questions to judge next (module doc), as
    ``ROUND_COLUMNS`` in the order to show them (the kinds interleaved at random, ``seed``).
    ``retriever``'s distances are what ``calibration`` maps to probabilities; ``judgments``: those
    so far (their pairs are not asked again; their audits estimate purity); ``audit_order``: one of
    ``AUDIT_ORDERS`` (module doc)."""
    if audit_order not in AUDIT_ORDERS:
        raise ValueError(f"audit_order must be one of {AUDIT_ORDERS}, not {audit_order!r}")
    judgments = judgments if judgments is not None else pd.DataFrame(columns=["query_qid", "candidate_qid", "label", "id"])
    done = judged_pairs(judgments)
    rng = np.random.default_rng(seed)
    pool = _retrieved(retriever, corpus, k, done).assign(
        probability=lambda f: calibration.probability(f["distance"]))
    cluster_of = corpus.set_index("qid")["cluster"]
    shares = np.floor(np.array([UNCERTAIN_SHARE, AUDIT_SHARE, RANDOM_SHARE]) * size).astype(int)
    shares[0] += size - shares.sum()
    uncertain = _capped(pool.iloc[np.argsort(np.abs(pool["probability"].to_numpy() - target), kind="stable")],
                        cluster_of, shares[0])
    taken = set(zip(uncertain["query_qid"], uncertain["candidate_qid"]))
    audit = _audits(retriever, corpus, judgments, done | taken | {(c, q) for q, c in taken}, shares[1], rng,
                    calibration if audit_order == "coherence" else None)
    audit = audit.assign(probability=calibration.probability(audit["distance"]) if len(audit) else [])
    taken |= {pair for q, c in zip(audit["query_qid"], audit["candidate_qid"]) for pair in ((q, c), (c, q))}
    rest = pool[[(q, c) not in taken for q, c in zip(pool["query_qid"], pool["candidate_qid"])]]
    # the random share takes up what the other kinds could not fill
    random = rest.iloc[rng.permutation(len(rest))[:size - len(uncertain) - len(audit)]]
    picked = pd.concat([uncertain.assign(kind="uncertain"), audit.assign(kind="audit"), random.assign(kind="random")],
                       ignore_index=True)[ROUND_COLUMNS]
    return picked.iloc[rng.permutation(len(picked))].reset_index(drop=True).astype(
        {"query_qid": "int64", "candidate_qid": "int64", "rank": "Int64"})


def _retrieved(retriever, corpus: pd.DataFrame, k: int, done: set) -> pd.DataFrame:
    """Each training question's top ``k`` among the training questions, once per unordered pair
    (the nearer direction), pairs judged before left out."""
    train = corpus[(corpus["split"] == "train") & corpus["cluster"].notna()]
    distances, qids = retriever.search_ids(train["question"].tolist(), k + 1)
    queries = pd.DataFrame({"query_qid": train["qid"].to_numpy(), "query_text": pd.NA})
    hits = hit_rows(queries, distances, qids, corpus)
    hits = hits[(hits["candidate_qid"] != hits["query_qid"]) & hits["candidate_qid"].isin(train["qid"])]
    ends = hits[["query_qid", "candidate_qid"]].astype("int64")
    hits = hits.assign(left=ends.min(axis=1), right=ends.max(axis=1)).sort_values(["distance", "left", "right"])
    hits = hits.drop_duplicates(["left", "right"])
    fresh = [(int(q), int(c)) not in done for q, c in zip(hits["query_qid"], hits["candidate_qid"])]
    return hits[np.asarray(fresh, dtype=bool)][["query_qid", "candidate_qid", "rank", "distance"]].reset_index(drop=True)


def _capped(ordered: pd.DataFrame, cluster_of: pd.Series, n: int) -> pd.DataFrame:
    """The first ``n`` rows of ``ordered`` with at most ``PER_CLUSTER`` rows touching each cluster."""
    counts: dict = {}
    keep = []
    for row, (q, c) in enumerate(zip(ordered["query_qid"], ordered["candidate_qid"])):
        touched = {cluster_of.get(q), cluster_of.get(c)}
        if all(counts.get(t, 0) < PER_CLUSTER for t in touched):
            keep.append(row)
            for t in touched:
                counts[t] = counts.get(t, 0) + 1
            if len(keep) == n:
                break
    return ordered.iloc[keep]


def _audits(retriever, corpus: pd.DataFrame, judgments: pd.DataFrame, done: set, n: int,
            rng: np.random.Generator, coherence_of: Calibration | None = None) -> pd.DataFrame:
    """``n`` random member pairs of the clusters ranked by size x (1 - estimated purity), or, given
    the calibration ``coherence_of`` and a retriever with an encoder, by the estimated purity of the
    audited ones and the model's coherence of the rest, least first; up to ``PER_CLUSTER`` each,
    with their encoder distances (NaN for a retriever without ``encode``)."""
    train = corpus[(corpus["split"] == "train") & corpus["cluster"].notna()]
    members = train.groupby("cluster")["qid"].agg(list)
    sizes = members.map(len)
    sizes = sizes[sizes >= 2]
    votes = judgments[judgments["query_qid"].notna()].astype({"query_qid": "int64"})
    audited, prior = audit_purity(corpus, item_decisions(votes)) if len(votes) else (pd.Series(dtype=float), 1.0)
    scorer = PairScorer.of(retriever, train, coherence_of) if coherence_of is not None else None
    if scorer is not None:
        seen = scorer.coherence(members[sizes.index])
        order = sizes.index.map(lambda c: audited.get(c, seen[c])).to_numpy(dtype=float).argsort(kind="stable")
        ranked = sizes.index[order]
    else:
        risk = sizes * (1 - sizes.index.map(lambda c: audited.get(c, prior)).to_numpy(dtype=float) + 1e-9)
        ranked = risk.sort_values(ascending=False, kind="stable").index
    rows = []
    for cluster in ranked:
        got = 0
        for _ in range(4 * PER_CLUSTER):
            q, c = (int(x) for x in rng.choice(np.asarray(members[cluster]), 2, replace=False))
            if (q, c) not in done and got < PER_CLUSTER:
                rows.append((q, c))
                done = done | {(q, c), (c, q)}
                got += 1
        if len(rows) >= n:
            break
    pairs = pd.DataFrame(rows[:n], columns=["query_qid", "candidate_qid"], dtype="int64")
    encode = getattr(retriever, "encode", None)
    if encode is None or pairs.empty:
        return pairs.assign(rank=pd.NA, distance=np.nan)
    text = corpus.set_index("qid")["question"]
    a, b = (np.asarray(encode(text.reindex(pairs[col]).tolist()), dtype=float) for col in ("query_qid", "candidate_qid"))
    return pairs.assign(rank=pd.NA, distance=((a - b) ** 2).sum(axis=1))  # an audit pair was not retrieved: no rank
