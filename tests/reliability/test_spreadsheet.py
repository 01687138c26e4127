"""Spreadsheet-safe CSV/TSV: no cell a spreadsheet would evaluate, and the text read back exactly.

"Live" is judged on the file as a spreadsheet parses it (Python's csv module): a cell whose text
begins with one of OWASP's formula triggers (= + - @ tab CR). JSONL and Parquet keep the text as is.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.csv_writers import PRODUCT, ROOT, csv_writers
from harness.formula_payloads import OWASP_PAYLOADS, live_cells
from qpr.data.corpus import read_cluster_file, read_table, write_cluster_file, write_table
from qpr.data.spreadsheet import TRIGGERS, neutralise, restore
from qpr.data.supervise import supervise
from qpr.data.supervise_report import write_report


@pytest.mark.parametrize("suffix, sep", [(".csv", ","), (".tsv", "\t")])
def test_owasp_payloads_are_written_dead_and_read_back_as_they_were(tmp_path, suffix, sep):
    frame = pd.DataFrame({"qid": range(1, len(OWASP_PAYLOADS) + 1), "question": OWASP_PAYLOADS,
                          "cluster": ["=A1", "-3", "c"] * (len(OWASP_PAYLOADS) // 3) + ["@x"] * (len(OWASP_PAYLOADS) % 3)})
    path = write_table(frame, tmp_path / f"export{suffix}")
    assert live_cells(path, sep) == []
    back = read_table(path)
    assert back["question"].tolist() == OWASP_PAYLOADS
    assert back["cluster"].tolist() == frame["cluster"].tolist()
    assert back["qid"].astype(int).tolist() == frame["qid"].tolist()  # numbers are not quoted


def test_a_cluster_file_round_trips_through_the_trainers_reader(tmp_path):
    corpus = pd.DataFrame({"qid": range(1, 5), "question": ["=1+1 learn python", "'quoted' learn python",
                                                              "-- learn chess", "@home learn chess"],
                           "cluster": ["a", "a", "=b", "=b"], "split": ["train"] * 4})
    back = read_cluster_file(write_cluster_file(corpus, tmp_path / "clusters.csv"))
    assert back["question"].tolist() == corpus["question"].tolist()
    assert back["cluster"].tolist() == corpus["cluster"].tolist()


def test_jsonl_and_parquet_are_untouched(tmp_path):
    frame = pd.DataFrame({"qid": [1, 2], "question": ["=1+1", "'x"]})
    write_table(frame, tmp_path / "e.jsonl")
    lines = [json.loads(line) for line in (tmp_path / "e.jsonl").read_text().splitlines()]
    assert [r["question"] for r in lines] == ["=1+1", "'x"]
    assert pd.read_parquet(write_table(frame, tmp_path / "e.parquet"))["question"].tolist() == ["=1+1", "'x"]


def test_every_csv_writer_of_the_product_is_the_safe_one():
    through, unsafe = csv_writers([ROOT / part for part in PRODUCT])
    assert unsafe == []
    assert {"qpr/data/corpus.py", "qpr/data/supervise_report.py"} <= {where.split(":")[0] for where in through}


def test_the_scan_finds_each_kind_of_unsafe_writer(tmp_path):
    (tmp_path / "module.py").write_text(
        "import csv\nfrom csv import DictWriter\nimport numpy as np\n"
        "def save(frame, handle, path):\n"
        "    frame.to_csv(path)\n    csv.writer(handle).writerow([1])\n    np.savetxt(path, [1])\n"
        "    frame.round(2).to_csv(path, sep='\\t')\n")
    through, unsafe = csv_writers([tmp_path])
    assert through == []
    assert sorted(int(where.rsplit(":", 1)[1]) for where in unsafe) == [2, 5, 6, 7, 8]


def test_the_supervision_reports_samples_are_spreadsheet_safe(tmp_path):
    log = pd.DataFrame([(f"{payload} learning topic{i} {form}", [f"=answer {i}"]) for i, payload in enumerate(OWASP_PAYLOADS)
                        for form in ("how", "tips for", "the best way")], columns=["question", "answers"])
    folder = write_report(supervise(log, min_coherence=0.0), tmp_path / "report", "payloads")
    for name in ("kept_sample.csv", "thresholds.csv"):
        assert live_cells(folder / name, ",") == []
    sample = read_table(folder / "kept_sample.csv")
    assert sum(question.startswith(TRIGGERS) for question in sample["questions"]) >= 10  # held, read back, never live


# Text a file can hold: any valid UTF-8 without NUL (refused on import anyway), weighted towards
# triggers and quotes at the start.
text = st.lists(st.one_of(st.sampled_from(list(TRIGGERS) + ["'", '"', ",", "\n", " "]),
                          st.characters(codec="utf-8", exclude_characters="\x00")), max_size=12).map("".join)


@settings(max_examples=150, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(text, min_size=1, max_size=5))
def test_round_trip_property(tmp_path, texts):
    for value in texts:
        assert restore(neutralise(value)) == value
        assert not neutralise(value).startswith(TRIGGERS)
    frame = pd.DataFrame({"qid": range(1, len(texts) + 1), "question": texts})
    for suffix, sep in ((".csv", ","), (".tsv", "\t")):
        path = write_table(frame, tmp_path / f"p{suffix}")
        assert live_cells(path, sep) == []
        assert read_table(path)["question"].tolist() == texts
