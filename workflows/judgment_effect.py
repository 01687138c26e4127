"""What a retrain's judgments changed, for the Retrain tab: which held-out queries' top result the
retrained model changed, before and after, and which of those changes touch a judged question.

The app trains no control model (the same epochs on the uncorrected labels would double a retrain),
so it cannot split a change into "the judgments" and "more training"; ``bench.loop_control``
measures that split (docs/LOOP_PAYOFF.md). What the tab can show exactly is the evidence: each
query whose first result changed, whether it was right before and after, and whether the query
or either result is a question the annotators judged (``judged``: the export's pairs table).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from qpr.bundles.training import held_out_splits
from qpr.retrieval.base import Retriever

COLUMNS = ["query", "before", "right before", "after", "right after", "judged question"]
ORDER = {"fixed": 0, "broken": 1, "other": 2}  # queries the retrain fixed first, then broke, then the rest


def first_results(retriever: Retriever, queries: pd.DataFrame) -> np.ndarray:
    """Each query's first result (qid; -1 for none) other than the query itself."""
    _, found = retriever.search_ids(queries["question"].tolist(), 2)
    own = queries["qid"].to_numpy()[:, None]
    first = np.where(found[:, :1] != own, found[:, :1], found[:, 1:2])
    return first.ravel()


def changed_top_results(before: Retriever, after: Retriever, corpus: pd.DataFrame,
                        judged: pd.DataFrame | None = None) -> pd.DataFrame:
    """The held-out queries of ``corpus`` (its val and test questions in clusters) whose first
    result differs between the ``before`` and ``after`` retrievers, as ``COLUMNS``: the query, each
    first result and whether it is of the query's cluster, and whether the query or either result is
    in a ``judged`` pair. The queries the retrain fixed come first, then those it broke."""
    splits = held_out_splits(corpus)
    queries = corpus[corpus["split"].isin(splits) & corpus["cluster"].notna()]
    if queries.empty:
        return pd.DataFrame(columns=COLUMNS)
    old, new = first_results(before, queries), first_results(after, queries)
    moved = old != new
    queries, old, new = queries[moved], old[moved], new[moved]
    text = pd.Series(corpus["question"].to_numpy(), index=corpus["qid"].to_numpy())
    cluster = pd.Series(corpus["cluster"].to_numpy(), index=corpus["qid"].to_numpy())
    right_before = cluster.reindex(old).to_numpy() == queries["cluster"].to_numpy()
    right_after = cluster.reindex(new).to_numpy() == queries["cluster"].to_numpy()
    seen = set() if judged is None else set(judged["qid1"]) | set(judged["qid2"])
    touched = [bool({q, o, n} & seen) for q, o, n in zip(queries["qid"], old, new)]
    kind = np.where(right_after & ~right_before, "fixed", np.where(right_before & ~right_after, "broken", "other"))
    table = pd.DataFrame({"query": queries["question"].to_numpy(), "before": text.reindex(old).fillna("(none)").to_numpy(),
                          "right before": right_before, "after": text.reindex(new).fillna("(none)").to_numpy(),
                          "right after": right_after, "judged question": touched, "kind": kind})
    table = table.sort_values("kind", key=lambda k: k.map(ORDER), kind="stable")
    return table[COLUMNS].reset_index(drop=True)


def summary(changes: pd.DataFrame) -> str:
    """One sentence on ``changed_top_results``: how many first results changed, fixed, broken, and
    how many of the changes touch a judged question."""
    if changes.empty:
        return "The retrained model changed no held-out query's first result."
    fixed = int((changes["right after"] & ~changes["right before"]).sum())
    broken = int((changes["right before"] & ~changes["right after"]).sum())
    touched = int(changes["judged question"].sum())
    return (f"The retrained model changed {len(changes)} held-out queries' first result: {fixed} now right, {broken} now "
            f"wrong; {touched} of the changes involve a question the annotators judged (the query or a result). How much "
            "of the change the judgments made, apart from the extra training, is measured in docs/LOOP_PAYOFF.md, not "
            "per retrain.")
