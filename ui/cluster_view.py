"""One cluster as the Clusters tab shows it: its facts (``workflows.cluster_facts``: its members as
served now, the representative the others are judged against, the retrieved outsiders closest to
it, the current labels against the cluster, and the judgments touching it) rendered as a Markdown
summary and tables. Nothing here knows the page's components: the tab puts a ``ClusterView``
into them.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ui.display import plain, text_table, when
from workflows.cluster_facts import ClusterFacts

JUDGMENT_COLUMNS = ["id", "annotator", "label", "query", "query_cluster", "candidate", "candidate_cluster", "created_at"]
MEMBER_COLUMNS = ["qid", "question", "split", "judged"]  # judged: current labels against a member
OUTSIDER_COLUMNS = ["qid", "question", "cluster", "distance", "judged"]  # a BM25-only project shows "BM25 score" for distance


@dataclass(frozen=True)
class ClusterView:
    """What the tab shows of one cluster: a Markdown summary (size, splits, coherence, labels
    version, representative), and as tables ready for a gr.Dataframe its members and the nearest
    outsiders (each with the current labels against the cluster) and the judgments touching it."""

    summary: str
    members: pd.DataFrame
    outsiders: pd.DataFrame
    touching: pd.DataFrame


def cluster_view(facts: ClusterFacts) -> ClusterView:
    """The cluster ``facts`` describe, as the tab shows it."""
    members, touching = facts.members, facts.touching
    splits = ", ".join(sorted(members["split"].unique()))
    summary = (f"Cluster **{plain(facts.cluster)}**: {len(members)} questions, split {plain(splits)}, coherence "
               f"{facts.coherence:.3f}, labels version {facts.labels_version}. Representative (what the others are judged "
               f"against): **{facts.representative}** {plain(facts.representative_question)}. Click a member that does "
               "not belong, or an outsider that does, then press B (belongs) or X (does not belong).")
    return ClusterView(
        summary=summary,
        members=text_table(members, MEMBER_COLUMNS),
        outsiders=text_table(facts.outsiders),
        touching=text_table(touching.assign(created_at=touching["created_at"].map(when)), JUDGMENT_COLUMNS),
    )
