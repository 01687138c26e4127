"""Uploads built to exhaust the server are refused before they are parsed, each with a clear message.

The files come from the generators of ``harness.hostile_files`` at a small scale (each still over
the bound it tests); ``python -m bench.hostile_uploads`` runs them at full size and measures memory
and time.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from harness.hostile_files import HOSTILE
from qpr.data.upload import read_upload
from qpr.data.upload_limits import MAX_CELL_BYTES, parquet_problems
from qpr.errors import QPRError

EXPECTED = {
    "parquet_bomb": "data decodes to more than 50 MB",
    "parquet_dictionary_100kb": "data decodes to more than 50 MB",
    "parquet_dictionary_256kb": "record 1: its question takes 262,144 bytes, more than 131,072",
    "parquet_dictionary_1mb": "record 1: its question takes 1,048,576 bytes, more than 131,072",
    "parquet_many_rows": "declares 4,000,000 rows",
    "parquet_huge_value": "declares 1 rows and 60 MB of data once uncompressed",
    "parquet_many_columns": "columns, more than 1,000",
    "csv_million_columns": "line 1 has 10,002 columns, more than 1,000",
    "csv_huge_field": "the row starting on line 2 has a field longer than 131,072 characters",
    "jsonl_gzip_bomb": "gzip-compressed, not JSONL text",
    "jsonl_deep": "nested too deeply",
    "jsonl_million_keys": "line 1 has 10,002 fields, more than 1,000",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_upload_is_refused_with_what_to_fix(name, tmp_path):
    path, kind = HOSTILE[name](tmp_path, scale=0.01)
    with pytest.raises(QPRError) as err:
        read_upload(path, kind)
    message = str(err.value)
    assert message.startswith(f"{path.name}: 1 problem(s), nothing was imported")
    assert EXPECTED[name] in message


def test_the_field_bound_holds_when_the_size_limit_is_raised(tmp_path, monkeypatch):
    monkeypatch.setenv("QPR_MAX_UPLOAD_MB", "200")
    path, kind = HOSTILE["csv_huge_field"](tmp_path, scale=0.05)
    with pytest.raises(QPRError, match="field longer than"):
        read_upload(path, kind)


@pytest.mark.parametrize("store_schema", [True, False])
def test_parquet_shapes_a_real_file_has_pass_the_bounds(tmp_path, store_schema):
    """Nulls (a column of nothing but nulls too), lists of answers, structs, maps, dictionary-encoded
    text with nulls, numbers: within bounds, with or without pyarrow's Arrow schema."""
    texts = pa.array(["how do i cook rice", None, "x" * (MAX_CELL_BYTES - 1)] * 100)
    table = pa.table({"question": texts, "cluster": pa.array([None] * 300, pa.string()),
                      "answer": pa.array([["boil it", "steam it"], [], None] * 100),
                      "meta": pa.array([{"source": "faq", "rank": 1}, None, {"source": None, "rank": 2}] * 100),
                      "tags": pa.array([[("lang", "en")], None, []] * 100, pa.map_(pa.string(), pa.string())),
                      "label": texts.dictionary_encode(), "qid": pa.array(range(300))})
    pq.write_table(table, tmp_path / "real.parquet", store_schema=store_schema)
    assert parquet_problems(tmp_path / "real.parquet", 50_000_000) == []
    assert parquet_problems(tmp_path / "real.parquet", None) == []


@pytest.mark.parametrize("column", ["question", "answer", "tags"])
def test_the_row_of_an_oversized_cell_is_named_past_nulls_and_batches(tmp_path, column):
    """A text, a list of texts or a map over the cell bound, in record 5,001 (the second batch)."""
    big = "y" * (MAX_CELL_BYTES + 1)
    values = {"question": pa.array([None] * 5000 + [big]).dictionary_encode(),
              "answer": pa.array([None] * 5000 + [["a", big[1:]]]),
              "tags": pa.array([None] * 5000 + [[("k", big[1:])]], pa.map_(pa.string(), pa.string()))}
    pq.write_table(pa.table({column: values[column]}), tmp_path / "late.parquet", store_schema=False)
    assert parquet_problems(tmp_path / "late.parquet", None) == [
        f"record 5001: its {column} takes {MAX_CELL_BYTES + 1:,} bytes, more than {MAX_CELL_BYTES:,} (a question has at "
        "most 2,000 characters); shorten it"]


def test_parquet_whose_data_cannot_be_scanned_is_refused_not_handed_on(tmp_path):
    """Metadata intact, data pages scrambled: refused by the bounded scan (the unbounded reader never runs)."""
    path = tmp_path / "scrambled.parquet"
    pq.write_table(pa.table({"question": [f"question number {i}" for i in range(2000)], "cluster": ["a"] * 2000}), path,
                   compression="zstd")
    data = bytearray(path.read_bytes())
    data[8:200] = bytes((b * 7 + 3) % 256 for b in data[8:200])  # the first data page, past the magic bytes
    path.write_bytes(bytes(data))
    with pytest.raises(QPRError, match="the file's data cannot be read") as err:
        read_upload(path, "clusters")
    assert str(err.value).startswith("scrambled.parquet: 1 problem(s), nothing was imported")
