"""Projects (create, new version with stable qids, judgments carried over, open, restart),
lexical bundles, the background training worker's lifecycle, and the Projects tab's handlers."""

from __future__ import annotations

import json
import os
import signal
import time

import gradio as gr
import pandas as pd
import pytest
import torch

from annotations.db import open_store
from annotations.merge import applicable_judgments
from conftest import _small_encoder, make_corpus
from workflows.background_training import TrainingJob, describe
from qpr.bundles.bundle import Bundle
from qpr.model.encoder import EncoderConfig
from qpr.errors import QPRError
from qpr.retrieval.index import IndexConfig
from qpr.serving.projects import Projects, stable_qids
from qpr.serving.slugs import DEMO
from qpr.serving.served_model import ServedModel
from qpr.model.text import TextConfig
from qpr.training.train import TrainConfig, train
from qpr.data.upload import read_upload
from ui.common import AppContext
from ui.page import QPRPage
from ui.search_tab import labels_of
import workflows.project
from workflows.cluster_marks import representative
from workflows.project import SMALL_CORPUS, TrainingDefaults


def upload_of(tmp_path, corpus, kind="clusters", name="faq.csv"):
    path = tmp_path / name
    corpus[["question", "cluster"] if kind == "clusters" else ["question"]].to_csv(path, index=False)
    return read_upload(path, kind)


@pytest.fixture
def app_page(bundle, tmp_path):
    """The whole page over a fresh SQLite store and an empty cache (tests call its handlers)."""
    store = open_store(f"sqlite:///{tmp_path / 'a.db'}", project="demo")
    page = QPRPage(AppContext(ServedModel(bundle), store, "name", cache=tmp_path))
    page.build()
    yield page
    store.close()


def create_faq(page, tmp_path, name="FAQ", corpus=None) -> dict:
    """Create a project from a clustered file of ``corpus`` (make_corpus by default) as "ann"."""
    path = tmp_path / "faq.csv"
    (make_corpus() if corpus is None else corpus)[["question", "cluster"]].to_csv(path, index=False)
    return page.projects.create(str(path), "clusters", name, "", "", "", False, "ann")


def wait_for(job, states, limit=300):
    deadline = time.monotonic() + limit
    while job.status()["state"] not in states:
        assert time.monotonic() < deadline, job.status()
        time.sleep(0.3)
    return job.status()


def test_stable_qids_keep_unchanged_texts_and_never_reuse_a_qid():
    old = pd.DataFrame({"qid": [1, 2, 3], "question": ["a", "b", "c"]})
    new, next_qid = stable_qids(pd.DataFrame({"question": ["c", "d", "a"]}), old, 4)
    assert new["qid"].tolist() == [3, 4, 1] and next_qid == 5


def test_a_lexical_bundle_saves_loads_and_serves_bm25_everywhere(tmp_path):
    bundle = Bundle.lexical_of(make_corpus())
    loaded = Bundle.load(bundle.save(tmp_path / "b"))
    assert loaded.lexical and loaded.version == bundle.version
    assert sorted(os.listdir(tmp_path / "b")) == ["bm25", "corpus.arrow", "manifest.json"]
    served = ServedModel(loaded).current()
    assert served.default is served.model_retriever is served.bm25
    assert served.default.search("how do i learn chess ?", 1)[0].cluster == "c-chess"


def test_a_new_version_keeps_the_judgments_of_questions_that_still_exist(tmp_path):
    projects, store = Projects(tmp_path / "projects"), open_store(f"sqlite:///{tmp_path / 'a.db'}", project="demo")
    first = make_corpus(n_topics=16, distractors=0)
    slug = projects.create("My FAQ", upload_of(tmp_path, first), "ann")
    v1 = projects.served_bundle(slug)
    store.corpora.register(v1.version, v1.corpus)
    chess, golf = (v1.corpus[v1.corpus["question"] == f"how do i learn {t} ?"]["qid"].iloc[0] for t in ("chess", "guitar"))
    store.judgments.record("ann", int(golf), "same", v1.version, query_qid=int(chess))
    second = pd.concat([first[first["question"] != "any tips for a beginner in python ?"],
                        pd.DataFrame({"question": ["a brand new question about chess"], "cluster": ["c-chess"]})])
    record = projects.add_version(slug, upload_of(tmp_path, second), "bob")
    v2 = projects.served_bundle(slug)
    store.corpora.register(v2.version, v2.corpus)
    assert (record["kept"], record["new"], record["dropped"]) == (len(first) - 1, 1, 1)
    assert v2.corpus.set_index("question")["qid"].get("how do i learn chess ?") == chess
    assert v2.corpus["qid"].max() == len(first) + 1  # the new question's qid was never used
    assert len(applicable_judgments(store.judgments.frame(), v2.corpus)) == 1
    assert [v["number"] for v in projects.manifest(slug)["versions"]] == [1, 2]
    store.close()


def test_project_names_are_checked(tmp_path):
    projects = Projects(tmp_path)
    upload = upload_of(tmp_path, make_corpus(n_topics=16))
    projects.create("FAQ", upload, "ann")
    for name, message in (("faq", "exists already"), ("  ", "name the project"), ("Demo", "built-in demo")):
        with pytest.raises(QPRError, match=message):
            projects.create(name, upload, "ann")


def test_opening_a_project_outside_a_page_sets_the_default_and_a_restart_can_open_it(bundle, tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'a.db'}", project="demo")
    ctx = AppContext(ServedModel(bundle), store, "name", cache=tmp_path)
    slug = ctx.projects.create("Bare", upload_of(tmp_path, make_corpus(), "questions"), "ann")
    assert ctx.open(slug) == slug
    assert ctx.current().served().bundle.lexical and ctx.project == slug
    again = AppContext(ServedModel(bundle), store, "name", cache=tmp_path, project=slug)
    assert again.current().served().bundle.version == ctx.current().served().bundle.version
    ctx.open(DEMO)
    assert ctx.current().served().bundle is bundle
    with pytest.raises(QPRError, match="There is no project 'nope'.*Project list"):
        ctx.open("nope")
    store.close()


TINY_TRAIN = TrainConfig(batch_size=16, max_epochs=3, patience=3, val_pairs=200)


def test_the_worker_reports_progress_refuses_a_second_training_and_is_found_dead(tmp_path):
    job = TrainingJob(tmp_path / "training")
    assert job.status()["state"] == "none"
    slow = TrainConfig(batch_size=4, max_epochs=200, patience=200, val_pairs=200)
    job.start(make_corpus(), slow, TextConfig(hash_bins=100), _small_encoder(), None, {}, "ann")
    with pytest.raises(QPRError, match="already running \\(started by ann"):
        job.start(make_corpus(), slow, TextConfig(), _small_encoder(), None, {}, "bob")
    deadline = time.monotonic() + 120
    # One read of the status serves every check: the worker rewrites it between reads (a
    # validation clears the ETA), so a second read may miss what the first one waited for.
    while (status := job.status()).get("eta_s") is None:  # set once two batches have set a pace
        assert time.monotonic() < deadline, status
        time.sleep(0.3)
    assert status["state"] == "running" and status["steps"] >= status["step"] >= 1
    assert "of at most 200" in describe(status) and "s left" in describe(status, now=status["updated"])
    os.killpg(status["pid"], signal.SIGKILL)  # the worker dies (killed, out of memory, ...)
    status = wait_for(job, {"failed"}, limit=30)
    assert "stopped without finishing" in status["message"]
    job.start(make_corpus(), slow, TextConfig(hash_bins=100), _small_encoder(), None, {}, "ann")  # a new start is allowed
    cancelled = job.cancel("bob")
    assert cancelled["state"] == "cancelled" and cancelled["message"] == "cancelled by bob"
    with pytest.raises(QPRError, match="no training is running"):
        job.cancel("bob")


def test_a_project_trains_in_the_background_and_swaps_only_on_confirm(app_page, tmp_path, monkeypatch):

    monkeypatch.setattr(workflows.project, "SMALL_CORPUS", TrainingDefaults(TINY_TRAIN, SMALL_CORPUS.text, _small_encoder()))
    page = app_page
    tab = page.projects
    shown = create_faq(page, tmp_path, "My FAQ")
    assert "Created **My FAQ**" in shown[tab.note] and "BM25 only" in shown[tab.active]
    served = page.ctx.current().served().bundle
    results = page.search.search("how do i learn chess ?", 3, False)[page.search.results]
    assert results["cluster"].iloc[0] == "c-chess"  # BM25 serves at once
    tab.start(3, "ann")
    assert tab.start(3, "bob") == gr.skip()  # a second training is told it runs (warning)
    while page.ctx.current().training.status()["state"] in ("starting", "running"):
        page.search.search("how do i learn chess ?", 3, False)  # searches are served meanwhile
        time.sleep(0.5)
    shown = tab.poll()
    assert "is ready" in shown[tab.status] and page.ctx.current().served().bundle is served  # not swapped yet
    assert page.ctx.current().model.candidate() is not None
    page.retrain.confirm("ann", None, None)
    new = page.ctx.current().served().bundle
    assert not new.lexical and page.ctx.current().training.status()["state"] == "decided"
    assert page.ctx.projects.manifest("my-faq")["served"] == new.version  # served again after a restart


@pytest.fixture
def general(monkeypatch):
    """A general bundle (``python -m qpr general``) built on two synthetic domains, tiny budget, no teacher."""
    from qpr.data import sources
    from qpr.training.distill import GeneralConfig
    from qpr.bundles.general import build_general

    monkeypatch.setitem(sources.LOADERS, "banking77", lambda: make_corpus(seed=1).assign(split="none"))
    monkeypatch.setitem(sources.LOADERS, "squad", lambda: make_corpus(n_topics=12, seed=2).assign(split="none"))
    config = GeneralConfig(per_source=80, unlabelled_per_epoch=0, epochs=2, batch_size=16)
    return build_general(domains=["banking77", "squad"], teacher=False, config=config, progress=False)


def test_with_a_general_bundle_a_new_project_is_served_by_it_and_trains_on_from_it(general, bundle, tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'a.db'}", project="demo")
    page = QPRPage(AppContext(ServedModel(bundle), store, "name", cache=tmp_path, general=general))
    page.build()
    tab = page.projects
    shown = create_faq(page, tmp_path, "My FAQ")
    first = page.ctx.current().served().bundle
    assert not first.lexical and first.manifest.general["from"] == general.version
    assert torch.equal(first.encoder.embedding.weight, general.encoder.embedding.weight)  # its encoder, unchanged
    assert first.manifest.fusion == general.manifest.fusion
    assert "the general model with BM25" in shown[tab.active]
    assert labels_of(page.ctx.current().served())["results"].startswith("Rank fusion")  # what the Search tab says
    assert first.manifest.metrics and set(first.manifest.hybrid_metrics) == set(first.manifest.metrics)
    results = page.search.search("how do i learn chess ?", 3, False)[page.search.results]
    assert results["cluster"].iloc[0] == "c-chess"
    path = tmp_path / "faq-v2.csv"
    make_corpus(n_topics=20)[["question", "cluster"]].to_csv(path, index=False)
    tab.new_version(str(path), "clusters", "", "", "", False, "bob")
    second = page.ctx.current().served().bundle
    assert second.manifest.general["from"] == general.version and second.version != first.version
    assert Bundle.load(page.ctx.projects.bundle_path("my-faq", first.version)).version == first.version  # version 1 kept
    tab.start(2, "ann")
    wait_for(page.ctx.current().training, {"done", "failed"})
    assert "is ready" in tab.poll()[tab.status]
    page.retrain.confirm("ann", None, None)
    trained = page.ctx.current().served().bundle
    assert trained.manifest.general is None and trained.vocab.tokens == general.vocab.tokens  # continued from it
    assert "model " in tab.listed()[tab.active] and "general" not in tab.listed()[tab.active]
    store.close()


def test_with_a_general_bundle_bare_questions_are_grouped_by_its_encoder(general, bundle, tmp_path):
    with open_store(f"sqlite:///{tmp_path / 'a.db'}", project="demo") as store:
        page = QPRPage(AppContext(ServedModel(bundle), store, "name", cache=tmp_path, general=general))
        page.build()
        path = tmp_path / "inbox.csv"
        make_corpus()[["question"]].to_csv(path, index=False)
        page.projects.create(str(path), "questions", "Inbox", "", "", "", False, "ann")
        served = page.ctx.current().served()
        assert not served.bundle.lexical and served.model_retriever is not served.bm25  # the general encoder, beside BM25
        shown = page.annotate.start_cluster("", "ann", None, None)  # "Next cluster": a group of near questions
        group = shown[page.annotate.session].queue
        seed = served.corpus.set_index("qid").loc[int(group["query_qid"].iloc[0]), "question"]
        nearest = served.model_retriever.search([seed], len(served.corpus))[0]
        dense_distance = {hit.qid: hit.distance for hit in nearest}
        assert all(abs(dense_distance[q] - d) < 1e-4 for q, d in zip(group["candidate_qid"], group["distance"]))
        assert "**0** cluster(s) of 2+ questions formed so far" in shown[page.annotate.progress]


def test_handlers_refuse_without_a_name_or_a_file(app_page, tmp_path):
    page = app_page
    assert page.projects.create(None, "clusters", "x", "", "", "", False, "ann") == gr.skip()
    assert page.projects.create(None, "clusters", "x", "", "", "", False, "") == gr.skip()
    assert page.projects.new_version(None, "clusters", "", "", "", False, "ann") == gr.skip()  # the demo is fixed
    assert not (tmp_path / "projects").exists() or not list((tmp_path / "projects").glob("*/project.json"))


def test_a_cold_start_project_trains_on_the_clusters_its_annotators_built_and_survives_a_restart(app_page, bundle, tmp_path,
                                                                                                 monkeypatch):

    monkeypatch.setattr(workflows.project, "SMALL_CORPUS", TrainingDefaults(TINY_TRAIN, SMALL_CORPUS.text, _small_encoder()))
    page = app_page
    path = tmp_path / "bare.csv"
    make_corpus()[["question"]].to_csv(path, index=False)
    page.projects.create(str(path), "questions", "Bare", "", "", "", False, "ann")
    store = page.ctx.current().store  # the project's, now open on the page
    assert page.projects.start(3, "ann") == gr.skip()  # no clusters yet: told to judge first
    served = page.ctx.current().served().bundle
    topic = served.corpus["question"].str.extract(r"(\w+) (?:quickly )?\?$")[0]
    recorded = 0
    for _, group in served.corpus[~served.corpus["question"].str.contains("number")].groupby(topic):
        for candidate in group["qid"].iloc[1:]:  # annotators say every template means the same as the first
            store.judgments.record("ann", int(candidate), "same", served.version, query_qid=int(group["qid"].iloc[0]))
            recorded += 1
    page.projects.start(3, "ann")
    # The app restarts while the worker trains: the new app finds the training on disk.
    restarted = QPRPage(AppContext(ServedModel(bundle), store, "name", cache=tmp_path, project=page.ctx.project))
    restarted.build()
    assert restarted.ctx.current().served().bundle.version == served.version
    wait_for(restarted.ctx.current().training, {"done", "failed"})
    shown = restarted.projects.poll()
    assert "is ready" in shown[restarted.projects.status], shown[restarted.projects.status]
    assert restarted.ctx.current().served().bundle.version == served.version  # served model intact until confirmed
    assert recorded == 120 and len(store.judgments.frame()) == recorded  # no judgment lost


def test_a_model_trained_on_an_older_version_is_never_offered(app_page, tmp_path):
    page = app_page
    create_faq(page, tmp_path)
    job = page.ctx.current().training
    job.folder.mkdir(parents=True)
    (job.folder / "status.json").write_text(json.dumps({"state": "done", "version": "v-old", "by": "ann"}))
    path = tmp_path / "faq-v2.csv"
    make_corpus(n_topics=20)[["question", "cluster"]].to_csv(path, index=False)
    shown = page.projects.new_version(str(path), "clusters", "", "", "", False, "bob")
    assert "Version 2" in shown[page.projects.note] and "110 question(s) kept (their judgments still apply), 0 new, 50 gone" in shown[page.projects.note]
    assert job.status()["state"] == "decided" and "version 2 was uploaded by bob" in job.status()["message"]
    assert page.ctx.current().model.candidate() is None


def test_every_tab_works_on_a_project_served_by_bm25_alone(app_page, tmp_path):
    page = app_page
    create_faq(page, tmp_path)
    assert page.ctx.current().served().bundle.lexical
    view = page.annotate.start_cluster("c-chess", "ann", None, None)
    assert view  # the queue is ranked by BM25
    view = page.clusters.show_cluster("c-chess")  # no encoder: the representative shares most words
    members = view[page.clusters.members]
    rep = representative(page.ctx.current().served(), make_corpus()[make_corpus()["cluster"] == "c-chess"])
    assert f"**{rep}**" in view[page.clusters.summary]
    odd = int(members[members["qid"] != rep]["qid"].iloc[0])
    page.clusters.mark("different", "c-chess", str(odd), "ann")
    applied = page.clusters.apply("c-chess", "ann")
    assert odd not in set(applied[page.clusters.members]["qid"]) and page.ctx.current().served().labels_version == 1
    slug = page.ctx.project
    page.ctx.open(DEMO)
    page.ctx.served.drop(slug)  # as after a restart or an unload: opening it again builds the project's model again
    page.ctx.open(slug)
    assert page.ctx.current().served().labels_version == 1, "a project opened again serves its corrected labels"
    assert page.clusters.overview()
    assert page.metrics.metrics()
    files = page.retrain.export_clusters("csv")[page.retrain.files]
    assert pd.read_csv(files[0])["question"].nunique() == len(make_corpus())
    assert page.retrain.retrain(1, "ann", progress=lambda *a, **k: None) == gr.skip()  # told to train on Projects


def test_a_refused_upload_lists_one_problem_per_line_in_the_page(app_page, tmp_path):
    page = app_page
    path = tmp_path / "bad.csv"
    path.write_text("question,cluster\n,a\n<b>x</b>,b\n<b>x</b>,c\n")
    with pytest.warns(UserWarning) as caught:
        page.projects.create(str(path), "clusters", "Bad", "", "", "", False, "ann")
    # The page's warning, not another one emitted meanwhile (a ResourceWarning when the garbage
    # collector happens to finalise an earlier test's event loop inside this block).
    message = str(next(w.message for w in caught if w.category is UserWarning))
    assert "<br>- row 2: the question is empty" in message and "<br>- row 4: the same question as row 3" in message
    assert "<b>" not in message


def test_the_search_labels_follow_the_project_served_to_the_session(app_page, tmp_path):
    search = app_page.search
    hybrid = labels_of(app_page.ctx.current().served())
    before = app_page.ctx.current().served().bundle.version
    assert hybrid["results"] == "Hybrid: SDML and BM25 candidates re-scored" == search.results.label
    assert search.relabel(before, True) == gr.skip()  # the page already shows it
    # values only, one in each table (a table left out costs Gradio a rebuild of its config)
    alone = search.search("how do i learn chess ?", 3, False, before)
    assert set(alone) == {search.results, search.dense, search.bm25}
    assert all(isinstance(value, pd.DataFrame) for value in alone.values()) and alone[search.dense].empty
    create_faq(app_page, tmp_path)  # the page creates and opens a project served by BM25 alone
    now = app_page.ctx.current().served().bundle.version
    found = search.search("how do i learn chess ?", 3, True, before)
    assert found[search.shown] == now != before
    # Issue 38, bug 3: the examples are the project's own questions, not the demo's.
    assert set(found) == {search.results, search.dense, search.bm25, search.shown}
    controls = search.controls()  # what the page's new version in ``shown`` brings (its change event)
    examples = [sample[0] for sample in controls[search.examples].constructor_args["samples"]]
    assert len(examples) == 5 and set(examples) <= set(make_corpus()["question"])
    assert found[search.results].label == "BM25 alone (no encoder trained yet)"
    assert found[search.results].constructor_args["value"]["cluster"].iloc[0] == "c-chess"
    assert found[search.dense].visible is False and found[search.bm25].visible is True  # no encoder to compare
    assert found[search.dense].constructor_args["value"].empty  # the old encoder's results do not stay
    assert "no encoder trained yet" in controls[search.compare].label
    opened = search.relabel(before, False)  # another page, which searched before the switch, opens the tab
    assert opened[search.shown] == now and opened[search.results].label == found[search.results].label
    assert all(opened[table].constructor_args["value"].empty for table in (search.results, search.dense, search.bm25))
    assert search.relabel(now, False) == gr.skip()


def test_the_search_labels_name_the_served_encoder(tiny_corpus, tmp_path):
    lstm = EncoderConfig(architecture="lstm", pooling="mean", embedding_dim=16, channels=12, output_dim=8)
    trained = train(tiny_corpus, TrainConfig(batch_size=16, max_epochs=1, patience=1, val_pairs=50), encoder_config=lstm,
                    progress=False)
    bundle = Bundle.create(trained.encoder, trained.vocab, tiny_corpus, IndexConfig("Flat"))
    store = open_store(f"sqlite:///{tmp_path / 'a.db'}", project="demo")
    page = QPRPage(AppContext(ServedModel(bundle), store, "name", cache=tmp_path))
    page.build()
    assert (page.search.results.label, page.search.dense.label) == ("LSTM encoder", "LSTM encoder alone")
    assert page.search.compare.label == "Compare with LSTM alone and BM25"
    store.close()


def test_the_import_note_says_the_upload_limit(bundle, tmp_path, monkeypatch):
    monkeypatch.setenv("QPR_MAX_UPLOAD_MB", "2.5")  # what the browser refuses past (ui.startup.launch_options)
    store = open_store(f"sqlite:///{tmp_path / 'a.db'}", project="demo")
    demo = QPRPage(AppContext(ServedModel(bundle), store, "name", cache=tmp_path)).build()
    notes = [block.value for block in demo.blocks.values() if getattr(block, "elem_id", None) == "project-import-note"]
    assert len(notes) == 1 and "up to 2.5 MB (QPR_MAX_UPLOAD_MB)" in notes[0]
    store.close()
