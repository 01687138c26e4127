import json

import pytest

from qpr.cli.main import main
from qpr.data.corpus import write_cluster_file
from conftest import make_corpus


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cli")
    data = write_cluster_file(make_corpus(), folder / "clusters.jsonl")
    code = main(["train", "--data", str(data), "--out", str(folder / "bundle"), "--batch-size", "16",
                 "--epochs", "2", "--quiet"])
    assert code == 0
    return folder


def test_train_writes_a_bundle_with_metrics(trained):
    manifest = json.loads((trained / "bundle" / "manifest.json").read_text())
    assert set(manifest["metrics"]) == {"val", "test"}
    assert set(manifest["hybrid_metrics"]) == {"val", "test"} and "fusion" in manifest  # train fits the hybrid
    assert manifest["training"]["config"]["batch_size"] == 16


def test_search_prints_hits(trained, capsys):
    assert main(["search", str(trained / "bundle"), "how do i learn chess ?", "-k", "3", "--json"]) == 0
    line = json.loads(capsys.readouterr().out.splitlines()[0])
    assert line["query"] == "how do i learn chess ?" and len(line["hits"]) == 3


def test_eval_reports_the_served_hybrid_and_each_part(trained, capsys):
    for extra in ([], ["--dense"], ["--bm25"]):
        assert main(["eval", str(trained / "bundle"), "--split", "val", *extra]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["system"] for r in rows] == ["hybrid", "cnn-sdml", "bm25"] and all(r["queries"] > 0 for r in rows)
    with pytest.raises(SystemExit):  # one retriever at a time
        main(["eval", str(trained / "bundle"), "--dense", "--bm25"])
    assert "not allowed with" in capsys.readouterr().err


def test_index_rebuilds_in_place(trained, capsys):
    assert main(["index", str(trained / "bundle"), "--index", "HNSW8", "--search", "efSearch=4"]) == 0
    assert "HNSW8/efSearch=4 over 160 questions" in capsys.readouterr().out


def test_add_grows_a_bundle_without_a_rebuild(trained, tmp_path, capsys):
    import shutil

    import pandas as pd

    bundle = shutil.copytree(trained / "bundle", tmp_path / "bundle")
    new = write_cluster_file(pd.DataFrame({"qid": [77001], "question": ["where can i rent a canoe ?"], "cluster": ["canoe"],
                                           "split": ["none"]}),
                             tmp_path / "new.csv")
    assert main(["add", str(bundle), str(new)]) == 0
    assert "1 questions added, 161 indexed" in capsys.readouterr().out
    assert main(["search", str(bundle), "where can i rent a canoe ?", "-k", "1", "--json", "--dense"]) == 0
    assert json.loads(capsys.readouterr().out)["hits"][0]["qid"] == 77001
    assert main(["add", str(bundle), str(new)]) == 2  # the same qid again: refused, one line
    assert "already in the bundle's corpus: [77001]" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["search", "{missing}", "hello"], "no bundle directory"),
        (["search", "{bundle}", " "], "the query is empty"),
        (["train", "--data", "{missing}.csv", "--out", "{missing}"], "no such file"),
        (["index", "{bundle}", "--index", "IVF9999,Flat"], "needs at least 9999 vectors"),
        (["index", "{bundle}", "--index", "HNSW8", "--search", "nprobe=3"], "do not apply to a HNSW8 index"),
        (["index", "{bundle}", "--index", "Bogus3"], "unsupported index 'Bogus3'"),
    ],
)
def test_user_errors_print_one_line_and_exit_2(trained, capsys, argv, message):
    argv = [a.format(missing=trained / "nothing", bundle=trained / "bundle") for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and "Traceback" not in err


def test_train_options_beyond_the_paper_reach_the_training_config():
    from qpr.cli.commands import train_settings, train_system
    from qpr.cli.main import build_parser

    def _train_config(args):
        return train_settings(args, train_system(args)).train

    args = build_parser().parse_args(["train", "--data", "d", "--out", "o", "--pairs", "all", "--lr-schedule", "cosine",
                                      "--batching", "neighbours", "--unlabeled-dropout", "0.2", "--word-vectors"])
    config = _train_config(args)
    assert (config.pairs, config.lr_schedule, config.batching, config.unlabeled_dropout, config.word_vectors) == (
        "all", "cosine", "neighbours", 0.2, True)
    plain = _train_config(build_parser().parse_args(["train", "--data", "d", "--out", "o"]))
    assert not plain.word_vectors and plain.pairs == "partner"
