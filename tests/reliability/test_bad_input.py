"""Every row of issue 26's bad-input table, per entry point: the command line (one line, exit 2),
the store API and the file readers. Each must name what is wrong and what to do, and change
nothing on disk (a snapshot of every file, hidden ones included) or in the database."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

import qpr.cli.commands
from harness.hostile_files import parquet_dictionary_1mb
from workflows.cli import main as annotations_main
from annotations.db import open_store
from annotations.errors import AnnotationError
from conftest import make_corpus
from qpr.bundles.bundle import Bundle
from qpr.cli.main import main
from qpr.data.corpus import load_corpus, read_cluster_file, read_quora_pairs, write_cluster_file
from qpr.errors import QPRError
from qpr.serving.projects import Projects
from qpr.data.qalogs import read_log
from qpr.data.upload import read_upload
from qpr.model.text import Vocabulary
from reliability_support import snapshot

QUORA_HEADER = "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"


def _edit_manifest(change):
    def damage(folder: Path) -> None:
        manifest = json.loads((folder / "manifest.json").read_text())
        (folder / "manifest.json").write_text(json.dumps(change(manifest)))
    return damage


def _without(key):
    def change(manifest):
        del manifest[key]
        return manifest
    return change


# Damaged copies of a good bundle: name -> what is done to it.
DAMAGES = {
    "bad-arrow": lambda f: (f / "corpus.arrow").write_bytes(b"ARROW1 but not really" * 20),
    # A bundle from before the Arrow corpus (corpus.parquet) whose file is damaged:
    "bad-parquet": lambda f: ((f / "corpus.arrow").unlink(), (f / "corpus.parquet").write_bytes(b"PAR1 but not really" * 20)),
    "bad-encoder": lambda f: (f / "model.safetensors").write_bytes(b"not safetensors" * 20),
    # A bundle from before safetensors (encoder.pt) whose file is damaged:
    "bad-old-encoder": lambda f: ((f / "model.safetensors").unlink(), (f / "encoder.pt").write_bytes(b"not a zip archive" * 20)),
    "pickled-tensor": lambda f: ((f / "model.safetensors").unlink(),
                                 __import__("torch").save(__import__("torch").zeros(3), f / "encoder.pt")),
    "manifest-list": lambda f: (f / "manifest.json").write_text("[1, 2, 3]"),
    "manifest-no-encoder": _edit_manifest(_without("encoder_config")),
    "manifest-bad-encoder": _edit_manifest(lambda m: m | {"encoder_config": {"no_such_setting": 1}}),
    "manifest-unknown-factory": _edit_manifest(lambda m: m | {"index": m["index"] | {"factory": "Bogus7"}}),
    "manifest-wrong-factory": _edit_manifest(lambda m: m | {"index": m["index"] | {"factory": "HNSW16"}}),
    "manifest-bad-search": _edit_manifest(lambda m: m | {"index": m["index"] | {"search": 7}}),
    "manifest-not-utf8": lambda f: (f / "manifest.json").write_bytes(b"\xff\xfe{}"),
    "corpus-without-columns": lambda f: pd.DataFrame({"x": [1]}).to_feather(f / "corpus.arrow"),
}
DAMAGE_MESSAGES = {
    "bad-arrow": "corpus.arrow is not a readable Arrow file",
    "bad-parquet": "corpus.parquet is not a readable Parquet file",
    "bad-encoder": "model.safetensors is not a readable safetensors file",
    "bad-old-encoder": "encoder.pt is not a PyTorch weights file",
    "pickled-tensor": "encoder.pt holds a Tensor, not encoder weights",
    "manifest-list": "manifest.json holds a JSON list, not an object",
    "manifest-no-encoder": "manifest.json lacks encoder_config",
    "manifest-bad-encoder": "encoder_config is not one this version reads",
    "manifest-unknown-factory": "unsupported index 'Bogus7'",
    "manifest-wrong-factory": "holds an exact index, but the manifest says 'HNSW16'",
    "manifest-bad-search": "search parameters as text",
    "manifest-not-utf8": "manifest.json is not valid JSON",
    "corpus-without-columns": "corpus.arrow lacks column",
}


@pytest.fixture
def world(tiny_bundle, tmp_path):
    """A folder with a good bundle, damaged bundles, good and bad data files, and things that
    are not ours: a folder of notes, a file, a symlink."""
    tiny_bundle.save(tmp_path / "bundle")
    for name, damage in DAMAGES.items():
        shutil.copytree(tmp_path / "bundle", tmp_path / name)
        damage(tmp_path / name)
    write_cluster_file(make_corpus(), tmp_path / "clusters.jsonl")
    (tmp_path / "header-only.csv").write_text("qid,question,cluster,split\n")
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "pairs-header-only.tsv").write_text(QUORA_HEADER)
    (tmp_path / "nul.csv").write_text("question,cluster\nhow do i\x00 learn,a\nhow to learn,a\n")
    (tmp_path / "nul.jsonl").write_text('{"question": "a\\u0000b", "cluster": "a"}\n')
    pd.DataFrame({"question": ["fine", "bad\x00"], "cluster": ["a", "a"]}).to_parquet(tmp_path / "nul.parquet")
    (tmp_path / "pairs-nul.tsv").write_text(QUORA_HEADER + "1\t1\t2\tq\x00one\tq two\t1\n")
    (tmp_path / "log-nul.jsonl").write_text('{"question": "where\\u0000 is it", "answer": "x"}\n')
    (tmp_path / "log-header-only.csv").write_text("question,answer\n")
    for name, line in NOT_RECORDS.items():  # a good record, then a line that is not one
        (tmp_path / f"{name}.jsonl").write_text('{"question": "how do i learn chess", "cluster": "a"}\n' + line + "\n")
    parquet_dictionary_1mb(tmp_path, scale=0.001)  # a few hundred bytes whose one dictionary text is 1 MB
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "thesis.txt").write_text("years of work")
    (tmp_path / "a-file").write_text("mine")
    (tmp_path / "link").symlink_to(tmp_path / "notes")
    (tmp_path / "vocab.json").write_text('["a list"]')
    return tmp_path


NOT_RECORDS = {"null": "null", "number": "3.5", "true": "true", "list": '["how do i learn chess", "a"]'}
NOT_RECORD = "line 2 is {}, not a JSON object; give one object per line"
BOMB = "record 1: its question takes 1,048,576 bytes, more than 131,072"

TRAIN = ["train", "--data", "{d}/clusters.jsonl", "--quiet", "--out"]
CLI_CASES = [
    # --out: never destroy what is not ours, refuse an unwritable folder before training.
    (TRAIN + ["{d}/notes"], "{d}/notes is an existing folder that is not a bundle (it holds thesis.txt); choose a new path"),
    (TRAIN + ["{d}/a-file"], "{d}/a-file is an existing file, not a bundle; choose a new path"),
    (TRAIN + ["{d}/link"], "{d}/link is a symbolic link"),
    (TRAIN + ["{d}/a-file/bundle"], "cannot write {d}/a-file/bundle: {d}/a-file is a file, not a folder"),
    (TRAIN + ["/proc/no-such-process/bundle"], "cannot write /proc/no-such-process/bundle: No such file or directory"),
    (["rebase", "{d}/bundle", "--corpus", "{d}/clusters.jsonl", "--out", "{d}/notes"],
     "{d}/notes is an existing folder that is not a bundle (it holds thesis.txt); choose a new path"),
    (["rebase", "{d}/manifest-list", "--corpus", "{d}/clusters.jsonl", "--out", "{d}/new"], DAMAGE_MESSAGES["manifest-list"]),
    (["rebase", "{d}/bundle", "--corpus", "{d}/nul.jsonl", "--out", "{d}/new"], "contains a NUL character"),
    # training data
    (["train", "--data", "{d}/header-only.csv", "--out", "{d}/new"], "the file has no rows"),
    (["train", "--data", "{d}/empty.jsonl", "--out", "{d}/new"], "the file is empty"),
    (["train", "--data", "{d}/pairs-header-only.tsv", "--out", "{d}/new"], "the file has no rows"),
    (["train", "--data", "{d}/nul.csv", "--out", "{d}/new"], "the question of qid 1 contains a NUL character"),
    (["train", "--data", "{d}/nul.parquet", "--out", "{d}/new"], "the question of qid 2 contains a NUL character"),
    (["train", "--data", "{d}/pairs-nul.tsv", "--out", "{d}/new"], "the question1 of pair id 1 contains a NUL"),
    *[(["train", "--data", f"{{d}}/{name}.jsonl", "--out", "{d}/new"], NOT_RECORD.format(line).replace("{", "{{").replace("}", "}}"))
      for name, line in NOT_RECORDS.items()],
    (["train", "--data", "{d}/dict1m.parquet", "--out", "{d}/new"], BOMB),
    (["eval", "{d}/bundle", "--data", "{d}/nul.jsonl"], "contains a NUL character"),
    # queries
    (["search", "{d}/bundle", "how do i \udcff learn"], "the query contains a lone surrogate ('\\udcff')"),
    (["search", "{d}/bundle", "--bm25", "chess\udc80"], "lone surrogate"),
    (["search", "{d}/bundle", "chess \x00 lessons"], "the query contains a NUL character"),
    # logs
    (["supervise", "{d}/log-nul.jsonl", "--out", "{d}/c.tsv"], "the question (question) of data row 1 contains a NUL"),
    (["supervise", "{d}/log-header-only.csv", "--out", "{d}/c.tsv"], "the file has no rows"),
    (["supervise", "{d}/clusters.jsonl", "--answer-col", "cluster", "--out", "{d}/c.tsv", "--report", "{d}/notes"],
     "{d}/notes is an existing folder that is not a report of `qpr supervise` (it holds thesis.txt)"),
    (["supervise", "{d}/clusters.jsonl", "--out", "{d}/notes.tsv", "--answer-col", "cluster"], None),  # control: works
    # damaged bundles, through every command that opens one
    *[(["search", "{d}/" + name, "how do i learn chess ?"], message) for name, message in DAMAGE_MESSAGES.items()],
    *[([command, "{d}/" + name], DAMAGE_MESSAGES[name]) for command in ("index", "fuse", "eval")
      for name in ("manifest-list", "bad-parquet", "manifest-unknown-factory")],
]


@pytest.mark.parametrize("argv, message", CLI_CASES, ids=lambda v: " ".join(v)[:60] if isinstance(v, list) else None)
def test_cli_names_the_problem_in_one_line_and_changes_nothing(world, argv, message, capsys, monkeypatch):
    def no_training(*args, **kwargs):
        raise AssertionError("training started: the --out check must come first")

    monkeypatch.setattr(qpr.cli.commands, "train_system_bundle", no_training)
    argv = [a.format(d=world) for a in argv]
    before = snapshot(world)
    code = main(argv)
    err = capsys.readouterr().err
    if message is None:  # the control case: a good command still writes
        assert code == 0, err
        return
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert message.format(d=world) in err
    assert snapshot(world) == before


def test_annotations_export_refuses_a_folder_and_an_unwritable_path(world, capsys):
    url = f"sqlite:///{world / 'db' / 'a.db'}"
    with open_store(url, project="demo") as store:
        store.corpora.register("v1", make_corpus())
    (world / "out.csv").mkdir()
    before = snapshot(world)
    for out, message in [(world / "out.csv", "is an existing folder; give a file name"),
                         (Path("/proc/no-such-process/out.csv"), "cannot create the folder /proc/no-such-process")]:
        assert annotations_main(["export", "--db", url, "--format", "csv", "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and message in err and err.count("\n") == 1, err
    assert snapshot(world) == before
    with open_store(url, project="demo") as store, store.engine.connect() as connection:
        assert connection.exec_driver_sql("SELECT COUNT(*) FROM exports").scalar() == 0


# -- library entry points ------------------------------------------------------------------------

READER_CASES = [
    (read_cluster_file, "header-only.csv", "the file has no rows (columns: qid, question, cluster, split)"),
    (read_cluster_file, "empty.jsonl", "the file is empty"),
    (read_cluster_file, "nul.csv", "qid 1 contains a NUL character (\\x00) at position 8; remove it"),
    (read_cluster_file, "nul.jsonl", "contains a NUL character"),
    (read_cluster_file, "nul.parquet", "contains a NUL character"),
    *[(read_cluster_file, f"{name}.jsonl", NOT_RECORD.format(line)) for name, line in NOT_RECORDS.items()],
    (read_cluster_file, "dict1m.parquet", BOMB),
    (load_corpus, "pairs-header-only.tsv", "the file has no rows"),
    (load_corpus, "pairs-nul.tsv", "pair id 1 contains a NUL character"),
    (lambda p: read_quora_pairs(p), "pairs-nul.tsv", "NUL character"),
    (lambda p: read_log(p), "log-nul.jsonl", "contains a NUL character"),
    (lambda p: read_log(p), "log-header-only.csv", "the file has no rows (columns: question, answer)"),
    (Vocabulary.load, "vocab.json", "cannot read vocabulary"),
    *[(Bundle.load, name, message) for name, message in DAMAGE_MESSAGES.items()],
]


# Uploads in the app (Projects tab): one message listing each problem on its own line, by row.
UPLOAD_CASES = [
    ("header-only.csv", "clusters", "- the file has no rows (columns: qid, question, cluster, split)"),
    ("empty.jsonl", "questions", "- the file is empty"),
    ("nul.csv", "clusters", "- row 2: the question contains a NUL character (\\x00) at position 8; remove it"),
    ("nul.jsonl", "questions", "- row 1: the question contains a NUL character"),
    ("nul.parquet", "clusters", "- row 2: the question contains a NUL character"),
    ("log-nul.jsonl", "qa-log", "- row 1: the question contains a NUL character"),
    *[(f"{name}.jsonl", kind, "- " + NOT_RECORD.format(line)) for name, line in NOT_RECORDS.items()
      for kind in ("clusters", "qa-log")],
    ("dict1m.parquet", "questions", "- " + BOMB),
    ("log-header-only.csv", "qa-log", "- the file has no rows"),
    ("clusters.jsonl", "qa-log", "- missing column(s) answer (found: qid, question, cluster, split)"),
    ("vocab.json", "questions", "unknown file type '.json'"),
]


@pytest.mark.parametrize("name, kind, message", UPLOAD_CASES, ids=[f"{n}-{k}" for n, k, _ in UPLOAD_CASES])
def test_uploads_are_refused_whole_with_the_row_and_change_nothing(world, name, kind, message):
    before = snapshot(world)
    with pytest.raises(QPRError) as caught:
        Projects(world / "projects").create("mine", read_upload(world / name, kind), "ann")
    assert message in str(caught.value)
    assert snapshot(world) == before


@pytest.mark.parametrize("reader, name, message", READER_CASES, ids=lambda v: v if isinstance(v, str) else None)
def test_file_readers_raise_one_clear_error_and_change_nothing(world, reader, name, message):
    before = snapshot(world)
    if message is None:
        reader(world / name)
    else:
        with pytest.raises(QPRError) as caught:
            reader(world / name)
        assert message in str(caught.value) and "\n" not in str(caught.value)
    assert snapshot(world) == before


@pytest.mark.parametrize("kwargs, message", [
    ({"query_text": "how \udcff"}, "the query contains a lone surrogate"),
    ({"query_text": "how\x00 now"}, "the query contains a NUL character"),
    ({"query_text": "   "}, "the query is empty"),
    ({"annotator": "ann\x00"}, "the annotator name contains a NUL character"),
    ({"annotator": "\u200b"}, "no visible characters"),
    ({"annotator": "ann\tbob"}, "control character U+0009"),
])
def test_store_refuses_bad_text_and_writes_nothing(tmp_path, kwargs, message):
    with open_store(f"sqlite:///{tmp_path / 'a.db'}", project="demo") as store:
        store.corpora.register("v1", make_corpus())
        args = {"annotator": "ann", "candidate_qid": 2, "label": "same", "bundle_version": "v1"} | kwargs
        if "query_text" not in args:
            args["query_qid"] = 1
        with pytest.raises(AnnotationError) as caught:
            store.judgments.record(**args)
        assert message in str(caught.value)
        assert store.judgments.frame(current_only=False).empty and store.judgments.annotators() == []
