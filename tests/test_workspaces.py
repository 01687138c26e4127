"""Projects as workspaces (issue 38): each page has a project of its own, several projects are
served at once, loaded on first open and unloaded least recently opened first past the memory
budget (``qpr.serving.workspaces``), with a decision pending or the demo never unloaded."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from gradio.context import LocalContext

from annotations.db import open_store
from annotations.repositories import corpus as corpus_repository
from conftest import make_corpus
from qpr.data.upload import read_upload
from qpr.serving.slugs import DEMO
from qpr.serving.served_model import Served, ServedModel
from qpr.serving.workspaces import Workspaces, estimated_mb
from ui.common import AppContext
from ui.pages import page_id
from ui.page import QPRPage


class FakeModel:
    def __init__(self, name: str, pending: bool = False) -> None:
        self.name, self.pending = name, pending

    def candidate(self):
        return object() if self.pending else None


def test_projects_load_on_first_open_and_the_least_recently_opened_is_unloaded_past_the_budget():
    loads = []

    def load(slug):
        loads.append(slug)
        return FakeModel(slug, pending=slug == "waiting")

    served = Workspaces(load, budget_mb=30, pinned=[DEMO], size=lambda model: 10)
    served.put(DEMO, FakeModel(DEMO))
    assert served.get("a").name == "a" and served.get("a").name == "a" and loads == ["a"]  # loaded once
    served.get("b")
    assert served.loaded() == [DEMO, "a", "b"] and served.served_mb() == 30
    served.get("a")  # a is now more recent than b
    served.get("c")  # over budget: b (least recently opened, not pinned) goes
    assert served.loaded() == [DEMO, "a", "c"]
    served.get("waiting")
    served.get("d")  # a and c go; the demo is pinned and "waiting" holds a model waiting for a decision
    assert served.loaded() == [DEMO, "waiting", "d"]
    assert served.get("b").name == "b" and loads.count("b") == 2  # opened again: loaded again


def test_the_estimate_counts_the_corpus_the_index_and_the_encoder(bundle):
    served = Served.of(bundle)
    lexical = Served.of(type(bundle).lexical_of(bundle.corpus))
    assert 0 < estimated_mb(lexical) < estimated_mb(served)
    small, large = (estimated_mb(Served.of(type(bundle).lexical_of(make_corpus(n_topics=n)))) for n in (12, 60))
    assert 0 < small < large


def as_page(session: str | None):
    """Handle what follows as an event of page ``session`` (what Gradio does for every handler)."""
    LocalContext.request.set(SimpleNamespace(session_hash=session) if session else None)


@pytest.fixture
def two_projects(bundle, tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'a.db'}", project="demo")
    ctx = AppContext(ServedModel(bundle), store, "name", cache=tmp_path)
    slugs = []
    for name, topics in (("Alpha", 16), ("Beta", 20)):
        path = tmp_path / f"{name}.csv"
        make_corpus(n_topics=topics)[["question", "cluster"]].to_csv(path, index=False)
        slugs.append(ctx.projects.create(name, read_upload(path, "clusters"), "ann"))
    yield ctx, slugs
    as_page(None)
    store.close()


def test_each_page_works_on_its_own_project(two_projects):
    ctx, (alpha, beta) = two_projects
    as_page("page-1")
    assert page_id() == "page-1" and ctx.project == DEMO  # a new page opens the default project
    ctx.open(alpha)
    as_page("page-2")
    ctx.open(beta)
    assert ctx.project == beta and len(ctx.current().served().bundle.corpus) == len(make_corpus(n_topics=20))
    as_page("page-1")
    assert ctx.project == alpha and len(ctx.current().served().bundle.corpus) == len(make_corpus(n_topics=16))
    assert set(ctx.examples_of(ctx.project)) <= set(make_corpus(n_topics=16)["question"])
    assert set(ctx.current().versions()) == {ctx.current().served().bundle.version}
    as_page(None)
    assert ctx.project == DEMO, "opening on pages never changes the default"
    assert set(ctx.served.loaded()) == {DEMO, alpha, beta}  # several projects served at once
    as_page("page-1")
    ctx.close_page()
    assert ctx.project == DEMO


def test_a_page_opens_the_project_its_url_names(two_projects):
    ctx, (alpha, _) = two_projects
    page = QPRPage(ctx)
    page.build()
    as_page("page-9")
    opened = page.open_page(SimpleNamespace(query_params={"project": alpha}, session_hash="page-9"))
    assert opened[page.projects.choice].constructor_args["value"] == alpha and ctx.project == alpha
    as_page("page-10")
    with pytest.warns(UserWarning, match="There is no project 'gone'"):
        page.open_page(SimpleNamespace(query_params={"project": "gone"}, session_hash="page-10"))
    assert ctx.project == DEMO


def test_in_name_mode_no_load_event_writes_the_header(bundle, tmp_path):
    """Bug 5: a load event computed with the name box still empty could answer after the name was
    typed and put "type your name" back; in name mode only the name box updates the header."""
    store = open_store(f"sqlite:///{tmp_path / 'a.db'}", project="demo")
    page = QPRPage(AppContext(ServedModel(bundle), store, "name", cache=tmp_path))
    demo = page.build()
    who = next(block for block in demo.blocks.values() if getattr(block, "elem_id", None) == "page-who")
    writers = [fn for fn in demo.fns.values() if who in fn.outputs]
    assert writers and all(event == "change" for fn in writers for _, event in fn.targets)
    assert "type your name to annotate" in who.value and "Annotating as **Ann**" in page.ctx.whoami("Ann", None, None)
    store.close()


def test_a_refusal_names_the_action_and_stays_until_closed(bundle, tmp_path, monkeypatch):
    """Bug 7: a refused model swap or training says what was refused and how to fix it (not "To
    record judgments"), in a message that stays until the user closes it."""
    import gradio as gr

    shown = []
    monkeypatch.setattr(gr, "Warning", lambda message, title=None, duration=10: shown.append((message, duration)))
    store = open_store(f"sqlite:///{tmp_path / 'a.db'}", project="demo")
    page = QPRPage(AppContext(ServedModel(bundle), store, "name", cache=tmp_path))
    page.build()
    page.retrain.confirm("", None, None)
    page.projects.start(1, "", None, None)
    page.projects.new_version(None, "clusters", "", "", "", False, "ann")
    assert [message.split(": ")[0] for message, _ in shown] == [
        "Could not use the trained model", "Could not start training", "Could not upload a new version"]
    assert "To use or discard a trained model, type your name" in shown[0][0]
    assert "To train this project's model, type your name" in shown[1][0]
    assert not any("To record judgments" in message for message, _ in shown)
    assert {duration for _, duration in shown} == {None}  # stays until closed
    store.close()


def test_a_restart_loads_no_project_and_registers_nothing_again(two_projects, bundle, monkeypatch):
    """Issue 54 item 7: a restart with projects on disk does what a cold start does. No project is
    loaded until a page opens it, and a corpus the database already holds is not hashed or
    registered again (a warm start pays for neither, whatever the number of projects)."""
    ctx, (alpha, beta) = two_projects
    for n, slug in enumerate((alpha, beta)):  # the run before the restart opened both
        as_page(f"page-{n}")
        ctx.open(slug)
    as_page(None)
    hashed, loaded = [], []
    fingerprint = corpus_repository.fingerprint
    monkeypatch.setattr(corpus_repository, "fingerprint", lambda frame: hashed.append(len(frame)) or fingerprint(frame))
    served_bundle = type(ctx.projects).served_bundle
    monkeypatch.setattr(type(ctx.projects), "served_bundle", lambda self, slug: loaded.append(slug) or served_bundle(self, slug))
    restarted = AppContext(ServedModel(bundle), ctx.database, "name", cache=ctx.cache)
    assert restarted.served.loaded() == [DEMO] and loaded == []
    as_page("page-1")
    restarted.open(alpha)
    assert loaded == [alpha] and restarted.served.loaded() == [DEMO, alpha]
    assert hashed == [], "a registered corpus was hashed again"
