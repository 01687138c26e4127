import json

import pandas as pd
import pytest

from qpr.data import supervise_report
from qpr.cli.main import main
from qpr.data.corpus import read_cluster_file, read_table
from qpr.errors import QPRError
from qpr.data.qalogs import PRESETS, read_log, read_qa_log
from qpr.data.coherence import cluster_coherence
from qpr.data.supervise import NAME_CHARS, cluster_name, group_by_answer, supervise, threshold_table
from qpr.data.supervise_report import write_report
from qpr.model.text import tokenize

# Twelve questions without a shared word, all answered "three": a generic answer's cluster.
UNRELATED = [
    "how many wheels has a tricycle", "count the primary colours", "sides of any triangle",
    "musketeers in dumas novel", "little pigs story", "blind mice rhyme", "wise men visiting",
    "stooges comedy act", "branches of government", "strikes before out", "dimensions of space",
    "lions on flags",
]


def log_of(pairs) -> pd.DataFrame:
    """A log frame from (question, answers) tuples."""
    return pd.DataFrame(pairs, columns=["question", "answers"])


def topic_log(n_topics: int = 40) -> pd.DataFrame:
    """``n_topics`` answers, each answering three paraphrases about its topic."""
    templates = ["how do i learn {t} ?", "what is the best way to learn {t} ?", "tips for learning {t} ?"]
    return log_of([(t.format(t=f"topic{i}"), [f"answer {i}"]) for i in range(n_topics) for t in templates])


def test_coherence_of_identical_questions_is_one():
    assert cluster_coherence(["How do I learn Python?"] * 4) == 1.0


def test_coherence_of_disjoint_questions_of_equal_length_is_one_over_n():
    assert cluster_coherence(["red apple", "blue sky", "green grass"]) == pytest.approx(1 / 3)


def test_coherence_hand_computed_mixed_cluster():
    # T1 = {how, do, i, learn, python} (5), T2 = {how, to, learn, java} (4), |S| = 7:
    # c = (5/7 + 4/7) / 2 = 9/14. Punctuation and case do not count.
    assert cluster_coherence(["How do I learn Python?", "how to learn JAVA"]) == pytest.approx(9 / 14)


def test_grouping_normalises_answers_merges_identical_questions_and_keeps_singletons():
    log = log_of([
        ("How old is the moon?", ["Four billion years."]),
        ("how old is the moon ?", ["four billion years"]),  # the same tokens: merged
        ("What is the age of the moon", ["FOUR billion years"]),
        ("Who painted the Mona Lisa?", ["Leonardo"]),
        ("", ["nothing"]),
        ("What is love?", []),
    ])
    corpus, answers, counts = group_by_answer(log)
    assert counts["empty_questions"] == 1 and counts["duplicate_questions"] == 1
    assert list(corpus["question"]) == ["How old is the moon?", "What is the age of the moon", "Who painted the Mona Lisa?", "What is love?"]
    # Named by its first question (issue 54: a log's clusters were bare numbers), with its id.
    assert corpus["cluster"].iloc[0] == corpus["cluster"].iloc[1] == "How old is the moon? (#1)"
    assert corpus["cluster"].iloc[2:].isna().all() and (corpus["split"] == "none").all()
    assert counts["answers"] == 2 and counts["questions_without_answer"] == 1


def test_a_long_first_question_names_its_cluster_shortened_at_a_word():
    name = cluster_name("how do I " + "really " * 20 + "reset my card's PIN?", 7)
    assert name.endswith("… (#7)") and len(name) <= NAME_CHARS + len("… (#7)") and " reall…" not in name


def test_several_answers_join_clusters_or_exclude_the_question():
    log = log_of([("q one alpha", ["a"]), ("q two beta", ["a", "b"]), ("q three gamma", ["b"]), ("q four", ["b"])])
    joined, _, _ = group_by_answer(log, "join")
    assert joined["cluster"].nunique() == 1 and joined["cluster"].notna().all()
    excluded, _, counts = group_by_answer(log, "exclude")
    assert counts["questions_with_several_answers"] == 1
    assert list(excluded["cluster"].isna()) == [True, True, False, False]


def test_filter_removes_incoherent_cluster_and_keeps_its_questions_unclustered():
    log = log_of([(q, ["three"]) for q in UNRELATED] + list(topic_log(10).itertuples(index=False)))
    result = supervise(log, min_coherence=0.1, seed=0)
    generic = result.clusters[result.clusters["answers"] == "three"].iloc[0]
    assert generic["coherence"] < 0.1 and not generic["kept"] and pd.isna(generic["split"])
    assert result.clusters["kept"].sum() == 10
    unrelated = result.corpus[result.corpus["question"].isin(UNRELATED)]
    assert len(unrelated) == len(UNRELATED)  # still in the index...
    assert unrelated["cluster"].isna().all() and (unrelated["split"] == "none").all()  # ...in no cluster
    assert supervise(log, min_coherence=0.0).clusters["kept"].all()


def test_threshold_table_counts_clusters_and_questions_kept():
    clusters = pd.DataFrame({"size": [2, 3, 12], "coherence": [0.8, 0.3, 0.05]})
    table = threshold_table(clusters, [0.0, 0.1, 0.5, 0.9])
    assert table.to_dict(orient="list") == {
        "min_coherence": [0.0, 0.1, 0.5, 0.9], "clusters_kept": [3, 2, 1, 0], "questions_kept": [17, 5, 2, 0],
    }


def test_split_is_seeded_by_cluster_and_leaks_no_question_into_val_or_test():
    log = topic_log(40)
    # The same question logged with another answer: joined, it must not end up on both sides.
    log = pd.concat([log, log_of([("How do I learn topic3?", ["answer 7"])])], ignore_index=True)
    result = supervise(log, seed=1)
    corpus = result.corpus
    assert corpus.groupby("cluster")["split"].nunique().max() == 1
    counts = corpus.groupby("split")["cluster"].nunique()
    assert (counts["train"], counts["val"], counts["test"]) == (31, 4, 4)  # 39 clusters (3 and 7 joined)
    train_texts = {" ".join(tokenize(q)) for q in corpus.loc[corpus["split"] == "train", "question"]}
    held_out = corpus.loc[corpus["split"].isin(["val", "test"]), "question"]
    assert not any(" ".join(tokenize(q)) in train_texts for q in held_out)
    again = supervise(log, seed=1).corpus
    other = supervise(log, seed=2).corpus
    assert again.equals(corpus) and not other["split"].equals(corpus["split"])


def test_reader_names_missing_columns_and_found_ones(tmp_path):
    path = tmp_path / "log.csv"
    path.write_text("query,reply\nhi,hello\n")
    with pytest.raises(QPRError, match=r"missing column\(s\) question, answer; found query, reply"):
        read_qa_log(path)
    assert read_qa_log(path, "query", "reply")["answers"].tolist() == [["hello"]]


def test_reader_rejects_unreadable_files(tmp_path):
    garbage = tmp_path / "log.parquet"
    garbage.write_bytes(b"\x00not parquet at all")
    for bad in (garbage, tmp_path / "missing.csv", tmp_path / "log.txt"):
        with pytest.raises(QPRError, match=str(bad.name)):
            read_qa_log(bad)
    not_records = tmp_path / "log.json"
    not_records.write_text('{"question": "x"}')
    with pytest.raises(QPRError, match="one array of objects"):
        read_qa_log(not_records)
    not_squad = tmp_path / "squad.json"
    not_squad.write_text('{"data": [{"title": "x"}]}')
    with pytest.raises(QPRError, match="not a SQuAD v1.1 file"):
        read_log(not_squad, preset="squad-v1.1-dev")


def test_list_valued_answers_from_jsonl_parquet_and_separated_csv(tmp_path):
    frame = pd.DataFrame({"q": ["what is a deductible", "define deductible"], "ids": [[12, 40], [40]]})
    frame.to_json(tmp_path / "log.jsonl", orient="records", lines=True)
    frame.to_parquet(tmp_path / "log.parquet")
    (tmp_path / "log.csv").write_text("q,ids\nwhat is a deductible,12|40\ndefine deductible,40\n")
    frame.assign(ids=[[12, None, 40], [40]]).to_json(tmp_path / "gaps.jsonl", orient="records", lines=True)
    for name, sep in (("log.jsonl", None), ("log.parquet", None), ("log.csv", "|"), ("gaps.jsonl", None)):
        log = read_qa_log(tmp_path / name, "q", "ids", answer_sep=sep)
        assert log["answers"].tolist() == [["12", "40"], ["40"]], name
        assert supervise(log).clusters["size"].tolist() == [2]


def test_squad_reader_takes_the_first_gold_answer(tmp_path):
    squad = {"data": [{"title": "T", "paragraphs": [{"context": "c", "qas": [
        {"question": "How many?", "id": "1", "answers": [{"text": "Three", "answer_start": 0}, {"text": "3", "answer_start": 0}]},
        {"question": "Unanswered?", "id": "2", "answers": []},
    ]}]}]}
    path = tmp_path / "dev.json"
    path.write_text(json.dumps(squad))
    log = read_log(path, preset="squad-v1.1-dev")
    assert log.to_dict(orient="list") == {"question": ["How many?", "Unanswered?"], "answers": [["Three"], []]}


def test_report_is_written_whole_or_not_at_all(tmp_path, monkeypatch):
    result = supervise(log_of([(q, ["three"]) for q in UNRELATED] + list(topic_log(5).itertuples(index=False))))
    folder = write_report(result, tmp_path / "report", "synthetic")
    info = json.loads((folder / "summary.json").read_text())
    assert (info["clusters"], info["clusters_kept"], info["questions_removed"]) == (6, 5, len(UNRELATED))
    assert info["largest_removed"][0]["answers"] == "three"
    assert len(read_table(folder / "kept_sample.csv")) == 5 and len(read_table(folder / "removed_sample.csv")) == 1
    assert (folder / "coherence.png").read_bytes()[:4] == b"\x89PNG"
    assert "![coherence of synthetic](./coherence.png)" in (folder / "report.md").read_text()

    def broken(*args):
        raise RuntimeError("disk full")

    monkeypatch.setattr(supervise_report, "coherence_figure", broken)
    with pytest.raises(RuntimeError):
        write_report(result, tmp_path / "other", "synthetic")
    assert not (tmp_path / "other").exists() and [p.name for p in tmp_path.iterdir()] == ["report"]


def test_report_without_samples_quotes_no_question(tmp_path):
    result = supervise(log_of([(q, ["three"]) for q in UNRELATED] + list(topic_log(5).itertuples(index=False))))
    folder = write_report(result, tmp_path / "report", "synthetic", samples=False)
    assert sorted(p.name for p in folder.iterdir()) == ["coherence.png", "report.md", "summary.json", "thresholds.csv"]
    assert "python -m qpr supervise --preset synthetic" in (folder / "report.md").read_text()


def test_log_without_shared_answers_gives_no_clusters_and_an_empty_report(tmp_path):
    log = log_of([("a b", ["x"]), ("c d", []), ("e f", ["z"])])
    result = supervise(log)
    assert result.clusters.empty and result.corpus["cluster"].isna().all() and len(result.corpus) == 3
    info = json.loads((write_report(result, tmp_path / "r", "none") / "summary.json").read_text())
    assert (info["clusters"], info["questions"], info["questions_without_answer"]) == (0, 3, 1)


def test_cli_builds_a_cluster_file_that_trains(tmp_path, capsys):
    log = topic_log(20).assign(answers=lambda f: f["answers"].str[0]).rename(columns={"question": "text", "answers": "reply"})
    log.loc[len(log)] = ["a question nobody else asked", "lonely answer"]
    log.to_csv(tmp_path / "log.csv", index=False)
    out = tmp_path / "clusters.tsv"
    rc = main(["supervise", str(tmp_path / "log.csv"), "--question-col", "text", "--answer-col", "reply",
               "--out", str(out), "--report", str(tmp_path / "report"), "--seed", "3"])
    assert rc == 0
    corpus = read_cluster_file(out)
    assert len(corpus) == 61 and corpus["cluster"].nunique() == 20
    assert set(corpus["split"]) == {"train", "val", "test", "none"}
    assert json.loads(capsys.readouterr().out)["clusters_kept"] == 20
    assert (tmp_path / "report" / "coherence.png").is_file()
    rc = main(["train", "--data", str(out), "--out", str(tmp_path / "bundle"), "--epochs", "1",
               "--batch-size", "8", "--hash-bins", "64", "--quiet"])
    assert rc == 0 and (tmp_path / "bundle" / "manifest.json").is_file()


@pytest.mark.parametrize("args, out_name, message", [
    (["--answer-col", "nope"], "clusters.tsv", "missing column(s) nope; found question, answer"),
    (["--min-coherence", "1.5"], "clusters.tsv", "min_coherence must be between 0 and 1"),
    ([], "clusters.txt", "unknown file type"),
])
def test_cli_errors_are_one_line_with_status_2(tmp_path, capsys, args, out_name, message):
    (tmp_path / "log.csv").write_text("question,answer\nhow are you,fine\n")
    out = tmp_path / out_name
    assert main(["supervise", str(tmp_path / "log.csv"), "--out", str(out), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1
    assert not out.exists()


def test_cli_needs_a_log_or_a_preset(tmp_path, capsys):
    assert main(["supervise", "--out", str(tmp_path / "c.tsv")]) == 2
    assert "give a log file, or a preset: banking77" in capsys.readouterr().err


@pytest.mark.integration
def test_cli_reads_another_file_with_a_preset(data_dir, tmp_path):
    out = tmp_path / "banking77-test.parquet"
    rc = main(["supervise", "--preset", "banking77", str(data_dir / "intents" / "banking77" / "test.csv"),
               "--min-coherence", "0", "--out", str(out)])
    corpus = read_cluster_file(out)
    assert rc == 0 and len(corpus) == 3079 and corpus["cluster"].nunique() == 77  # 3080 rows, two the same question


@pytest.mark.integration
def test_squad_generic_answer_clusters_are_removed(data_dir):
    log = read_log(data_dir / PRESETS["squad-v1.1-dev"].path, preset="squad-v1.1-dev")
    result = supervise(log, min_coherence=0.1)
    three = result.clusters[result.clusters["answers"] == "three"].iloc[0]
    assert three["size"] >= 30 and three["coherence"] < 0.1 and not three["kept"]
    assert result.corpus.loc[result.corpus["question"].isin(three["questions"]), "cluster"].isna().all()
    assert result.clusters["kept"].mean() > 0.9  # small clusters (c >= 1/n) pass


@pytest.mark.integration
def test_shared_logs_read_with_their_presets(data_dir):
    insurance = read_log(data_dir / PRESETS["insuranceqa-v2"].path, preset="insuranceqa-v2")
    assert len(insurance) == 16889 and insurance["answers"].map(len).max() > 1
    banking = supervise(read_log(data_dir / PRESETS["banking77"].path, preset="banking77"), min_coherence=0.0)
    assert len(banking.clusters) == 77
