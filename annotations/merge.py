"""What the judgments about a corpus decide, item by item, and the shape of the corrected clusters
they imply (``MergeResult``); the rules that turn them into clusters are ``annotations.constraints``.

- **Which judgments count** (``applicable_judgments``): each annotator's current label of each item
  (query question, candidate question). Free-text queries name no cluster and are left out; so
  are judgments whose questions are not in the corpus with the same text (made on another data set).
- **Item decision** (``item_decisions``, the disagreement rule): per item, count "same" and
  "different" labels over annotators ("unsure" counts for neither). More "same" -> same; more
  "different" -> different; a tie is left undecided (reported as a ``tie`` conflict).
- **Reviewers decide last** (``adjudicate_items``): an adjudicated item takes the reviewer's
  decision (its counts stay).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

MERGE_COLUMNS = ["cluster_a", "cluster_b", "into", "support", "judgment_ids", "decided_by", "evidence"]
SPLIT_COLUMNS = ["cluster", "qid", "into", "support", "judgment_ids", "decided_by", "evidence"]
CONFLICT_COLUMNS = ["kind", "cluster_a", "cluster_b", "judgment_ids", "reason"]


@dataclass
class MergeResult:
    """``corpus``: the corpus with corrected clusters; ``merges`` / ``splits`` / ``conflicts``:
    what was joined, which questions left their cluster (``into``: the cluster they joined, blank
    for none) and what was left for review, each with its judgment ids; ``items``: the per-item
    decisions (``item_decisions``); ``judgment_ids``: every judgment considered; ``threshold``: the
    pair probability that counted as "same" (None without a model)."""

    corpus: pd.DataFrame
    merges: pd.DataFrame
    conflicts: pd.DataFrame
    items: pd.DataFrame
    judgment_ids: list[int] = field(default_factory=list)
    splits: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=SPLIT_COLUMNS))
    threshold: float | None = None

    def decisions(self) -> list[dict]:
        """Merges, splits and conflicts as rows for the ``merge_decisions`` table (a split names
        the cluster as ``cluster_a`` and the question leaving it as ``cluster_b`` = ``qid:<m>``)."""
        merged = [{"decision": "merged", "cluster_a": m.cluster_a, "cluster_b": m.cluster_b, "judgment_ids": m.judgment_ids,
                   "reason": f"{m.evidence}; joined into {m.into}"} for m in self.merges.itertuples()]
        split = [{"decision": "split", "cluster_a": s.cluster, "cluster_b": f"qid:{s.qid}", "judgment_ids": s.judgment_ids,
                  "reason": f"{s.evidence}; left {s.cluster}" + (f", joined {s.into}" if s.into else ", now in no cluster")}
                 for s in self.splits.itertuples()]
        conflicts = [{"decision": c.kind, "cluster_a": c.cluster_a, "cluster_b": c.cluster_b, "judgment_ids": c.judgment_ids,
                      "reason": c.reason} for c in self.conflicts.itertuples()]
        return merged + split + conflicts


def item_decisions(votes: pd.DataFrame) -> pd.DataFrame:
    """Per (query_qid, candidate_qid): counts of same / different labels, the majority decision
    ("same" | "different" | "tie"), and the ids of all its judgments. Items with only "unsure"
    labels are dropped (nothing to decide)."""
    items = votes.groupby(["query_qid", "candidate_qid"], sort=True).agg(
        same=("label", lambda s: int((s == "same").sum())),
        different=("label", lambda s: int((s == "different").sum())),
        judgment_ids=("id", lambda s: sorted(int(i) for i in s)),
    ).reset_index()
    items = items[(items["same"] + items["different"]) > 0]
    decision = pd.Series("tie", index=items.index)
    decision[items["same"] > items["different"]] = "same"
    decision[items["different"] > items["same"]] = "different"
    return items.assign(decision=decision).reset_index(drop=True)


def adjudicate_items(items: pd.DataFrame, adjudications: pd.DataFrame) -> pd.DataFrame:
    """Rule 0 for items: an adjudicated item takes the reviewer's decision (its counts stay)."""
    by_pair = {}
    for row in adjudications[adjudications["kind"] == "item"].itertuples():
        if pd.notna(row.query_qid):
            by_pair[(int(row.query_qid), int(row.candidate_qid))] = by_pair[(int(row.candidate_qid), int(row.query_qid))] = row.decision
    if not by_pair or items.empty:
        return items
    decision = [by_pair.get((int(q), int(c)), d) for q, c, d in zip(items["query_qid"], items["candidate_qid"], items["decision"])]
    return items.assign(decision=decision)



def applicable_judgments(judgments: pd.DataFrame, corpus: pd.DataFrame) -> pd.DataFrame:
    """The judgments that speak about ``corpus``: a corpus-question query, and both questions in
    the corpus with the text they had when judged."""
    text = corpus.set_index("qid")["question"]
    by_qid = judgments[judgments["query_qid"].notna()].astype({"query_qid": "int64"})
    same_query = by_qid["query_qid"].map(text) == by_qid["query_question"]
    same_candidate = by_qid["candidate_qid"].map(text) == by_qid["candidate_question"]
    return by_qid[same_query & same_candidate].reset_index(drop=True)
