"""Corpora of questions in clusters: readers, transitive closure of pairs, the split, writers.

A corpus is a pandas DataFrame with one row per question and the columns
``qid`` (int64, unique), ``question`` (str), ``cluster`` (str, or <NA> for a question in no
cluster) and ``split`` ("train" | "val" | "test" | "none"). Every question stays in the index;
``split`` only says which clusters train the encoder and which serve as evaluation queries.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from qpr.errors import QPRError, one_line
from qpr.fsutil.atomic import atomic_path
from qpr.data.spreadsheet import restore_frame, write_csv
from qpr.data.upload_limits import jsonl_problems, parquet_problems
from qpr.model.text import text_problem, tokenize
from qpr.settings import settings

COLUMNS = ["qid", "question", "cluster", "split"]
SPLITS = ("train", "val", "test", "none")
QUORA_COLUMNS = ["id", "qid1", "qid2", "question1", "question2", "is_duplicate"]
CLUSTER_FORMATS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".parquet": "parquet"}


def data_dir() -> Path:
    """Where the shared real data sets live: ``QPR_DATA_DIR``, default ``../shared/data`` beside the repo."""
    return settings().data_dir


def _format_of(path: Path) -> str:
    fmt = CLUSTER_FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise QPRError(f"{path}: unknown file type {path.suffix!r}; use one of {', '.join(CLUSTER_FORMATS)}")
    return fmt


def read_table(path: str | Path, blank_lines: bool = False) -> pd.DataFrame:
    """Read a CSV / TSV / JSONL / Parquet file (chosen by extension) with text columns as str;
    ``blank_lines`` keeps a CSV / TSV file's blank lines as rows of empty cells (so that row
    numbers match the file's lines), instead of skipping them. CSV / TSV text cells are restored
    from their spreadsheet-safe form (``qpr.data.spreadsheet.restore``: a leading quote before
    ``= + - @``, a tab, a carriage return or another quote is dropped). A JSONL line that is not an
    object, or a Parquet cell over ``qpr.data.upload_limits.MAX_CELL_BYTES``, is refused first
    (QPRError naming the line or record), within bounded memory."""
    path = Path(path)
    fmt = _format_of(path)
    if not path.is_file():
        raise QPRError(f"{path}: no such file")
    if path.stat().st_size == 0:
        what = "a header and at least one row" if fmt in ("csv", "tsv") else "at least one record"
        raise QPRError(f"{path}: the file is empty; give a {fmt.upper()} file with {what}")
    problems = jsonl_problems(path) if fmt == "jsonl" else parquet_problems(path, None) if fmt == "parquet" else []
    if problems:
        raise QPRError(f"{path}: {problems[0]} (nothing was read)")
    try:
        if fmt in ("csv", "tsv"):
            return restore_frame(pd.read_csv(path, sep="\t" if fmt == "tsv" else ",", dtype=str,
                                             keep_default_na=False, skip_blank_lines=not blank_lines))
        if fmt == "jsonl":
            return pd.read_json(path, lines=True, dtype=False)
        return pd.read_parquet(path)
    except (ValueError, OSError, UnicodeDecodeError) as err:
        raise QPRError(f"{path}: not a readable {fmt.upper()} file ({one_line(err)})") from err


def write_table(frame: pd.DataFrame, path: str | Path) -> Path:
    """Write ``frame`` atomically in the format its extension names; returns the path. CSV / TSV
    text cells a spreadsheet would evaluate as a formula are neutralised (``qpr.data.spreadsheet``);
    ``read_table`` reads them back as they were."""
    path = Path(path)
    fmt = _format_of(path)
    with atomic_path(path) as tmp:
        if fmt in ("csv", "tsv"):
            write_csv(frame, tmp, sep="\t" if fmt == "tsv" else ",")
        elif fmt == "jsonl":
            frame.to_json(tmp, orient="records", lines=True, force_ascii=False)
        else:
            frame.to_parquet(tmp, index=False)
    return path


def check_questions(texts: pd.Series, source: Path | str, labels: pd.Series | None = None, column: str = "question") -> None:
    """QPRError naming the first question that holds a NUL character or a lone surrogate
    (``qpr.model.text.text_problem``); ``labels`` names the rows (e.g. "qid 17"), else the data row number does."""
    for position, text in enumerate(texts):
        problem = isinstance(text, str) and text_problem(text)
        if problem:
            row = labels.iloc[position] if labels is not None else f"data row {position + 1}"
            raise QPRError(f"{source}: the {column} of {row} {problem} (nothing was read)")


def require_rows(frame: pd.DataFrame, path: Path | str) -> None:
    if frame.empty:
        columns = ", ".join(map(str, frame.columns)) or "none"
        raise QPRError(f"{path}: the file has no rows (columns: {columns}); add at least one question")


def _require_columns(frame: pd.DataFrame, needed: list[str], path: Path | str) -> None:
    missing = [c for c in needed if c not in frame.columns]
    if missing:
        raise QPRError(
            f"{path}: missing column(s) {', '.join(missing)}; found {', '.join(map(str, frame.columns)) or 'none'}"
        )


def check_corpus(frame: pd.DataFrame, source: Path | str) -> pd.DataFrame:
    """The corpus columns of ``frame`` (``COLUMNS``) in their canonical dtypes, checked: unique
    integer qids and known splits (a missing ``split`` column means "none"). The one check of the
    corpus schema, for files read here and for corpora registered in the annotation store;
    raises QPRError naming ``source`` and what to fix."""
    _require_columns(frame, ["qid", "question", "cluster"], source)
    if "split" not in frame.columns:
        frame = frame.assign(split="none")
    out = frame[COLUMNS].copy()
    try:
        out["qid"] = pd.to_numeric(out["qid"], errors="raise").astype("int64")
    except (ValueError, TypeError) as err:
        raise QPRError(f"{source}: qid must be an integer in every row ({one_line(err)})") from err
    if out["qid"].duplicated().any():
        dup = out.loc[out["qid"].duplicated(), "qid"].iloc[0]
        raise QPRError(f"{source}: qid {dup} appears more than once")
    out["question"] = out["question"].fillna("").astype(str)
    check_questions(out["question"], source, "qid " + out["qid"].astype(str))
    cluster = out["cluster"].astype("string").str.strip()
    out["cluster"] = cluster.mask(cluster == "")
    out["split"] = out["split"].fillna("none").astype(str).replace("", "none")
    bad = sorted(set(out["split"]) - set(SPLITS))
    if bad:
        raise QPRError(f"{source}: unknown split value(s) {bad}; use {', '.join(SPLITS)}")
    return out.reset_index(drop=True)


def _drop_empty_questions(frame: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    has_tokens = frame["question"].map(lambda q: bool(tokenize(q)))
    return frame[has_tokens].reset_index(drop=True), int((~has_tokens).sum())


def read_quora_pairs(path: str | Path) -> tuple[pd.DataFrame, int]:
    """Read the Quora Question Pairs release (TSV, header ``id qid1 qid2 question1 question2
    is_duplicate``; quoted fields may hold tabs and newlines).

    Returns the pairs and the number of pairs skipped because a question was empty.
    """
    path = Path(path)
    pairs = read_table(path) if path.suffix.lower() in (".tsv", ".csv") else None
    if pairs is None:
        raise QPRError(f"{path}: the Quora release is a .tsv file")
    _require_columns(pairs, QUORA_COLUMNS, path)
    require_rows(pairs, path)
    pairs = pairs[QUORA_COLUMNS].copy()
    try:
        for col in ("id", "qid1", "qid2", "is_duplicate"):
            pairs[col] = pd.to_numeric(pairs[col], errors="raise").astype("int64")
    except ValueError as err:
        raise QPRError(f"{path}: id, qid1, qid2 and is_duplicate must be integers ({one_line(err)})") from err
    for column in ("question1", "question2"):
        check_questions(pairs[column], path, "pair id " + pairs["id"].astype(str), column)
    empty = pairs["question1"].map(lambda q: not tokenize(q)) | pairs["question2"].map(lambda q: not tokenize(q))
    return pairs[~empty].reset_index(drop=True), int(empty.sum())


def clusters_from_pairs(pairs: pd.DataFrame) -> pd.DataFrame:
    """Corpus of every question in ``pairs``; clusters are connected components of the duplicates.

    Questions with no duplicate get cluster <NA> (they stay in the corpus as distractors). Cluster
    labels are the smallest qid of the component, so they are stable across runs. ``split`` is
    "none" until ``split_clusters`` assigns one.
    """
    questions = pd.concat(
        [
            pairs[["qid1", "question1"]].set_axis(["qid", "question"], axis=1),
            pairs[["qid2", "question2"]].set_axis(["qid", "question"], axis=1),
        ]
    ).drop_duplicates("qid").sort_values("qid", kind="stable").reset_index(drop=True)
    position = pd.Series(np.arange(len(questions)), index=questions["qid"].to_numpy())
    dup = pairs[pairs["is_duplicate"] == 1]
    rows, cols = position[dup["qid1"]].to_numpy(), position[dup["qid2"]].to_numpy()
    graph = coo_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(questions),) * 2)
    _, component = connected_components(graph, directed=False)
    sizes = np.bincount(component)
    label = pd.Series(questions["qid"].to_numpy()).groupby(component).transform("min").to_numpy()
    questions["cluster"] = pd.array([str(c) for c in label], dtype="string")
    questions.loc[sizes[component] < 2, "cluster"] = pd.NA
    questions["split"] = "none"
    return questions[COLUMNS]


def split_clusters(corpus: pd.DataFrame, seed: int = 0, fractions=(0.8, 0.1, 0.1)) -> pd.DataFrame:
    """The paper's split: clusters of 2+ questions go 80:10:10 to train/val/test at random (seeded).

    Then every val/test question whose text also occurs in train is removed from the corpus (the
    train copy stays), so evaluation never rewards memorising a training question; a val/test
    cluster left with fewer than 2 questions can no longer be queried and becomes "none".
    """
    out = corpus.copy()
    sizes = out.groupby("cluster")["qid"].transform("size")
    multi = out["cluster"].notna() & (sizes >= 2)
    clusters = np.array(sorted(out.loc[multi, "cluster"].unique()), dtype=object)
    np.random.default_rng(seed).shuffle(clusters)
    n_train = int(round(fractions[0] * len(clusters)))
    n_val = int(round(fractions[1] * len(clusters)))
    assignment = {c: "train" for c in clusters[:n_train]}
    assignment |= {c: "val" for c in clusters[n_train : n_train + n_val]}
    assignment |= {c: "test" for c in clusters[n_train + n_val :]}
    out["split"] = [assignment[c] if m else "none" for c, m in zip(out["cluster"], multi)]
    train_texts = set(out.loc[out["split"] == "train", "question"].str.strip().str.lower())
    held_out = out["split"].isin(["val", "test"])
    leaked = held_out & out["question"].str.strip().str.lower().isin(train_texts)
    out = out[~leaked].reset_index(drop=True)
    left = out.groupby("cluster")["qid"].transform("size")
    out.loc[out["split"].isin(["val", "test"]) & (left < 2), "split"] = "none"
    return out


def read_cluster_file(path: str | Path, seed: int = 0) -> pd.DataFrame:
    """Read a cluster file: columns ``question`` and ``cluster`` (required), ``qid`` and ``split``
    (optional) in CSV / TSV / JSONL / Parquet.

    Missing qids are numbered 1..N in file order; a file without ``split`` is split by
    ``split_clusters(seed)``. Empty questions are dropped.
    """
    path = Path(path)
    frame = read_table(path)
    _require_columns(frame, ["question", "cluster"], path)
    require_rows(frame, path)
    if "qid" not in frame.columns:
        frame = frame.assign(qid=np.arange(1, len(frame) + 1))
    has_split = "split" in frame.columns
    if not has_split:
        frame = frame.assign(split="none")
    corpus, _ = _drop_empty_questions(check_corpus(frame, path))
    if corpus.empty:
        raise QPRError(f"{path}: no questions in the file")
    return corpus if has_split else split_clusters(corpus, seed)


def write_cluster_file(corpus: pd.DataFrame, path: str | Path) -> Path:
    """Write a corpus as a cluster file that ``read_cluster_file`` reads back unchanged."""
    return write_table(corpus[COLUMNS], path)


def load_corpus(path: str | Path, seed: int = 0) -> pd.DataFrame:
    """Load training/evaluation data from any supported source.

    - a directory with ``split.tsv`` (Quora-lite's canonical split), read as is;
    - a Quora release TSV (pairs): clusters by transitive closure, then ``split_clusters(seed)``;
    - any other table: a cluster file (``read_cluster_file``).
    """
    path = Path(path)
    if path.is_dir():
        if not (path / "split.tsv").is_file():
            raise QPRError(f"{path} is a directory without split.tsv; pass a cluster or Quora pairs file")
        path = path / "split.tsv"
        return read_cluster_file(path)
    if path.suffix.lower() == ".tsv" and path.is_file():
        with path.open(encoding="utf-8", errors="replace") as handle:
            header = handle.readline().rstrip("\r\n").split("\t")
        if header == QUORA_COLUMNS:
            pairs, _ = read_quora_pairs(path)
            return split_clusters(clusters_from_pairs(pairs), seed)
    return read_cluster_file(path, seed)


def fingerprint(corpus: pd.DataFrame) -> str:
    """A short SHA-256 of a corpus' content, so a bundle names exactly the data it was built on."""
    digest = hashlib.sha256()
    for column in COLUMNS:
        digest.update(json.dumps(corpus[column].astype(object).where(corpus[column].notna(), None).tolist(), ensure_ascii=False).encode())
    return digest.hexdigest()[:16]
