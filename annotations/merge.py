"""Corrected clusters: original clusters joined by confirmed false negatives, conflicts reported.

The rule, in order:

0. **Reviewers decide last, and win.** A reviewer's adjudication (the newest per target,
   ``AnnotationStore.adjudications``) overrides the annotators': an adjudicated item takes the
   reviewer's "same" or "different" (it is no longer a tie), a cluster pair the reviewer
   *applied* is merged before any other (its mixed or cannot-link conflict is settled), and one
   *rejected* is never merged and counts as a cannot-link. The merge says who decided.
1. **Which judgments count.** Each annotator's current label of each item (query question,
   candidate question). Free-text queries name no cluster and are left out; so are judgments
   whose questions are not in the corpus with the same text (made on another data set).
2. **Item decision (disagreement rule).** Per item, count "same" and "different" labels over
   annotators ("unsure" counts for neither). More "same" -> same; more "different" -> different;
   a tie between annotators is left undecided and reported as a ``tie`` conflict.
3. **Cluster pairs.** A question in no cluster stands for itself (shown as ``qid:<n>``). Between
   two clusters, any "different" item is a cannot-link: the two may never end up in one cluster.
   A pair with both "same" and "different" items is not merged and is reported (``mixed``).
   A "different" item inside one original cluster is reported for review (``within_cluster``);
   clusters are never split automatically.
4. **Merging.** Pairs with only "same" items are merged in order of support (number of "same"
   items, most first; ties by name), each merge joining the two current groups (union-find,
   scipy's DisjointSet), i.e. connected components, so A~B and B~C put A, B and C together. A merge
   that would put two cannot-linked clusters into one group is skipped and reported
   (``cannot_link``): better-supported merges win, and nothing is resolved silently.
5. **Labels and splits.** Only merged groups (two or more original groups joined by "same")
   are relabelled: a question judged only "different" keeps its cluster, or stays in none. A
   merged group takes the label of its largest original cluster (ties: smallest label), or
   ``new-<smallest qid>`` if it holds only unclustered questions. Questions
   keep their split, so no evaluation question moves into training; questions with split "none"
   take the split of the group's label cluster ("train" for a group made only of such questions).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd
from scipy.cluster.hierarchy import DisjointSet

from annotations.store import AnnotationStore

MERGE_COLUMNS = ["cluster_a", "cluster_b", "into", "support", "judgment_ids", "decided_by"]
CONFLICT_COLUMNS = ["kind", "cluster_a", "cluster_b", "judgment_ids", "reason"]
Node = str  # "c:<cluster>" or "q:<qid>" (a question in no cluster): the groups being merged


@dataclass
class MergeResult:
    """``corpus``: the corpus with corrected clusters; ``merges`` / ``conflicts``: what was joined
    and what was left for review (with judgment ids); ``items``: the per-item decisions
    (``item_decisions``); ``judgment_ids``: every judgment considered."""

    corpus: pd.DataFrame
    merges: pd.DataFrame
    conflicts: pd.DataFrame
    items: pd.DataFrame
    judgment_ids: list[int] = field(default_factory=list)

    def decisions(self) -> list[dict]:
        """Merges and conflicts as rows for the ``merge_decisions`` table."""
        merged = [
            {"decision": "merged", "cluster_a": m.cluster_a, "cluster_b": m.cluster_b, "judgment_ids": m.judgment_ids,
             "reason": (f"applied by reviewer {m.decided_by}" if m.decided_by else f"{m.support} item(s) judged same")
                       + f"; joined into {m.into}"}
            for m in self.merges.itertuples()
        ]
        conflicts = [
            {"decision": c.kind, "cluster_a": c.cluster_a, "cluster_b": c.cluster_b, "judgment_ids": c.judgment_ids,
             "reason": c.reason}
            for c in self.conflicts.itertuples()
        ]
        return merged + conflicts


def corrected_clusters(store: AnnotationStore, corpus: pd.DataFrame) -> MergeResult:
    """Apply the module's rule to the store's current judgments and adjudications over ``corpus``."""
    votes = applicable_judgments(store.judgments(), corpus)
    adjudications = store.adjudications()
    node_of = _nodes(corpus)
    items = _adjudicate_items(item_decisions(votes), adjudications)
    decided = items[items["decision"] != "tie"].assign(
        a=lambda f: [node_of[q] for q in f["query_qid"]], b=lambda f: [node_of[c] for c in f["candidate_qid"]]
    )
    pairs = _cluster_pairs(decided[decided["a"] != decided["b"]])
    applied, rejected = _pair_decisions(adjudications, set(node_of.values()))
    conflicts = [c for c in _evidence_conflicts(items, decided, pairs, node_of)
                 if (min(c["a"], c["b"]), max(c["a"], c["b"])) not in set(applied) | set(rejected)]
    groups, merges, skipped = _merge_by_support(pairs, applied, rejected)
    new_corpus, label_of = _relabel(corpus, node_of, groups)
    merge_frame = pd.DataFrame(
        [{"cluster_a": _name(m["a"]), "cluster_b": _name(m["b"]), "into": label_of[m["a"]], "support": m["support"],
          "judgment_ids": m["judgment_ids"], "decided_by": m.get("decided_by", "")} for m in merges],
        columns=MERGE_COLUMNS,
    )
    conflict_frame = pd.DataFrame([{k: c[k] for k in CONFLICT_COLUMNS} for c in conflicts + skipped], columns=CONFLICT_COLUMNS)
    return MergeResult(new_corpus, merge_frame, conflict_frame, items, sorted(int(i) for i in votes["id"]))


def _adjudicate_items(items: pd.DataFrame, adjudications: pd.DataFrame) -> pd.DataFrame:
    """Rule 0 for items: an adjudicated item takes the reviewer's decision (its counts stay)."""
    by_pair = {}
    for row in adjudications[adjudications["kind"] == "item"].itertuples():
        if pd.notna(row.query_qid):
            by_pair[(int(row.query_qid), int(row.candidate_qid))] = by_pair[(int(row.candidate_qid), int(row.query_qid))] = row.decision
    if not by_pair or items.empty:
        return items
    decision = [by_pair.get((int(q), int(c)), d) for q, c, d in zip(items["query_qid"], items["candidate_qid"], items["decision"])]
    return items.assign(decision=decision)


def _pair_decisions(adjudications: pd.DataFrame, nodes: set[Node]) -> tuple[dict, dict]:
    """Rule 0 for cluster pairs: {(a, b): reviewer} applied and rejected, as ordered node pairs of
    this corpus (pairs naming a cluster the corpus lacks are ignored)."""
    applied, rejected = {}, {}
    for row in adjudications[adjudications["kind"] == "cluster_pair"].itertuples():
        a, b = (f"q:{name[4:]}" if name.startswith("qid:") else f"c:{name}" for name in (row.cluster_a, row.cluster_b))
        if a in nodes and b in nodes and a != b:
            (applied if row.decision == "apply" else rejected)[(min(a, b), max(a, b))] = row.reviewer
    return applied, rejected


def _evidence_conflicts(items: pd.DataFrame, decided: pd.DataFrame, pairs: pd.DataFrame, node_of: dict) -> list[dict]:
    """Rule 2 and 3 conflicts: tied items, "different" inside a cluster, mixed cluster pairs."""
    conflicts = [
        _conflict("tie", node_of[i.query_qid], node_of[i.candidate_qid], i.judgment_ids,
                  f"annotators split {i.same}:{i.different} on question {i.query_qid} vs {i.candidate_qid}; not merged")
        for i in items[items["decision"] == "tie"].itertuples()
    ]
    conflicts += [
        _conflict("within_cluster", i.a, i.b, i.judgment_ids,
                  f"questions {i.query_qid} and {i.candidate_qid} are judged different but share cluster {_name(i.a)}")
        for i in decided[(decided["a"] == decided["b"]) & (decided["decision"] == "different")].itertuples()
    ]
    conflicts += [
        _conflict("mixed", p.a, p.b, p.judgment_ids,
                  f"{p.same} item(s) judged same and {p.different} different between {_name(p.a)} and {_name(p.b)}; "
                  "not merged")
        for p in pairs[(pairs["same"] > 0) & (pairs["different"] > 0)].itertuples()
    ]
    return conflicts


def _merge_by_support(pairs: pd.DataFrame, applied: dict | None = None,
                      rejected: dict | None = None) -> tuple[DisjointSet, list[dict], list[dict]]:
    """Rules 0 and 4: join the pairs reviewers ``applied`` first, then same-only pairs, best
    supported first, unless that joins a cannot-link pair ("different" items, or a pair reviewers
    ``rejected``). Returns the groups, the merges made and the ``cannot_link`` conflicts for those
    skipped."""
    applied, rejected = applied or {}, rejected or {}
    pairs = pairs.assign(pair=list(zip(pairs["a"], pairs["b"])))
    cannot_link = [(p.a, p.b, p.judgment_ids) for p in pairs.itertuples() if p.different > 0 and p.pair not in applied]
    cannot_link += [(a, b, []) for a, b in rejected]
    groups = DisjointSet([*pairs["a"], *pairs["b"], *(node for pair in applied for node in pair)])
    merges, skipped = [], []
    evidence = {p.pair: p for p in pairs.itertuples()}
    for (a, b), reviewer in sorted(applied.items()):
        groups.merge(a, b)
        found = evidence.get((a, b))
        merges.append({"a": a, "b": b, "support": found.same if found else 0,
                       "judgment_ids": found.judgment_ids if found else [], "decided_by": reviewer})
    same_only = pairs[(pairs["different"] == 0) & ~pairs["pair"].isin(list(applied) + list(rejected))]
    for pair in same_only.sort_values(["same", "a", "b"], ascending=[False, True, True]).itertuples():
        blocker = next((c for c in cannot_link if _would_join(groups, pair.a, pair.b, c[0], c[1])), None)
        if blocker is None:
            groups.merge(pair.a, pair.b)
            merges.append({"a": pair.a, "b": pair.b, "support": pair.same, "judgment_ids": pair.judgment_ids})
            continue
        skipped.append(_conflict(
            "cannot_link", pair.a, pair.b, sorted(pair.judgment_ids + blocker[2]),
            f"joining {_name(pair.a)} and {_name(pair.b)} would put {_name(blocker[0])} and {_name(blocker[1])}, "
            "judged different, in one cluster; not merged",
        ))
    return groups, merges, skipped


def applicable_judgments(judgments: pd.DataFrame, corpus: pd.DataFrame) -> pd.DataFrame:
    """The judgments that speak about ``corpus``: a corpus-question query, and both questions in
    the corpus with the text they had when judged."""
    text = corpus.set_index("qid")["question"]
    by_qid = judgments[judgments["query_qid"].notna()].astype({"query_qid": "int64"})
    same_query = by_qid["query_qid"].map(text) == by_qid["query_question"]
    same_candidate = by_qid["candidate_qid"].map(text) == by_qid["candidate_question"]
    return by_qid[same_query & same_candidate].reset_index(drop=True)


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


def _nodes(corpus: pd.DataFrame) -> dict[int, Node]:
    return {int(q): f"q:{q}" if pd.isna(c) else f"c:{c}" for q, c in zip(corpus["qid"], corpus["cluster"])}


def _name(node: Node) -> str:
    return node[2:] if node.startswith("c:") else f"qid:{node[2:]}"


def _conflict(kind: str, a: Node, b: Node, judgment_ids: list[int], reason: str) -> dict:
    # a and b (the nodes) ride along so rule 0 can drop conflicts a reviewer settled.
    return {"kind": kind, "cluster_a": _name(a), "cluster_b": _name(b), "judgment_ids": list(judgment_ids), "reason": reason,
            "a": a, "b": b}


def _cluster_pairs(decided: pd.DataFrame) -> pd.DataFrame:
    """Decided items between different groups, aggregated per unordered group pair."""
    columns = ["a", "b", "same", "different", "judgment_ids"]
    if decided.empty:
        return pd.DataFrame(columns=columns)
    ordered = decided.assign(
        a=[min(x, y) for x, y in zip(decided["a"], decided["b"])], b=[max(x, y) for x, y in zip(decided["a"], decided["b"])]
    )
    return ordered.groupby(["a", "b"], sort=True).agg(
        same=("decision", lambda s: int((s == "same").sum())),
        different=("decision", lambda s: int((s == "different").sum())),
        judgment_ids=("judgment_ids", lambda s: sorted(i for ids in s for i in ids)),
    ).reset_index()[columns]


def _would_join(groups: DisjointSet, a: Node, b: Node, x: Node, y: Node) -> bool:
    """Whether merging the groups of a and b puts x and y (now apart) into one group."""
    return (groups.connected(a, x) and groups.connected(b, y)) or (groups.connected(a, y) and groups.connected(b, x))


def _relabel(corpus: pd.DataFrame, node_of: dict[int, Node], groups: DisjointSet) -> tuple[pd.DataFrame, dict[Node, str]]:
    """The corpus with each merged group under one label (rule 5), and the label of every node."""
    sizes = corpus["cluster"].value_counts()
    taken = set(sizes.index)
    split_of = corpus[corpus["cluster"].notna()].groupby("cluster")["split"].first()
    label_of: dict[Node, str] = {}
    group_split: dict[str, str] = {}
    for members in groups.subsets():
        if len(members) < 2:
            # Only a confirmed "same" joins or forms a cluster: a question that was merely judged
            # (say "different" from a cluster) stays as it was, unclustered if it was.
            continue
        clusters = sorted((-sizes[node[2:]], node[2:]) for node in members if node.startswith("c:"))
        if clusters:
            label = clusters[0][1]
            group_split[label] = split_of[label]
        else:
            label = f"new-{min(int(node[2:]) for node in members)}"
            while label in taken:  # only if the corpus already uses the name for something else
                label += "+"
            group_split[label] = "train"
        taken.add(label)
        label_of |= {node: label for node in members}
    out = corpus.copy()
    nodes = [node_of[int(q)] for q in out["qid"]]
    new_cluster = [label_of.get(node, node[2:] if node.startswith("c:") else None) for node in nodes]
    out["cluster"] = pd.array(new_cluster, dtype="string")
    joined = out["cluster"].isin(list(group_split)).fillna(False) & (out["split"] == "none")
    out.loc[joined, "split"] = out.loc[joined, "cluster"].map(group_split)
    return out, label_of
