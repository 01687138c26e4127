"""Corrected clusters from pair constraints (issue 57): a judgment speaks about two questions,
never about two whole clusters by itself.

A "same" item is a must-link between its two questions, a "different" item a cannot-link. The
corrected clusters are the imported ones changed only as far as the constraints and, where a
``PairScorer`` is given, the model's calibrated pair probabilities (cut at a threshold fitted on
the judged pairs, ``annotations.pair_scores``) support, in this order:

0. **Reviewers decide last, and win.** An adjudicated item takes the reviewer's decision; a
   cluster pair *applied* is merged first, whatever the votes; one *rejected* is never merged and
   no question moves between its two sides. A split (``C`` and ``qid:<m>``) *applied* takes ``m``
   out of ``C`` for good; *rejected*, ``m`` stays in ``C`` whatever the votes.
1. **Which judgments count** and **item decisions** (``item_decisions``): each annotator's current
   label, majority per item; a tie decides nothing and is reported (``tie``).
2. **Voted out.** A "different" item inside one cluster votes one of its two questions out: the
   one the model finds less like the rest of the cluster, or without a model the candidate (the
   query is the member it was compared against, the cluster's representative in the cluster
   view). A question with a "same" item holding it to another member that is not voted out stays,
   reported (``mixed``). A question voted out never rejoins its cluster; it is re-placed by rule 5.
3. **Whole clusters merge only on evidence for the whole clusters**: at least ``MIN_LINKS``
   independent "same" links between them (distinct questions on both sides), or one link and the
   model's probability between the two clusters as wholes (mean over all cross pairs) at or above
   the fitted threshold; and no cannot-link between any of their members. Best supported first,
   each merge judged again against the merged cluster, so single links never chain clusters.
   A pair with links and a cannot-link is reported (``mixed``), not merged.
4. **Linked questions move.** Questions joined by "same" items (connected components; a link that
   would join two questions judged different is skipped and reported, ``cannot_link``) go to one
   home: of the clusters they are in, the one the model finds them most like (at or above the
   threshold), else a new cluster of their own; without a model, the cluster holding most of them
   (then the larger). A home where any of them is cannot-linked is not a home; with none left, they
   stay and it is reported. Questions in no cluster linked only to each other form a new cluster.
5. **Re-placed.** With a model, a question voted out joins the cluster it is most like when that
   is at or above the threshold and nothing forbids it; otherwise it is in no cluster.
6. **Labels and splits.** Clusters keep their names; a merge takes the larger cluster's (ties: the
   smaller name); a new cluster is ``new-<smallest qid>``. Every question keeps its split; one with
   split "none" that joins a cluster takes that cluster's ("train" for a new one).

The result (``MergeResult``) lists merges (``cluster_a``, ``cluster_b``, ``into``), the questions
that left their cluster (``splits``: voted out, or moved, ``into`` the cluster they joined, blank
for none) and conflicts, each with its judgment ids and ``evidence`` in words. Pure: a judgments
frame, the corpus and an optional scorer in, no database.
"""

from __future__ import annotations


import pandas as pd
from scipy.cluster.hierarchy import DisjointSet

from annotations.merge import (
    CONFLICT_COLUMNS, MERGE_COLUMNS, SPLIT_COLUMNS, MergeResult, adjudicate_items, applicable_judgments, item_decisions,
)
from annotations.pair_scores import PairScorer, fit_threshold
from annotations.store import AnnotationStore

MIN_LINKS = 2  # independent "same" links that merge two whole clusters without a model's agreement


def corrected_clusters(store: AnnotationStore, corpus: pd.DataFrame, scorer: PairScorer | None = None) -> MergeResult:
    """The module's rules over the store's current judgments and adjudications about ``corpus``."""
    return constrained_clusters(corpus, applicable_judgments(store.judgments.frame(), corpus), store.review.adjudications(), scorer)


def constrained_clusters(corpus: pd.DataFrame, votes: pd.DataFrame, adjudications: pd.DataFrame,
                         scorer: PairScorer | None = None) -> MergeResult:
    """The module's rules over ``corpus`` from ``votes`` (current judgments that apply to it:
    columns id, query_qid, candidate_qid, label), ``adjudications`` (the store's newest per
    target) and, optionally, the model's pair probabilities (``scorer``)."""
    items = adjudicate_items(item_decisions(votes), adjudications)
    work = _Work(corpus, items, adjudications, scorer)
    work.vote_out()
    work.reviewer_merges()
    work.merge_clusters()
    work.join_linked()
    work.replace_voted_out()
    return work.result(sorted(int(i) for i in votes["id"]))


def _node(qid: int) -> str:
    return f"qid:{qid}"


class _Work:
    """The clusters as the rules change them, and what each change rests on."""

    def __init__(self, corpus: pd.DataFrame, items: pd.DataFrame, adjudications: pd.DataFrame, scorer: PairScorer | None):
        self.corpus, self.items, self.scorer = corpus, items, scorer
        self.original = {int(q): None if pd.isna(c) else str(c) for q, c in zip(corpus["qid"], corpus["cluster"])}
        self.group = dict(self.original)
        self.members: dict[str, set[int]] = {}
        for qid, label in self.original.items():
            if label is not None:
                self.members.setdefault(label, set()).add(qid)
        self.alias: dict[str, str] = {}  # a merged cluster's name -> the name it was merged under
        decided = items[items["decision"] != "tie"]
        known = [int(q) in self.original and int(c) in self.original for q, c in zip(decided["query_qid"], decided["candidate_qid"])]
        decided = decided[known] if len(decided) else decided
        self.same = [(int(r.query_qid), int(r.candidate_qid), list(r.judgment_ids), int(r.same))
                     for r in decided[decided["decision"] == "same"].itertuples()]
        self.different = [(int(r.query_qid), int(r.candidate_qid), list(r.judgment_ids))
                          for r in decided[decided["decision"] == "different"].itertuples()]
        self.cannot: dict[frozenset, list[int]] = {}
        self.partners: dict[int, set[int]] = {}
        for q, c, ids in self.different:
            self.cannot[frozenset((q, c))] = self.cannot.get(frozenset((q, c)), []) + ids
            self.partners.setdefault(q, set()).add(c)
            self.partners.setdefault(c, set()).add(q)
        self.threshold = None
        if scorer is not None:
            probabilities = scorer.pairs(decided["query_qid"].astype(int), decided["candidate_qid"].astype(int))
            self.threshold = fit_threshold(probabilities, (decided["decision"] == "same").to_numpy())
        self.applied, self.rejected, self.split_applied, self.split_rejected = self._pair_decisions(adjudications)
        self.banned: dict[int, set[str]] = {}  # questions voted out -> the clusters they may not rejoin
        self.why: dict[int, dict] = {}  # a question that left its cluster -> support, ids, decided_by, evidence
        self.merge_rows: list[dict] = []
        self.conflicts: list[dict] = []
        self.voted_out: list[int] = []

    # -- reading the state ------------------------------------------------------------------

    def resolve(self, label: str | None) -> str | None:
        while label in self.alias:
            label = self.alias[label]
        return label

    def name(self, qid: int) -> str:
        return self.group[qid] or _node(qid)

    def linked_against(self, qids, others) -> list[int]:
        """Judgment ids of the cannot-links between any of ``qids`` and any of ``others``."""
        others = set(others)
        return [i for q in qids for p in self.partners.get(q, ()) if p in others for i in self.cannot[frozenset((q, p))]]

    def _pair_decisions(self, adjudications: pd.DataFrame) -> tuple[dict, dict, dict, set]:
        """Rule 0's cluster pairs: merges applied and rejected ({frozenset of names: reviewer}),
        splits applied ({(cluster, qid): reviewer}) and rejected; names the corpus lacks are ignored."""
        names = set(self.members) | {_node(q) for q in self.original}
        applied, rejected, split_applied, split_rejected = {}, {}, {}, set()
        for row in adjudications[adjudications["kind"] == "cluster_pair"].itertuples():
            a, b = str(row.cluster_a), str(row.cluster_b)
            for cluster, node in ((a, b), (b, a)):
                member = int(node[4:]) if node.startswith("qid:") and node[4:].isdigit() else None
                if member is not None and self.original.get(member) == cluster:
                    if row.decision == "apply":
                        split_applied[(cluster, member)] = row.reviewer
                    else:
                        split_rejected.add((cluster, member))
                    break
            else:
                if a in names and b in names and a != b:
                    (applied if row.decision == "apply" else rejected)[frozenset((a, b))] = row.reviewer
        return applied, rejected, split_applied, split_rejected

    def settled(self, a: str, b: str) -> bool:
        pair = frozenset((a, b))
        return pair in self.applied or pair in self.rejected or any(
            {c, _node(m)} == set(pair) for c, m in [*self.split_applied, *self.split_rejected])

    def conflict(self, kind: str, a: str, b: str, ids, reason: str) -> None:
        if not self.settled(a, b):
            self.conflicts.append({"kind": kind, "cluster_a": a, "cluster_b": b, "judgment_ids": sorted(set(ids)), "reason": reason})

    # -- changing it -------------------------------------------------------------------------

    def move(self, qid: int, into: str | None, ids, evidence: str, decided_by: str = "") -> None:
        """``qid`` leaves its cluster (if any) for ``into`` (None: no cluster), with its reasons."""
        old = self.group[qid]
        if old is not None:
            self.members[old].discard(qid)
        if into is not None:
            self.members.setdefault(into, set()).add(qid)
        self.group[qid] = into
        if self.original[qid] is not None:
            why = self.why.setdefault(qid, {"support": 0, "ids": set(), "decided_by": "", "evidence": []})
            why["support"] += 1
            why["ids"] |= set(ids)
            why["decided_by"] = why["decided_by"] or decided_by
            why["evidence"].append(evidence)

    def merge(self, a: str, b: str, support: int, ids, evidence: str, decided_by: str = "") -> str:
        """Clusters ``a`` and ``b`` as one, under the larger one's name (ties: the smaller name)."""
        keep, gone = sorted((a, b), key=lambda label: (-len(self.members[label]), label))
        for qid in self.members.pop(gone):
            self.group[qid] = keep
            self.members[keep].add(qid)
        self.alias[gone] = keep
        self.merge_rows.append({"cluster_a": min(a, b), "cluster_b": max(a, b), "into": keep, "support": support,
                                "judgment_ids": sorted(set(ids)), "decided_by": decided_by, "evidence": evidence})
        return keep

    def new_label(self, qids) -> str:
        label = f"new-{min(qids)}"
        while label in self.members or label in set(self.original.values()):
            label += "+"
        return label

    # -- the rules ---------------------------------------------------------------------------

    def vote_out(self) -> None:
        """Rules 0 and 2."""
        suspects: dict[tuple[str, int], list[int]] = {}
        for q, c, ids in self.different:
            cluster = self.original[q]
            if cluster is None or cluster != self.original[c]:
                continue
            leaver = c
            rest = self.members[cluster] - {q, c}
            if self.scorer is not None and rest:
                leaver = min((c, q), key=lambda x: self.scorer.to_group(x, rest))
            suspects.setdefault((cluster, leaver), []).extend(ids)
        out = {m for _, m in suspects}
        for (cluster, member), ids in sorted(suspects.items(), key=lambda s: s[0][1]):
            if (cluster, member) in self.split_applied or (cluster, member) in self.split_rejected:
                continue
            holding = [i for q, c, same_ids, _ in self.same if member in (q, c)
                       for other in [c if q == member else q]
                       if self.original[other] == cluster and other not in out for i in same_ids]
            if holding:
                self.conflict("mixed", cluster, _node(member), ids + holding,
                              f"question {member} is judged different from {len(ids)} and the same as "
                              f"{len(holding)} member(s) of {cluster}; not split")
                continue
            self.move(member, None, ids, f"{len(ids)} item(s) judged it different from members of {cluster}")
            self.banned.setdefault(member, set()).add(cluster)
            self.voted_out.append(member)
        for (cluster, member), reviewer in sorted(self.split_applied.items(), key=lambda s: s[0][1]):
            ids = [i for pair, found in self.cannot.items() if member in pair for i in found]
            self.move(member, None, ids, f"applied by reviewer {reviewer}", decided_by=reviewer)
            self.banned.setdefault(member, set()).add(cluster)
            self.voted_out.append(member)

    def reviewer_merges(self) -> None:
        """Rule 0: the pairs reviewers applied, joined whatever the votes."""
        for pair, reviewer in sorted(self.applied.items(), key=lambda p: sorted(p[0])):
            a, b = sorted(pair)
            ends = [self.resolve(x) if not x.startswith("qid:") else x for x in (a, b)]
            questions = [int(x[4:]) for x in ends if x.startswith("qid:")]
            if any(self.group[q] is not None for q in questions) or ends[0] == ends[1]:
                continue  # a question still in a cluster has nothing to join; already one cluster
            clusters = [x for x in ends if not x.startswith("qid:")]
            into = clusters[0] if clusters else self.new_label(questions)
            if len(clusters) == 2:
                self.merge(*clusters, 0, [], f"applied by reviewer {reviewer}", reviewer)
                continue
            for q in questions:
                self.group[q] = into
                self.members.setdefault(into, set()).add(q)
            self.merge_rows.append({"cluster_a": a, "cluster_b": b, "into": into, "support": 0, "judgment_ids": [],
                                    "decided_by": reviewer, "evidence": f"applied by reviewer {reviewer}"})

    def merge_clusters(self) -> None:
        """Rule 3: whole clusters merged on evidence for the whole clusters, best first."""
        blocked: set[frozenset] = set()
        while True:
            links: dict[frozenset, list] = {}
            for q, c, ids, _ in self.same:
                a, b = self.group[q], self.group[c]
                if a is not None and b is not None and a != b:
                    links.setdefault(frozenset((a, b)), []).append((q, c, ids))
            best = None
            for pair, found in links.items():
                a, b = sorted(pair)
                if pair in blocked or frozenset((a, b)) in self.rejected:
                    continue
                side = [{q if self.group[q] == x else c for q, c, _ in found} for x in (a, b)]
                independent = min(len(side[0]), len(side[1]))
                p = self.scorer.between(self.members[a], self.members[b]) if self.scorer is not None else None
                if independent < MIN_LINKS and (p is None or p < self.threshold):
                    continue
                against = self.linked_against(self.members[a], self.members[b])
                ids = [i for _, _, found_ids in found for i in found_ids]
                if against:
                    blocked.add(pair)
                    self.conflict("mixed", a, b, ids + against,
                                  f"{len(found)} item(s) judged same and {len(against)} different between {a} and {b}; "
                                  "not merged")
                    continue
                key = (independent, p or 0.0, [-ord(ch) for ch in a + b])
                if best is None or key > best[0]:
                    evidence = f"{independent} independent link(s)" + ("" if p is None else f"; probability {p:.2f} between "
                                                                              f"the whole clusters, threshold {self.threshold:.2f}")
                    best = (key, a, b, independent, ids, evidence)
            if best is None:
                return
            self.merge(best[1], best[2], best[3], best[4], best[5])

    def join_linked(self) -> None:
        """Rule 4: questions joined by "same" links go to one home."""
        components = DisjointSet(sorted({q for q, c, _, _ in self.same} | {c for _, c, _, _ in self.same}))
        edges: dict[int, list] = {}
        for q, c, ids, _ in sorted(self.same, key=lambda s: (-s[3], s[0], s[1])):
            if components.connected(q, c):
                edges.setdefault(components[q], []).append((q, c, ids))
                continue
            against = self.linked_against(components.subset(q), components.subset(c))
            if against:
                self.conflict("cannot_link", self.name(q), self.name(c), ids + against,
                              f"questions {q} and {c} are judged the same, but that would join questions judged "
                              "different; not joined")
                continue
            joined = edges.pop(components[q], []) + edges.pop(components[c], []) + [(q, c, ids)]
            components.merge(q, c)
            edges[components[q]] = joined
        for root, found in sorted(edges.items()):
            self._home(sorted(components.subset(root)), found)

    def _home(self, linked: list[int], found: list) -> None:
        groups = {self.group[q] for q in linked}
        if len(groups) == 1 and None not in groups:
            return
        ids = sorted({i for _, _, e in found for i in e})
        stuck = {self.group[q] for q in linked if (self.original[q], q) in self.split_rejected and self.group[q] is not None}
        options = sorted(stuck if stuck else {g for g in groups if g is not None})
        valid = [g for g in options if self._may_join(linked, g)]
        scored = {g: self._score(linked, g) for g in valid}
        home = max(valid, key=lambda g: scored[g], default=None)  # ties: the smaller name (valid is sorted)
        if self.scorer is not None and home is not None and scored[home][0] < self.threshold and not stuck:
            home = None  # the model finds them unlike every cluster they are in: a cluster of their own
        if home is None and (stuck or (self.scorer is None and groups != {None})):
            self.conflict("cannot_link", *sorted({self.name(q) for q in linked})[:2], ids,
                          f"questions {', '.join(map(str, linked))} are judged the same, but no cluster of theirs may take "
                          "them all (judged different, or a reviewer's decision); not moved")
            return
        into = home or self.new_label(linked)
        how = f"judged the same as {len(found)} pair(s) of questions now in {into}" + (
            "" if home is None or self.scorer is None else f"; probability {scored[home][0]:.2f} to {home}, "
                                                           f"threshold {self.threshold:.2f}")
        before = {q: self.group[q] for q in linked}
        if home is None:  # a new cluster: each link of a question from no cluster is a merge
            pairs = [(a, c) for a, c, _ in found if before[a] is None or before[c] is None]
            names = [tuple(sorted((_node(a), _node(c)))) for a, c in pairs]
        else:
            names = [tuple(sorted((into, _node(q)))) for q in linked if before[q] is None]
        for a, b in dict.fromkeys(names):
            self.merge_rows.append({"cluster_a": a, "cluster_b": b, "into": into, "support": len(found), "judgment_ids": ids,
                                    "decided_by": "", "evidence": how})
        for q in linked:
            if before[q] != into:
                self.move(q, into, ids, how)

    def _may_join(self, linked: list[int], label: str) -> bool:
        inside = self.members.get(label, set())
        for q in linked:
            if self.group[q] == label:
                continue
            moving = self.group[q]
            if label in {self.resolve(b) for b in self.banned.get(q, ())} or frozenset((label, _node(q))) in self.rejected:
                return False
            if moving is not None and (frozenset((label, moving)) in self.rejected or (self.original[q], q) in self.split_rejected):
                return False
        return not self.linked_against(linked, inside - set(linked))

    def _score(self, linked: list[int], label: str) -> tuple:
        rest = self.members[label] - set(linked)
        if self.scorer is None:
            return (sum(self.group[q] == label for q in linked), len(self.members[label]))
        mean = sum(self.scorer.to_group(q, rest) for q in linked) / len(linked) if rest else 1.0
        return (mean, len(self.members[label]))

    def replace_voted_out(self) -> None:
        """Rule 5: with a model, a question voted out joins the cluster it is most like, if any passes."""
        if self.scorer is None:
            return
        for q in self.voted_out:
            if self.group[q] is not None:
                continue
            options = {g: sorted(m) for g, m in self.members.items() if m and self._may_join([q], g)}
            scores = self.scorer.to_groups(q, options)
            best = max(sorted(scores), key=lambda g: scores[g], default=None)
            if best is not None and scores[best] >= self.threshold:
                self.move(q, best, [], f"re-placed by the model (probability {scores[best]:.2f} to {best}, threshold "
                                       f"{self.threshold:.2f})")

    def result(self, judgment_ids: list[int]) -> MergeResult:
        """Rule 6, and the frames of ``MergeResult``."""
        out = self.corpus.copy()
        final = [self.resolve(self.group[int(q)]) for q in out["qid"]]
        out["cluster"] = pd.array(final, dtype="string")
        split_of = self.corpus[self.corpus["cluster"].notna()].groupby("cluster")["split"].first().to_dict()
        joined = out["cluster"].notna().to_numpy() & (out["split"] == "none").to_numpy()
        out.loc[joined, "split"] = out.loc[joined, "cluster"].map(lambda label: split_of.get(label, "train"))
        after = dict(zip(out["qid"].astype(int), final))
        splits = [{"cluster": self.original[q], "qid": q, "into": after[q] or "", "support": why["support"],
                   "judgment_ids": sorted(why["ids"]), "decided_by": why["decided_by"], "evidence": "; then ".join(why["evidence"])}
                  for q, why in sorted(self.why.items()) if after[q] != self.resolve(self.original[q])]
        merges = [row | {"into": self.resolve(row["into"])} for row in self.merge_rows]
        ties = self.items[self.items["decision"] == "tie"]
        for i in ties.itertuples():
            q, c = int(i.query_qid), int(i.candidate_qid)
            self.conflict("tie", self.original.get(q) or _node(q), self.original.get(c) or _node(c), i.judgment_ids,
                          f"annotators split {i.same}:{i.different} on question {q} vs {c}; not decided")
        return MergeResult(out, pd.DataFrame(merges, columns=MERGE_COLUMNS), pd.DataFrame(self.conflicts, columns=CONFLICT_COLUMNS),
                           self.items, judgment_ids, pd.DataFrame(splits, columns=SPLIT_COLUMNS), self.threshold)
