"""What the next judgments are expected to fix, estimated from the judgments made so far.

A judgment finds a label error when it contradicts the clusters the annotator was shown: "same"
for questions filed in two clusters (a false negative) or "different" for two questions filed in
one (a false positive). The share of recent judgments that found one (the queue's *yield*) is the
best estimate, without a ground truth, of how many of the pairs the queue shows next are label
errors, and so of what the next ``n`` judgments fix: ``n * yield``, with a Wilson 95% interval
(``scipy.stats.binomtest``).

Assumptions, stated wherever the number is shown (``describe``): the next pairs are as likely to
be errors as the last ``window`` were, annotators are right, and every error found is applied by
the merge. On Quora-lite the yield of an ordered queue falls as the budget grows
(docs/LOOP_PAYOFF.md), so the estimate is an upper one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.stats import binomtest

NEXT = 500
WINDOW = 500


def found_errors(judgments: pd.DataFrame) -> np.ndarray:
    """Whether each judgment (``store.judgments.frame()`` rows) found a label error in the clusters it
    was shown: "same" across clusters (or with a question in none), "different" within one;
    "unsure" finds none."""
    query, candidate = judgments["query_cluster"], judgments["candidate_cluster"]
    together = (query == candidate).fillna(False).to_numpy(bool)
    label = judgments["label"].to_numpy()
    return ((label == "same") & ~together) | ((label == "different") & together)


@dataclass(frozen=True)
class Outlook:
    """``judged`` decided judgments so far, ``found`` of them label errors; over the most recent
    ``recent`` (at most ``WINDOW``), the yield ``rate`` with its 95% interval (``low``, ``high``);
    ``next_n`` judgments are expected to fix ``next_n`` times those."""

    judged: int
    found: int
    recent: int
    recent_found: int
    rate: float
    low: float
    high: float
    next_n: int

    @property
    def expected(self) -> tuple[float, float, float]:
        return self.next_n * self.rate, self.next_n * self.low, self.next_n * self.high


def outlook(judgments: pd.DataFrame, next_n: int = NEXT, window: int = WINDOW) -> Outlook | None:
    """The estimate from ``judgments`` (current ones of corpus questions, oldest first; e.g.
    ``store.judgments.frame()``); None before any "same" or "different" judgment."""
    decided = judgments[judgments["label"].isin(["same", "different"]) & judgments["query_qid"].notna()]
    if decided.empty:
        return None
    errors = found_errors(decided)
    recent = errors[-window:]
    interval = binomtest(int(recent.sum()), len(recent)).proportion_ci(confidence_level=0.95, method="wilson")
    return Outlook(len(decided), int(errors.sum()), len(recent), int(recent.sum()), float(recent.mean()),
                   float(interval.low), float(interval.high), next_n)


def describe(estimate: Outlook | None) -> str:
    """The estimate in words, with its assumptions (Markdown, for the Metrics tab)."""
    if estimate is None:
        return ("**Label errors:** no judgments yet, so no estimate of the label errors left. Judge pairs on the "
                "Annotate tab; the estimate appears here.")
    e = estimate
    expected, low, high = e.expected
    return (
        f"**Label errors:** {e.found:,} of {e.judged:,} judgments so far found one (questions filed apart that mean "
        f"the same, or filed together that do not). Of the pairs the queue shows next, about **{e.rate:.0%}** "
        f"(95% interval {e.low:.0%}-{e.high:.0%}) are label errors, judging by the last {e.recent:,} judgments, so "
        f"the next {e.next_n:,} judgments are expected to fix about **{expected:,.0f}** ({low:,.0f}-{high:,.0f}). "
        f"Assumed: the next pairs are as likely to be errors as the last {e.recent:,}, annotators are right, and "
        "retraining applies what they found. The queue shows the likeliest errors first, so its yield usually falls "
        "as work goes on (docs/LOOP_PAYOFF.md): read this as an upper estimate."
    )
