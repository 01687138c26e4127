"""A project of bare questions through the page's handlers (issue 38's dead end): "Next cluster"
and "Corpus-wide task" propose groups of near questions instead of refusing; "Check query" with a
corpus question is that question; "same meaning" judgments form clusters the page counts, the
export counts as formed, and training is then offered, never advising what just failed."""

from __future__ import annotations

import re

import gradio as gr
import pandas as pd
import pytest

from annotations.db import open_store
from qpr.data.upload import MIN_TRAIN_CLUSTERS
from qpr.serving.served_model import ServedModel
from test_grouping import TOPICS, topics_corpus
from ui.common import AppContext
from ui.page import QPRPage


@pytest.fixture
def bare_page(bundle, tmp_path):
    """The page serving a project created from the topics' questions without clusters."""
    store = open_store(f"sqlite:///{tmp_path / 'a.db'}", project="demo")
    page = QPRPage(AppContext(ServedModel(bundle), store, "name", cache=tmp_path))
    page.build()
    path = tmp_path / "inbox.csv"
    topics_corpus()[["question"]].to_csv(path, index=False)
    page.projects.create(str(path), "questions", "Inbox", "", "", "", False, "ann")
    yield page
    store.close()


def topic(text: str) -> str:
    return next(t for t in TOPICS if t in text.split())


def test_next_cluster_and_the_task_build_clusters_until_training_is_offered(bare_page):
    page, tab = bare_page, bare_page.annotate
    with pytest.warns(UserWarning, match=f"Build {MIN_TRAIN_CLUSTERS} more on the Annotate tab"):
        assert page.projects.start(1, "ann") == gr.skip()  # refused, pointing at what works now
    shown = tab.start_task("ann", None, None)  # was: "the corpus has no training clusters ..."
    assert "Building clusters" in shown[tab.status] and f"training needs **{MIN_TRAIN_CLUSTERS}**" in shown[tab.progress]
    assert shown[tab.candidate] and shown[tab.query] != shown[tab.candidate]
    assert list(shown[tab.queue].columns)[0] == "query" and (shown[tab.queue]["query"] == shown[tab.query]).all()
    groups = 0
    while "enough to train" not in shown[tab.progress]:
        session = shown[tab.session]
        while session.current() is not None:
            same = topic(shown[tab.query]) == topic(shown[tab.candidate])
            shown = tab.judge("same" if same else "different", session, "ann", None, None)
            session = shown[tab.session]
        groups += 1
        assert groups <= 2 * MIN_TRAIN_CLUSTERS, "a cluster forms from (almost) every group"
        shown = tab.start_cluster("", "ann", None, None)  # "Next cluster" on a bare project
    exported = page.retrain.export_clusters("csv")[page.retrain.export_note]
    formed = int(re.search(r"formed (\d+) new one", exported).group(1))  # was "formed 0 new one(s)"
    assert formed >= MIN_TRAIN_CLUSTERS


def test_check_query_with_a_corpus_question_is_that_question(bare_page):
    page, tab = bare_page, bare_page.annotate
    question = page.ctx.current().served().corpus["question"].iloc[0]
    shown = tab.start_query(question, "ann", None, None)
    session = shown[tab.session]
    assert question not in set(session.queue["question"]), "never offered as its own candidate"
    assert session.queue["query_qid"].notna().all()
    tab.judge("same", session, "ann", None, None)
    judged = page.ctx.current().store.judgments.frame().iloc[0]
    assert judged["query_question"] == question and pd.isna(judged["query_text"])


def test_undo_after_a_reload_says_why_nothing_is_undone(bare_page):
    tab = bare_page.annotate
    shown = tab.start_cluster("", "ann", None, None)
    tab.judge("different", shown[tab.session], "ann", None, None)
    after_reload = tab.undo(None, "ann", None, None)  # a reloaded page has no session
    assert "Nothing to undo on this page" in after_reload[tab.status] and "a reload starts a new page" in after_reload[tab.status]
    assert after_reload[tab.buttons[-1]].interactive, "Z stays on, so it always answers"
    assert len(bare_page.ctx.current().store.judgments.frame()) == 1


def test_outsiders_of_a_project_served_by_bm25_show_its_score_not_a_negative_distance(bare_page):
    """Issue 38, bug 9: outsiders showed a negative "distance" (BM25's is minus its score)."""
    page, store = bare_page, bare_page.ctx.current().store
    served = page.ctx.current().served()
    corpus = served.bundle.corpus
    for name in TOPICS[:2]:
        mates = corpus[corpus["question"].map(topic) == name]["qid"].tolist()
        for other in mates[1:]:
            store.judgments.record("ann", int(other), "same", served.bundle.version, query_qid=int(mates[0]))
    page.clusters.apply("", "ann")
    cluster = page.ctx.current().served().cluster_of([corpus["qid"].iloc[0]])[0]
    outsiders = page.clusters.show_cluster(cluster)[page.clusters.outsiders]
    assert "distance" not in outsiders.columns and len(outsiders)
    assert (outsiders["BM25 score"].astype(float) > 0).all()
