"""One project's work stays in that project (issue 54, item 1), through the page's handlers: two
projects imported from the same file (so their question ids coincide), judged by two annotators
on overlapping pairs; every view of each shows its own judgments only. The browser walk of the
same is tests/test_app_browser_isolation.py."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from alembic import command
from sqlalchemy import text

from annotations.db import WRITE_OPTION, alembic_config, make_engine, open_store
from annotations.export import manifest_path
from conftest import make_corpus
from qpr.serving.served_model import ServedModel
from ui.common import AppContext
from ui.page import QPRPage

ALPHA, BETA = "zoe", "yuri"  # names that no other text of the page contains


def text_of(output) -> str:
    """Everything a handler's output shows, as text."""
    if isinstance(output, dict):
        return "\n".join(text_of(value) for value in output.values())
    if isinstance(output, pd.DataFrame):
        return output.to_string()
    if isinstance(output, (list, tuple)):
        return "\n".join(text_of(value) for value in output)
    return str(getattr(output, "value", output))


@pytest.fixture
def two_projects(bundle, tmp_path):
    """The page with projects Alpha and Beta made from one file; each judged by its own annotator
    on the same question ids, with opposite labels: (page, {slug: (annotator, store)})."""
    store = open_store(f"sqlite:///{tmp_path / 'a.db'}", project="demo")
    page = QPRPage(AppContext(ServedModel(bundle), store, "name", cache=tmp_path))
    page.build()
    path = tmp_path / "same.csv"
    make_corpus()[["question", "cluster"]].to_csv(path, index=False)
    judged = {}
    for name, who, label in (("Alpha", ALPHA, "same"), ("Beta", BETA, "different")):
        page.projects.create(str(path), "clusters", name, "", "", "", False, who)
        scoped, version = page.ctx.current().store, page.ctx.current().served().bundle.version
        for query, candidate in ((1, 6), (1, 11), (2, 7), (16, 21)):  # across clusters c-python, c-guitar, ...
            scoped.judgments.record(who, candidate, label, version, query_qid=query)
        scoped.judgments.record(who, 3, "different", version, query_qid=1)  # within c-python
        judged[name.lower()] = (who, scoped)
    yield page, judged
    store.close()


def test_every_view_of_a_project_shows_its_own_judgments_only(two_projects):
    page, judged = two_projects
    for slug, (who, _) in judged.items():
        other = next(name for s, (name, _) in judged.items() if s != slug)
        page.ctx.open(slug)
        views = {
            "clusters": page.clusters.show_cluster("c-python"),
            "annotate": page.annotate.start_cluster("c-python", who, None, None),
            "my work": page.my_work.show("", True, other, None, None),
            "metrics": page.metrics.metrics(),
            "review": page.review.overview(),
        }
        for view, output in views.items():
            assert other not in text_of(output), f"{view} of {slug} shows {other}'s judgments"
        assert who in text_of(views["clusters"]), "the project's own judgments are shown"
        assert "Judged today: **5**" in text_of(views["annotate"]) and "labelled in total: **5**" in text_of(views["annotate"])
        assert next(iter(views["my work"].values())).empty, f"{other} has no work in {slug}"
        done = page.retrain.export_clusters("csv")
        manifest = json.loads(manifest_path(done[page.retrain.files][0]).read_text())
        own = set(judged[slug][1].judgments.frame()["id"])
        assert set(manifest["judgment_ids"]) == own, "an export reads its project's judgments, all of them"
        assert f"/exports/{slug}/" in done[page.retrain.files][0]


def test_a_judgment_cannot_point_into_another_projects_bundle(two_projects):
    page, judged = two_projects
    (_, alpha), (_, beta) = judged["alpha"], judged["beta"]
    alpha_version = alpha.corpora.versions()["version"].iloc[0]
    with pytest.raises(Exception, match="not registered in this project"):
        beta.judgments.record(BETA, 6, "same", alpha_version, query_qid=1)
    assert set(alpha.judgments.frame()["annotator"]) == {ALPHA} and set(beta.judgments.frame()["annotator"]) == {BETA}
    assert alpha.judgments.progress(BETA) == {"today": 0, "total": 0} and beta.judgments.progress(BETA)["total"] == 5
    assert beta.judgments.annotators() == [BETA]


def test_one_annotator_judges_the_same_item_in_two_projects_each_label_its_own(two_projects):
    """The same qids in two projects are two items: one current label per annotator, project and item."""
    page, judged = two_projects
    (_, alpha), (_, beta) = judged["alpha"], judged["beta"]
    beta.judgments.record(ALPHA, 6, "different", beta.corpora.versions()["version"].iloc[0], query_qid=1)
    mine = {slug: store.judgments.frame(annotator=ALPHA).query("candidate_qid == 6 and query_qid == 1")["label"].tolist()
            for slug, store in (("alpha", alpha), ("beta", beta))}
    assert mine == {"alpha": ["same"], "beta": ["different"]}


def test_a_database_from_before_projects_upgrades_and_a_project_claims_its_versions(scratch_dir):
    """Migration 0009 on a database of revision 0008 holding judgments, a comment, an export and an
    adjudication: everything is the demo's until a project claims its bundle version (taking its
    judgments and the adjudications of their items along), and nothing is lost on the way."""
    url = f"sqlite:///{scratch_dir / 'old.db'}"
    engine, config = make_engine(url), alembic_config()
    with engine.execution_options(**{WRITE_OPTION: True}).begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "0008")
        for statement in (
            "INSERT INTO bundles VALUES ('v-old', 'f', 3, '2026-01-01')",
            "INSERT INTO corpus_questions VALUES ('v-old', 1, 'a', 'c', 'train'), ('v-old', 2, 'b', 'c', 'train'),"
            " ('v-old', 3, 'c', NULL, 'none')",
            "INSERT INTO annotators (id, name, name_key, created_at) VALUES (1, 'ann', 'ann', '2026-01-01')",
            "INSERT INTO judgments (id, annotator_id, bundle_version, query_qid, candidate_qid, item_key, label, created_at,"
            " is_current, superseded_by) VALUES (1, 1, 'v-old', 1, 3, 'qid:1:3', 'same', '2026-01-01', NULL, 2),"
            " (2, 1, 'v-old', 1, 3, 'qid:1:3', 'different', '2026-01-02', 1, NULL)",
            "INSERT INTO judgment_comments VALUES (1, 2, 1, 'not sure', '2026-01-02')",
            "INSERT INTO exports (id, created_at, bundle_version, format, path, questions, clusters_before, clusters_after)"
            " VALUES (1, '2026-01-02', 'v-old', 'csv', '/x.csv', 3, 1, 1)",
            "INSERT INTO export_judgments VALUES (1, 2)",
            "INSERT INTO adjudications (id, reviewer_id, kind, item_key, query_qid, candidate_qid, decision, created_at)"
            " VALUES (1, 1, 'item', 'qid:1:3', 1, 3, 'different', '2026-01-03')",
        ):
            connection.execute(text(statement))
    engine.dispose()
    with open_store(url, project="demo") as demo:
        assert demo.judgments.frame(current_only=False)["id"].tolist() == [1, 2] and demo.review.comments().tolist() == ["not sure"]
        project = demo.for_project("faq")
        assert project.judgments.frame().empty and project.review.adjudications().empty
        assert project.corpora.claim_versions(["v-old", "v-unknown"]) == ["v-old"]
        assert project.judgments.frame(current_only=False)["id"].tolist() == [1, 2] and demo.judgments.frame(current_only=False).empty
        assert project.review.adjudications()["item_key"].tolist() == ["qid:1:3"] and demo.review.adjudications().empty
        assert project.review.comments().tolist() == ["not sure"] and project.corpora.claim_versions(["v-old"]) == []
        with demo.engine.connect() as connection:
            assert connection.exec_driver_sql("SELECT COUNT(*) FROM export_judgments").scalar() == 1
            assert connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall() == []
