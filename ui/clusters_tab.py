"""The Clusters tab: the least coherent clusters, one cluster's members and judgments, and the
merges and conflicts the current judgments imply."""

from __future__ import annotations

import gradio as gr
import pandas as pd

from annotations.merge import corrected_clusters
from annotations.queue import least_coherent
from qpr.bundle import Bundle
from qpr.coherence import cluster_coherence
from qpr.errors import QPRError
from ui.common import AppContext, plain, shows_errors, text_table, when

JUDGMENT_COLUMNS = ["id", "annotator", "label", "query", "query_cluster", "candidate", "candidate_cluster", "created_at"]


class ClustersTab:
    """Layout and handlers of the Clusters tab."""

    def __init__(self, ctx: AppContext) -> None:
        self.ctx = ctx
        self._coherence: dict[str, pd.DataFrame] = {}  # least coherent clusters per bundle version

    def render(self) -> None:
        """Lay out the tab (inside a gr.Blocks) and wire it to the handlers."""
        with gr.Tab("Clusters") as tab:
            with gr.Row():
                self.cluster = gr.Textbox(label="Cluster id", scale=3)
                show = gr.Button("Show", variant="primary")
                refresh = gr.Button("Refresh merges and conflicts")
            self.summary = gr.Markdown()
            with gr.Row():
                self.weakest = gr.Dataframe(label="Least coherent clusters (click one)", datatype=["str", "number", "number"],
                                            interactive=False)
                self.members = gr.Dataframe(label="Members", datatype=["number", "str", "str"], interactive=False, wrap=True)
            self.touching = gr.Dataframe(label="Judgments touching this cluster", datatype="str", interactive=False, wrap=True)
            self.merges = gr.Dataframe(label="Merges proposed by the current judgments", datatype="str", interactive=False,
                                       wrap=True, elem_id="clusters-merges")
            self.conflicts = gr.Dataframe(label="Conflicts to review", datatype="str", interactive=False, wrap=True)
        shown = [self.summary, self.members, self.touching]
        gr.on([show.click, self.cluster.submit], self.show_cluster, [self.cluster], shown)
        self.weakest.select(self.pick_cluster, None, [self.cluster, *shown])
        gr.on([tab.select, refresh.click], self.overview, None, [self.weakest, self.merges, self.conflicts])

    def overview(self) -> dict:
        """Least coherent clusters, and the merges and conflicts the current judgments imply."""
        bundle = self.ctx.model.current().bundle
        result = corrected_clusters(self.ctx.store, bundle.corpus)
        merges = result.merges.assign(judgment_ids=result.merges["judgment_ids"].map(_ids))
        conflicts = result.conflicts.assign(judgment_ids=result.conflicts["judgment_ids"].map(_ids))
        return {self.weakest: self._least_coherent(bundle), self.merges: text_table(merges),
                self.conflicts: text_table(conflicts)}

    def _least_coherent(self, bundle: Bundle) -> pd.DataFrame:
        # A bundle's corpus never changes, so its coherence table is computed once per version
        # (1.6 s on the 157k-question Quora bundle), not on every visit of the tab.
        if bundle.version not in self._coherence:
            self._coherence[bundle.version] = least_coherent(bundle.corpus).assign(coherence=lambda f: f["coherence"].round(3))
        return self._coherence[bundle.version]

    @shows_errors
    def show_cluster(self, cluster: str) -> dict:
        """Members, coherence and the judgments touching ``cluster``."""
        cluster = (cluster or "").strip()
        if not cluster:
            raise QPRError("Type a cluster id, or click one in the list of least coherent clusters.")
        corpus = self.ctx.model.current().bundle.corpus
        members = corpus[corpus["cluster"] == cluster]
        if members.empty:
            raise QPRError(f"There is no cluster {cluster!r} in the served corpus.")
        coherence = cluster_coherence(members["question"])
        summary = (f"Cluster **{plain(cluster)}**: {len(members)} questions, split {plain(members['split'].iloc[0])}, "
                   f"coherence {coherence:.3f}")
        judged = self.ctx.store.judgments(cluster=cluster)
        judged = judged.assign(
            query=judged["query_question"].fillna(judged["query_text"]),
            created_at=judged["created_at"].map(when),
        ).rename(columns={"candidate_question": "candidate"})
        return {self.summary: summary, self.members: text_table(members, ["qid", "question", "split"]),
                self.touching: text_table(judged, JUDGMENT_COLUMNS)}

    def pick_cluster(self, event: gr.SelectData) -> dict:
        """The cluster id of the clicked row of the least-coherent table, shown."""
        cluster = str(event.row_value[0])
        return {self.cluster: cluster} | self.show_cluster(cluster)


def _ids(ids) -> str:
    return ", ".join(str(i) for i in ids)
