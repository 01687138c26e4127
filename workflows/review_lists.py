"""What the Review tab lists and records: agreement per annotator pair, the items annotators tied
on, the merges, splits (a cluster and ``qid:<member>``) and conflicts between clusters the
judgments propose (``annotations.constraints``), each with the decision in force on it, the
decisions in force, the judgments behind any of them, and a reviewer's decision, recorded in the
``adjudications`` table (never as a judgment). ``ui.review_tab`` renders them.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from annotations.agreement import agreement
from annotations.constraints import corrected_clusters
from annotations.repositories.review import ADJUDICATION_COLUMNS
from qpr.errors import QPRError
from workflows.project import Project

DECISIONS = ["same", "different", "apply", "reject"]  # same/different for an item, apply/reject for a cluster pair
ITEM_COLUMNS = ["item", "query", "candidate", "same", "different", "judgment_ids", "adjudicated"]
PAIR_COLUMNS = ["kind", "cluster_a", "cluster_b", "judgment_ids", "reason", "adjudicated"]
DECIDED_COLUMNS = ADJUDICATION_COLUMNS[1:]  # a decision in force, as listed (its id left out)
EVIDENCE_COLUMNS = ["id", "annotator", "label", "query_qid", "query", "candidate_qid", "candidate", "created_at"]


@dataclass(frozen=True)
class ReviewLists:
    """The Review tab's tables: ``agreement`` per annotator pair (``annotations.agreement``), the
    tied ``items`` (``ITEM_COLUMNS``), the proposed cluster ``pairs`` (``PAIR_COLUMNS``; a pair
    decided and no longer proposed stays listed as "decided") and the ``decided`` decisions in
    force (``DECIDED_COLUMNS``); ``judgment_ids`` are lists of ids."""

    agreement: pd.DataFrame
    items: pd.DataFrame
    pairs: pd.DataFrame
    decided: pd.DataFrame


def review_lists(project: Project) -> ReviewLists:
    """What ``project``'s current judgments and decisions say about its served bundle's own
    corpus, for a reviewer."""
    store, corpus = project.store, project.served().bundle.corpus
    result = corrected_clusters(store, corpus)
    decided = store.review.adjudications()
    on_item = dict(zip(decided["item_key"].dropna(), decided.loc[decided["item_key"].notna(), "decision"]))
    pairs_decided = decided[decided["kind"] == "cluster_pair"]
    on_pair = {(a, b): d for a, b, d in zip(pairs_decided["cluster_a"], pairs_decided["cluster_b"], pairs_decided["decision"])}
    text = corpus.set_index("qid")["question"]
    # Ties by the raw counts, so an item stays listed (with its decision) once adjudicated.
    ties = result.items[result.items["same"] == result.items["different"]]
    items = pd.DataFrame({
        "item": [f"qid:{q}:{c}" for q, c in zip(ties["query_qid"], ties["candidate_qid"])],
        "query": ties["query_qid"].map(text).to_numpy(), "candidate": ties["candidate_qid"].map(text).to_numpy(),
        "same": ties["same"].to_numpy(), "different": ties["different"].to_numpy(),
        "judgment_ids": ties["judgment_ids"].to_numpy(),
    }, columns=ITEM_COLUMNS[:-1])
    items["adjudicated"] = items["item"].map(on_item)
    merges = result.merges.assign(kind="merge", reason=lambda f: "proposed merge into " + f["into"].astype(str))
    splits = result.splits.assign(kind="split", cluster_a=result.splits["cluster"],
                                  cluster_b="qid:" + result.splits["qid"].astype(str),
                                  reason=lambda f: "proposed split: the member leaves " + f["cluster"].astype(str))
    pairs = pd.concat([merges, splits.drop(columns=["cluster", "qid"]), result.conflicts[result.conflicts["kind"] != "tie"]],
                      ignore_index=True)
    listed = {(min(a, b), max(a, b)) for a, b in zip(pairs["cluster_a"], pairs["cluster_b"])}
    gone = [{"kind": "decided", "cluster_a": a, "cluster_b": b, "judgment_ids": [], "reason": f"no longer proposed ({d})"}
            for (a, b), d in on_pair.items() if (a, b) not in listed]
    pairs = pd.concat([pairs, pd.DataFrame(gone, columns=PAIR_COLUMNS[:-1])], ignore_index=True)
    pairs = pairs.assign(adjudicated=[on_pair.get((min(a, b), max(a, b))) for a, b in zip(pairs["cluster_a"], pairs["cluster_b"])])
    return ReviewLists(agreement(store), items, pairs.reindex(columns=PAIR_COLUMNS), decided[DECIDED_COLUMNS])


def evidence(project: Project, ids: list[int]) -> pd.DataFrame:
    """``project``'s judgments ``ids`` (superseded ones too) with their query and candidate texts
    (``EVIDENCE_COLUMNS``)."""
    judged = project.store.judgments.frame(current_only=False, ids=ids)
    judged = judged.assign(query=judged["query_question"].fillna(judged["query_text"]), candidate=judged["candidate_question"])
    return judged[EVIDENCE_COLUMNS]


def record_decision(project: Project, who: str, decision: str | None, item: str, cluster_a: str, cluster_b: str,
                    note: str) -> str:
    """Record reviewer ``who``'s ``decision`` (``DECISIONS``) in ``project`` on the ``item`` (same
    or different) or on the cluster pair (apply or reject), with ``note``; returns what it was
    taken on (e.g. "item qid:1:2"). QPRError for a missing decision or a target it does not fit."""
    store = project.store
    if decision not in DECISIONS:
        raise QPRError("Choose a decision: same or different for an item, apply or reject for a cluster pair.")
    if decision in ("same", "different"):
        store.review.adjudicate(who, decision, item=item, note=note)
        return f"item {item.strip()}"
    store.review.adjudicate(who, decision, cluster_a=cluster_a, cluster_b=cluster_b, note=note)
    return f"clusters {cluster_a.strip()} and {cluster_b.strip()}"
