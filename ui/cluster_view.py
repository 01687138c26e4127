"""One cluster as the Clusters tab shows it: its members as served now, the representative the
others are judged against, the retrieved outsiders closest to it, the current labels against the
cluster, and the judgments touching it. Nothing here knows the page's components: the tab puts a
``ClusterView`` into them.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from annotations.store import AnnotationStore
from qpr.data.coherence import cluster_coherence
from qpr.serving.served_model import Served
from ui.display import plain, text_table, when
from workflows.cluster_marks import cluster_members, representative

JUDGMENT_COLUMNS = ["id", "annotator", "label", "query", "query_cluster", "candidate", "candidate_cluster", "created_at"]
MEMBER_COLUMNS = ["qid", "question", "split", "judged"]  # judged: current labels against a member
OUTSIDER_COLUMNS = ["qid", "question", "cluster", "distance", "judged"]  # a BM25-only project shows "BM25 score" for distance
OUTSIDERS = 10  # retrieved questions from other clusters shown with a cluster


@dataclass(frozen=True)
class ClusterView:
    """What the tab shows of one cluster: a Markdown summary (size, splits, coherence, labels
    version, representative), and as tables ready for a gr.Dataframe its members and the nearest
    outsiders (each with the current labels against the cluster) and the judgments touching it."""

    summary: str
    members: pd.DataFrame
    outsiders: pd.DataFrame
    touching: pd.DataFrame


def cluster_view(served: Served, store: AnnotationStore, cluster: str) -> ClusterView:
    """``cluster`` of the served labels as the tab shows it; QPRError when there is no such cluster."""
    cluster, members = cluster_members(store, served, cluster)
    rep = representative(served, members)
    text = served.corpus.set_index("qid")["question"]
    coherence = cluster_coherence(members["question"])
    splits = ", ".join(sorted(members["split"].unique()))
    summary = (f"Cluster **{plain(cluster)}**: {len(members)} questions, split {plain(splits)}, coherence "
               f"{coherence:.3f}, labels version {served.labels_version}. Representative (what the others are judged "
               f"against): **{rep}** {plain(text[rep])}. Click a member that does not belong, or an outsider that "
               "does, then press B (belongs) or X (does not belong).")
    inside = set(members["qid"])
    judged = store.judgments()
    labels = labels_against(judged, inside)
    judged = judged[judged["query_qid"].isin(inside) | judged["candidate_qid"].isin(inside)]
    judged = judged.assign(
        query=judged["query_question"].fillna(judged["query_text"]), created_at=judged["created_at"].map(when),
    ).rename(columns={"candidate_question": "candidate"})
    near = outsiders(served, members)
    return ClusterView(
        summary=summary,
        members=text_table(members.assign(judged=[labels.get(q, "") for q in members["qid"]]), MEMBER_COLUMNS),
        outsiders=text_table(near.assign(judged=[labels.get(q, "") for q in near["qid"]]), [*near.columns, "judged"]),
        touching=text_table(judged, JUDGMENT_COLUMNS),
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
