"""The My work tab and the guidelines without a browser: search my judgments, re-judge one (the
old label stays as history), comment on one, nobody else's; guidelines edited and shown as text."""

from __future__ import annotations

import gradio as gr
import pytest

from annotations.db import open_store
from conftest import make_corpus
from test_app_handlers import TWIN_A, TWIN_B, page_for, qpr_app  # noqa: F401  (fixture)
from ui.guidelines import NONE_YET, guidelines_markdown, guidelines_panel


def judged_twins(qpr_app, who="ann", label="same") -> int:
    corpus = qpr_app.ctx.current().served().bundle.corpus
    query = int(corpus.loc[corpus["cluster"] == TWIN_A, "qid"].iloc[0])
    candidate = int(corpus.loc[corpus["cluster"] == TWIN_B, "qid"].iloc[0])
    return qpr_app.ctx.current().store.judgments.record(who, candidate, label, qpr_app.ctx.current().served().bundle.version, query_qid=query)


def test_search_rejudge_and_comment_my_judgments(qpr_app):
    corpus = qpr_app.ctx.current().served().bundle.corpus
    first = judged_twins(qpr_app)
    judged_twins(qpr_app, who="other", label="different")
    tab = qpr_app.my_work
    table = tab.show("", False, "ann", None, None)[tab.table]
    assert table["id"].astype(int).tolist() == [first]  # only mine
    word = corpus.loc[corpus["cluster"] == TWIN_B, "question"].iloc[0].split()[-1].upper()
    assert tab.show(word, False, "ann", None, None)[tab.table]["id"].astype(int).tolist() == [first]
    assert tab.show("no such words anywhere", False, "ann", None, None)[tab.table].empty
    picked = tab.pick(gr.SelectData(None, {"index": [0, 0], "value": table.iloc[0, 0], "row_value": list(table.iloc[0])}))
    assert (picked[tab.judgment], picked[tab.label]) == (str(first), "same")
    out = tab.rejudge(picked[tab.judgment], "different", "", True, "ann", None, None)
    assert "re-judged **different**" in out[tab.status]
    assert out[tab.table][["label", "status"]].values.tolist() == [["different", "current"], ["same", "superseded"]]
    current = int(out[tab.table].iloc[0]["id"])
    out = tab.save_comment(str(current), "same topic, different ask", "", False, "ann", None, None)
    assert out[tab.table].iloc[0]["comment"] == "same topic, different ask"


@pytest.mark.parametrize("judgment, label, message", [("", "same", "Type a judgment id"), ("x", "same", "Type a judgment id"),
                                                      ("999999", "same", "not one of yours"), (None, None, "Choose the new label")])
def test_rejudge_bad_input(qpr_app, judgment, label, message):
    mine = judged_twins(qpr_app)
    with pytest.warns(UserWarning, match=message):
        qpr_app.my_work.rejudge(str(mine) if judgment is None else judgment, label, "", False, "ann", None, None)
    assert len(qpr_app.ctx.current().store.judgments.frame(current_only=False)) == 1


def test_nobody_comments_on_another_annotators_judgment(qpr_app):
    theirs = judged_twins(qpr_app, who="other")
    with pytest.warns(UserWarning, match="not one of yours"):
        qpr_app.my_work.save_comment(str(theirs), "hi", "", False, "ann", None, None)
    assert qpr_app.ctx.current().store.review.comments().empty


def test_logout_link_only_in_login_mode(bundle, tmp_path):
    for identity, expected in (("auth", 1), ("name", 0)):
        with open_store(f"sqlite:///{tmp_path / f'{identity}.db'}", project="demo") as store:
            page = page_for(bundle, store, identity, tmp_path)
            demo = page.build()
            links = [b for b in demo.blocks.values() if isinstance(b, gr.Button) and b.link == "/logout"]
            assert len(links) == expected


def test_guidelines_are_edited_and_shown_as_text(qpr_app):
    tab = qpr_app.guidelines
    assert guidelines_markdown(qpr_app.ctx.current().store.review.guidelines()) == NONE_YET
    out = tab.save("Same: <b>one</b> answer fits both.", "How do I renew a passport? | Passport renewal steps?",
                   "Reset my password | Change my email", "lead", None, None)
    assert "Saved by lead" in out[tab.status]
    shown = out[tab.preview]
    assert "&lt;b&gt;one&lt;/b&gt;" in shown and "<b>" not in shown
    assert "Examples of “same”" in shown and "Passport renewal steps" in shown and "Change my email" in shown
    loaded = tab.load()
    assert loaded[tab.same] == "How do I renew a passport? | Passport renewal steps?"
    with pytest.warns(UserWarning, match="guidelines are empty"):
        tab.save("  ", "", "", "lead", None, None)
    with pytest.warns(UserWarning, match="type your name"):
        tab.save("text", "", "", "", None, None)


def test_guidelines_panel_shows_the_stored_guidelines_on_each_load(qpr_app, tmp_path):
    store = qpr_app.ctx.current().store
    with gr.Blocks() as demo:
        panel = guidelines_panel(qpr_app.ctx)
    assert panel.value == NONE_YET
    store.review.set_guidelines("lead", "Same: one answer fits both.")
    on_load = [f.fn for f in demo.fns.values() if panel in f.outputs]  # re-run when a page loads
    assert len(on_load) == 1 and "one answer fits both" in on_load[0]()
    # ... of the page's project, read when the page loads (issue 54: they were the demo's everywhere).
    path = tmp_path / "other.csv"
    make_corpus()[["question", "cluster"]].to_csv(path, index=False)
    qpr_app.projects.create(str(path), "clusters", "Other", "", "", "", False, "lead")  # opened (outside a page: the default)
    assert qpr_app.ctx.project == "other" and on_load[0]() == NONE_YET
