"""What a team met on its own project's pages in the two-team browser walk (issue 54, items 2-6),
each as it should be now: repeated rows, honest score columns, the header's credit and backup
line, an empty search, who may review or decide, My work without a role, project names in any
script, a bare project's cluster count."""

from __future__ import annotations

from types import SimpleNamespace

import gradio as gr
import pandas as pd
import pytest

from annotations.db import open_store
from conftest import make_corpus
from qpr.data.upload import read_upload
from qpr.errors import QPRError
from qpr.serving.served_model import SAME_MEANING, ServedModel
from ui.common import AppContext, review_note
from ui.page import QPRPage


def login(name: str) -> SimpleNamespace:
    return SimpleNamespace(username=name)


@pytest.fixture
def page(bundle, tmp_path):
    """The page (typed names) with project "FAQ", made from make_corpus by "ann", open."""
    store = open_store(f"sqlite:///{tmp_path / 'a.db'}", project="demo")
    built = QPRPage(AppContext(ServedModel(bundle), store, "name", cache=tmp_path))
    built.build()
    path = tmp_path / "faq.csv"
    make_corpus()[["question", "cluster"]].to_csv(path, index=False)
    built.projects.create(str(path), "clusters", "FAQ", "", "", "", False, "ann")
    yield built
    store.close()


@pytest.fixture
def logins(bundle, tmp_path):
    """The same in login mode: "ann" owns FAQ, "bob" annotates in it, "root" is the app's admin."""
    store = open_store(f"sqlite:///{tmp_path / 'a.db'}", project="demo")
    built = QPRPage(AppContext(ServedModel(bundle), store, "auth", cache=tmp_path, admins=frozenset({"root"})))
    built.build()
    path = tmp_path / "faq.csv"
    make_corpus()[["question", "cluster"]].to_csv(path, index=False)
    built.projects.create(str(path), "clusters", "FAQ", "", "", "", False, None, login("ann"))
    built.team.grant("bob", "annotator", None, login("ann"))
    yield built
    store.close()


def repeated_file(tmp_path):
    """make_corpus with one question repeated in its own cluster and one in another cluster."""
    corpus = make_corpus()[["question", "cluster"]]
    repeats = corpus.iloc[[0, 5]].assign(cluster=[corpus["cluster"].iloc[0], "c-elsewhere"])
    repeats["question"] = [q.upper() for q in repeats["question"]]  # the same words as the encoder reads them
    path = tmp_path / "repeats.csv"
    pd.concat([corpus, repeats]).to_csv(path, index=False)
    return path, len(corpus)


def test_repeated_questions_are_dropped_on_request_naming_the_rows_in_another_cluster(tmp_path):
    path, unique = repeated_file(tmp_path)
    with pytest.raises(QPRError) as refused:
        read_upload(path, "clusters")
    assert "the same question as row 2; delete one of them, or choose to drop repeated questions" in str(refused.value)
    upload = read_upload(path, "clusters", drop_repeats=True)
    assert len(upload.corpus) == unique and upload.rows == unique + 2
    assert upload.dropped.startswith("2 repeated question(s) dropped, the first of each kept; 1 of them")
    assert "(row 163: the same question as row 7 in another cluster ('c-elsewhere', not 'c-guitar'))" in upload.dropped


def test_the_projects_tab_imports_a_file_with_repeats_when_asked(page, tmp_path):
    path, unique = repeated_file(tmp_path)
    assert page.projects.create(str(path), "clusters", "With repeats", "", "", "", False, "ann") == gr.skip()
    shown = page.projects.create(str(path), "clusters", "With repeats", "", "", "", True, "ann")
    assert "2 repeated question(s) dropped" in shown[page.projects.note]
    assert len(page.ctx.current().served().bundle.corpus) == unique


def test_a_bm25_project_shows_scores_under_their_own_name_never_a_negative_distance(page):
    served = page.ctx.current().served()
    assert served.bundle.lexical
    results = served.results("how do i learn chess ?", 5)
    assert {r["score_is"] for r in results} <= {SAME_MEANING, "BM25 score (higher = more alike)"}
    assert all(r["score"] >= 0 for r in results)
    if results[0]["score_is"] == SAME_MEANING:
        assert all(0 <= r["score"] <= 1 for r in results)
    table = page.search.search("how do i learn chess ?", 5, False)[page.search.results]
    assert list(table.columns)[-1] == results[0]["score_is"] and (table.iloc[:, -1] >= 0).all()
    uncalibrated = served.__class__(served.bundle, served.model_retriever, served.bm25, served.default)  # no calibrations
    header, scores = uncalibrated.readable(served.bm25, [-8.07, -4.22])
    assert header == "BM25 score (higher = more alike)" and scores.tolist() == [8.07, 4.22]
    shown = page.annotate.start_cluster("c-chess", "ann", None, None)
    queue = shown[page.annotate.queue]
    assert list(queue.columns)[3] in (SAME_MEANING, "BM25 score (higher = more alike)")
    assert (queue.iloc[:, 3].astype(float) >= 0).all()


def test_the_header_credits_the_page_s_own_project_and_shows_backups_to_who_may_act(logins):
    assert logins.credit() == "", "a project of the team's own credits no data set (the demo's BANKING77 is not it)"
    # The line counts every project's judgments: only the app's admins see it (the demo's rights).
    assert logins.backup_status(None, login("ann")) == "", "not a project's owner"
    assert logins.backup_status(None, login("bob")) == "", "nor an annotator"
    assert "backup" in logins.backup_status(None, login("root")).lower()


def test_a_search_that_matches_nothing_says_so(page):
    with pytest.warns(UserWarning, match="No question of this project matches 'zzzqqq xxyyz'"):
        shown = page.search.search("zzzqqq xxyyz", 5, False)
    assert shown[page.search.results].empty


def test_who_may_review_is_said_as_enforced_and_my_work_without_a_role_explains_in_the_tab(logins):
    note = review_note(logins.ctx)
    assert "owners and reviewers" in note and "Anyone signed in may record" not in note
    shown = logins.my_work.show("", False, None, login("carol"), None)  # no role in FAQ
    assert shown[logins.my_work.table].empty and "you need the role" in shown[logins.my_work.status]


def test_use_and_discard_are_on_only_for_who_may_use_a_model(logins):
    logins.ctx.current().model.propose(logins.ctx.current().served().bundle, pd.DataFrame())  # a model waits for a decision
    for who, on in (("ann", True), ("bob", False), ("root", True)):
        shown = logins.projects.poll(login(who))
        assert shown[logins.projects.use].interactive is on and shown[logins.projects.drop].interactive is on, who


@pytest.mark.parametrize("name", ["日本語 プロジェクト", "Ünïcödé FAQ", "Запросы клиентов"])
def test_a_project_name_in_any_script_is_taken(page, tmp_path, name):
    path = tmp_path / "faq.csv"  # the page fixture's file
    page.projects.create(str(path), "clusters", name, "", "", "", False, "ann")
    assert page.ctx.project_name() == name and page.ctx.project.strip("-")


def test_a_bare_project_counts_the_clusters_its_judgments_formed(page, tmp_path):
    path = tmp_path / "bare.csv"
    make_corpus()[["question"]].to_csv(path, index=False)
    page.projects.create(str(path), "questions", "Bare", "", "", "", False, "ann")
    served = page.ctx.current().served().bundle
    for query, candidate in ((1, 2), (6, 7)):
        page.ctx.current().store.judgments.record("ann", candidate, "same", served.version, query_qid=query)
    line = page.projects.poll()[page.projects.active]
    assert "0 clusters (2 of 2+ questions formed by judgments so far)" in line
