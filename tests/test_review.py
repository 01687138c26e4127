"""The Review tab's handlers without a browser: agreement per pair, a tie adjudicated by a
reviewer, a proposed merge applied with its judgments one click away, who may review, and the
overlap setting reaching the Annotate tab's queue."""

from __future__ import annotations

import gradio as gr
import pytest

from annotations.db import open_store
from test_app_handlers import TWIN_A, TWIN_B, page_for, qpr_app, session, shown  # noqa: F401  (fixture)


def twin_pair(qpr_app) -> tuple[int, int]:
    corpus = qpr_app.ctx.current().served().bundle.corpus
    return int(corpus.loc[corpus["cluster"] == TWIN_A, "qid"].iloc[0]), int(corpus.loc[corpus["cluster"] == TWIN_B, "qid"].iloc[0])


def select(table, row: int = 0) -> gr.SelectData:
    return gr.SelectData(None, {"index": [row, 0], "value": table.iloc[row, 0], "row_value": list(table.iloc[row])})


def test_a_tie_is_listed_and_a_reviewer_adjudicates_it(qpr_app):
    store, version = qpr_app.ctx.current().store, qpr_app.ctx.current().served().bundle.version
    query, candidate = twin_pair(qpr_app)
    ids = [store.judgments.record("alice", candidate, "same", version, query_qid=query),
           store.judgments.record("bob", candidate, "different", version, query_qid=query)]
    tab = qpr_app.review
    agreement, items, decided = shown(tab.overview(), tab.agreement, tab.items, tab.decided)
    assert agreement[["annotator_a", "annotator_b"]].values.tolist() == [["alice", "bob"]]
    assert float(agreement.iloc[0]["percent"]) == 0.0
    assert items["item"].tolist() == [f"qid:{query}:{candidate}"] and items.iloc[0]["adjudicated"] == ""
    assert decided.empty
    picked = tab.pick_item(select(items))
    assert picked[tab.item] == f"qid:{query}:{candidate}"
    assert sorted(picked[tab.evidence]["id"].astype(int)) == sorted(ids)
    out = tab.decide(picked[tab.item], "", "", "same", "guideline 2", "carol", None, None)
    assert "Recorded **same**" in out[tab.status]
    assert out[tab.items].iloc[0]["adjudicated"] == "same"
    recorded = store.review.adjudications()
    assert recorded[["reviewer", "kind", "item_key", "decision", "note"]].values.tolist() == [
        ["carol", "item", f"qid:{query}:{candidate}", "same", "guideline 2"]]


def test_a_proposed_merge_is_applied_with_its_judgments_one_click_away(qpr_app):
    store, version = qpr_app.ctx.current().store, qpr_app.ctx.current().served().bundle.version
    query, candidate = twin_pair(qpr_app)
    corpus = qpr_app.ctx.current().served().bundle.corpus
    second = [int(corpus.loc[corpus["cluster"] == c, "qid"].iloc[1]) for c in (TWIN_A, TWIN_B)]
    # Two independent links: evidence for the whole clusters (one link would move one question).
    judged = [store.judgments.record("alice", candidate, "same", version, query_qid=query),
              store.judgments.record("alice", second[1], "same", version, query_qid=second[0])]
    tab = qpr_app.review
    pairs = tab.overview()[tab.pairs]
    assert pairs["kind"].tolist() == ["merge"]
    picked = tab.pick_pair(select(pairs))
    assert {picked[tab.cluster_a], picked[tab.cluster_b]} == {TWIN_A, TWIN_B}
    assert picked[tab.evidence]["id"].astype(int).tolist() == judged
    out = tab.decide("", picked[tab.cluster_a], picked[tab.cluster_b], "reject", "", "carol", None, None)
    assert out[tab.pairs].iloc[0]["adjudicated"] == "reject"
    assert store.review.adjudications()["decision"].tolist() == ["reject"]


def test_a_proposed_split_is_listed_and_a_reviewer_keeps_the_member(qpr_app):
    store, corpus = qpr_app.ctx.current().store, qpr_app.ctx.current().served().bundle.corpus
    version = qpr_app.ctx.current().served().bundle.version
    reference, member = corpus.loc[corpus["cluster"] == TWIN_A, "qid"].iloc[:2].astype(int)
    judged = store.judgments.record("alice", member, "different", version, query_qid=reference)
    tab = qpr_app.review
    pairs = tab.overview()[tab.pairs]
    assert pairs[["kind", "cluster_a", "cluster_b"]].values.tolist() == [["split", TWIN_A, f"qid:{member}"]]
    picked = tab.pick_pair(select(pairs))
    assert picked[tab.evidence]["id"].astype(int).tolist() == [judged]
    out = tab.decide("", picked[tab.cluster_a], picked[tab.cluster_b], "reject", "it belongs", "carol", None, None)
    assert out[tab.pairs][["kind", "adjudicated"]].values.tolist() == [["decided", "reject"]]
    assert qpr_app.clusters.overview()[qpr_app.clusters.splits].empty, "the member stays in its cluster"


@pytest.mark.parametrize("args, message", [
    (("qid:1:2", "", "", None, ""), "Choose a decision"),
    (("", "", "", "same", ""), "needs an item like qid:"),
    (("", "a", "", "apply", ""), "two different clusters"),
])
def test_bad_decisions_say_what_to_fix_and_write_nothing(qpr_app, args, message):
    with pytest.warns(UserWarning, match=message):
        qpr_app.review.decide(*args, "carol", None, None)
    with pytest.warns(UserWarning, match="type your name"):
        qpr_app.review.decide("qid:1:2", "", "", "same", "", "  ", None, None)
    assert qpr_app.ctx.current().store.review.adjudications().empty


def test_in_login_mode_only_admins_may_review(bundle, tmp_path, monkeypatch):
    monkeypatch.setenv("QPR_ADMINS", "boss, chief")
    with open_store(f"sqlite:///{tmp_path / 'a.db'}", project="demo") as store:
        page = page_for(bundle, store, "auth", tmp_path)
        with pytest.warns(UserWarning, match=r"Only the app.s admins \(QPR_ADMINS\) may review"):
            page.review.decide("qid:1:2", "", "", "same", "", "", gr.Request(username="alice"), None)
        page.review.decide("qid:1:2", "", "", "same", "", "", gr.Request(username="chief"), None)
        assert store.review.adjudications()["reviewer"].tolist() == ["chief"]


def test_in_name_mode_the_page_says_names_are_not_verified(bundle, tmp_path, monkeypatch):
    monkeypatch.setenv("QPR_ADMINS", "boss")
    with open_store(f"sqlite:///{tmp_path / 'a.db'}", project="demo") as store:
        page = page_for(bundle, store, "name", tmp_path)
        page.review.decide("qid:1:2", "", "", "same", "", "anyone", None, None)
        assert store.review.adjudications()["reviewer"].tolist() == ["anyone"]
        from ui.common import review_note
        assert "not verified" in review_note(page.ctx)


def test_overlap_one_hides_an_item_another_annotator_already_judged(qpr_app, monkeypatch):
    monkeypatch.setenv("QPR_OVERLAP", "1")
    tab = qpr_app.annotate
    alice = session(tab.start_cluster(TWIN_A, "alice", None, None))
    first = alice.current()
    tab.judge("unsure", alice, "alice", None, None)
    bob_queue = session(tab.start_cluster(TWIN_A, "bob", None, None))
    assert int(first["candidate_qid"]) not in set(bob_queue.queue["candidate_qid"])
    monkeypatch.setenv("QPR_OVERLAP", "2")
    bob_queue = session(tab.start_cluster(TWIN_A, "bob", None, None))
    assert int(first["candidate_qid"]) in set(bob_queue.queue["candidate_qid"])


def test_a_decided_pair_stays_listed_when_no_longer_proposed(qpr_app):
    tab = qpr_app.review
    out = tab.decide("", TWIN_B, TWIN_A, "reject", "", "carol", None, None)  # nothing proposes this pair (no judgments)
    pairs = out[tab.pairs]
    assert pairs[["kind", "cluster_a", "cluster_b", "adjudicated"]].values.tolist() == [
        ["decided", min(TWIN_A, TWIN_B), max(TWIN_A, TWIN_B), "reject"]]
