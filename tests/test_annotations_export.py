"""Export of corrected clusters (files, manifest, database record), the trainer round trip, and the
``qpr-annotations`` command line (``python -m workflows``) with its one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pandas as pd
import pytest
from sqlalchemy import text

from workflows.cli import main
from annotations.errors import AnnotationError
from annotations.export import export, manifest_path, pairs_path
from annotations.constraints import corrected_clusters
from export_store import VERSION, corpus, db_url, first_qids, store  # noqa: F401 (fixtures)
from qpr.data.corpus import QUORA_COLUMNS, read_cluster_file, read_table
from qpr.training.train import TrainConfig, train

REPO = Path(__file__).resolve().parents[1]


def judge_some(store, corpus) -> dict[str, int]:
    """Two train clusters judged the same (two independent links, which merge whole clusters), one
    pair judged different, a distractor joined, a tie."""
    a, b, c, d = first_qids(corpus, "train")[:4]
    a2, b2 = (int(corpus.loc[(corpus["cluster"] == corpus.set_index("qid").loc[q, "cluster"]) & (corpus["qid"] != q), "qid"].iloc[0])
              for q in (a, b))
    distractor = int(corpus.loc[corpus["cluster"].isna(), "qid"].iloc[0])
    return {
        "same": store.judgments.record("ann", b, "same", VERSION, query_qid=a),
        "same_too": store.judgments.record("ann", b2, "same", VERSION, query_qid=a2),
        "different": store.judgments.record("ann", d, "different", VERSION, query_qid=c),
        "distractor": store.judgments.record("ann", distractor, "same", VERSION, query_qid=c),
        "tie_ann": store.judgments.record("ann", d, "same", VERSION, query_qid=b),
        "tie_bob": store.judgments.record("bob", d, "different", VERSION, query_qid=b),
    }


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_export_writes_cluster_file_pairs_and_manifest_and_records_them(store, corpus, tmp_path, fmt):
    ids = judge_some(store, corpus)
    expected = corrected_clusters(store, corpus)
    out = export(store, corpus, fmt, tmp_path / f"corrected.{fmt}", bundle_version=VERSION)

    back = read_cluster_file(out)
    pd.testing.assert_frame_equal(back, expected.corpus, check_dtype=False)
    assert back["cluster"].nunique() == corpus["cluster"].nunique() - 1  # one merge of two clusters

    pairs = read_table(pairs_path(out))
    assert list(pairs.columns) == QUORA_COLUMNS
    judged = {(int(p.qid1), int(p.qid2)): int(p.is_duplicate) for p in pairs.itertuples()}
    texts = corpus.set_index("qid")["question"]
    assert sorted(judged.values()) == [0, 1, 1, 1] and len(judged) == 4  # the tie is no pair
    assert all(texts[int(p.qid1)] == p.question1 and texts[int(p.qid2)] == p.question2 for p in pairs.itertuples())

    manifest = json.loads(manifest_path(out).read_text())
    assert manifest["judgment_ids"] == sorted(ids.values())
    assert manifest["bundle_version"] == VERSION and manifest["format"] == fmt
    assert datetime.fromisoformat(manifest["created"]).tzinfo is not None
    assert (manifest["cluster_file"], manifest["pairs_file"]) == (out.name, pairs_path(out).name)
    assert [m["judgment_ids"] for m in manifest["merges"]] == [[ids["same"], ids["same_too"]], [ids["distractor"]]]
    assert [c["kind"] for c in manifest["conflicts"]] == ["tie"]

    with store.engine.connect() as connection:
        recorded = connection.execute(text("SELECT id, bundle_version, format, path FROM exports")).all()
        included = connection.execute(text("SELECT judgment_id FROM export_judgments ORDER BY judgment_id")).scalars().all()
        decisions = connection.execute(text("SELECT decision FROM merge_decisions ORDER BY id")).scalars().all()
    assert [tuple(r) for r in recorded] == [(manifest["export_id"], VERSION, fmt, str(out.resolve()))]
    assert included == manifest["judgment_ids"]
    assert decisions == ["merged", "merged", "tie"]


def test_exported_clusters_train_without_conversion(store, corpus, tmp_path):
    judge_some(store, corpus)
    out = export(store, corpus, "parquet", tmp_path / "corrected.parquet", VERSION)
    retrain = read_cluster_file(out)
    result = train(retrain, TrainConfig(batch_size=16, max_epochs=1), progress=False)
    assert len(result.history) == 1 and 0.0 <= result.best_auc <= 1.0


def test_bad_export_requests_write_nothing(store, corpus, tmp_path):
    with pytest.raises(AnnotationError, match="unknown export format 'xlsx'"):
        export(store, corpus, "xlsx", tmp_path / "out.xlsx", VERSION)
    with pytest.raises(AnnotationError, match=r"needs a file name ending in \.csv"):
        export(store, corpus, "csv", tmp_path / "out.parquet", VERSION)
    with pytest.raises(AnnotationError, match="not registered"):
        export(store, corpus, "csv", tmp_path / "out.csv", bundle_version="v-unknown")
    assert not list(tmp_path.glob("out*"))
    with store.engine.connect() as connection:
        assert connection.execute(text("SELECT COUNT(*) FROM exports")).scalar_one() == 0


def test_exporting_again_replaces_files_and_manifest(store, corpus, tmp_path):
    out = tmp_path / "corrected.csv"
    first = json.loads(manifest_path(export(store, corpus, "csv", out, VERSION)).read_text())
    judge_some(store, corpus)
    second = json.loads(manifest_path(export(store, corpus, "csv", out, VERSION)).read_text())
    assert second["export_id"] == first["export_id"] + 1
    assert first["judgment_ids"] == [] and len(second["judgment_ids"]) == 6
    assert read_cluster_file(out)["cluster"].nunique() == second["clusters_after"] < first["clusters_after"]


# -- command line ------------------------------------------------------------------------------


def test_cli_export_uses_the_newest_registered_corpus_or_the_one_asked_for(store, corpus, db_url, tmp_path, capsys):
    judge_some(store, corpus)
    store.corpora.register("v2", corpus.head(100))
    out = tmp_path / "new.jsonl"
    assert main(["export", "--db", db_url, "--format", "jsonl", "--out", str(out)]) == 0
    assert len(read_cluster_file(out)) == 100
    assert json.loads(manifest_path(out).read_text())["bundle_version"] == "v2"
    old = tmp_path / "old.parquet"
    assert main(["--db", db_url, "export", "--bundle-version", VERSION, "--format", "parquet", "--out", str(old)]) == 0
    assert len(read_cluster_file(old)) == len(corpus)
    assert capsys.readouterr().out.count(f"on bundle {VERSION};") == 1
    assert main(["stats", "--db", db_url]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["bundle_versions"] == ["v2", VERSION]
    assert stats["judgments"] == {"recorded": 6, "current": 6}
    assert stats["annotators"]["ann"]["total"] == 5 and stats["agreement"][0]["items"] == 1


@pytest.mark.parametrize(
    "argv, message",
    [
        (["export", "--db", "not a url", "--format", "csv", "--out", "x.csv"], "not a database URL"),
        (["export", "--db", "nosuchdialect://x", "--format", "csv", "--out", "x.csv"], "cannot use database URL"),
        (["stats", "--db", "postgresql+psycopg://qpr:secret@127.0.0.1:1/qpr"], "cannot open the annotation database"),
        (["stats", "--db", "sqlite:////proc/no-such-folder/a.db"], "cannot create the folder"),
    ],
)
def test_cli_reports_a_bad_database_in_one_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {message}") and err.count("\n") == 1 and "secret" not in err


def test_a_file_that_is_no_database_is_refused(tmp_path, capsys):
    notes = tmp_path / "notes.db"
    notes.write_text("these are my notes, not a database\n" * 100)
    assert main(["stats", "--db", f"sqlite:///{notes}"]) == 2
    assert "file is not a database" in capsys.readouterr().err
    assert notes.read_text().startswith("these are my notes")


def test_cli_errors_on_an_empty_database_or_unknown_version(db_url, store, tmp_path, capsys):
    empty = f"sqlite:///{tmp_path / 'empty.db'}"
    assert main(["export", "--db", empty, "--format", "csv", "--out", str(tmp_path / "x.csv")]) == 2
    assert "no corpus of project 'demo' is registered" in capsys.readouterr().err
    assert main(["export", "--db", db_url, "--bundle-version", "v7", "--format", "csv", "--out", str(tmp_path / "x.csv")]) == 2
    assert "'v7' is not registered" in capsys.readouterr().err


def test_cli_as_a_process_prints_one_line_and_no_traceback(tmp_path):
    env = os.environ | {"PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "workflows", "export", "--db", "nosuchdialect://x", "--format", "parquet",
         "--out", str(tmp_path / "x.parquet")],
        capture_output=True, text=True, env=env, cwd=tmp_path,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


def test_the_manifest_counts_add_up_and_a_different_distractor_gets_no_cluster(store, corpus, tmp_path):
    judge_some(store, corpus)
    a = first_qids(corpus, "train")[0]
    lonely = int(corpus.loc[corpus["cluster"].isna(), "qid"].iloc[1])
    store.judgments.record("ann", lonely, "different", VERSION, query_qid=a)
    manifest = json.loads(manifest_path(export(store, corpus, "csv", tmp_path / "c.csv", VERSION)).read_text())
    exported = read_cluster_file(tmp_path / "c.csv").set_index("qid")
    assert pd.isna(exported.loc[lonely, "cluster"]) and exported.loc[lonely, "split"] == "none"
    assert manifest["clusters_after"] == manifest["clusters_before"] - manifest["clusters_absorbed"] + manifest["clusters_formed"]
    assert manifest["clusters_absorbed"] == 1 and manifest["clusters_formed"] == 0  # one merge of two clusters; the
    # joined distractor went into an existing cluster


def test_an_export_carries_splits_in_its_clusters_manifest_and_decision_records(store, corpus, tmp_path):
    a, b = first_qids(corpus, "train")[:2]
    cluster_a = corpus.set_index("qid").loc[a, "cluster"]
    outsider = int(corpus.loc[(corpus["cluster"] == cluster_a) & (corpus["qid"] != a), "qid"].iloc[0])
    voted_out = store.judgments.record("ann", outsider, "different", VERSION, query_qid=a)  # a false positive in a's cluster
    joined = store.judgments.record("ann", b, "same", VERSION, query_qid=outsider)  # ... that belongs with b
    manifest = json.loads(manifest_path(export(store, corpus, "jsonl", tmp_path / "s.jsonl", VERSION)).read_text())
    exported = read_cluster_file(tmp_path / "s.jsonl").set_index("qid")
    cluster_b = corpus.set_index("qid").loc[b, "cluster"]
    assert exported.loc[outsider, "cluster"] == cluster_b and exported.loc[a, "cluster"] == cluster_a
    assert exported.loc[outsider, "split"] == corpus.set_index("qid").loc[outsider, "split"]
    assert [(s["cluster"], s["qid"], s["into"], s["judgment_ids"]) for s in manifest["splits"]] == [
        (cluster_a, outsider, cluster_b, [voted_out, joined])]
    assert manifest["questions_moved"] == 1 and manifest["clusters_after"] == manifest["clusters_before"]
    with store.engine.connect() as connection:
        rows = connection.execute(text("SELECT decision, cluster_a, cluster_b, judgment_ids FROM merge_decisions "
                                       "ORDER BY id")).all()
    recorded = {(d, x, y): json.loads(ids) if isinstance(ids, str) else ids for d, x, y, ids in rows}
    assert recorded[("split", cluster_a, f"qid:{outsider}")] == [voted_out, joined]
    assert recorded[("merged", cluster_b, f"qid:{outsider}")] == [joined]
