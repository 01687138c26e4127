import pandas as pd
import pytest

from qpr.data.corpus import (
    clusters_from_pairs, fingerprint, load_corpus, read_cluster_file, read_quora_pairs, split_clusters,
    write_cluster_file, write_table,
)
from qpr.errors import QPRError

QUORA = (
    'id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n'
    '0\t1\t2\thow do i cook rice ?\twhat is the way to cook rice ?\t1\n'
    '1\t2\t3\twhat is the way to cook rice ?\t"rice: how do\ti cook it,\nproperly ?"\t1\n'
    '2\t4\t5\tis paris nice ?\tis rome nice ?\t0\n'
    '3\t6\t7\t\tempty on the left\t1\n'
    '4\t8\t9\tbest phone ?\twhich phone is best ?\t1\n'
)


@pytest.fixture
def quora_file(tmp_path):
    path = tmp_path / "quora.tsv"
    path.write_text(QUORA)
    return path


def test_quora_reader_handles_quoted_tabs_and_newlines_and_counts_empty(quora_file):
    pairs, skipped = read_quora_pairs(quora_file)
    assert skipped == 1 and len(pairs) == 4
    assert pairs.loc[1, "question2"] == "rice: how do\ti cook it,\nproperly ?"


def test_quora_reader_names_missing_columns(tmp_path):
    path = tmp_path / "bad.tsv"
    path.write_text("id\tq1\tq2\n0\ta\tb\n")
    with pytest.raises(QPRError, match=r"missing column\(s\) qid1.*found id, q1, q2"):
        read_quora_pairs(path)


def test_transitive_closure_joins_chains_only(quora_file):
    corpus = clusters_from_pairs(read_quora_pairs(quora_file)[0]).set_index("qid")
    assert corpus.loc[1, "cluster"] == corpus.loc[2, "cluster"] == corpus.loc[3, "cluster"] == "1"
    assert corpus.loc[8, "cluster"] == corpus.loc[9, "cluster"] == "8"
    assert pd.isna(corpus.loc[4, "cluster"]) and pd.isna(corpus.loc[5, "cluster"])  # non-duplicates
    assert set(corpus.index) == {1, 2, 3, 4, 5, 8, 9}  # every question stays in the corpus


def _clusters(n, size=3):
    rows = [(c * size + i + 1, f"question {c} variant {i}", f"k{c}") for c in range(n) for i in range(size)]
    frame = pd.DataFrame(rows, columns=["qid", "question", "cluster"]).assign(split="none")
    frame["cluster"] = frame["cluster"].astype("string")
    return frame


def test_split_is_80_10_10_by_cluster_and_seeded():
    corpus = _clusters(100)
    split = split_clusters(corpus, seed=3)
    per_cluster = split.groupby("cluster")["split"].agg(set)
    assert all(len(s) == 1 for s in per_cluster)  # a cluster never straddles splits
    assert per_cluster.map(lambda s: next(iter(s))).value_counts().to_dict() == {"train": 80, "val": 10, "test": 10}
    assert split.equals(split_clusters(corpus, seed=3))
    assert not split.equals(split_clusters(corpus, seed=4))


def test_split_removes_held_out_questions_that_occur_in_train():
    corpus = _clusters(100)
    assigned = split_clusters(corpus, seed=0)
    train_q = assigned[assigned["split"] == "train"].iloc[0]
    victim = assigned[assigned["split"] == "test"].iloc[0]
    corpus.loc[corpus["qid"] == victim["qid"], "question"] = train_q["question"].upper()
    split = split_clusters(corpus, seed=0)
    assert victim["qid"] not in set(split["qid"])
    held = split[split["split"].isin(["val", "test"])]
    assert not set(held["question"].str.lower()) & set(split.loc[split["split"] == "train", "question"].str.lower())


def test_split_of_a_corpus_without_clusters_marks_everything_none():
    corpus = _clusters(3, size=1)
    assert set(split_clusters(corpus)["split"]) == {"none"}


def test_split_keeps_singletons_as_distractors():
    corpus = pd.concat([_clusters(10), pd.DataFrame({"qid": [999], "question": ["alone ?"], "cluster": [pd.NA], "split": ["none"]})])
    corpus["cluster"] = corpus["cluster"].astype("string")
    split = split_clusters(corpus, seed=0)
    assert split.set_index("qid").loc[999, "split"] == "none"


@pytest.mark.parametrize("ext", [".csv", ".tsv", ".jsonl", ".parquet"])
def test_cluster_files_round_trip_in_every_format(tmp_path, tiny_corpus, ext):
    path = write_cluster_file(tiny_corpus, tmp_path / f"clusters{ext}")
    back = read_cluster_file(path)
    assert fingerprint(back) == fingerprint(tiny_corpus)


def test_cluster_file_without_qid_or_split_gets_both(tmp_path):
    path = tmp_path / "c.csv"
    write_table(_clusters(20)[["question", "cluster"]], path)
    corpus = read_cluster_file(path, seed=0)
    assert list(corpus["qid"][:3]) == [1, 2, 3]
    assert set(corpus["split"]) == {"train", "val", "test"}


@pytest.mark.parametrize(
    "content, message",
    [
        ("question,label\nhi,1\n", r"missing column\(s\) cluster; found question, label"),
        ("qid,question,cluster\nx,hi,1\n", "qid must be an integer"),
        ("qid,question,cluster\n1,hi,1\n1,ho,1\n", "qid 1 appears more than once"),
        ("qid,question,cluster,split\n1,hi,1,dev\n", "unknown split"),
        ("qid,question,cluster\n1,  ,1\n", "no questions"),
    ],
)
def test_malformed_cluster_files_get_clear_errors(tmp_path, content, message):
    path = tmp_path / "c.csv"
    path.write_text(content)
    with pytest.raises(QPRError, match=message):
        read_cluster_file(path)


def test_unknown_extension_and_missing_file(tmp_path):
    with pytest.raises(QPRError, match="unknown file type"):
        read_cluster_file(tmp_path / "c.xlsx")
    with pytest.raises(QPRError, match="no such file"):
        read_cluster_file(tmp_path / "c.csv")


def test_failed_write_leaves_the_old_file(tmp_path, tiny_corpus, monkeypatch):
    path = write_cluster_file(tiny_corpus, tmp_path / "c.tsv")
    before = path.read_bytes()

    def broken(self, *args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(pd.DataFrame, "to_csv", broken)
    with pytest.raises(QPRError, match="disk full; nothing was changed"):
        write_cluster_file(tiny_corpus.head(3), path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["c.tsv"]


def test_load_corpus_detects_quora_release(quora_file):
    corpus = load_corpus(quora_file)
    assert set(corpus.columns) == {"qid", "question", "cluster", "split"}


@pytest.mark.integration
def test_canonical_quora_lite_split_is_read_as_is(data_dir):
    corpus = load_corpus(data_dir / "quora-lite")
    assert len(corpus) == 157_023
    assert corpus["split"].value_counts().to_dict() == {"train": 110_681, "none": 18_172, "val": 14_254, "test": 13_916}
    assert corpus.loc[corpus["split"] == "train", "cluster"].nunique() == 44_402


@pytest.mark.integration
def test_transitive_closure_of_the_release_gives_the_canonical_clusters(data_dir):
    pairs, skipped = read_quora_pairs(data_dir / "quora-lite" / "quora_duplicate_questions.tsv")
    ours = clusters_from_pairs(pairs)
    canonical = load_corpus(data_dir / "quora-lite")
    assert ours["cluster"].nunique() == canonical["cluster"].nunique() == 55_502
    assert ours["cluster"].isna().sum() == canonical["cluster"].isna().sum()


def test_atomic_writes_leave_no_open_file_descriptor(tmp_path, tiny_corpus):
    import os

    before = len(os.listdir("/proc/self/fd"))
    for _ in range(20):
        write_cluster_file(tiny_corpus, tmp_path / "c.tsv")
    assert len(os.listdir("/proc/self/fd")) <= before
