"""A bundle's corpus on disk: an Arrow IPC file, read through a memory map.

Read this way the corpus costs no memory of its own: the DataFrame's columns are views of the
mapped file (pages the kernel shares and can drop), where a Parquet file is decoded into a
private copy (800 MB at ten million questions). Bundles saved before it hold ``corpus.parquet``,
still read (a copy, as before); the next save of such a bundle writes the Arrow file.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from qpr.data.corpus import COLUMNS
from qpr.errors import QPRError, one_line

CORPUS_FILE = "corpus.arrow"
PARQUET_CORPUS_FILE = "corpus.parquet"  # what bundles saved before the Arrow file hold in its place
TYPES = {"qid": pa.int64(), "question": pa.large_string(), "cluster": pa.large_string(), "split": pa.large_string()}


def corpus_path(folder: Path) -> Path:
    """The corpus file of the bundle folder ``folder``: the Arrow file, else an older bundle's Parquet."""
    arrow = folder / CORPUS_FILE
    return arrow if arrow.is_file() or not (folder / PARQUET_CORPUS_FILE).is_file() else folder / PARQUET_CORPUS_FILE


def write_corpus_file(corpus: pd.DataFrame, path: Path) -> None:
    """Write ``corpus`` (its columns as they are, the corpus' own with fixed Arrow types) to
    ``path`` as one record batch: one chunk per column, which a search's row lookups need
    (``qpr.retrieval.base``) and a memory map can give without copying."""
    table = pa.Table.from_pandas(corpus, preserve_index=False)
    for name, kind in TYPES.items():
        if name in table.column_names:
            table = table.set_column(table.column_names.index(name), name, table[name].cast(kind))
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table.combine_chunks(), max_chunksize=max(len(table), 1))


def read_corpus_file(path: Path, advice: str) -> pd.DataFrame:
    """The corpus in ``path`` (``corpus_path``): the Arrow file memory-mapped, a Parquet file
    decoded. A file that cannot be read, or lacks a column of the corpus, raises QPRError
    naming it and ending with ``advice`` (what the user can do)."""
    try:
        if path.suffix == ".arrow":
            table = pa.ipc.open_file(pa.memory_map(str(path))).read_all()
        else:
            table = pq.read_table(path)
        # One chunk per column (already so in a file ``write_corpus_file`` wrote): a search takes
        # its hits' rows in time proportional to the chunks (7 ms a search at a million questions
        # from a Parquet file's row groups). Split blocks: pandas would copy the qids into one
        # block of its own rather than view the file's.
        corpus = table.combine_chunks().to_pandas(split_blocks=True)
    except (ValueError, OSError, pa.ArrowException) as err:
        kind = "Arrow" if path.suffix == ".arrow" else "Parquet"
        raise QPRError(f"{path} is not a readable {kind} file ({one_line(err)}); {advice}") from err
    missing = [c for c in COLUMNS if c not in corpus.columns]
    if missing:
        raise QPRError(f"{path} lacks column(s) {', '.join(missing)}; {advice}")
    return corpus
