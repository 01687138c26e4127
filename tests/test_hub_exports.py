"""Exports pushed as Hub datasets (``workflows.hub_export``), to a local Hub layout offline as
bundles are (``hub_layout.FakeHub``): they load with ``datasets.load_dataset`` as exported, the
card's front matter is the Hub's, a second push is a second commit that says what changed; a
general bundle named by repository id starts the app offline, and its model card says what it was
trained on and how it scored on each set."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
import pytest
import yaml
from datasets import load_dataset
from huggingface_hub import snapshot_download

from annotations.db import open_store
from conftest import make_corpus
from export_store import VERSION, corpus, db_url, first_qids, store  # noqa: F401 (fixtures)
from hub_layout import FakeHub, cache_repo, offline_hub  # noqa: F401 (a fixture)
from test_general import TINY
from qpr.bundles import hub
from qpr.bundles.bundle import Bundle
from qpr.cli.main import main as qpr_main
from qpr.data.corpus import write_cluster_file
from qpr.bundles.general import build_general
from qpr.data import sources
from qpr.errors import QPRError
from qpr.serving.served_model import ServedModel
from ui.common import AppContext
from ui.page import QPRPage
from workflows import hub_export
from workflows.app_start import general_bundle, identity_mode
from workflows.cli import main
from workflows.retraining import export_corrected

REPO = "someone/corrected"
CONFIGS = ("clusters", "pairs", "anchor-positive", "triplets")


@pytest.fixture
def fake_hub(offline_hub, monkeypatch) -> FakeHub:
    fake = FakeHub(offline_hub)
    monkeypatch.setattr(hub, "HfApi", lambda: fake)
    return fake


def judge(store, corpus) -> None:
    a, b, c, d = first_qids(corpus, "train")[:4]
    store.judgments.record("ann", b, "same", VERSION, query_qid=a)
    store.judgments.record("ann", d, "different", VERSION, query_qid=c)


def pulled(repo: str, config: str, tmp_path) -> pd.DataFrame:
    """``config`` of the dataset ``repo`` as ``datasets.load_dataset`` gives it, its splits one
    after another in the card's order. Offline, ``load_dataset("owner/name")`` cannot reach the
    Hub, so it is given the repository's snapshot in the Hub cache, which is what it reads."""
    loaded = load_dataset(snapshot_download(repo, repo_type="dataset"), config, cache_dir=str(tmp_path / "datasets"))
    return pd.concat([split.to_pandas() for split in loaded.values()], ignore_index=True)


def front_matter(readme: str) -> dict:
    return yaml.safe_load(readme.split("---\n")[1])


def test_a_pushed_export_loads_as_exported_and_its_card_is_the_hubs(store, corpus, fake_hub, tmp_path):
    judge(store, corpus)
    done = export_corrected(store, corpus, VERSION, "parquet", folder=tmp_path / "exports")
    url = hub_export.push_export(done, REPO, "faq")
    assert fake_hub.created == [(REPO, "dataset", False)] and REPO in url
    (repo, files, deleted, message), = fake_hub.commits
    assert set(files) == {*CONFIGS, "README.md", hub_export.RECORD} and deleted == ["*"] and "faq" in message

    clusters = pulled(REPO, "clusters", tmp_path)
    expected = pd.concat([rows for _, rows in done.corpus.groupby("split", sort=False)], ignore_index=True)
    assert clusters["qid"].tolist() == expected["qid"].tolist()
    for column in ("question", "cluster", "split"):  # a question in no cluster: <NA> here, NaN from datasets
        assert [None if pd.isna(v) else v for v in clusters[column]] == [None if pd.isna(v) else v for v in expected[column]]
    assert sorted(clusters["qid"]) == sorted(done.corpus["qid"])  # every row of the export, once
    pd.testing.assert_frame_equal(pulled(REPO, "pairs", tmp_path), done.pairs, check_dtype=False)

    card = (snapshot_download(REPO, repo_type="dataset") + "/README.md")
    front = front_matter(open(card, encoding="utf-8").read())
    assert [c["config_name"] for c in front["configs"]] == list(CONFIGS) and front["configs"][0]["default"]
    assert {f["split"] for f in front["configs"][0]["data_files"]} == set(done.corpus["split"])
    assert front["license"] == "other" and front["task_categories"] == ["sentence-similarity"]
    assert front["size_categories"] == ["n<1K"]
    qpr = front["qpr"]
    assert qpr["project"] == "faq" and qpr["bundle_version"] == VERSION and qpr["export_id"] == done.manifest["export_id"]
    assert qpr["judgment_ids"] == done.manifest["judgment_ids"] and qpr["judgments"] == 2 and qpr["changed"] is None


def test_a_second_push_is_a_second_commit_whose_card_says_what_changed(store, corpus, fake_hub, tmp_path):
    judge(store, corpus)
    first = export_corrected(store, corpus, VERSION, "parquet", folder=tmp_path / "exports")
    hub_export.push_export(first, REPO, "faq")
    a, b = first_qids(corpus, "train")[4:6]
    store.judgments.record("ann", b, "same", VERSION, query_qid=a)
    second = export_corrected(store, corpus, VERSION, "parquet", folder=tmp_path / "exports")
    hub_export.push_export(second, REPO, "faq")

    assert [commit[0] for commit in fake_hub.commits] == [REPO, REPO]
    snapshot = snapshot_download(REPO, repo_type="dataset")
    assert snapshot.endswith(f"{2:040x}")  # the repository's main revision is the second commit
    changed = front_matter(open(snapshot + "/README.md", encoding="utf-8").read())["qpr"]["changed"]
    before, after = first.manifest["clusters_after"], second.manifest["clusters_after"]
    assert after == before  # one "same" moves one question, no whole cluster (issue 57)
    assert (second.corpus.set_index("qid")["cluster"] != first.corpus.set_index("qid")["cluster"]).sum() == 1
    assert changed == {"export_id": [first.manifest["export_id"], second.manifest["export_id"]],
                       "bundle_version": [VERSION, VERSION], "questions": [len(corpus), len(corpus)],
                       "clusters_after": [before, after], "judgments": [2, 3], "judgments_added": 1, "judgments_dropped": 0}
    text = open(snapshot + "/README.md", encoding="utf-8").read()
    assert f"clusters {before} -> {after}, judgments 2 -> 3 (1 added, 0 no longer current)" in " ".join(text.split())
    assert pulled(REPO, "clusters", tmp_path)["cluster"].nunique() == after


def test_the_command_line_writes_and_pushes_the_dataset(store, corpus, fake_hub, db_url, tmp_path, capsys):
    judge(store, corpus)
    folder = tmp_path / "dataset"
    argv = ["--db", db_url, "export", "--format", "parquet", "--out", str(tmp_path / "c.parquet"), "--dataset", str(folder),
            "--push", REPO, "--project", "demo"]
    assert main(argv) == 0
    assert f"https://huggingface.co/datasets/{REPO}" in capsys.readouterr().out
    assert len(fake_hub.commits) == 1
    local = load_dataset(str(folder), "clusters", cache_dir=str(tmp_path / "datasets"))
    assert sum(len(split) for split in local.values()) == len(corpus)
    assert main(argv) == 0  # the folder it wrote is replaced; its card says what changed since
    assert front_matter((folder / "README.md").read_text())["qpr"]["changed"]["judgments"] == [2, 2]

    assert main(["--db", db_url, "export", "--format", "parquet", "--out", str(tmp_path / "d.parquet"), "--push", "no id"]) == 2
    assert "'no id' is not a Hub dataset repository id" in capsys.readouterr().err
    assert not (tmp_path / "d.parquet").exists()  # refused before anything was exported


def test_an_owner_pushes_from_the_retrain_tab(tiny_bundle, fake_hub, tmp_path):
    """The Retrain & export tab's *Push to the Hub*, in login mode: refused, before anything is
    exported, to one who may not (in the demo project, only the app's admins) and for a bad
    repository id; done for the app's admin."""
    with open_store(f"sqlite:///{tmp_path / 'app.db'}", project="demo") as store:
        page = QPRPage(AppContext(ServedModel(tiny_bundle), store, "auth", cache=tmp_path, admins=frozenset({"root"})))
        page.build()
        with pytest.warns(UserWarning, match="Could not push to the Hub: Only the app.s admins \\(QPR_ADMINS\\) may push"):
            page.retrain.push(REPO, None, SimpleNamespace(username="bob"))
        with pytest.warns(UserWarning, match="Could not push to the Hub: 'no id' is not a Hub dataset repository id"):
            page.retrain.push("no id", None, SimpleNamespace(username="root"))
        assert fake_hub.commits == [] and not (tmp_path / "exports").exists()
        note = page.retrain.push(f" {REPO} ", None, SimpleNamespace(username="root"))[page.retrain.export_note]
    assert note.startswith("Pushed export #1 (0 judgment(s)) to the Hub dataset") and REPO in note
    assert [commit[0] for commit in fake_hub.commits] == [REPO]


def test_a_folder_it_did_not_write_is_not_replaced_and_tables_without_rows_are_left_out(store, corpus, tmp_path):
    done = export_corrected(store, corpus, VERSION, "parquet", folder=tmp_path / "exports")  # no judgments yet
    folder = hub_export.write_dataset(done, "faq", tmp_path / "dataset")
    configs = [c["config_name"] for c in front_matter((folder / "README.md").read_text())["configs"]]
    assert configs == ["clusters", "anchor-positive"] and not (folder / "pairs").exists()
    for config in configs:
        assert len(load_dataset(str(folder), config, cache_dir=str(tmp_path / "datasets"))) >= 1
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    with pytest.raises(QPRError, match="not a dataset folder written by"):
        hub_export.write_dataset(done, "faq", mine)
    assert (mine / "notes.txt").read_text() == "keep"


def test_the_app_starts_from_a_general_bundle_named_by_repo_id_offline(tiny_bundle, tmp_path, offline_hub, monkeypatch):
    """QPR_GENERAL=<repo id> with HF_HUB_OFFLINE=1 and the repository in the Hub cache: the app's
    context is built with that general bundle (a cold start from the Hub)."""
    cache_repo(offline_hub, "someone/qpr-general", tiny_bundle.save(tmp_path / "general"))
    monkeypatch.setenv("QPR_GENERAL", "someone/qpr-general")
    general = general_bundle()
    assert general.version == tiny_bundle.version
    with open_store(f"sqlite:///{tmp_path / 'app.db'}", project="demo") as store:
        ctx = AppContext(ServedModel(tiny_bundle), store, identity_mode(None), (), tmp_path / "cache", general=general)
        assert ctx.general is general
    monkeypatch.setenv("QPR_GENERAL", "someone/not-cached")
    with pytest.raises(QPRError, match="no Hub model repository of that name could be fetched"):
        general_bundle()
    # `qpr rebase` takes the repository id too.
    questions = write_cluster_file(make_corpus().assign(cluster=pd.NA), tmp_path / "mine.parquet")
    assert qpr_main(["rebase", "someone/qpr-general", "--corpus", str(questions), "--out", str(tmp_path / "mine"),
                     "--quiet"]) == 0
    assert Bundle.load(tmp_path / "mine").manifest.general["from"] == tiny_bundle.version


def topic(name: str) -> pd.DataFrame:
    """A set of 20 clusters of 3 questions about ``name``, which ``sources.load_domain`` splits so
    that some clusters are test clusters."""
    rows = [(f"how do i {verb} my {name} {thing}", f"{name}-{thing}") for thing in range(20) for verb in ("reset", "change", "fix")]
    frame = pd.DataFrame(rows, columns=["question", "cluster"])
    frame.insert(0, "qid", range(1, len(frame) + 1))
    return frame.assign(split="none")


def test_a_general_bundles_card_says_what_it_was_trained_on_and_its_results_per_set(tmp_path, monkeypatch):
    tiny_domains = ["banking77", "squad"]
    for name in tiny_domains:
        monkeypatch.setitem(sources.LOADERS, name, lambda name=name: topic(name))
    general = build_general(domains=tiny_domains, teacher=False, config=TINY, progress=False)
    assert set(general.manifest.domain_metrics) == set(tiny_domains)
    card = (general.save(tmp_path / "general") / "README.md").read_text()
    assert "## Trained on" in card and all(f"`{domain}`" in card for domain in tiny_domains)
    assert "on their train clusters as labelled pairs (no teacher)" in card
    reported = {(r["dataset"]["name"], m["type"]): m["value"]
                for entry in front_matter(card)["model-index"] for r in entry["results"] for m in r["metrics"]}
    for domain in tiny_domains:
        scores = general.manifest.domain_metrics[domain]["test"]
        assert reported[(domain, "hit_at_1")] == pytest.approx(scores["H1"], abs=1e-4)
        assert f"| {domain} | {scores['queries']} | {scores['H1']:.3f} |" in card
