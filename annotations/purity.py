"""How pure each corrected cluster probably is, from the annotators' audits: the weight a retrain
gives its pairs (``qpr.training.fixed_shape``).

A cluster made by a machine is a soft label: of BANKING77's automatic clusters only about one pair
in four means the same (docs/LOOP_PAYOFF.md). Every judged pair whose two questions were imported
into one cluster audits it: "same" counts for it, "different" against. A cluster's purity is the
share of its audited pairs judged the same, shrunk towards the share over every audited cluster
(``PRIOR_PAIRS`` pseudo-pairs of it), so one audit does not make a cluster pure or worthless; an
unaudited cluster gets that overall share. A cluster formed only from questions judged the same
(``new-<qid>``) is verified: purity 1. The queue's audits pick uncertain pairs, which makes the
overall share pessimistic; its random share (``annotations.queue``) keeps some of them unbiased.

Optionally (``priors``) each cluster is shrunk towards a prior of its own instead of the overall
share: the model's coherence (``annotations.pair_scores.PairScorer.coherence``), which on clusters
the audits rarely reach (many small ones) still tells a joined cluster from a clean one
(docs/LOOP_PAYOFF.md, "Why quora-fp-0.4 gains nothing"). Not the default: measured as a design.
"""

from __future__ import annotations

import pandas as pd

from annotations.merge import MergeResult

PRIOR_PAIRS = 4.0  # pseudo-pairs of the overall share in each cluster's estimate


def cluster_purity(corpus: pd.DataFrame, result: MergeResult, priors: pd.Series | None = None) -> tuple[pd.Series, float]:
    """(the estimated purity of each cluster of ``result.corpus``, by name; the overall share of
    audited pairs judged the same, 1.0 when nothing was audited). ``corpus``: the imported clusters;
    ``priors``: each imported cluster's own prior by name (module doc; the overall share where absent)."""
    audited, prior = audit_purity(corpus, result.items, priors)
    names = pd.Series(result.corpus["cluster"].dropna().unique())
    imported = set(corpus["cluster"].dropna())
    own = priors if priors is not None else pd.Series(dtype=float)
    purity = names.map(lambda name: audited.get(name, own.get(name, prior)) if name in imported else 1.0)
    return pd.Series(purity.to_numpy(dtype=float), index=names.to_numpy()), prior


def audit_purity(corpus: pd.DataFrame, items: pd.DataFrame, priors: pd.Series | None = None) -> tuple[pd.Series, float]:
    """(the estimated purity of each imported cluster of ``corpus`` with an audited pair, by name;
    the overall share). ``items``: ``annotations.merge.item_decisions``' rows; ``priors``: each
    cluster's own prior by name, shrunk towards instead of the overall share where given."""
    original = corpus.set_index("qid")["cluster"].astype(object)
    original = original.where(original.notna(), None)
    decided = items[items["decision"].isin(["same", "different"])]
    a = original.reindex(decided["query_qid"].astype("int64")).to_numpy()
    b = original.reindex(decided["candidate_qid"].astype("int64")).to_numpy()
    inside = pd.notna(a) & (a == b).astype(bool)
    audits = pd.DataFrame({"cluster": a[inside], "same": (decided["decision"] == "same").to_numpy()[inside]})
    prior = float(audits["same"].mean()) if len(audits) else 1.0
    counts = audits.groupby("cluster")["same"].agg(["sum", "size"])
    towards = prior if priors is None else priors.reindex(counts.index).fillna(prior)
    return (counts["sum"] + PRIOR_PAIRS * towards) / (counts["size"] + PRIOR_PAIRS), prior
