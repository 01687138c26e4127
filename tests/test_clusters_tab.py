"""The Clusters tab's spot-check both ways and its served labels, through its handlers (no
browser): a member marked as not belonging is split off and an outsider marked as belonging is
merged in, both shown by search and the cluster view as soon as corrections are applied; a
restart keeps them; a version is rolled back and one decision reverted."""

from __future__ import annotations

import gradio as gr
import pytest

from annotations.db import open_store
from annotations.constraints import corrected_clusters
from qpr.serving.served_model import ServedModel
from workflows.cluster_marks import representative
from ui.common import AppContext
from workflows.demos import EXAMPLE_QUERIES, SPLIT_PARAPHRASES
from ui.page import QPRPage

TWIN_A, TWIN_B = SPLIT_PARAPHRASES[0]


@pytest.fixture
def db_url(tmp_path):
    return f"sqlite:///{tmp_path / 'annotations.db'}"


@pytest.fixture
def qpr_app(bundle, db_url, tmp_path):
    with open_store(db_url, project="demo") as store:
        page = QPRPage(AppContext(ServedModel(bundle), store, "name", EXAMPLE_QUERIES, cache=tmp_path))
        page.build()
        yield page


@pytest.fixture(scope="module")
def untouched_app(bundle, tmp_path_factory):
    """One app for the tests that must change nothing (built once: building costs seconds)."""
    folder = tmp_path_factory.mktemp("untouched")
    with open_store(f"sqlite:///{folder / 'annotations.db'}", project="demo") as store:
        page = QPRPage(AppContext(ServedModel(bundle), store, "name", EXAMPLE_QUERIES, cache=folder))
        page.build()
        yield page


def members_of(qpr_app, cluster: str):
    corpus = qpr_app.ctx.current().served().corpus
    return corpus[corpus["cluster"] == cluster]


def search_cluster(qpr_app, question: str) -> str:
    """The cluster the Search tab shows for ``question`` when searching it word for word."""
    results = qpr_app.search.search(question, 5, False)[qpr_app.search.results]
    return results.set_index("question").loc[question, "cluster"]


def test_a_member_marked_as_not_belonging_leaves_its_cluster_in_search_at_once(qpr_app, bundle, db_url, tmp_path):
    tab, served = qpr_app.clusters, qpr_app.ctx.current().served()
    members = members_of(qpr_app, TWIN_A)
    rep = representative(served, members)
    view = tab.show_cluster(TWIN_A)
    assert f"Representative (what the others are judged against): **{rep}**" in view[tab.summary]
    assert set(view[tab.members]["qid"]) == set(members["qid"])
    outsider = members[members["qid"] != rep].iloc[0]
    picked = tab.pick_question(gr.SelectData(None, {"index": [0, 0], "value": outsider["qid"],
                                                    "row_value": [outsider["qid"], outsider["question"]]}))
    assert picked[tab.selected] == str(outsider["qid"])
    marked = tab.mark("different", f" {TWIN_A} ", picked[tab.selected], "ann")
    assert "does not belong to" in marked[tab.mark_status]
    assert marked[tab.members].set_index("qid").loc[outsider["qid"], "judged"] == "different x1"
    judged = qpr_app.ctx.current().store.judgments.frame().iloc[0]  # the contract other tools rely on
    assert (judged["query_qid"], judged["candidate_qid"], judged["label"]) == (rep, outsider["qid"], "different")
    proposed = marked[tab.splits]
    assert proposed[["cluster", "qid"]].values.tolist() == [[TWIN_A, outsider["qid"]]]
    assert search_cluster(qpr_app, outsider["question"]) == TWIN_A, "nothing changes before corrections are applied"

    applied = tab.apply(TWIN_A, "rev")
    assert "labels version **1**" in applied[tab.labels_status] and "by rev" in applied[tab.labels_status]
    assert outsider["qid"] not in set(applied[tab.members]["qid"])
    assert search_cluster(qpr_app, outsider["question"]) == "", "search shows the split at once"
    history = applied[tab.history].iloc[0]
    assert (history["version"], history["annotator"], history["kind"]) == (1, "rev", "apply")
    assert f"split qid:{outsider['qid']} out of {TWIN_A}" in history["what"]
    assert qpr_app.ctx.current().served().bundle is bundle, "the model itself is unchanged"

    with open_store(db_url, project="demo") as store:  # a restart serves the newest labels version again
        restarted = AppContext(ServedModel(bundle), store, "name", cache=tmp_path)
        assert restarted.current().served().labels_version == 1
        assert restarted.current().served().cluster_of([outsider["qid"]]) == [None]

    rolled = tab.rollback(0, TWIN_A, "rev")
    assert outsider["qid"] in set(rolled[tab.members]["qid"]) and search_cluster(qpr_app, outsider["question"]) == TWIN_A
    assert rolled[tab.history]["kind"].tolist() == ["rollback", "apply"]


def test_b_on_an_outsider_moves_that_one_question_and_x_on_a_member_splits_it(qpr_app):
    """Issue 38's surprising merge: X on one member, B on one outsider, Apply. Only the outsider
    moves in; both clusters keep their names; the view reloads at once."""
    tab = qpr_app.clusters
    view = tab.show_cluster(TWIN_A)
    twin = view[tab.outsiders][view[tab.outsiders]["cluster"] == TWIN_B]
    assert not twin.empty, "the paraphrase cluster is among the closest outsiders"
    qid = int(twin.iloc[0]["qid"])
    before_a, before_b = set(members_of(qpr_app, TWIN_A)["qid"]), set(members_of(qpr_app, TWIN_B)["qid"])
    rep = representative(qpr_app.ctx.current().served(), members_of(qpr_app, TWIN_A))
    member = sorted(before_a - {rep})[0]
    tab.mark("different", TWIN_A, str(member), "ann")
    said = tab.mark("same", TWIN_A, str(qid), "ann")[tab.mark_status].replace("\\", "")  # Markdown escapes off
    assert f"no longer to {TWIN_B}" in said and "only this question moves" in said
    applied = tab.apply(TWIN_A, "rev")
    assert set(members_of(qpr_app, TWIN_A)["qid"]) == before_a - {member} | {qid}
    assert set(members_of(qpr_app, TWIN_B)["qid"]) == before_b - {qid}
    assert set(applied[tab.members]["qid"]) == before_a - {member} | {qid}, "the view reloads after Apply"
    assert "labels version 1" in applied[tab.summary]
    assert search_cluster(qpr_app, twin.iloc[0]["question"]) == TWIN_A


def test_merging_two_whole_clusters_is_its_own_action_shown_first_and_can_be_reverted(qpr_app):
    tab = qpr_app.clusters
    both = tab.preview_merge(TWIN_A, TWIN_B)
    assert set(both[tab.both]["cluster"]) == {TWIN_A, TWIN_B} and both[tab.merge_button].interactive
    merged_qids = set(members_of(qpr_app, TWIN_A)["qid"]) | set(members_of(qpr_app, TWIN_B)["qid"])
    assert set(both[tab.both]["qid"]) == merged_qids
    done = tab.merge(TWIN_A, TWIN_B, "ann")
    assert "whole clusters" in done[tab.mark_status].replace("\\", "") and not done[tab.merge_button].interactive
    size_b = len(members_of(qpr_app, TWIN_B))
    applied = tab.apply(TWIN_B, "rev")  # the view was on the cluster that is folded in
    assert set(members_of(qpr_app, TWIN_A)["qid"]) == merged_qids and members_of(qpr_app, TWIN_B).empty
    assert "merged" in applied[tab.history].iloc[0]["what"]
    went = f"Cluster '{TWIN_B}' is no longer served (labels version 1): its {size_b} question(s) are now in {TWIN_A} ({size_b})"
    assert went in applied[tab.summary].replace("\\", "") and applied[tab.members].empty, "no stale view of a cluster that is gone"
    with pytest.warns(UserWarning, match="no longer served"):
        tab.show_cluster(TWIN_B)
    reverted = tab.revert(TWIN_B, TWIN_A, TWIN_B, "boss")
    assert reverted[tab.history].iloc[0]["kind"] == "revert" and not members_of(qpr_app, TWIN_B).empty
    assert tab.apply(TWIN_A, "rev")[tab.merges].empty, "a reverted merge is not proposed again"

@pytest.mark.parametrize("call, message", [
    (lambda tab: tab.mark("different", TWIN_A, "1", ""), "type your name"),
    (lambda tab: tab.mark("different", TWIN_A, "", "ann"), "Click a member"),
    (lambda tab: tab.mark("different", "nope", "1", "ann"), "no cluster 'nope'"),
    (lambda tab: tab.mark("same", TWIN_A, "999999", "ann"), "no question 999999"),
    (lambda tab: tab.apply(TWIN_A, ""), "type your name"),
    (lambda tab: tab.rollback(None, TWIN_A, "rev"), "number of the version"),
    (lambda tab: tab.rollback(3, TWIN_A, "rev"), "no label version 3"),
    (lambda tab: tab.revert(TWIN_A, TWIN_B, TWIN_A, "rev"), "made no merge or split"),
])
def test_bad_marks_and_changes_are_refused_with_a_message_and_change_nothing(untouched_app, call, message):
    with pytest.warns(UserWarning, match=message):
        assert call(untouched_app.clusters) == gr.skip()
    assert untouched_app.ctx.current().store.judgments.frame().empty and untouched_app.ctx.current().served().labels_version == 0
    assert untouched_app.ctx.current().store.labels.versions(untouched_app.ctx.current().served().bundle.version).empty


def test_the_representative_cannot_be_marked(untouched_app):
    members = members_of(untouched_app, TWIN_A)
    rep = representative(untouched_app.ctx.current().served(), members)
    with pytest.warns(UserWarning, match="is the representative"):
        untouched_app.clusters.mark("different", TWIN_A, str(rep), "ann")
    assert untouched_app.ctx.current().store.judgments.frame().empty


def test_b_on_a_question_another_judged_different_says_where_it_really_goes(qpr_app):
    """Issue 54: B on a question someone had judged different from the cluster said "only this
    question moves", then left it in no cluster (the two judgments tie). It says so now."""
    tab = qpr_app.clusters
    view = tab.show_cluster(TWIN_A)
    qid = int(view[tab.outsiders][view[tab.outsiders]["cluster"] == TWIN_B].iloc[0]["qid"])
    rep = representative(qpr_app.ctx.current().served(), members_of(qpr_app, TWIN_A))
    qpr_app.ctx.current().store.judgments.record("bob", qid, "different", qpr_app.ctx.current().served().bundle.version, query_qid=rep)
    said = tab.mark("same", TWIN_A, str(qid), "ann")[tab.mark_status].replace("\\", "")
    assert "only this question moves" not in said and "another judgment of the same pair disagrees" in said
    placed = corrected_clusters(qpr_app.ctx.current().store, qpr_app.ctx.current().served().corpus).corpus.set_index("qid")["cluster"]
    assert (f"would be **in {placed[qid]}**" if isinstance(placed[qid], str) else "would be **in no cluster**") in said
