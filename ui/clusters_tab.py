"""The Clusters tab: one cluster's view (members and the retrieved outsiders closest to it, each
marked "belongs" or "does not belong" against the cluster's representative), the least coherent
clusters, the merges, splits and conflicts the current judgments imply, and the served labels:
apply the corrections at once, their history, roll a version back or revert one decision.

One cluster's view is rendered by ``ui.cluster_view`` from ``workflows.cluster_facts``. What the tab
shows is the served labels (``Served.corpus``): after "Apply corrections" the corrected clusters,
without retraining. What the judgments propose and the labels' history are
``workflows.labels.labels_overview``'s.
"""

from __future__ import annotations

import gradio as gr
import pandas as pd

from annotations.corrections import HISTORY_COLUMNS
from annotations.merge import CONFLICT_COLUMNS, MERGE_COLUMNS
from qpr.errors import QPRError
from qpr.serving.served_model import Served
from ui.cluster_view import JUDGMENT_COLUMNS, MEMBER_COLUMNS, OUTSIDER_COLUMNS, cluster_view
from ui.common import AppContext
from ui.display import plain, shows_errors, text_table, when
from workflows.cluster_facts import LeastCoherent, cluster_facts
from workflows.cluster_marks import mark, merge_clusters, merge_preview, where_went
from workflows.labels import labels_overview, serve_corrections, serve_revert, serve_rollback
from workflows.project import Project


SPLIT_SHOWN = ["cluster", "qid", "question", "into", "support", "judgment_ids", "decided_by", "evidence"]  # a split, with its question


class ClustersTab:
    """Layout and handlers of the Clusters tab."""

    def __init__(self, ctx: AppContext) -> None:
        self.ctx = ctx
        self._coherence = LeastCoherent()  # least coherent clusters per served labels

    def render(self, name: gr.Textbox) -> None:
        """Lay out the tab (inside a gr.Blocks) and wire it to the handlers; ``name`` is the
        page's 'Your name' box (marking and applying corrections need a named person)."""
        with gr.Tab("Clusters") as tab:
            with gr.Row():
                self.cluster = gr.Textbox(label="Cluster id", scale=3, elem_id="clusters-id")
                show = gr.Button("Show", variant="primary", elem_id="clusters-show")
                refresh = gr.Button("Refresh merges and conflicts")
            self.summary = gr.Markdown(elem_id="clusters-summary")
            with gr.Row():
                self.weakest = gr.Dataframe(pd.DataFrame(columns=["cluster", "size", "coherence"]), interactive=False,
                                            label="Least coherent clusters (click one)", datatype=["str", "number", "number"])
                self.members = gr.Dataframe(pd.DataFrame(columns=MEMBER_COLUMNS), label="Members (click one to mark it)",
                                            datatype="str", interactive=False,
                                            wrap=True, elem_id="clusters-members")
            # No label here says "question": the browser tests find the Search tab's box by that word.
            self.outsiders = gr.Dataframe(label="Retrieved outsiders: the nearest from other clusters (click one to mark it)",
                                          value=pd.DataFrame(columns=OUTSIDER_COLUMNS), datatype="str", interactive=False,
                                          wrap=True, elem_id="clusters-outsiders")
            with gr.Row(equal_height=True):
                self.selected = gr.Textbox(label="Selected to mark (qid)", elem_id="clusters-selected")
                belongs = gr.Button("Belongs to this cluster (B)", elem_id="clusters-belongs")
                not_belong = gr.Button("Does not belong (X)", variant="stop", elem_id="clusters-not-belong")
            self.mark_status = gr.Markdown(elem_id="clusters-mark-status")
            with gr.Accordion("Merge this whole cluster with another (B moves one question only)", open=False):
                with gr.Row(equal_height=True):
                    self.other = gr.Textbox(label="The other cluster", elem_id="clusters-merge-other")
                    preview = gr.Button("Show both", elem_id="clusters-merge-preview")
                    self.merge_button = gr.Button("Merge the two whole clusters", interactive=False, elem_id="clusters-merge")
                self.both = gr.Dataframe(pd.DataFrame(columns=["cluster", "qid", "question"]), label="Both clusters",
                                         datatype="str", interactive=False, wrap=True, elem_id="clusters-merge-both")
            self.touching = gr.Dataframe(pd.DataFrame(columns=JUDGMENT_COLUMNS), label="Judgments touching this cluster",
                                         datatype="str", interactive=False, wrap=True, elem_id="clusters-touching")
            self.merges = gr.Dataframe(pd.DataFrame(columns=MERGE_COLUMNS), label="Merges proposed by the current judgments",
                                       datatype="str", interactive=False, wrap=True, elem_id="clusters-merges")
            self.splits = gr.Dataframe(pd.DataFrame(columns=SPLIT_SHOWN), label="Splits proposed by the current judgments "
                                       "(members voted out)", datatype="str", interactive=False, wrap=True, elem_id="clusters-splits")
            self.conflicts = gr.Dataframe(pd.DataFrame(columns=CONFLICT_COLUMNS), label="Conflicts to review", datatype="str",
                                          interactive=False, wrap=True)
            with gr.Accordion("Served labels: apply corrections, history, roll back", open=True):
                self.labels_status = gr.Markdown(elem_id="clusters-labels-status")
                apply = gr.Button("Apply corrections now (serve the merges and splits above)", variant="primary",
                                  elem_id="clusters-apply")
                self.history = gr.Dataframe(pd.DataFrame(columns=HISTORY_COLUMNS), label="History of the served labels (newest first)",
                                            datatype="str", interactive=False, wrap=True, elem_id="clusters-history")
                with gr.Row(equal_height=True):
                    self.version = gr.Number(label="Version", precision=0, minimum=0, elem_id="clusters-rollback-version")
                    roll = gr.Button("Roll back to this version", elem_id="clusters-rollback")
                with gr.Row(equal_height=True):
                    self.revert_a = gr.Textbox(label="Merge or split of: cluster A", elem_id="clusters-revert-a")
                    self.revert_b = gr.Textbox(label="cluster B (or qid:<n>)", elem_id="clusters-revert-b")
                    revert = gr.Button("Revert this decision", elem_id="clusters-revert")
        shown = [self.summary, self.members, self.outsiders, self.touching]
        overview = [self.weakest, self.merges, self.splits, self.conflicts, self.labels_status, self.history]
        gr.on([show.click, self.cluster.submit], self.show_cluster, [self.cluster], shown)
        self.weakest.select(self.pick_cluster, None, [self.cluster, *shown])
        self.members.select(self.pick_question, None, [self.selected])
        self.outsiders.select(self.pick_question, None, [self.selected])
        gr.on([tab.select, refresh.click], self.overview, None, overview)
        marked = [self.mark_status, *shown, *overview]
        gr.on([belongs.click], self.mark_belongs, [self.cluster, self.selected, name], marked)
        gr.on([not_belong.click], self.mark_not_belong, [self.cluster, self.selected, name], marked)
        gr.on([preview.click, self.other.submit], self.preview_merge, [self.cluster, self.other], [self.both, self.merge_button])
        gr.on([self.cluster.change, self.other.change], lambda: gr.Button(interactive=False), None, [self.merge_button])
        gr.on([self.merge_button.click], self.merge, [self.cluster, self.other, name], [*marked, self.merge_button])
        gr.on([apply.click], self.apply, [self.cluster, name], [*overview, *shown])
        gr.on([roll.click], self.rollback, [self.version, self.cluster, name], [*overview, *shown])
        gr.on([revert.click], self.revert, [self.revert_a, self.revert_b, self.cluster, name], [*overview, *shown])

    # -- one cluster ---------------------------------------------------------------------------

    @shows_errors
    def show_cluster(self, cluster: str) -> dict:
        """Members (as served now), representative, coherence, the closest outsiders and the
        judgments touching ``cluster``."""
        return self._cluster_view(self.ctx.current(), cluster)

    def _cluster_view(self, project: Project, cluster: str) -> dict:
        view = cluster_view(cluster_facts(project, cluster))
        return {self.summary: view.summary, self.members: view.members, self.outsiders: view.outsiders,
                self.touching: view.touching}

    def pick_cluster(self, event: gr.SelectData) -> dict:
        """The cluster id of the clicked row of the least-coherent table, shown."""
        cluster = str(event.row_value[0])
        return {self.cluster: cluster} | self.show_cluster(cluster)

    def pick_question(self, event: gr.SelectData) -> dict:
        """The qid of the clicked member or outsider, ready to mark."""
        return {self.selected: str(event.row_value[0])}

    def mark_belongs(self, cluster: str, selected: str, name: str, request: gr.Request,
                     profile: gr.OAuthProfile | None) -> dict:
        """Record that the selected question belongs to the cluster (a false negative when it is an outsider)."""
        return self.mark("same", cluster, selected, name, request, profile)

    def mark_not_belong(self, cluster: str, selected: str, name: str, request: gr.Request,
                        profile: gr.OAuthProfile | None) -> dict:
        """Record that the selected question does not belong to the cluster (a false positive when it is a member)."""
        return self.mark("different", cluster, selected, name, request, profile)

    @shows_errors
    def mark(self, label: str, cluster: str, selected: str, name: str, request: gr.Request | None = None,
             profile: gr.OAuthProfile | None = None) -> dict:
        """Record ``label`` ("same": belongs, "different": does not belong) for the selected question
        (``workflows.cluster_marks.mark``: B on an outsider moves that one question), then show the
        cluster and what the judgments now propose."""
        who = self.ctx.annotator(name, request, profile)
        project = self.ctx.current()
        status = mark(project, who, cluster, selected, label, self.ctx.role_of(who))
        return {self.mark_status: plain(status)} | self._cluster_view(project, cluster) | self._overview(project)

    @shows_errors
    def preview_merge(self, cluster: str, other: str) -> dict:
        """Both whole clusters, shown before they may be merged."""
        both = merge_preview(self.ctx.current(), cluster, other)
        return {self.both: text_table(both), self.merge_button: gr.Button(interactive=True)}

    @shows_errors
    def merge(self, cluster: str, other: str, name: str, request: gr.Request | None = None,
              profile: gr.OAuthProfile | None = None) -> dict:
        """Record that the two whole clusters shown mean the same (to serve on Apply)."""
        who = self.ctx.annotator(name, request, profile)
        project = self.ctx.current()
        status = merge_clusters(project, who, cluster, other, self.ctx.role_of(who))
        return ({self.mark_status: plain(status), self.merge_button: gr.Button(interactive=False)}
                | self._cluster_view(project, cluster) | self._overview(project))

    # -- what the judgments imply, and the served labels ---------------------------------------

    def overview(self) -> dict:
        """Least coherent clusters (as served), the merges, splits and conflicts the current
        judgments imply, and the served labels with their history."""
        return self._overview(self.ctx.current())

    def _overview(self, project: Project) -> dict:
        served = project.served()
        found = labels_overview(project)
        merges, splits, conflicts = (frame.assign(judgment_ids=frame["judgment_ids"].map(_ids))
                                     for frame in (found.merges, found.splits, found.conflicts))
        shown = found.history
        return {self.weakest: self._coherence.of(served), self.merges: text_table(merges),
                self.splits: text_table(splits, SPLIT_SHOWN),
                self.conflicts: text_table(conflicts), self.labels_status: _labels_note(served, shown),
                self.history: text_table(shown.assign(created_at=shown["created_at"].map(when)))}

    @shows_errors
    def apply(self, cluster: str, name: str, request: gr.Request | None = None,
              profile: gr.OAuthProfile | None = None) -> dict:
        """Serve the corrected clusters of the current judgments at once, as the next labels version."""
        who = self._changer(name, request, profile)
        project = self.ctx.current()
        serve_corrections(project, who)
        return self._after_change(project, cluster)

    @shows_errors
    def rollback(self, version: float | None, cluster: str, name: str, request: gr.Request | None = None,
                 profile: gr.OAuthProfile | None = None) -> dict:
        """Serve the labels of an earlier version again (recorded as a new version)."""
        who = self._changer(name, request, profile)
        if version is None:
            raise QPRError("Type the number of the version to go back to (0 is the bundle's own clusters).")
        project = self.ctx.current()
        serve_rollback(project, int(version), who)
        return self._after_change(project, cluster)

    @shows_errors
    def revert(self, cluster_a: str, cluster_b: str, cluster: str, name: str, request: gr.Request | None = None,
               profile: gr.OAuthProfile | None = None) -> dict:
        """Undo one merge or split of the served labels for good (a reviewer's reject), and serve the result."""
        who = self._changer(name, request, profile)
        if not (cluster_a or "").strip() or not (cluster_b or "").strip():
            raise QPRError("Type the two sides of the merge or split to revert, as the history names them "
                           "(a split: the cluster and qid:<n>).")
        project = self.ctx.current()
        serve_revert(project, who, cluster_a, cluster_b)
        return self._after_change(project, cluster)

    def _changer(self, name: str, request: gr.Request | None, profile: gr.OAuthProfile | None) -> str:
        return self.ctx.privileged("change the served clusters", name, request, profile, roles=("owner", "reviewer"))

    def _after_change(self, project: Project, cluster: str) -> dict:
        """The overview, and the cluster view again: reloaded when that cluster is still served,
        else emptied, saying where its questions went."""
        out = self._overview(project)
        served = project.served()
        if (cluster or "").strip() in set(served.corpus["cluster"].dropna()):
            return out | self._cluster_view(project, cluster)
        if not (cluster or "").strip():
            return out
        gone = where_went(project, served, cluster.strip()) or f"There is no cluster {cluster.strip()!r} any more."
        return out | {self.summary: plain(gone), self.members: pd.DataFrame(columns=MEMBER_COLUMNS),
                      self.outsiders: pd.DataFrame(columns=OUTSIDER_COLUMNS), self.touching: pd.DataFrame(columns=JUDGMENT_COLUMNS)}


def _labels_note(served: Served, shown: pd.DataFrame) -> str:
    if served.labels_version == 0:
        return ("Serving the bundle's own clusters (labels version 0). **Apply corrections** serves the merges and splits "
                "proposed above at once, without retraining.")
    row = shown[shown["version"] == served.labels_version]
    by = f", by {plain(row.iloc[0]['annotator'])} at {when(row.iloc[0]['created_at'])}" if not row.empty else ""
    return (f"Serving labels version **{served.labels_version}**{by}: search results and cluster views show these "
            "corrected clusters; the model itself is unchanged until you retrain.")


def _ids(ids) -> str:
    return ", ".join(str(i) for i in ids)
