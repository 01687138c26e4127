"""Corrected clusters: original clusters joined by confirmed false negatives and split by
confirmed false positives, conflicts reported.

The rule, in order:

0. **Reviewers decide last, and win.** A reviewer's adjudication (the newest per target,
   ``AnnotationStore.adjudications``) overrides the annotators': an adjudicated item takes the
   reviewer's "same" or "different" (it is no longer a tie); a cluster pair the reviewer
   *applied* is merged before any other (its mixed or cannot-link conflict is settled), and one
   *rejected* is never merged and counts as a cannot-link. A pair of a cluster and one of its own
   members (``C`` and ``qid:<m>``, as splits are named) is a split: *applied*, the member leaves
   ``C`` whatever the votes (and may not rejoin it); *rejected*, it stays. The result says who decided.
1. **Which judgments count.** Each annotator's current label of each item (query question,
   candidate question). Free-text queries name no cluster and are left out; so are judgments
   whose questions are not in the corpus with the same text (made on another data set).
2. **Item decision (disagreement rule).** Per item, count "same" and "different" labels over
   annotators ("unsure" counts for neither). More "same" -> same; more "different" -> different;
   a tie between annotators is left undecided and reported as a ``tie`` conflict.
3. **Splits (false positives).** Inside one original cluster, a "different" item votes its
   *candidate* out: the query is the member it was compared against (the cluster's representative
   in the cluster view), so when two members are judged different, the candidate is the one that
   leaves. A member with "different" items inside its cluster leaves it unless it also has a
   "same" item with a member of that cluster that is not itself voted out (a candidate of a
   "different" item there); with both, it stays and the pair (cluster, member) is reported
   (``mixed``), exactly as a mixed pair is not merged. A member that leaves becomes a group of
   its own (``qid:<m>``) for the next rules: its "different" items against its old cluster are
   cannot-links, so it never rejoins it, and its "same" items elsewhere may merge it (rule 5).
4. **Cluster pairs.** A question in no cluster stands for itself (shown as ``qid:<n>``). Between
   two groups, any "different" item is a cannot-link: the two may never end up in one cluster.
   A pair with both "same" and "different" items is not merged and is reported (``mixed``).
5. **Merging.** Pairs with only "same" items are merged in order of support (number of "same"
   items, most first; ties by name), each merge joining the two current groups (union-find,
   scipy's DisjointSet), i.e. connected components, so A~B and B~C put A, B and C together. A merge
   that would put two cannot-linked groups into one is skipped and reported (``cannot_link``):
   better-supported merges win, and nothing is resolved silently. So a member voted out of ``C``
   that was judged the same as a member of ``D`` joins ``D``; two members voted out of ``C`` and
   judged the same as each other form a new cluster.
6. **Labels and splits.** Only merged groups (two or more groups joined by "same") are
   relabelled: a question judged only "different" keeps its cluster, or stays in none; a member
   voted out that joins nothing is in no cluster. A merged group takes the label of its largest
   cluster (after splits; ties: smallest label), or ``new-<smallest qid>`` if it holds only
   unclustered questions. Questions keep their split (train / val / test), so no evaluation
   question moves into training; questions with split "none" take the split of the group's label
   cluster ("train" for a group made only of such questions).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd
from scipy.cluster.hierarchy import DisjointSet

from annotations.store import AnnotationStore

MERGE_COLUMNS = ["cluster_a", "cluster_b", "into", "support", "judgment_ids", "decided_by"]
SPLIT_COLUMNS = ["cluster", "qid", "into", "support", "judgment_ids", "decided_by"]
CONFLICT_COLUMNS = ["kind", "cluster_a", "cluster_b", "judgment_ids", "reason"]
Node = str  # "c:<cluster>" or "q:<qid>" (a question in no cluster, or voted out of one): the groups being merged
Pair = tuple[Node, Node]  # sorted


@dataclass
class MergeResult:
    """``corpus``: the corpus with corrected clusters; ``merges`` / ``splits`` / ``conflicts``:
    what was joined, which members left their cluster (``into``: the cluster they joined, blank
    for none), and what was left for review, each with its judgment ids; ``items``: the per-item
    decisions (``item_decisions``); ``judgment_ids``: every judgment considered."""

    corpus: pd.DataFrame
    merges: pd.DataFrame
    conflicts: pd.DataFrame
    items: pd.DataFrame
    judgment_ids: list[int] = field(default_factory=list)
    splits: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=SPLIT_COLUMNS))

    def decisions(self) -> list[dict]:
        """Merges, splits and conflicts as rows for the ``merge_decisions`` table (a split names
        the cluster as ``cluster_a`` and the member leaving it as ``cluster_b`` = ``qid:<m>``)."""
        merged = [
            {"decision": "merged", "cluster_a": m.cluster_a, "cluster_b": m.cluster_b, "judgment_ids": m.judgment_ids,
             "reason": (f"applied by reviewer {m.decided_by}" if m.decided_by else f"{m.support} item(s) judged same")
                       + f"; joined into {m.into}"}
            for m in self.merges.itertuples()
        ]
        split = [
            {"decision": "split", "cluster_a": s.cluster, "cluster_b": f"qid:{s.qid}", "judgment_ids": s.judgment_ids,
             "reason": (f"applied by reviewer {s.decided_by}" if s.decided_by
                        else f"{s.support} item(s) judged it different from members of {s.cluster}")
                       + f"; left {s.cluster}" + (f", joined {s.into}" if s.into else ", now in no cluster")}
            for s in self.splits.itertuples()
        ]
        conflicts = [
            {"decision": c.kind, "cluster_a": c.cluster_a, "cluster_b": c.cluster_b, "judgment_ids": c.judgment_ids,
             "reason": c.reason}
            for c in self.conflicts.itertuples()
        ]
        return merged + split + conflicts


def corrected_clusters(store: AnnotationStore, corpus: pd.DataFrame) -> MergeResult:
    """Apply the module's rule to the store's current judgments and adjudications over ``corpus``."""
    return apply_rules(corpus, applicable_judgments(store.judgments(), corpus), store.adjudications())


def apply_rules(corpus: pd.DataFrame, votes: pd.DataFrame, adjudications: pd.DataFrame) -> MergeResult:
    """The module's rule over ``corpus``, from ``votes`` (current judgments that apply to it:
    columns id, query_qid, candidate_qid, label) and ``adjudications`` (``ADJUDICATION_COLUMNS``
    of the store, the newest per target)."""
    original = _nodes(corpus)
    items = _adjudicate_items(item_decisions(votes), adjudications)
    applied, rejected, split_applied, split_rejected = _pair_decisions(adjudications, original)
    decided = _with_nodes(items[items["decision"] != "tie"], original)
    splits, split_conflicts = _splits(decided[decided["a"] == decided["b"]], split_applied, split_rejected)
    node_of = original | {s["qid"]: f"q:{s['qid']}" for s in splits}
    decided = _with_nodes(decided, node_of)
    pairs = _cluster_pairs(decided[decided["a"] != decided["b"]])
    settled = set(applied) | set(rejected) | set(split_applied) | set(split_rejected)
    conflicts = [c for c in _evidence_conflicts(items, pairs, node_of) + split_conflicts
                 if (min(c["a"], c["b"]), max(c["a"], c["b"])) not in settled]
    # A member a reviewer split off is cannot-linked to its cluster, like a rejected merge; a merge
    # applied to a member that did not leave its cluster has nothing to join.
    applied = {pair: reviewer for pair, reviewer in applied.items() if set(pair) <= set(node_of.values())}
    groups, merges, skipped = _merge_by_support(pairs, applied, rejected | split_applied)
    new_corpus, label_of = _relabel(corpus, node_of, groups)
    merge_frame = pd.DataFrame(
        [{"cluster_a": _name(m["a"]), "cluster_b": _name(m["b"]), "into": label_of[m["a"]], "support": m["support"],
          "judgment_ids": m["judgment_ids"], "decided_by": m.get("decided_by", "")} for m in merges],
        columns=MERGE_COLUMNS,
    )
    split_frame = pd.DataFrame(
        [s | {"into": label_of.get(f"q:{s['qid']}", "")} for s in splits], columns=SPLIT_COLUMNS,
    )
    conflict_frame = pd.DataFrame([{k: c[k] for k in CONFLICT_COLUMNS} for c in conflicts + skipped], columns=CONFLICT_COLUMNS)
    return MergeResult(new_corpus, merge_frame, conflict_frame, items, sorted(int(i) for i in votes["id"]), split_frame)


def _with_nodes(items: pd.DataFrame, node_of: dict[int, Node]) -> pd.DataFrame:
    """``items`` with the groups of their query (``a``) and candidate (``b``) under ``node_of``."""
    return items.assign(a=[node_of[int(q)] for q in items["query_qid"]], b=[node_of[int(c)] for c in items["candidate_qid"]])


def _splits(inside: pd.DataFrame, applied: dict[Pair, str], rejected: dict[Pair, str]) -> tuple[list[dict], list[dict]]:
    """Rules 0 and 3: the members that leave their cluster, from the decided items inside one
    original cluster (``a`` == ``b``), and the ``mixed`` conflicts of members that stay. Split
    pairs are ``(c:<cluster>, q:<member>)``; ``applied`` and ``rejected`` are the reviewers'."""
    different = inside[inside["decision"] == "different"]
    same = inside[inside["decision"] == "same"]
    suspects = {int(q): node for q, node in zip(different["candidate_qid"], different["a"])}
    splits, conflicts = [], []
    for member, cluster in sorted(suspects.items()):
        pair = (cluster, f"q:{member}")
        if pair in applied or pair in rejected:
            continue  # the reviewer's decision, below
        against = different[different["candidate_qid"] == member]
        holding = same[((same["query_qid"] == member) & ~same["candidate_qid"].isin(list(suspects)))
                       | ((same["candidate_qid"] == member) & ~same["query_qid"].isin(list(suspects)))]
        ids = sorted(i for ids in pd.concat([against["judgment_ids"], holding["judgment_ids"]]) for i in ids)
        if holding.empty:
            splits.append({"cluster": _name(cluster), "qid": member, "support": len(against), "judgment_ids": ids,
                           "decided_by": ""})
        else:
            conflicts.append(_conflict(
                "mixed", cluster, f"q:{member}", ids,
                f"question {member} is judged different from {len(against)} and the same as {len(holding)} member(s) "
                f"of {_name(cluster)}; not split",
            ))
    for (cluster, node), reviewer in sorted(applied.items()):
        member = int(node[2:])
        evidence = inside[(inside["query_qid"] == member) | (inside["candidate_qid"] == member)]
        splits.append({"cluster": _name(cluster), "qid": member, "support": int((evidence["decision"] == "different").sum()),
                       "judgment_ids": sorted(i for ids in evidence["judgment_ids"] for i in ids), "decided_by": reviewer})
    return sorted(splits, key=lambda s: s["qid"]), conflicts


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


def _pair_decisions(adjudications: pd.DataFrame, node_of: dict[int, Node]) -> tuple[dict, dict, dict, dict]:
    """Rule 0 for cluster pairs: {(a, b): reviewer} merges applied and rejected, then splits
    applied and rejected, as sorted node pairs of this corpus (a split pair is a cluster and
    ``q:<member>`` of one of its members; pairs naming a cluster or question the corpus lacks are
    ignored)."""
    # any question may be a group of its own (unclustered, or once voted out of its cluster)
    nodes = set(node_of.values()) | {f"q:{qid}" for qid in node_of}
    applied, rejected, split_applied, split_rejected = {}, {}, {}, {}
    for row in adjudications[adjudications["kind"] == "cluster_pair"].itertuples():
        a, b = sorted(f"q:{name[4:]}" if name.startswith("qid:") else f"c:{name}" for name in (row.cluster_a, row.cluster_b))
        member = int(b[2:]) if b.startswith("q:") and b[2:].isdigit() else None
        if a.startswith("c:") and member is not None and node_of.get(member) == a:
            (split_applied if row.decision == "apply" else split_rejected)[(a, b)] = row.reviewer
        elif a in nodes and b in nodes and a != b:
            (applied if row.decision == "apply" else rejected)[(a, b)] = row.reviewer
    return applied, rejected, split_applied, split_rejected


def _evidence_conflicts(items: pd.DataFrame, pairs: pd.DataFrame, node_of: dict) -> list[dict]:
    """Rule 2 and 4 conflicts: tied items and mixed group pairs."""
    conflicts = [
        _conflict("tie", node_of[i.query_qid], node_of[i.candidate_qid], i.judgment_ids,
                  f"annotators split {i.same}:{i.different} on question {i.query_qid} vs {i.candidate_qid}; not decided")
        for i in items[items["decision"] == "tie"].itertuples()
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
    """Rules 0 and 5: join the pairs reviewers ``applied`` first, then same-only pairs, best
    supported first, unless that joins a cannot-link pair ("different" items, or a pair reviewers
    ``rejected``). Returns the groups, the merges made and the ``cannot_link`` conflicts for those
    skipped."""
    applied, rejected = applied or {}, rejected or {}
    pairs = pairs.assign(pair=list(zip(pairs["a"], pairs["b"])))
    cannot_link = [(p.a, p.b, p.judgment_ids) for p in pairs.itertuples() if p.different > 0 and p.pair not in applied]
    cannot_link += [(a, b, []) for a, b in rejected]
    groups = DisjointSet([*pairs["a"], *pairs["b"], *(node for pair in [*applied, *rejected] for node in pair)])
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
    """The corpus with each merged group under one label (rule 6), and the label of every node."""
    sizes = pd.Series([node[2:] for node in node_of.values() if node.startswith("c:")]).value_counts()  # after splits
    taken = set(corpus["cluster"].dropna())
    split_of = corpus[corpus["cluster"].notna()].groupby("cluster")["split"].first()
    label_of: dict[Node, str] = {}
    group_split: dict[str, str] = {}
    for members in groups.subsets():
        if len(members) < 2:
            # Only a confirmed "same" joins or forms a cluster: a question that was merely judged
            # (say "different" from a cluster) stays as it was, unclustered if it was.
            continue
        clusters = sorted((-sizes.get(node[2:], 0), node[2:]) for node in members if node.startswith("c:"))
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
