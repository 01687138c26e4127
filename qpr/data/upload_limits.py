"""Bounds an upload must keep before it is parsed: files built to exhaust the server are refused
within bounded memory and time.

The size limit (``QPR_MAX_UPLOAD_MB``) bounds the bytes sent, not what they expand to. So, before
pandas reads a file (``qpr.data.upload.read_upload``):

- a text file (CSV, TSV, JSONL) that is really a compressed archive is refused (gzip, bzip2, xz,
  zstd or zip magic bytes);
- CSV / TSV are scanned row by row with the csv module (one row in memory at a time): at most
  ``MAX_COLUMNS`` columns in any row and no field over the csv module's 131,072 characters (a
  question is at most 2,000); a million columns or a 100 MB field stop the scan at that row;
- Parquet: its metadata first (the footer, read before anything else): the footer at most
  ``MAX_FOOTER_BYTES``, at most ``MAX_COLUMNS`` columns, the values and uncompressed bytes its pages
  declare within the size limit, and no value its statistics record over ``MAX_CELL_BYTES``. Then
  the data one batch of rows at a time, text columns kept dictionary-encoded as stored (so a
  dictionary that repeats a 1 MB text 20,000 times is read once, not 20,000 times): no cell over
  ``MAX_CELL_BYTES``, and at most the size limit decoded in all. A few-hundred-byte file whose
  dictionary decodes to gigabytes stops at its first batch, in bounded memory.
- JSONL is parsed line by line (one record in memory at a time): every line an object (``null``,
  a number, ``true`` or a list is named by its line), at most ``MAX_COLUMNS`` fields in a record, and
  a record nested beyond Python's recursion limit is refused (pandas' own reader refuses nesting
  past its depth limit as well).

``qpr.data.corpus.read_table`` applies the JSONL and Parquet checks to every file it reads (the
trainer's too); a local Parquet file is bounded by its own size instead of the upload limit.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from qpr.errors import one_line

MAX_COLUMNS = 1_000  # an upload needs two or three columns; a spreadsheet export rarely has more than a few dozen
MAX_FOOTER_BYTES = 4_000_000  # Parquet metadata beyond this means absurdly many columns or row groups
PARQUET_BATCH_ROWS = 4_096
# A cell's bound: the csv module's field limit, which a CSV upload's cells already keep (a question
# has at most 2,000 characters); a Parquet or JSONL cell holding a list of answers is one cell too.
MAX_CELL_BYTES = csv.field_size_limit()
MAX_EXPANSION = 100  # a local Parquet file may decode to this many times its size: real data compresses ~2-10x, a bomb 10,000x
LOCAL_FLOOR_BYTES = 100_000_000  # ... and to this much whatever its size: reading 100 MB costs little anywhere
VALUE_OVERHEAD = 8  # bytes a value costs beyond its text once read (an offset, then a pointer): a million empty cells count too
COMPRESSED = {b"\x1f\x8b": "gzip", b"BZh": "bzip2", b"\xfd7zXZ\x00": "xz", b"\x28\xb5\x2f\xfd": "zstd",
              b"PK\x03\x04": "zip"}


def shape_problems(path: Path, fmt: str, limit_bytes: int) -> list[str]:
    """What makes the upload at ``path`` (format ``fmt``: csv, tsv, jsonl or parquet) too costly to
    read, each with the fix; empty when it is within bounds. ``limit_bytes``: the upload size limit,
    which also bounds a Parquet file's decoded data."""
    if fmt == "parquet":
        return parquet_problems(path, limit_bytes)
    with path.open("rb") as handle:
        head = handle.read(8)
    for magic, kind in COMPRESSED.items():
        if head.startswith(magic):
            return [f"the file is {kind}-compressed, not {fmt.upper()} text; decompress it and upload the "
                    f"{fmt.upper()} file itself"]
    return _table_problems(path, fmt) if fmt in ("csv", "tsv") else jsonl_problems(path)


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


def jsonl_problems(path: Path) -> list[str]:
    """The first line of the JSONL file at ``path`` that cannot be a record, with the fix: nested
    too deeply to read, a value that is not an object (``null``, a number, ``true``, a string, a
    list) or an object of more than ``MAX_COLUMNS`` fields. Empty when there is none, or when a
    line is not JSON at all (the reader says where). Reads one line at a time."""
    with path.open(encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue  # the reader skips blank lines between records
            try:
                record = json.loads(line)
            except RecursionError:
                return [f"line {number}: the record is nested too deeply to read; give one flat object per line"]
            except ValueError:
                return []  # not JSON: the reader says where
            if not isinstance(record, dict):
                shown = json.dumps(record)
                shown = shown if len(shown) <= 40 else shown[:37] + "..."
                return [f"line {number} is {shown}, not a JSON object; give one object per line, e.g. "
                        '{"question": "how do i cook rice", "cluster": "rice"}']
            if len(record) > MAX_COLUMNS:
                return [f"line {number} has {len(record):,} fields, more than {MAX_COLUMNS:,}; an upload needs only its "
                        "question field (and cluster or answer): delete the others"]
    return []


def _cell_bytes(array: pa.Array) -> np.ndarray:
    """The bytes each row of ``array`` takes once materialised: a text's length, a dictionary-encoded
    text counted as its value (that is how a tiny file decodes to gigabytes, while the dictionary
    stays read once), a list or struct as the sum of its parts, anything else as its width."""
    kind = array.type
    if pa.types.is_dictionary(kind):
        lengths = np.append(_cell_bytes(array.dictionary), 0)  # a null cell points at the 0 appended
        return lengths[array.indices.fill_null(len(array.dictionary)).to_numpy(zero_copy_only=False)]
    if pa.types.is_string(kind) or pa.types.is_binary(kind) or pa.types.is_large_string(kind) or pa.types.is_large_binary(kind):
        return pc.binary_length(array).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    if pa.types.is_map(kind):  # a list of key-value structs (the list kernels do not take maps: they abort)
        return _cell_bytes(array.cast(pa.list_(pa.struct([kind.key_field, kind.item_field]))))
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        parents = pc.list_parent_indices(array).to_numpy(zero_copy_only=False)
        children = _cell_bytes(pc.list_flatten(array))
        return np.bincount(parents, weights=children, minlength=len(array)).astype(np.int64)
    if pa.types.is_struct(kind):
        return sum((_cell_bytes(child) for child in array.flatten()), np.zeros(len(array), dtype=np.int64))
    try:
        width = max(kind.bit_width // 8, 1)
    except ValueError:  # another variable-width type (none that Parquet stores): its bytes shared out over its rows
        width = array.nbytes // max(len(array), 1)
    return np.full(len(array), width, dtype=np.int64)


def parquet_problems(path: Path, limit_bytes: int | None) -> list[str]:
    """What makes the Parquet file at ``path`` too costly to read, with the fix (empty when it is
    within bounds, or not Parquet at all: the reader says so). First its metadata, before any data
    is read: the footer's size, the number of columns, the values and uncompressed bytes its pages
    declare, and the longest value its statistics record. Then the data in batches of
    ``PARQUET_BATCH_ROWS`` rows, text columns kept dictionary-encoded as stored (a dictionary is
    read once, not once per row): no cell over ``MAX_CELL_BYTES``, and the bytes decoded in all
    bounded. The bound is ``limit_bytes`` (an upload's size limit) or, for None (a local file given
    to the trainer), ``MAX_EXPANSION`` times the file's size (at least ``LOCAL_FLOOR_BYTES``)."""
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
    if limit_bytes:
        bound = Bound(limit_bytes, f"the upload limit of {limit_bytes / 1e6:,g} MB (QPR_MAX_UPLOAD_MB)",
                      "split it, or upload it as CSV")
    else:
        bound = Bound(max(MAX_EXPANSION * size, LOCAL_FLOOR_BYTES), f"{MAX_EXPANSION} times the file's size",
                      "a real corpus this large reads as CSV or TSV")
    try:
        metadata = pq.ParquetFile(path).metadata
    except (pa.ArrowException, OSError):
        return []  # damaged metadata: the reader refuses it with its own message
    problems = _declared_problems(metadata, size, bound)
    if problems:
        return problems
    texts = [metadata.schema.column(i).path for i in range(metadata.num_columns)
             if metadata.schema.column(i).physical_type == "BYTE_ARRAY"]
    try:
        return _data_problems(pq.ParquetFile(path, read_dictionary=texts), size, bound)
    except (pa.ArrowException, OSError) as err:  # never handed on to a reader without bounds
        return [f"the file's data cannot be read ({one_line(err)}); write it again (e.g. with pandas' to_parquet) or "
                "upload it as CSV"]


class Bound(NamedTuple):
    """The most bytes a Parquet file may decode to, what that bound is, and what to do instead."""

    bytes: int
    what: str
    fix: str


def _declared_problems(metadata: pq.FileMetaData, size: int, bound: Bound) -> list[str]:
    if metadata.num_columns > MAX_COLUMNS:
        return [f"the file has {metadata.num_columns:,} columns, more than {MAX_COLUMNS:,}; an upload needs only its "
                "question column (and cluster or answer): write it again without the others"]
    chunks = [metadata.row_group(g).column(c) for g in range(metadata.num_row_groups) for c in range(metadata.num_columns)]
    for chunk in chunks:
        longest = _longest_statistic(chunk)
        if longest > MAX_CELL_BYTES:
            return [f"column {chunk.path_in_schema} holds a value of {longest:,} bytes (its statistics say), more than "
                    f"{MAX_CELL_BYTES:,} (a question has at most 2,000 characters); shorten it"]
    values = sum(chunk.num_values for chunk in chunks)
    declared = sum(chunk.total_uncompressed_size for chunk in chunks) + VALUE_OVERHEAD * values
    if declared > bound.bytes:
        return [f"the file declares {metadata.num_rows:,} rows and {declared / 1e6:,.0f} MB of data once uncompressed "
                f"(from a {size:,}-byte file), over {bound.what}; {bound.fix}"]
    return []


def _longest_statistic(chunk: pq.ColumnChunkMetaData) -> int:
    """The length of the longer text among a column chunk's recorded min and max (0 where none)."""
    try:
        stats = chunk.statistics
        values = (stats.min, stats.max) if stats is not None and stats.has_min_max else ()
    except (pa.ArrowException, ValueError):  # statistics pyarrow cannot decode: the data scan still bounds the cells
        return 0
    return max((len(v) for v in values if isinstance(v, (str, bytes))), default=0)


def _data_problems(parquet: pq.ParquetFile, size: int, bound: Bound) -> list[str]:
    decoded, rows = 0, 0
    for batch in parquet.iter_batches(batch_size=PARQUET_BATCH_ROWS):
        for name, column in zip(batch.schema.names, batch.columns):
            cells = _cell_bytes(column)
            if len(cells) and cells.max() > MAX_CELL_BYTES:
                return [f"record {rows + int(cells.argmax()) + 1}: its {name} takes {int(cells.max()):,} bytes, more "
                        f"than {MAX_CELL_BYTES:,} (a question has at most 2,000 characters); shorten it"]
            decoded += int(cells.sum()) + VALUE_OVERHEAD * len(cells)
        rows += batch.num_rows
        if decoded > bound.bytes:
            return [f"the file's data decodes to more than {bound.bytes / 1e6:,.0f} MB (from a {size:,}-byte file), "
                    f"over {bound.what}; {bound.fix}"]
    return []
