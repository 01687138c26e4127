"""What the Clusters tab shows of the served labels, as data: one cluster whole (``cluster_facts``:
its members as served now, the representative the others are judged against, its coherence, the
retrieved outsiders closest to it, the current labels against the cluster and the judgments
touching it), and the least coherent clusters (``LeastCoherent``). ``ui.cluster_view`` and
``ui.clusters_tab`` render them.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from annotations.queue import least_coherent
from qpr.data.coherence import cluster_coherence
from qpr.serving.served_model import Served
from workflows.cluster_marks import cluster_members, representative
from workflows.project import Project

OUTSIDERS = 10  # retrieved questions from other clusters shown with a cluster


@dataclass(frozen=True)
class ClusterFacts:
    """One cluster of the served labels (``labels_version``): its id, its ``members`` (served
    corpus rows) and the ``outsiders`` nearest to it (``outsiders``), each with ``judged``: the
    current labels against the cluster; the ``representative`` member (a qid) and its question,
    the cluster's ``coherence``, and the judgments ``touching`` it (with their ``query`` and
    ``candidate`` texts)."""

    cluster: str
    members: pd.DataFrame
    outsiders: pd.DataFrame
    representative: int
    representative_question: str
    coherence: float
    labels_version: int
    touching: pd.DataFrame


def cluster_facts(project: Project, cluster: str) -> ClusterFacts:
    """``cluster`` of ``project``'s served labels, whole; QPRError when there is no such cluster
    (saying where its questions went when it is no longer served)."""
    served = project.served()
    cluster, members = cluster_members(project, served, cluster)
    rep = representative(served, members)
    inside = set(members["qid"])
    judged = project.store.judgments.frame()
    labels = labels_against(judged, inside)
    judged = judged[judged["query_qid"].isin(inside) | judged["candidate_qid"].isin(inside)]
    judged = judged.assign(query=judged["query_question"].fillna(judged["query_text"])).rename(
        columns={"candidate_question": "candidate"})
    near = outsiders(served, members)
    return ClusterFacts(
        cluster=cluster,
        members=members.assign(judged=[labels.get(q, "") for q in members["qid"]]),
        outsiders=near.assign(judged=[labels.get(q, "") for q in near["qid"]]),
        representative=rep,
        representative_question=served.corpus.set_index("qid")["question"][rep],
        coherence=cluster_coherence(members["question"]),
        labels_version=served.labels_version,
        touching=judged,
    )


def labels_against(judged: pd.DataFrame, members: set[int]) -> dict[int, str]:
    """Current labels of the items (a member, candidate) by candidate, e.g. "different x2, same x1"
    (against any member: the representative moves as the cluster changes)."""
    counts = judged[judged["query_qid"].isin(members)].groupby(["candidate_qid", "label"]).size()
    shown: dict[int, list[str]] = {}
    for (candidate, label), n in counts.items():
        shown.setdefault(int(candidate), []).append(f"{label} x{n}")
    return {candidate: ", ".join(labels) for candidate, labels in shown.items()}


def outsiders(served: Served, members: pd.DataFrame, n: int = OUTSIDERS) -> pd.DataFrame:
    """The ``n`` questions outside the cluster that the served retriever finds closest to any of
    its members (at most 20 members ask), nearest first, with their served cluster and how near:
    the encoder's distance, or for a project served by BM25 alone its score (BM25 has no distance;
    its "distance" is minus the score, which a reader takes for an error)."""
    inside = set(members["qid"])
    asking = members.head(20)["question"].tolist()
    best: dict[int, tuple[float, str]] = {}
    for hits in served.default.search(asking, min(50, n + len(inside))):
        for hit in hits:
            if hit.qid not in inside and (hit.qid not in best or hit.distance < best[hit.qid][0]):
                best[hit.qid] = (hit.distance, hit.question)
    frame = pd.DataFrame([(q, text, d) for q, (d, text) in best.items()], columns=["qid", "question", "distance"])
    frame = frame.sort_values(["distance", "qid"]).head(n).reset_index(drop=True)
    frame = frame.assign(cluster=served.cluster_of(frame["qid"]), distance=frame["distance"].round(3))
    if served.bundle.lexical:
        frame = frame.assign(distance=-frame["distance"]).rename(columns={"distance": "BM25 score"})
    return frame[["qid", "question", "cluster", "BM25 score" if served.bundle.lexical else "distance"]]


class LeastCoherent:
    """The served labels' clusters, least coherent first (``annotations.queue.least_coherent``),
    computed once per labels version: served labels change only by a new version, and the table
    took 1.6 s on the 157k-question Quora bundle, too long for every visit of the tab."""

    def __init__(self) -> None:
        self._tables: dict[tuple[str, int], pd.DataFrame] = {}

    def of(self, served: Served) -> pd.DataFrame:
        """``served``'s table: cluster, size and coherence (to 3 decimals)."""
        key = (served.bundle.version, served.labels_version)
        if key not in self._tables:
            self._tables[key] = least_coherent(served.corpus).assign(coherence=lambda f: f["coherence"].round(3))
        return self._tables[key]
