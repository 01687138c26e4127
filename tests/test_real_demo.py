"""The default demo serves real questions: BANKING77, read from QPR_DATA_DIR or else from the Hub
data set (here offline, from a Hub-cache folder holding a small stand-in in the Hub's layout and
format), by BM25 at once, then by the encoder a background training swaps in; the trained model is
cached for the next start. The training here is one short epoch on the stand-in: what is tested
is the path, not the model (bench/startup.py times the real one)."""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from annotations.db import open_store
from conftest import make_corpus
from hub_layout import cache_repo, offline_hub  # noqa: F401 (a fixture)
from qpr.data.banking77 import HUB_DATASET, banking77_corpus
from qpr.errors import QPRError
from qpr.serving.served_model import ServedModel
from qpr.training.train import TrainConfig
from ui.common import AppContext
from ui.page import QPRPage
from ui.startup import stop_first_training
from workflows.app_start import served_bundle
from workflows.demos import BANKING_EXAMPLES, banking_demo, banking_path, start_banking_training
from workflows.first_training import FIRST_TRAINING, STOP_WAIT_S, FirstTraining, start

SHORT = TrainConfig(batch_size=16, max_epochs=1, patience=1, val_pairs=100)


@pytest.fixture
def stand_in() -> pd.DataFrame:
    """Labelled questions as BANKING77 holds them: text and an intent."""
    corpus = make_corpus().dropna(subset=["cluster"])
    return pd.DataFrame({"text": corpus["question"], "category": corpus["cluster"]}).reset_index(drop=True)


@pytest.fixture
def hub_banking77(stand_in, offline_hub, tmp_path, monkeypatch):
    """No BANKING77 under QPR_DATA_DIR; the Hub data set in the (offline) cache: Parquet files with
    integer labels, the intent names in the card's ``dataset_info``, as ``PolyAI/banking77`` has them."""
    monkeypatch.setenv("QPR_DATA_DIR", str(tmp_path / "no-data"))
    monkeypatch.setenv("QPR_DEMO", "banking77")
    names = sorted(stand_in["category"].unique())
    labels = stand_in["category"].map({name: i for i, name in enumerate(names)})
    folder = tmp_path / "repo"
    (folder / "data").mkdir(parents=True)
    half = len(stand_in) // 2
    for part, rows in (("train", slice(0, half)), ("test", slice(half, None))):
        table = pa.table({"text": stand_in["text"][rows].tolist(), "label": labels[rows].tolist()})
        pq.write_table(table, folder / "data" / f"{part}-00000-of-00001.parquet")
    listed = "\n".join(f"            '{i}': {name}" for i, name in enumerate(names))
    (folder / "README.md").write_text(f"---\nlicense: cc-by-4.0\ndataset_info:\n  features:\n  - name: text\n"
                                      f"    dtype: string\n  - name: label\n    dtype:\n      class_label:\n"
                                      f"        names:\n{listed}\n---\n# banking77\n")
    cache_repo(offline_hub, HUB_DATASET, folder, kind="datasets")
    return stand_in


def test_banking77_is_read_from_the_hub_when_the_data_folder_lacks_it(hub_banking77):
    corpus = banking77_corpus()
    assert sorted(corpus["question"]) == sorted(hub_banking77["text"].str.strip())
    by_text = dict(zip(hub_banking77["text"].str.strip(), hub_banking77["category"]))
    assert all(by_text[q] == c for q, c in zip(corpus["question"], corpus["cluster"]))  # intent names from the card
    assert set(corpus["split"]) == {"train", "val", "test"}


def test_without_the_data_folder_or_the_hub_the_error_says_what_to_set(offline_hub, tmp_path, monkeypatch):
    monkeypatch.setenv("QPR_DATA_DIR", str(tmp_path / "no-data"))
    with pytest.raises(QPRError, match="QPR_DATA_DIR.*QPR_DEMO=tutorial"):
        banking77_corpus()


def test_the_demo_answers_by_bm25_then_serves_the_encoder_trained_in_the_background(hub_banking77, tmp_path, monkeypatch):
    monkeypatch.setenv("QPR_CACHE_DIR", str(tmp_path / "cache"))
    bundle, examples = served_bundle()
    assert bundle.lexical and examples == BANKING_EXAMPLES and len(bundle.corpus) == len(hub_banking77)
    model, store = ServedModel(bundle), open_store(f"sqlite:///{tmp_path / 'annotations.db'}", project="demo")
    page = QPRPage(AppContext(model, store, "name", examples, cache=tmp_path / "cache"))
    page.build()
    assert "BANKING77" in page.credit() and "CC BY 4.0" in page.credit(), "the page credits the data set"
    assert model.current().default.search(examples[0], 3)  # BM25 answers before any training

    start_banking_training(model, store, tmp_path / "cache", SHORT, log=lambda _: None).join()
    served = model.current()
    assert not served.bundle.lexical and served.bundle.corpus.equals(bundle.corpus)
    assert served.default.search(examples[0], 3)
    swap = store.swaps.frame().iloc[-1]
    assert (swap["annotator"], swap["bundle_version"], swap["replaced_version"]) == (
        FIRST_TRAINING, served.bundle.version, bundle.version)
    assert start_banking_training(model, store, tmp_path / "cache", SHORT) is None  # nothing left to train
    restarted = banking_demo(tmp_path / "cache", SHORT, log=lambda _: None)
    assert restarted.version == served.bundle.version and not restarted.lexical  # the next start serves it at once
    assert restarted.manifest.card["license"] == "cc-by-4.0"

    cached = banking_path(banking77_corpus(), tmp_path / "cache", SHORT)
    shutil.copytree(cached, cached.with_name(f".{cached.name}.tmp-999999999-abcd1234"))
    cached.rename(cached.with_name(f".{cached.name}.old-999999999-abcd1234"))  # killed between the swap's renames
    recovered = banking_demo(tmp_path / "cache", SHORT, log=lambda _: None)
    assert recovered.version == served.bundle.version and not recovered.lexical  # finished, not retrained


def test_a_retrained_model_waiting_for_a_decision_is_not_pushed_aside(tiny_bundle, tmp_path):
    """When the first training ends while someone's retrained model waits to be confirmed, the
    trained model is recorded and saved for the next start but not swapped in: that decision
    stays theirs."""
    from qpr.bundles.bundle import Bundle
    from workflows.first_training import FIRST_TRAINING, serve_when_trained
    from workflows.project import FolderHome, Project

    model = ServedModel(Bundle.lexical_of(tiny_bundle.corpus))
    waiting = model.propose(tiny_bundle, pd.DataFrame())
    store, messages = open_store(f"sqlite:///{tmp_path / 'annotations.db'}", project="demo"), []
    store.corpora.register(model.current().bundle.version, tiny_bundle.corpus)  # as the app does when it serves it
    target = Project("demo", "Demo", model, store, FolderHome(tmp_path / "trained"), built_in=True)
    assert serve_when_trained(target, lambda: tiny_bundle, messages.append) is None
    assert model.current().bundle.lexical and model.candidate() is waiting
    assert Bundle.load(tmp_path / "trained").version == tiny_bundle.version and "waits for a decision" in messages[0]
    swaps = store.swaps.frame()[["annotator", "bundle_version", "replaced_version"]].values.tolist()
    assert swaps == [[FIRST_TRAINING, tiny_bundle.version, model.current().bundle.version]], "what the next start serves"


def test_python_app_py_serves_bm25_then_the_trained_encoder(hub_banking77, offline_hub, tmp_path, monkeypatch):
    """``python app.py`` as a fresh clone runs it (no cache; the data set from the Hub cache,
    offline, through the real environment variables): its first search answers, then it logs the
    trained encoder served; what the bench times (bench/startup.py), here on the small stand-in."""
    from harness.app_process import TRAINED, cold_start

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(offline_hub))
    started = cold_start(tmp_path, tmp_path / "cache", limit_s=600)
    assert any(TRAINED in line for line in started["log"]), started["log"]
    assert (tmp_path / "cache" / "demo-bundle").is_dir()


def test_closing_the_app_stops_the_first_training_at_its_next_batch(tiny_bundle, tmp_path):
    """Ctrl-C while the demo trains: the training ends at its next batch (a process that exits
    while a thread is inside torch aborts), nothing is served or saved, and the log says that the
    next start trains again."""
    from qpr.bundles.bundle import Bundle
    from workflows.project import FolderHome, Project

    model = ServedModel(Bundle.lexical_of(tiny_bundle.corpus))
    store, messages, steps = open_store(f"sqlite:///{tmp_path / 'annotations.db'}", project="demo"), [], []
    target = Project("demo", "Demo", model, store, FolderHome(tmp_path / "trained"), built_in=True)

    def endless(on_batch):  # a training that only the app's closing ends
        while True:
            steps.append(len(steps))
            on_batch(1, len(steps), 0)
            time.sleep(0.01)

    training = start(target, endless, messages.append)
    while len(steps) < 3:
        time.sleep(0.01)
    assert training.thread.is_alive() and not messages
    assert training.stop(wait_s=60), "the training ended at its next batch"
    assert model.current().bundle.lexical and not (tmp_path / "trained").exists(), "nothing served or saved"
    assert len(messages) == 1 and "first training stopped" in messages[0] and "next start" in messages[0]


def test_ctrl_c_during_the_first_start_ends_the_app_cleanly(hub_banking77, offline_hub, tmp_path, monkeypatch):
    """``python app.py`` stopped with Ctrl-C as soon as it answers, while its encoder trains:
    it exits with status 0 and says the training stopped (before, the C++ runtime aborted it with
    "terminate called without an active exception", status -6)."""
    from harness.app_process import TRAINED, start_app

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(offline_hub))
    log = tmp_path / "app.log"
    process, _, _ = start_app({"QPR_CACHE_DIR": str(tmp_path / "cache"), "QPR_DB_URL": f"sqlite:///{tmp_path / 'a.db'}"},
                              log)
    process.send_signal(signal.SIGINT)
    try:
        status = process.wait(timeout=STOP_WAIT_S + 60)
    finally:
        process.kill()
    text = log.read_text()
    assert status == 0, text[-2000:]
    assert "first training stopped" in text or TRAINED in text, text[-2000:]


def test_a_training_that_does_not_stop_in_time_is_left_with_where_it_hung(capsys):
    """A first training stuck outside its batches (it never sees the close) does not keep the app
    from closing, and the terminal says where it was, so that a hang can be told from a slow batch."""
    release = threading.Event()

    def stuck_somewhere_named_oddly():
        release.wait()

    thread = threading.Thread(target=stuck_somewhere_named_oddly, daemon=True)
    thread.start()
    training = FirstTraining(thread, threading.Event())
    stop_first_training(training, wait_s=0.05)
    said = capsys.readouterr().err
    assert "did not stop in 0.05 s" in said and "stuck_somewhere_named_oddly" in said and training.closing.is_set()
    release.set()
    thread.join()
    assert training.where() == ""


def test_a_second_ctrl_c_while_the_training_stops_quits_at_once(monkeypatch):
    """The closing message offers a second Ctrl-C to quit at once: it ends the process without the
    interpreter's clean-up (which aborts under a thread inside torch), with Ctrl-C's status 130."""
    release = threading.Event()
    thread = threading.Thread(target=release.wait, daemon=True)
    thread.start()

    def interrupted(self, wait_s=STOP_WAIT_S):
        raise KeyboardInterrupt

    exits = []
    monkeypatch.setattr(FirstTraining, "stop", interrupted)
    monkeypatch.setattr(os, "_exit", exits.append)
    stop_first_training(FirstTraining(thread, threading.Event()))
    release.set()
    assert exits == [130]
