"""Uploads built to exhaust the server, from small generators (nothing committed).

Each generator writes one hostile file into a folder and returns its path and upload kind;
``scale`` shrinks the file (the tests use small ones, each still over the bound it tests;
``python -m bench.hostile_uploads`` runs them at full size and measures memory and time).
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def parquet_bomb(folder: Path, scale: float = 1.0) -> tuple[Path, str]:
    """A few-kilobyte Parquet whose dictionary-encoded question column decodes to ~10 GB."""
    rows = int(10_000_000 * scale)
    question = pa.DictionaryArray.from_arrays(pa.array(np.zeros(rows, dtype="int32")), pa.array(["why " * 250]))
    cluster = pa.DictionaryArray.from_arrays(pa.array(np.zeros(rows, dtype="int32")), pa.array(["c"]))
    path = folder / "bomb.parquet"
    pq.write_table(pa.table({"question": question, "cluster": cluster}), path, compression="zstd")
    return path, "clusters"


def _repeated(folder: Path, name: str, value: str, rows: int) -> Path:
    """A Parquet of ``rows`` rows whose question is ``value`` in every row (cluster "c"):
    dictionary-encoded, zstd, without statistics, and without pyarrow's Arrow schema (as other
    writers leave it), so a reader not told otherwise decodes the text into every row."""
    question = pa.DictionaryArray.from_arrays(pa.array(np.zeros(rows, dtype="int32")), pa.array([value]))
    cluster = pa.DictionaryArray.from_arrays(pa.array(np.zeros(rows, dtype="int32")), pa.array(["c"]))
    path = folder / name
    pq.write_table(pa.table({"question": question, "cluster": cluster}), path, compression="zstd",
                   write_statistics=False, store_schema=False)
    return path


def parquet_dictionary_256kb(folder: Path, scale: float = 1.0) -> tuple[Path, str]:
    """Under a kilobyte: a dictionary holding one 256 KB text, repeated in 20,000 rows (5 GB decoded)."""
    return _repeated(folder, "dict256k.parquet", "a" * 262_144, max(int(20_000 * scale), 2)), "clusters"


def parquet_dictionary_100kb(folder: Path, scale: float = 1.0) -> tuple[Path, str]:
    """Under a kilobyte: one 100 KB text (under the cell bound) repeated in 20,000 rows (2 GB decoded)."""
    return _repeated(folder, "dict100k.parquet", "d" * 100_000, max(int(20_000 * scale), 600)), "clusters"


def parquet_dictionary_1mb(folder: Path, scale: float = 1.0) -> tuple[Path, str]:
    """Under a kilobyte: a dictionary holding one 1 MB text, repeated in 20,000 rows (20 GB decoded)."""
    return _repeated(folder, "dict1m.parquet", "b" * 1_048_576, max(int(20_000 * scale), 2)), "clusters"


def parquet_many_rows(folder: Path, scale: float = 1.0) -> tuple[Path, str]:
    """A few hundred kilobytes: 200 million rows of one short question (a pointer each in pandas: 1.6 GB)."""
    return _repeated(folder, "rows.parquet", "how do i cook rice", max(int(200_000_000 * scale), 4_000_000)), "clusters"


def parquet_huge_value(folder: Path, scale: float = 1.0) -> tuple[Path, str]:
    """A few kilobytes: one row whose question is a 200 MB text, plain-encoded (no dictionary)."""
    path = folder / "value.parquet"
    pq.write_table(pa.table({"question": ["q" * max(int(200_000_000 * scale), 60_000_000)], "cluster": ["c"]}), path,
                   compression="zstd", use_dictionary=False, write_statistics=False)
    return path, "clusters"


def parquet_many_columns(folder: Path, scale: float = 1.0) -> tuple[Path, str]:
    """A Parquet of one row and tens of thousands of columns."""
    columns = max(int(20_000 * scale), 2_000)
    path = folder / "wide.parquet"
    pq.write_table(pa.table({f"c{i}": pa.array([""]) for i in range(columns)} | {"question": ["q"], "cluster": ["a"]}),
                   path)
    return path, "clusters"


def csv_million_columns(folder: Path, scale: float = 1.0) -> tuple[Path, str]:
    """A CSV whose header has a million columns."""
    columns = int(1_000_000 * scale)
    path = folder / "wide.csv"
    with path.open("w") as handle:
        handle.write("question,cluster," + ",".join(f"c{i}" for i in range(columns)) + "\n")
        handle.write("how do i cook rice,a" + "," * columns + "\n")
    return path, "clusters"


def csv_huge_field(folder: Path, scale: float = 1.0) -> tuple[Path, str]:
    """A CSV with one 100 MB field (an unclosed quote runs on to the end of the file)."""
    path = folder / "field.csv"
    chunk = "a" * 1_000_000
    with path.open("w") as handle:
        handle.write('question,cluster\n"')
        for _ in range(max(int(100 * scale), 1)):
            handle.write(chunk)
        handle.write('",a\n')
    return path, "clusters"


def jsonl_gzip_bomb(folder: Path, scale: float = 1.0) -> tuple[Path, str]:
    """A .jsonl that is a gzip archive of ~1 GB of records (about 3 MB compressed)."""
    path = folder / "bomb.jsonl"
    block = ('{"question": "how do i cook rice", "cluster": "a"}\n' * 20_000).encode()
    with gzip.open(path, "wb", compresslevel=6) as handle:
        for _ in range(max(int(1_000 * scale), 1)):
            handle.write(block)
    return path, "clusters"


def jsonl_deep(folder: Path, scale: float = 1.0) -> tuple[Path, str]:
    """A JSONL record nested 100,000 lists deep."""
    depth = max(int(100_000 * scale), 5_000)
    path = folder / "deep.jsonl"
    path.write_text('{"question": ' + "[" * depth + "]" * depth + ', "cluster": "a"}\n')
    return path, "clusters"


def jsonl_million_keys(folder: Path, scale: float = 1.0) -> tuple[Path, str]:
    """A JSONL record with a million fields."""
    keys = int(1_000_000 * scale)
    path = folder / "keys.jsonl"
    with path.open("w") as handle:
        handle.write('{"question": "how do i cook rice", "cluster": "a", ' + ", ".join(f'"k{i}": 0' for i in range(keys)) + "}\n")
    return path, "clusters"


PARQUET_BOMBS = (parquet_bomb, parquet_dictionary_100kb, parquet_dictionary_256kb, parquet_dictionary_1mb, parquet_many_rows,
                 parquet_huge_value)
HOSTILE = {f.__name__: f for f in (*PARQUET_BOMBS, parquet_many_columns, csv_million_columns, csv_huge_field,
                                   jsonl_gzip_bomb, jsonl_deep, jsonl_million_keys)}
