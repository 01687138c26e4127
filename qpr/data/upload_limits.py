"""Bounds an upload must keep before it is parsed: files built to exhaust the server are refused
within bounded memory and time.

The size limit (``QPR_MAX_UPLOAD_MB``) bounds the bytes sent, not what they expand to. So, before
pandas reads a file (``qpr.data.upload.read_upload``):

- a text file (CSV, TSV, JSONL) that is really a compressed archive is refused (gzip, bzip2, xz,
  zstd or zip magic bytes);
- CSV / TSV are scanned row by row with the csv module (one row in memory at a time): at most
  ``MAX_COLUMNS`` columns in any row and no field over the csv module's 131,072 characters (a
  question is at most 2,000); a million columns or a 100 MB field stop the scan at that row;
- Parquet: its footer (the metadata, read before anything else) must be at most
  ``MAX_FOOTER_BYTES``, the schema at most ``MAX_COLUMNS`` columns, and the data, decoded one batch
  of rows at a time, at most the size limit: a file of a few kilobytes whose dictionary- or
  run-length-encoded column decodes to gigabytes stops after the first batches over the limit.

- JSONL is parsed line by line (one record in memory at a time): at most ``MAX_COLUMNS`` fields in
  a record, and a record nested beyond Python's recursion limit is refused (pandas' own reader
  refuses nesting past its depth limit as well).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

MAX_COLUMNS = 1_000  # an upload needs two or three columns; a spreadsheet export rarely has more than a few dozen
MAX_FOOTER_BYTES = 4_000_000  # Parquet metadata beyond this means absurdly many columns or row groups
PARQUET_BATCH_ROWS = 4_096
COMPRESSED = {b"\x1f\x8b": "gzip", b"BZh": "bzip2", b"\xfd7zXZ\x00": "xz", b"\x28\xb5\x2f\xfd": "zstd",
              b"PK\x03\x04": "zip"}


def shape_problems(path: Path, fmt: str, limit_bytes: int) -> list[str]:
    """What makes the upload at ``path`` (format ``fmt``: csv, tsv, jsonl or parquet) too costly to
    read, each with the fix; empty when it is within bounds. ``limit_bytes``: the upload size limit,
    which also bounds a Parquet file's decoded data."""
    if fmt == "parquet":
        return _parquet_problems(path, limit_bytes)
    with path.open("rb") as handle:
        head = handle.read(8)
    for magic, kind in COMPRESSED.items():
        if head.startswith(magic):
            return [f"the file is {kind}-compressed, not {fmt.upper()} text; decompress it and upload the "
                    f"{fmt.upper()} file itself"]
    return _table_problems(path, fmt) if fmt in ("csv", "tsv") else _jsonl_problems(path)


def _table_problems(path: Path, fmt: str) -> list[str]:
    with path.open(encoding="utf-8", errors="replace", newline="") as handle:
        reader = csv.reader(handle, delimiter="\t" if fmt == "tsv" else ",")
        start = 1  # the line the next row starts on
        try:
            for row in reader:
                if len(row) > MAX_COLUMNS:
                    return [f"line {start} has {len(row):,} columns, more than {MAX_COLUMNS:,}; an upload needs only "
                            "its question column (and cluster or answer): delete the others"]
                start = reader.line_num + 1
        except csv.Error as err:  # the csv module's own bound: a field over 131,072 characters
            return [f"the row starting on line {start} has a field longer than {csv.field_size_limit():,} characters "
                    f"({err}); a question has at most 2,000: check the quoting (an unclosed quote runs on to the end "
                    "of the file) or shorten that field"]
    return []


def _jsonl_problems(path: Path) -> list[str]:
    with path.open(encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle, start=1):
            try:
                record = json.loads(line) if line.strip() else None
            except RecursionError:
                return [f"line {number}: the record is nested too deeply to read; give one flat object per line"]
            except ValueError:
                return []  # not JSON: the reader says where
            if isinstance(record, dict) and len(record) > MAX_COLUMNS:
                return [f"line {number} has {len(record):,} fields, more than {MAX_COLUMNS:,}; an upload needs only its "
                        "question field (and cluster or answer): delete the others"]
    return []


def _decoded_bytes(array: pa.Array) -> int:
    """Bytes ``array`` takes once each value is materialised: a dictionary-encoded column counts
    every row's value, not the dictionary once (that is how a tiny file decodes to gigabytes)."""
    if pa.types.is_dictionary(array.type):
        values = array.dictionary
        if pa.types.is_string(values.type) or pa.types.is_binary(values.type) or pa.types.is_large_string(values.type):
            lengths = pc.take(pc.binary_length(values), array.indices)
            return int(pc.sum(lengths).as_py() or 0) + 8 * len(array)
        return array.indices.nbytes * 2 + values.nbytes
    return array.nbytes


def _parquet_problems(path: Path, limit_bytes: int) -> list[str]:
    size = path.stat().st_size
    with path.open("rb") as handle:
        handle.seek(max(size - 8, 0))
        tail = handle.read(8)
    if len(tail) < 8 or tail[4:] != b"PAR1":
        return []  # not Parquet at all: the reader says so
    footer = int.from_bytes(tail[:4], "little")
    if footer > MAX_FOOTER_BYTES:
        return [f"the file's metadata takes {footer / 1e6:,.1f} MB (at most {MAX_FOOTER_BYTES / 1e6:,.0f} MB): far "
                "too many columns or row groups; write it again with only the columns an upload needs"]
    try:
        parquet = pq.ParquetFile(path)
        columns = parquet.metadata.num_columns
        if columns > MAX_COLUMNS:
            return [f"the file has {columns:,} columns, more than {MAX_COLUMNS:,}; an upload needs only its question "
                    "column (and cluster or answer): write it again without the others"]
        decoded = 0
        for batch in parquet.iter_batches(batch_size=PARQUET_BATCH_ROWS):
            decoded += sum(_decoded_bytes(column) for column in batch.columns)
            if decoded > limit_bytes:
                return [f"the file's data decodes to more than {limit_bytes / 1e6:,g} MB (the upload limit, "
                        f"QPR_MAX_UPLOAD_MB) from a {size / 1e6:,.1f} MB file; split it, or upload it as CSV"]
    except (pa.ArrowException, OSError):
        return []  # damaged: the reader refuses it with its own message
    return []
