"""The retraining workflow (``workflows.retraining``) without Gradio: a tiny bundle, a SQLite store,
export handed over in memory, retrain, offer, confirm with its failure cases (a record or a
remember that fails takes the swap back), discard."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import pandas as pd
import pytest
from sqlalchemy.exc import OperationalError

import workflows.retraining as retraining
from annotations.db import open_store
from annotations.export import manifest_path
from qpr.bundles.bundle import Bundle
from qpr.data.corpus import read_cluster_file
from qpr.errors import QPRError
from qpr.serving.projects import Projects
from qpr.serving.served_model import ServedModel
from qpr.training.train import TrainConfig
from workflows.background_training import BUNDLE, STATUS, TrainingJob
from workflows.cli import main
from workflows.labels import serve_corrections, serve_latest, serve_rollback
from workflows.project_versions import add_version
from workflows.project import FolderHome, Project

TWINS = ("c-chess", "c-piano")  # two clusters judged the same: one merge


@dataclass(frozen=True)
class Home:
    """A project home (``workflows.project.Home``) whose save and remember the test chooses."""

    save: Callable
    remember: Callable


def demo_project(model: ServedModel, store, training: TrainingJob | None = None) -> Project:
    """The demo project serving ``model``, seen through ``store`` (its home a folder that the tests
    using it never confirm a model into)."""
    return Project("demo", "Demo", model, store, FolderHome(Path("never-confirmed")), training=training)


def judge_twins(store, bundle: Bundle) -> list[int]:
    """Record that two questions of each twin cluster mean the same as two of the other (two
    independent links: evidence for the whole clusters, annotations.constraints); the judgment ids."""
    corpus = bundle.corpus
    for row in (0, 1):
        first, second = (int(corpus.loc[corpus["cluster"] == cluster, "qid"].iloc[row]) for cluster in TWINS)
        store.judgments.record("ann", second, "same", bundle.version, query_qid=first)
    return sorted(store.judgments.frame()["id"].tolist())


@pytest.fixture(scope="module")
def retrained(tiny_bundle, tmp_path_factory):
    """One retraining of the tiny bundle on its corrected clusters: what it proposed, the stages
    and epochs it reported, the judgments it learned from, and its export folder."""
    folder = tmp_path_factory.mktemp("retrain")
    model = ServedModel(tiny_bundle)
    stages, epochs = [], []
    with open_store(f"sqlite:///{folder / 'a.db'}", project="demo") as store:
        store.corpora.register(tiny_bundle.version, tiny_bundle.corpus)
        judged = judge_twins(store, tiny_bundle)
        proposal = retraining.retrain(demo_project(model, store), folder / "exports", 1, epochs.append, stages.append)
    return {"model": model, "proposal": proposal, "stages": stages, "epochs": epochs, "judged": judged,
            "folder": folder / "exports"}


@pytest.fixture
def target(tiny_bundle, retrained, scratch_dir, tmp_path):
    """A deployment serving the tiny bundle with the retrained model waiting; ``remembered``
    lists what ``remember`` was called with."""
    store = open_store(f"sqlite:///{scratch_dir / 'a.db'}", project="demo")
    store.corpora.register(tiny_bundle.version, tiny_bundle.corpus)
    model = ServedModel(tiny_bundle)
    candidate = retrained["proposal"].candidate
    model.propose(candidate.served.bundle, candidate.comparison)
    remembered = []
    home = Home(lambda bundle: bundle.save(tmp_path / "bundles" / bundle.version), lambda path, who: remembered.append((path, who)))
    deployment = Project("demo", "Demo", model, store, home, training=TrainingJob(tmp_path / "training"))
    yield deployment, remembered
    store.close()


def test_an_export_is_handed_over_in_memory_as_written(tiny_bundle, scratch_dir, tmp_path):
    with open_store(f"sqlite:///{scratch_dir / 'e.db'}", project="demo") as store:
        store.corpora.register(tiny_bundle.version, tiny_bundle.corpus)
        judged = judge_twins(store, tiny_bundle)
        done = retraining.export_corrected(store, tiny_bundle.corpus, tiny_bundle.version, "csv", folder=tmp_path / "exports")
    assert done.path.parent == tmp_path / "exports" and done.path.name.startswith("corrected-")
    assert done.corpus.equals(read_cluster_file(done.path)), "the corpus in memory is the file's"
    assert done.manifest == json.loads(manifest_path(done.path).read_text())
    twins = done.corpus[tiny_bundle.corpus["cluster"].isin(TWINS)]
    assert twins["cluster"].nunique() == 1 and len(done.manifest["merges"]) == 1
    # The one provenance schema: the export's id, its cluster file's absolute path, its judgments.
    assert done.provenance == {"export_id": done.manifest["export_id"], "export_file": str(done.path.resolve()),
                           "judgment_ids": judged}


def test_retrain_proposes_a_model_trained_on_the_export_and_changes_nothing_served(tiny_bundle, retrained):
    proposal, model = retrained["proposal"], retrained["model"]
    new = proposal.candidate.served.bundle
    assert model.current().bundle is tiny_bundle and model.candidate() is proposal.candidate
    assert new.version != tiny_bundle.version and new.manifest.provenance == proposal.export.provenance
    assert proposal.export.provenance["judgment_ids"] == retrained["judged"]
    assert proposal.export.path.parent == retrained["folder"] and proposal.export.path.suffix == ".parquet"
    assert list(proposal.candidate.comparison["model"]) == ["current", "current", "retrained", "retrained"]
    assert retrained["stages"] == ["exporting", "comparing"] and [row["epoch"] for row in retrained["epochs"]] == [1]


def test_retrain_trains_on_the_judged_pairs_and_lists_the_queries_it_changed(tiny_bundle, scratch_dir, tmp_path,
                                                                             monkeypatch):
    import qpr.systems.question_encoder as question_encoder

    seen = []
    real_train = question_encoder.train

    def recording_train(*args, **kwargs):
        seen.append(kwargs["judged"])
        return real_train(*args, **kwargs)

    monkeypatch.setattr(question_encoder, "train", recording_train)
    with open_store(f"sqlite:///{scratch_dir / 'j.db'}", project="demo") as store:
        store.corpora.register(tiny_bundle.version, tiny_bundle.corpus)
        corpus = tiny_bundle.corpus
        first, second = (int(corpus.loc[corpus["cluster"] == cluster, "qid"].iloc[0]) for cluster in TWINS)
        store.judgments.record("ann", second, "different", tiny_bundle.version, query_qid=first)
        proposal = retraining.retrain(demo_project(ServedModel(tiny_bundle), store), tmp_path / "exports", 1)
    # The judged pair reaches the training as the export wrote it ("different": is_duplicate 0).
    assert len(seen) == 1 and seen[0] is proposal.export.pairs
    assert seen[0][["qid1", "qid2", "is_duplicate"]].values.tolist() == [[first, second, 0]]
    assert list(proposal.changed.columns) == ["query", "before", "right before", "after", "right after", "judged question"]


def test_retrain_refuses_a_model_served_by_bm25_alone(tiny_bundle, scratch_dir, tmp_path):
    with open_store(f"sqlite:///{scratch_dir / 'l.db'}", project="demo") as store:
        with pytest.raises(QPRError, match="no encoder yet"):
            retraining.retrain(demo_project(ServedModel(Bundle.lexical_of(tiny_bundle.corpus)), store), tmp_path / "exports", 1)
    assert not (tmp_path / "exports").exists()


def test_confirm_serves_records_and_remembers_the_candidate(tiny_bundle, target):
    deployment, remembered = target
    new = deployment.model.candidate().served.bundle
    done = retraining.confirm(deployment, "Carol")
    assert deployment.model.current().bundle is new and deployment.model.candidate() is None
    assert done.bundle is new and done.replaced == tiny_bundle.version and Bundle.load(done.path).version == new.version
    swaps = deployment.store.swaps.frame()
    assert swaps[["annotator", "bundle_version", "replaced_version"]].values.tolist() == [["Carol", new.version,
                                                                                          tiny_bundle.version]]
    assert swaps.iloc[0]["judgment_ids"] == new.manifest.provenance["judgment_ids"]
    assert remembered == [(done.path, "Carol")]
    with pytest.raises(QPRError, match="No retrained model is waiting"):
        retraining.confirm(deployment, "Carol")


def test_a_record_that_fails_once_is_retried(target, monkeypatch):
    deployment, remembered = target
    monkeypatch.setattr(retraining, "RETRY_PAUSE_S", 0.0)
    real, calls = deployment.store.swaps.record, []

    def flaky(*args):
        calls.append(args)
        if len(calls) == 1:
            raise OperationalError("INSERT", {}, Exception("database is locked"))
        return real(*args)

    monkeypatch.setattr(deployment.store.swaps, "record", flaky)
    done = retraining.confirm(deployment, "Carol")
    assert len(calls) == 2 and len(deployment.store.swaps.frame()) == 1 and len(remembered) == 1
    assert deployment.model.current().bundle is done.bundle


def test_a_record_that_keeps_failing_takes_the_swap_back(tiny_bundle, target, monkeypatch):
    deployment, remembered = target
    monkeypatch.setattr(retraining, "RETRY_PAUSE_S", 0.0)
    candidate, calls = deployment.model.candidate(), []

    def broken(*args):
        calls.append(args)
        raise OperationalError("INSERT", {}, Exception("disk I/O error"))

    monkeypatch.setattr(deployment.store.swaps, "record", broken)
    with pytest.raises(QPRError, match="could not be recorded \\(.*disk I/O error.*\\), so it was taken back"):
        retraining.confirm(deployment, "Carol")
    assert len(calls) == retraining.ATTEMPTS
    # Never served unrecorded: the old model is served, the candidate waits, nothing remembered.
    assert deployment.model.current().bundle is tiny_bundle and deployment.model.candidate() is candidate
    assert deployment.model.last_swap() is None and remembered == []
    monkeypatch.undo()  # the database is back: confirming again works
    retraining.confirm(deployment, "Carol")
    assert deployment.model.current().bundle is candidate.served.bundle and len(deployment.store.swaps.frame()) == 1


def test_a_bug_in_a_step_after_the_swap_takes_it_back_and_keeps_its_traceback(tiny_bundle, target, monkeypatch):
    deployment, remembered = target
    calls = []

    def buggy(*args):
        calls.append(args)
        raise TypeError("a bug")

    monkeypatch.setattr(deployment.store.swaps, "record", buggy)
    with pytest.raises(TypeError, match="a bug"):
        retraining.confirm(deployment, "Carol")
    assert len(calls) == 1, "a bug is not retried"
    assert deployment.model.current().bundle is tiny_bundle and deployment.model.candidate() is not None and remembered == []


def test_a_remember_that_keeps_failing_takes_the_swap_back_and_records_that(tiny_bundle, target, monkeypatch):
    deployment, _ = target
    monkeypatch.setattr(retraining, "RETRY_PAUSE_S", 0.0)
    candidate = deployment.model.candidate()
    new = candidate.served.bundle

    def full(path, who):
        raise OSError(28, "No space left on device")

    with pytest.raises(QPRError, match="could not be remembered for a restart .*No space left"):
        retraining.confirm(replace(deployment, home=Home(deployment.home.save, full)), "Carol")
    assert deployment.model.current().bundle is tiny_bundle and deployment.model.candidate() is candidate
    swaps = deployment.store.swaps.frame()[["bundle_version", "replaced_version"]].values.tolist()
    assert swaps == [[new.version, tiny_bundle.version], [tiny_bundle.version, new.version]], "the record says what is served"


def finished_training(job: TrainingJob, bundle: Bundle) -> None:
    """``job``'s folder as a worker leaves it when done with ``bundle``."""
    bundle.save(job.folder / BUNDLE)
    (job.folder / STATUS).write_text(json.dumps({"state": "done", "version": bundle.version, "by": "ann"}))


def test_a_finished_training_is_offered_once_and_settled_by_the_decision(tiny_bundle, retrained, target, monkeypatch):
    deployment, _ = target
    model, job = ServedModel(tiny_bundle), deployment.training
    trained = replace(deployment, model=model)  # nothing waits yet: the training's model is offered
    new = retrained["proposal"].candidate.served.bundle
    finished_training(job, new)
    offered = retraining.offer_trained(trained, new.version)
    assert model.candidate() is offered and offered.served.bundle.version == new.version
    assert list(offered.comparison["model"]) == ["current", "current", "retrained", "retrained"]
    monkeypatch.setattr(retraining, "compare_bundles", lambda *args: pytest.fail("compared twice"))
    assert retraining.offer_trained(trained, new.version) is offered
    assert retraining.discard(trained, "bob") is offered
    assert model.candidate() is None and model.current().bundle is tiny_bundle
    assert job.status()["state"] == "decided" and job.status()["message"] == "discarded by bob"


def test_a_confirmed_training_is_settled(retrained, target):
    deployment, _ = target
    finished_training(deployment.training, deployment.model.candidate().served.bundle)
    retraining.confirm(deployment, "Carol")
    assert deployment.training.status()["message"] == "put in service by Carol"


def test_a_result_that_cannot_be_compared_is_not_offered(tiny_bundle, tmp_path):
    job = TrainingJob(tmp_path / "training")
    job.folder.mkdir()
    (job.folder / STATUS).write_text(json.dumps({"state": "done", "version": "v-gone", "by": "ann"}))
    model = ServedModel(tiny_bundle)
    with pytest.raises(QPRError):
        retraining.offer_trained(demo_project(model, None, training=job), "v-gone")  # no bundle in the folder
    assert model.candidate() is None and job.status()["state"] == "decided"
    assert job.status()["message"].startswith("not offered: ")


def test_training_needs_clusters_to_hold_out(tiny_bundle, scratch_dir, tmp_path):
    bare = tiny_bundle.corpus.assign(cluster=pd.array([None] * len(tiny_bundle.corpus), dtype="string"))
    lexical = Bundle.lexical_of(bare)
    job = TrainingJob(tmp_path / "training")
    with open_store(f"sqlite:///{scratch_dir / 't.db'}", project="demo") as store:
        store.corpora.register(lexical.version, lexical.corpus)
        with pytest.raises(QPRError, match="Only 0 cluster\\(s\\) of 2 or more questions so far"):
            retraining.start_training(demo_project(ServedModel(lexical), store, training=job), tmp_path / "exports", "ann")
    assert job.status()["state"] == "none", "no worker started"


# -- the command line: qpr-annotations retrain ---------------------------------------------------


@pytest.fixture
def retrain_cli(tiny_bundle, scratch_dir, tmp_path):
    """The tiny bundle saved, a database with its corpus registered and the twins judged the same,
    and ``main`` run with ``retrain`` and these: returns (argv prefix, db URL, judgment ids)."""
    url = f"sqlite:///{scratch_dir / 'cli.db'}"
    with open_store(url, project="demo") as store:
        store.corpora.register(tiny_bundle.version, tiny_bundle.corpus)
        judged = judge_twins(store, tiny_bundle)
    folder = tiny_bundle.save(tmp_path / "bundle")
    return ["retrain", "--db", url, "--bundle", str(folder), "--epochs", "1", "--quiet"], url, judged


def test_cli_retrain_compares_and_changes_nothing_without_confirm(tiny_bundle, retrain_cli, tmp_path, capsys):
    argv, url, _ = retrain_cli
    out = tmp_path / "bundles" / "new"
    assert main([*argv, "--out", str(out)]) == 0
    shown = capsys.readouterr().out
    assert f"retrained {tiny_bundle.version} -> " in shown and "retrained" in shown.splitlines()[-3]
    assert "not confirmed: no bundle saved, no swap recorded" in shown
    assert not out.exists(), "nothing saved"
    (export,) = (tmp_path / "bundles" / "exports").glob("corrected-*[0-9]Z.parquet")  # the export, beside --out
    assert str(export) in shown and manifest_path(export).is_file()
    with open_store(url, project="demo") as store:
        assert store.swaps.frame().empty


def test_cli_retrain_with_confirm_saves_the_bundle_and_records_the_swap(tiny_bundle, retrain_cli, tmp_path, capsys):
    argv, url, judged = retrain_cli
    out = tmp_path / "new"
    assert main([*argv, "--out", str(out), "--format", "csv", "--exports", str(tmp_path / "ex"), "--confirm",
                 "--by", "Carol"]) == 0
    new = Bundle.load(out)
    assert f"saved {new.version} at {out}; recorded Carol's swap from {tiny_bundle.version}" in capsys.readouterr().out
    assert new.manifest.provenance["judgment_ids"] == judged
    assert new.manifest.provenance["export_file"].startswith(str((tmp_path / "ex").resolve()))
    assert new.manifest.provenance["export_file"].endswith(".csv")
    with open_store(url, project="demo") as store:
        swaps = store.swaps.frame()
    assert swaps[["annotator", "bundle_version", "replaced_version"]].values.tolist() == [["Carol", new.version,
                                                                                          tiny_bundle.version]]
    assert swaps.iloc[0]["judgment_ids"] == judged


def test_cli_retrain_refuses_bad_input_in_one_line(tiny_bundle, retrain_cli, scratch_dir, tmp_path, capsys):
    argv, url, _ = retrain_cli
    few = tiny_bundle.corpus.assign(cluster=tiny_bundle.corpus["cluster"].where(
        tiny_bundle.corpus["cluster"].isin(tiny_bundle.corpus["cluster"].dropna().unique()[:3])))
    few_bundle = Bundle.create(tiny_bundle.encoder, tiny_bundle.vocab, few, tiny_bundle.index.config,
                               train_info=tiny_bundle.manifest.training)
    bundle, few_url = few_bundle.save(tmp_path / "few"), f"sqlite:///{scratch_dir / 'few.db'}"
    with open_store(few_url, project="demo") as store:  # its own: the version may be the tiny bundle's (same weights, same second)
        store.corpora.register(few_bundle.version, few)
    (tmp_path / "notes.txt").write_text("mine")
    cases = [
        ([*argv, "--db", f"sqlite:///{scratch_dir / 'empty.db'}"], "is not registered in project 'demo'"),
        ([*argv, "--bundle", str(tmp_path / "nowhere")], "no bundle directory there"),
        ([*argv, "--db", few_url, "--bundle", str(bundle)], "Only 3 cluster(s) of 2 or more questions"),
        ([*argv, "--epochs", "0"], "--epochs must be 1 or more"),
    ]
    for args, message in cases:
        assert main([*args, "--out", str(tmp_path / "out"), "--confirm"]) == 2
        err = capsys.readouterr().err
        assert message in err and err.startswith("error: ") and err.count("\n") == 1
    assert main([*argv, "--out", str(tmp_path / "notes.txt"), "--confirm"]) == 2
    assert "is an existing file, not a bundle" in capsys.readouterr().err
    assert not (tmp_path / "out").exists() and (tmp_path / "notes.txt").read_text() == "mine"
    with open_store(url, project="demo") as store:
        assert store.swaps.frame().empty


class RunningJob:
    """A project's training as a new version sees it: running."""

    def status(self) -> dict:
        return {"state": "running"}


def never_read():
    raise AssertionError("the upload was read although the version is refused")


@pytest.mark.parametrize(("slug", "training", "said"), [("demo", None, "The demo's corpus is fixed"),
                                                        ("mine", RunningJob(), "A training of this project is running")])
def test_a_new_version_is_refused_before_its_file_is_read(tmp_path, slug, training, said):
    project = Project(slug, slug, None, None, None, training=training, built_in=slug == "demo")
    with pytest.raises(QPRError, match=said):
        add_version(project, Projects(tmp_path), never_read, "ann", lambda slug: None)


def test_corrections_are_recorded_then_served_and_a_restart_serves_them_again(tiny_bundle, tmp_path):
    model = ServedModel(tiny_bundle)
    with open_store(f"sqlite:///{tmp_path / 'a.db'}", project="demo") as store:
        store.corpora.register(tiny_bundle.version, tiny_bundle.corpus)
        judge_twins(store, tiny_bundle)
        serve_corrections(demo_project(model, store), "ann")
        served = model.current()
        assert served.labels_version == 1 and store.labels.corpus(tiny_bundle.version)[0] == 1
        merged = served.labels.set_index("qid")["cluster"]
        twins = tiny_bundle.corpus[tiny_bundle.corpus["cluster"].isin(TWINS)]["qid"]
        assert merged.loc[twins].nunique() == 1, "the twin clusters are served as one"

        restarted = ServedModel(tiny_bundle)
        serve_latest(demo_project(restarted, store))
        assert restarted.current().labels_version == 1

        serve_rollback(demo_project(model, store), 0, "ann")
        assert model.current().labels_version == 2
        assert model.current().labels.set_index("qid")["cluster"].loc[twins].nunique() == 2


def test_a_background_training_gets_the_judged_pairs_of_its_export(tiny_bundle, tmp_path, monkeypatch):
    import workflows.background_training as background

    class NoWorker:
        pid = 999_999_999

        def poll(self):
            return 0  # finished at once

    monkeypatch.setattr(background.subprocess, "Popen", lambda *args, **kwargs: NoWorker())
    judged = pd.DataFrame({"qid1": [1], "qid2": [2], "is_duplicate": [0]})
    job = TrainingJob(tmp_path / "job")
    job.start(tiny_bundle.corpus, TrainConfig(), tiny_bundle.vocab.config, tiny_bundle.encoder.config, tmp_path / "base",
              {}, "ann", judged=judged)
    # The worker (not started here) continues the encoder on these pairs as the in-process retrain does.
    assert pd.read_parquet(tmp_path / "job" / background.PAIRS).equals(judged)
    background._CHILDREN.pop(NoWorker.pid, None)


def test_a_background_job_written_before_the_provenance_rename_still_records_it(tiny_bundle, tmp_path, monkeypatch):
    """A job.json started by a version that called the provenance "labels" and run by this one."""
    import workflows.background_training as background

    class NoWorker:
        pid = 999_999_998

        def poll(self):
            return None  # still running: the test runs the worker itself

    monkeypatch.setattr(background.subprocess, "Popen", lambda *args, **kwargs: NoWorker())
    monkeypatch.setattr(background.torch, "set_num_threads", lambda n: None)
    trace = {"export_id": 9, "export_file": "/exports/corrected.parquet", "judgment_ids": [1, 2]}
    job = TrainingJob(tmp_path / "job")
    job.start(tiny_bundle.corpus, TrainConfig(), tiny_bundle.vocab.config, tiny_bundle.encoder.config, tmp_path / "base",
              trace, "ann")
    background._CHILDREN.pop(NoWorker.pid, None)
    written = json.loads((tmp_path / "job" / background.JOB).read_text())
    assert written["provenance"] == trace and "labels" not in written
    old = {("labels" if key == "provenance" else key): value for key, value in written.items()}
    (tmp_path / "job" / background.JOB).write_text(json.dumps(old))
    seen = {}

    def retrain(bundle, corpus, **kwargs):
        seen.update(kwargs)
        return bundle.with_manifest(provenance=kwargs["provenance"])

    monkeypatch.setattr(background.Bundle, "load", classmethod(lambda cls, path: tiny_bundle))
    monkeypatch.setattr(background, "retrain_bundle", retrain)
    background.run(tmp_path / "job")
    assert seen["provenance"] == trace
    assert json.loads((tmp_path / "job" / background.BUNDLE / "manifest.json").read_text())["provenance"] == trace
