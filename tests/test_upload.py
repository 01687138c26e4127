"""Uploads: every problem of a file named with its row and fix in one message, nothing read
from a bad file; good files of each kind and format read whole."""

from __future__ import annotations

import gc
import re

import pandas as pd
import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from conftest import make_corpus
from qpr.errors import QPRError
from qpr.data.upload import read_upload


def write(path, rows: list[dict]):
    """``rows`` in the format ``path``'s extension names."""
    frame = pd.DataFrame(rows)
    suffix = path.suffix
    # Records end in CRLF (RFC 4180): then pandas quotes a field holding a lone CR too, which
    # with its default LF it left bare, and a reader rightly took for the end of a row.
    if suffix == ".csv":
        frame.to_csv(path, index=False, lineterminator="\r\n")
    elif suffix == ".tsv":
        frame.to_csv(path, sep="\t", index=False, lineterminator="\r\n")
    elif suffix == ".jsonl":
        frame.to_json(path, orient="records", lines=True, force_ascii=False)
    else:
        frame.to_parquet(path, index=False)
    return path


def clusters_rows(n_topics=16):  # 15 clusters are the least that train (MIN_TRAIN_CLUSTERS)
    return make_corpus(n_topics=n_topics, distractors=0)[["question", "cluster"]].to_dict(orient="records")


GOOD = clusters_rows()
# name -> (kind, rows, file suffix, what the message must say)
BAD = {
    "missing-column": ("clusters", [{"question": "a b"}], ".csv", ["missing column(s) cluster", "found: question"]),
    "empty-question": ("clusters", GOOD[:3] + [{"question": "  ", "cluster": "x"}] + GOOD[3:], ".csv",
                       ["row 5: the question is empty"]),
    "duplicate": ("clusters", GOOD + [dict(GOOD[0])], ".csv", [f"row {len(GOOD) + 2}: the same question as row 2"]),
    "duplicate-jsonl": ("questions", [{"question": "how now"}, {"question": "How  NOW"}], ".jsonl",
                        ["row 2: the same question as row 1"]),
    "nul": ("questions", [{"question": "ok one"}, {"question": "bad\x00one"}], ".parquet", ["row 2: the question contains a NUL"]),
    "list-question": ("questions", [{"question": ["a", "b"]}], ".jsonl", ["row 1: the question is a list"]),
    "too-long": ("questions", [{"question": "word " * 500}], ".tsv", ["row 2: the question has 2,500 characters"]),
    # A quoted field holding line breaks is one row (as a spreadsheet shows it) over several lines.
    "line-breaks": ("clusters", [{"question": "how do i\nlearn chess ?", "cluster": "a"}, {"question": "", "cluster": "b"}]
                    + GOOD, ".csv", ["row 3 (line 4 of the file): the question is empty"]),
    "line-breaks-duplicate": ("questions", [{"question": "what is\nthe best\nway"}, {"question": "what is the best way"}],
                              ".tsv", ["row 3 (line 5 of the file): the same question as row 2; delete"]),
    "too-few-clusters": ("clusters", GOOD[:10], ".csv", ["too few clusters to train: 2 clusters", "bare questions"]),
    "qa-missing-answer": ("qa-log", [{"question": "q"}], ".csv", ["missing column(s) answer"]),
    "qa-too-few": ("qa-log", [{"question": f"how to {w}", "answer": w} for w in "ab"] * 2, ".csv",
                   ["too few clusters to train: 0 coherent answer clusters"]),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_uploads_are_refused_with_every_row_and_fix(tmp_path, case):
    kind, rows, suffix, expected = BAD[case]
    path = write(tmp_path / f"upload{suffix}", rows)
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(QPRError) as err:
        read_upload(path, kind)
    assert "nothing was imported" in str(err.value)
    for text in expected:
        assert text in str(err.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_all_problems_come_in_one_message(tmp_path):
    rows = GOOD[:4] + [{"question": "", "cluster": "x"}, dict(GOOD[0]), {"question": "ok\x00", "cluster": "y"}]
    with pytest.raises(QPRError) as err:
        read_upload(write(tmp_path / "f.csv", rows), "clusters")
    message = str(err.value)
    assert "3 problem(s)" in message
    assert "row 6: the question is empty" in message and "row 7: the same question as row 2" in message
    assert "row 8: the question contains a NUL" in message


def test_a_blank_line_is_an_empty_row_not_a_skipped_one(tmp_path):
    path = tmp_path / "gaps.csv"
    path.write_text("question\nfirst question\n \n\nsecond question\n")
    with pytest.raises(QPRError) as err:
        read_upload(path, "questions")
    assert "row 3: the question is empty" in str(err.value) and "row 4: the question is empty" in str(err.value)


def test_a_jsonl_row_after_a_blank_line_names_its_line(tmp_path):
    path = tmp_path / "gaps.jsonl"
    path.write_text('{"question": "first question"}\n\n{"question": " "}\n')
    with pytest.raises(QPRError, match=r"row 2 \(line 3 of the file\): the question is empty"):
        read_upload(path, "questions")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(breaks=st.lists(st.integers(0, 3), min_size=1, max_size=8), data=st.data(),
       suffix=st.sampled_from([".csv", ".tsv"]))
def test_a_row_is_named_by_its_number_and_the_line_it_starts_on(tmp_path, breaks, data, suffix):
    """Questions holding line breaks (and quotes and separators), then an empty one at any place:
    the message names its row as a spreadsheet numbers it and, where the file's line differs,
    that line, which is where the empty field stands in the file."""
    questions = [f'question {i} "quoted", with\ttabs' + "\nmore" * n for i, n in enumerate(breaks)]
    position = data.draw(st.integers(0, len(questions)))
    path = write(tmp_path / f"breaks{suffix}", [{"question": q} for q in questions[:position] + [""] + questions[position:]])
    with pytest.raises(QPRError) as err:
        read_upload(path, "questions")
    named = re.search(r"- row (\d+)(?: \(line (\d+) of the file\))?: the question is empty", str(err.value))
    row, line = int(named[1]), int(named[2] or named[1])
    assert row == position + 2  # the header is row 1
    assert path.read_text().split("\n")[line - 1] == '""'  # pandas writes an empty field alone on its line quoted
    assert (named[2] is None) == (sum(breaks[:position]) == 0)


def test_wrong_encoding_names_the_line(tmp_path):
    path = tmp_path / "latin1.csv"
    path.write_bytes("question\ncafé au lait\nnaïve question\n".encode("latin-1"))
    with pytest.raises(QPRError) as err:
        read_upload(path, "questions")
    assert "line 2: byte 0xe9 is not UTF-8" in str(err.value) and "line 3: byte 0xef" in str(err.value)
    assert "save the file as UTF-8" in str(err.value)


def test_size_limit_is_the_documented_setting(tmp_path, monkeypatch):
    path = write(tmp_path / "big.csv", [{"question": f"question number {i}"} for i in range(2000)])
    monkeypatch.setenv("QPR_MAX_UPLOAD_MB", "0.01")
    with pytest.raises(QPRError, match="over the limit of 0.01 MB \\(QPR_MAX_UPLOAD_MB\\)"):
        read_upload(path, "questions")
    monkeypatch.setenv("QPR_MAX_UPLOAD_MB", "lots")
    with pytest.raises(QPRError, match="QPR_MAX_UPLOAD_MB must be a positive number"):
        read_upload(path, "questions")


def test_the_app_refuses_an_upload_over_the_limit_before_storing_it(tmp_path, monkeypatch):
    import gradio as gr
    import httpx

    from ui.startup import launch_options, serve

    monkeypatch.setenv("QPR_MAX_UPLOAD_MB", "0.01")  # 10,000 bytes
    with gr.Blocks() as demo:
        gr.File()
    serve(demo, launch_options(None, tmp_path), block=False)
    try:
        upload = f"{demo.local_url}gradio_api/upload"
        refused = httpx.post(upload, files={"files": ("big.csv", b"question\n" + b"x" * 20_000)})
        kept = httpx.post(upload, files={"files": ("small.csv", b"question\nhow do i learn chess ?\n")})
    finally:
        demo.close()
        gc.unfreeze()
    assert refused.status_code == 413 and "maximum allowed size of 10000 bytes" in refused.text
    assert kept.status_code == 200 and kept.json()[0].endswith("small.csv")


def test_unknown_kind_and_type(tmp_path):
    with pytest.raises(QPRError, match="unknown kind"):
        read_upload(write(tmp_path / "f.csv", GOOD), "faq")
    (tmp_path / "f.xlsx").write_text("x")
    with pytest.raises(QPRError, match="unknown file type '.xlsx'"):
        read_upload(tmp_path / "f.xlsx", "clusters")


@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".jsonl", ".parquet"])
def test_each_kind_reads_in_each_format(tmp_path, suffix):
    clusters = read_upload(write(tmp_path / f"c{suffix}", GOOD), "clusters")
    assert clusters.rows == len(GOOD) and len(clusters.corpus) == len(GOOD)
    assert set(clusters.corpus["split"]) == {"train", "val", "test"}
    bare = read_upload(write(tmp_path / f"q{suffix}", [{"question": r["question"]} for r in GOOD]), "questions")
    assert bare.corpus["cluster"].isna().all() and set(bare.corpus["split"]) == {"none"}
    log = [{"question": r["question"], "answer": f"answer for {r['cluster']}"} for r in GOOD]
    qa = read_upload(write(tmp_path / f"l{suffix}", log), "qa-log")
    assert qa.report["clusters_kept"] == 16 and qa.report["clusters_removed"] == 0
    assert len(qa.kept_sample) == 10


def test_columns_named_otherwise_are_chosen(tmp_path):
    rows = [{"text": r["question"], "category": r["cluster"], "question": "not this one"} for r in GOOD]
    upload = read_upload(write(tmp_path / "b.csv", rows), "clusters", columns={"question": "text", "cluster": "category"})
    assert list(upload.corpus["question"]) == [r["question"] for r in GOOD]
    with pytest.raises(QPRError, match="missing column\\(s\\) txt \\(the question\\)"):
        read_upload(write(tmp_path / "b.csv", rows), "clusters", columns={"question": "txt", "cluster": "category"})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@example(texts=["0", " "], suffix=".csv")  # a whitespace-only CSV line was skipped, not reported
@example(texts=["0\r1"], suffix=".csv")  # written unquoted, a lone CR ended the row (see ``write``)
@given(texts=st.lists(st.text(min_size=0, max_size=30), min_size=1, max_size=12),
       suffix=st.sampled_from([".csv", ".tsv", ".jsonl", ".parquet"]))
def test_a_bare_questions_file_is_read_whole_or_refused(tmp_path, texts, suffix):
    """Any texts in any format: either every question comes back verbatim (up to the CSV
    reader's view of surrounding blanks), or one QPRError says which rows to fix."""
    path = tmp_path / f"h{suffix}"
    try:
        write(path, [{"question": t} for t in texts])
    except (UnicodeEncodeError, ValueError):
        return  # lone surrogates cannot even be written as UTF-8
    try:
        upload = read_upload(path, "questions")
    except QPRError as err:
        assert "row " in str(err) or "line " in str(err) or "problem" in str(err)
        return
    assert len(upload.corpus) == len(texts)
    assert upload.corpus["qid"].tolist() == list(range(1, len(texts) + 1))
    if suffix in (".jsonl", ".parquet"):
        assert upload.corpus["question"].tolist() == texts


@pytest.mark.parametrize("suffix, said", [
    (".csv", "rows are numbered as a spreadsheet shows them: the header is row 1, the first question row 2"),
    (".jsonl", "rows are numbered by record: the first record is row 1"),
])
def test_a_refusal_says_how_its_rows_are_numbered(tmp_path, suffix, said):
    """Issue 38, bug 8: "row 4" meant the 3rd data row and the page did not say so."""
    path = tmp_path / f"bad{suffix}"
    frame = pd.DataFrame({"question": ["one question", "two question", ""]})
    frame.to_csv(path, index=False) if suffix == ".csv" else frame.to_json(path, orient="records", lines=True)
    with pytest.raises(QPRError) as err:
        read_upload(path, "questions")
    assert said in str(err.value)


def test_a_clusters_import_counts_its_questions_in_no_cluster(tmp_path):
    """Issue 38, bug 8: a clusters import did not mention its questions with no cluster."""
    corpus = make_corpus()[["question", "cluster"]]
    alone = int(corpus["cluster"].isna().sum())
    assert alone, "make_corpus has questions in no cluster"
    corpus.to_csv(tmp_path / "faq.csv", index=False)
    upload = read_upload(tmp_path / "faq.csv", "clusters")
    assert upload.no_cluster.startswith(f"{alone} question(s) have no cluster")
    corpus.dropna().to_csv(tmp_path / "clean.csv", index=False)
    assert read_upload(tmp_path / "clean.csv", "clusters").no_cluster == ""
