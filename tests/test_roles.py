"""Roles per project in login mode (issue 38): the creator owns a project, an owner grants
roles, every right is checked against the page's project and each allowed action is recorded
with its role; name mode stays one team's, with no roles. Against both database backends."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from sqlalchemy import insert, update
from sqlalchemy.exc import IntegrityError

from annotations.db import open_store
from annotations.errors import AnnotationError
from annotations.models import Judgment, ProjectRole
from conftest import make_corpus
from qpr.data.upload import read_upload
from qpr.errors import QPRError
from qpr.serving.slugs import DEMO
from qpr.serving.served_model import ServedModel
from ui.common import AppContext, reviewer
from ui.page import QPRPage
from workflows.cluster_marks import representative
from workflows.ownership import ADOPTED


def login(name: str) -> SimpleNamespace:
    return SimpleNamespace(username=name)


def test_roles_are_one_per_person_and_project_and_constrained(db_url):
    with open_store(db_url, project="demo") as store:
        store.roles.grant("faq", "Ann", "owner", "Ann")
        store.roles.grant("faq", "bob", "annotator", "ann")
        store.roles.grant("faq", "BOB", "reviewer", "ann")  # a new grant replaces the old role
        store.roles.grant("other", "bob", "owner", "bob")
        assert store.roles.role_of("faq", "bob") == "reviewer" and store.roles.role_of("faq", "carol") is None
        assert store.roles.frame("faq")[["annotator", "role", "granted_by"]].values.tolist() == [
            ["Ann", "owner", "Ann"], ["bob", "reviewer", "Ann"]]
        with pytest.raises(AnnotationError, match="unknown role 'boss'"):
            store.roles.grant("faq", "bob", "boss", "ann")
        with pytest.raises(IntegrityError), store.engine.begin() as connection:  # the database refuses it too
            connection.execute(insert(ProjectRole).values(project="faq", annotator_id=1, role="boss", granted_by=1))
        store.roles.record_action("faq", "ann", "owner", "train this project's model")
        assert store.roles.actions("faq")[["annotator", "role", "action"]].values.tolist() == [
            ["Ann", "owner", "train this project's model"]]


@pytest.fixture
def logins(bundle, tmp_path):
    """A page in login mode whose context has the project "faq" open; "root" is the app's admin."""
    store = open_store(f"sqlite:///{tmp_path / 'a.db'}", project="demo")
    page = QPRPage(AppContext(ServedModel(bundle), store, "auth", cache=tmp_path, admins=frozenset({"root"})))
    page.build()
    path = tmp_path / "faq.csv"
    make_corpus()[["question", "cluster"]].to_csv(path, index=False)
    page.projects.create(str(path), "clusters", "FAQ", "", "", "", False, None, login("ann"))
    yield page
    store.close()


def test_each_right_needs_its_role_in_the_page_s_project_and_is_recorded(logins):
    ctx, store = logins.ctx, logins.ctx.current().store
    assert ctx.project == "faq" and store.roles.role_of("faq", "ann") == "owner"  # the creator owns it
    with pytest.raises(QPRError, match="To record judgments in project 'FAQ' you need the role owner or reviewer or "
                                       "annotator there; you have no role. Ask its owner \\(ann\\)"):
        ctx.annotator(None, login("bob"))
    with pytest.warns(UserWarning, match="Could not grant the role.*To grant roles in project 'FAQ'"):
        logins.team.grant("carol", "owner", None, login("bob"))  # only an owner grants
    logins.team.grant("bob", "annotator", None, login("ann"))
    assert ctx.annotator(None, login("bob")) == "bob"
    with pytest.raises(QPRError, match="To review in project 'FAQ' you need the role owner or reviewer there; you have "
                                       "the role annotator"):
        reviewer(ctx, None, login("bob"))
    with pytest.warns(UserWarning, match="Could not start training.*you need the role owner"):
        logins.projects.start(1, None, login("bob"))
    logins.team.grant("carol", "reviewer", None, login("ann"))
    assert logins.clusters._changer(None, login("carol"), None) == "carol"  # a reviewer applies corrections ...
    with pytest.raises(QPRError, match="To use or discard a trained model in project 'FAQ' you need the role owner"):
        ctx.replacer(None, login("carol"))  # ... but does not swap the model
    assert ctx.replacer(None, login("ann")) == "ann" and ctx.replacer(None, login("root")) == "root"  # owner, admin
    actions = store.roles.actions("faq")
    assert actions[["annotator", "role", "action"]].values.tolist() == [
        ["ann", "owner", "grant roles"], ["ann", "owner", "grant roles"], ["carol", "reviewer", "change the served clusters"],
        ["ann", "owner", "use or discard a trained model"],
        ["root", "admin", "use or discard a trained model"]]
    shown = logins.team.show()
    assert shown[logins.team.roles]["annotator"].tolist() == ["ann", "carol", "bob"]  # owners first, then reviewers
    assert "grant roles" in shown[logins.team.actions]["action"].tolist()
    # The demo has no roles: with admins, its rights are theirs; anyone signed in judges it.
    ctx.open(DEMO)
    assert ctx.annotator(None, login("bob")) == "bob"
    with pytest.raises(QPRError, match="Only the app's admins \\(QPR_ADMINS\\) may review in the demo project"):
        reviewer(ctx, None, login("bob"))


def test_only_an_owner_uploads_a_new_version_and_the_upload_is_recorded(logins, tmp_path):
    ctx, store = logins.ctx, logins.ctx.current().store
    logins.team.grant("bob", "reviewer", None, login("ann"))
    path = tmp_path / "faq-2.csv"
    make_corpus(n_topics=18)[["question", "cluster"]].to_csv(path, index=False)
    before = ctx.current().served().bundle.version
    with pytest.warns(UserWarning, match="To upload a new version of this project in project 'FAQ' you need the role owner"):
        logins.projects.new_version(str(path), "clusters", "", "", "", False, None, login("bob"))
    assert ctx.current().served().bundle.version == before
    logins.projects.new_version(str(path), "clusters", "", "", "", False, None, login("ann"))
    assert ctx.current().served().bundle.version != before
    assert store.roles.actions("faq")[["annotator", "role", "action"]].values.tolist()[-1] == [
        "ann", "owner", "upload a new version of this project"]


def test_the_memory_budget_of_served_projects_is_qpr_max_served_mb(bundle, tmp_path, monkeypatch):
    monkeypatch.setenv("QPR_MAX_SERVED_MB", "123.5")
    with open_store(f"sqlite:///{tmp_path / 'a.db'}", project="demo") as store:
        assert AppContext(ServedModel(bundle), store, "name", cache=tmp_path).served.budget_mb == 123.5


def a_member_to_mark(ctx) -> tuple[str, str]:
    """A cluster of the page's project and one of its members that is not its representative."""
    served = ctx.current().served()
    cluster = served.corpus["cluster"].dropna().iloc[0]
    members = served.corpus[served.corpus["cluster"] == cluster]
    rep = representative(served, members)
    return cluster, str(members.loc[members["qid"] != rep, "qid"].iloc[0])


def test_each_judgment_records_the_role_it_was_made_under(logins):
    ctx, store = logins.ctx, logins.ctx.current().store
    logins.team.grant("bob", "annotator", None, login("ann"))
    cluster, qid = a_member_to_mark(ctx)
    for who in ("bob", "ann", "root"):
        logins.clusters.mark("different", cluster, qid, None, login(who))
    with pytest.warns(UserWarning, match="To record judgments in project 'FAQ'"):
        logins.clusters.mark("same", cluster, qid, None, login("dave"))  # no role: refused, nothing recorded
    assert store.judgments.frame()[["annotator", "role"]].values.tolist() == [["bob", "annotator"], ["ann", "owner"],
                                                                        ["root", "admin"]]
    with pytest.raises(AnnotationError, match="role must be one of"):
        store.judgments.record("bob", int(qid), "same", ctx.current().served().bundle.version, query_qid=int(qid) + 1, role="boss")
    with pytest.raises(IntegrityError), store.engine.begin() as connection:  # the database refuses it too
        connection.execute(update(Judgment).values(role="boss"))


def test_name_mode_is_one_team_with_no_roles(bundle, tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'a.db'}", project="demo")
    page = QPRPage(AppContext(ServedModel(bundle), store, "name", cache=tmp_path))
    page.build()
    assert page.ctx.privileged("train this project's model", "anyone") == "anyone"
    assert store.roles.actions(DEMO).empty  # nothing recorded about roles
    assert "one team shares every project" in page.team.show()[page.team.note]
    assert "one team shares every project" in page.ctx.whoami("ann", None, None)
    cluster, qid = a_member_to_mark(page.ctx)
    page.clusters.mark("different", cluster, qid, "anyone")
    assert store.judgments.frame()["role"].isna().all()  # typed names carry no role
    store.close()


def test_a_project_with_no_owner_is_owned_by_its_creator_once_logins_begin(bundle, tmp_path):
    """Issue 54 item 6: a project made while names were typed (here by ``Projects.create``, as a
    command or a version before roles made it: no role at all) gets its creator (``created_by``)
    as owner when the app with logins first loads it, recorded as their action; one where anyone
    holds a role keeps its roles as they are, even without an owner."""
    path = tmp_path / "faq.csv"
    make_corpus()[["question", "cluster"]].to_csv(path, index=False)
    store = open_store(f"sqlite:///{tmp_path / 'a.db'}", project="demo")
    typed = AppContext(ServedModel(bundle), store, "name", cache=tmp_path)
    upload = read_upload(path, "clusters")
    faq, owned, managed = (typed.projects.create(name, upload, "ann") for name in ("FAQ", "Owned", "Managed"))
    store.roles.grant(owned, "carol", "owner", "carol")
    store.roles.grant(managed, "ann", "reviewer", "carol")  # an owner who stepped down, say
    typed.open(faq)
    assert store.roles.frame(faq).empty, "name mode grants no role"
    ctx = AppContext(ServedModel(bundle), store, "auth", cache=tmp_path)
    for slug, who in ((faq, "ann"), (owned, "carol"), (managed, "ann")):
        ctx.open(slug, login(who))
    assert store.roles.frame(faq)[["annotator", "role"]].values.tolist() == [["ann", "owner"]]
    assert store.roles.actions(faq)[["annotator", "role", "action"]].values.tolist() == [["ann", "owner", ADOPTED]]
    assert store.roles.frame(owned)[["annotator", "role"]].values.tolist() == [["carol", "owner"]] and store.roles.actions(owned).empty
    assert store.roles.frame(managed)[["annotator", "role"]].values.tolist() == [["ann", "reviewer"]]
    ctx.open(faq, login("ann"))
    assert ctx.privileged("train this project's model", None, login("ann")) == "ann"
    with pytest.raises(QPRError, match="you need the role owner"):
        ctx.privileged("train this project's model", None, login("bob"))
    store.close()
