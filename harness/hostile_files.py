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


HOSTILE = {f.__name__: f for f in (parquet_bomb, parquet_many_columns, csv_million_columns, csv_huge_field,
                                   jsonl_gzip_bomb, jsonl_deep, jsonl_million_keys)}
