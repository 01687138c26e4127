"""A user's upload read into a corpus, every problem found before anything is written.

Three kinds of file (CSV, TSV, JSONL or Parquet, by extension):

- ``clusters``: a ``question`` and a ``cluster`` column (optionally ``split``), e.g. an FAQ whose
  paraphrases are already grouped; clusters of 2+ questions are split 80:10:10 when there is no
  ``split`` column (``qpr.data.corpus.split_clusters``);
- ``qa-log``: a ``question`` and an ``answer`` column (a list of answers per row in JSONL or
  Parquet); clusters come from distant supervision with the coherence filter (``qpr.data.supervise``),
  and ``Upload.report`` says what it kept and dropped (``qpr.data.supervise_report.summary``);
- ``questions``: a ``question`` column only (cold start): no clusters, so the project is served
  by BM25 until annotators' judgments form clusters to train on.

``read_upload`` collects every problem (wrong encoding, missing column, empty, duplicate or
unusable question, too few clusters to train, over the size limit ``QPR_MAX_UPLOAD_MB``, or shaped to
exhaust the server: ``qpr.data.upload_limits``) into one
``QPRError`` that names each row and says what to fix, so a file is either read whole or refused.
Rows are numbered as a user sees them: in CSV/TSV as a spreadsheet shows them (the header is
row 1), in JSONL and Parquet by record from 1. Where a row starts on another line of the file
(a quoted CSV field holding line breaks, a blank line between JSONL records), the message names
that line too: ``row 3 (line 5 of the file)``.
"""

from __future__ import annotations

import csv
import functools
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from qpr.data.corpus import CLUSTER_FORMATS, check_corpus, read_table, require_rows, split_clusters
from qpr.errors import QPRError
from qpr.data.qalogs import read_qa_log
from qpr.data.supervise import supervise
from qpr.data.supervise_report import sample_clusters, summary
from qpr.data.upload_limits import shape_problems
from qpr.model.text import MAX_QUERY_CHARS, text_problem, tokenize
from qpr.settings import settings

KINDS = ("clusters", "qa-log", "questions")
COLUMNS_OF = {"clusters": ["question", "cluster"], "qa-log": ["question", "answer"], "questions": ["question"]}
# 80:10:10 must leave 2 val clusters (early stopping's ROC AUC needs 2, qpr.training.sampling) and 1 test
# cluster: round(0.1 * 15) = 2. With 10, training on a project that passed this check failed (issue 38).
MIN_TRAIN_CLUSTERS = 15
LISTED = 50  # problems listed in one message; the rest are counted


@dataclass
class Upload:
    """A validated upload: ``corpus`` (``qpr.data.corpus.COLUMNS``, qids 1..N in file order), the
    ``kind``, the number of data ``rows`` read, and for a qa-log the supervision ``report``
    (summary counts) with ``kept_sample`` / ``removed_sample`` clusters to spot-check."""

    kind: str
    corpus: pd.DataFrame
    rows: int
    report: dict | None = None
    kept_sample: pd.DataFrame = field(default_factory=pd.DataFrame)
    removed_sample: pd.DataFrame = field(default_factory=pd.DataFrame)
    repeats: list[str] = field(default_factory=list)  # repeated questions dropped (``read_upload``'s drop_repeats)

    @property
    def dropped(self) -> str:
        """A sentence on the repeated questions dropped (the first of each kept), naming the rows
        whose repeat was in another cluster; "" when none were."""
        if not self.repeats:
            return ""
        conflicts = [line for line in self.repeats if "another cluster" in line]
        listed = "; ".join(conflicts[:LISTED]) + (f"; ... and {len(conflicts) - LISTED} more" if len(conflicts) > LISTED else "")
        return (f"{len(self.repeats)} repeated question(s) dropped, the first of each kept"
                + (f"; {len(conflicts)} of them were in another cluster than the one kept ({listed})." if conflicts else "."))

    @property
    def no_cluster(self) -> str:
        """For a clusters file, a sentence on its questions in no cluster (a blank cluster cell, or
        a cluster of one question), which train nothing; "" when there are none or no clusters were given."""
        alone = int(self.corpus["cluster"].isna().sum()) if self.kind == "clusters" else 0
        return (f"{alone} question(s) have no cluster (a blank cluster cell, or a cluster of one question): they are "
                "searchable but train nothing until annotators put them in a cluster.") if alone else ""


def megabytes(size: int) -> str:
    """``size`` bytes as the limit is set: decimal megabytes, no more digits than it has ("50 MB")."""
    return f"{size / 1e6:,g} MB"


def max_upload_bytes() -> int:
    """The size limit of an upload: ``QPR_MAX_UPLOAD_MB`` megabytes (default 50)."""
    return int(settings().max_upload_mb * 1_000_000)


class Rows:
    """How messages name the ``count`` data rows read from the file ``path`` in format ``fmt``
    (module doc)."""

    def __init__(self, path: Path, fmt: str, count: int) -> None:
        self.path, self.fmt, self.count = path, fmt, count

    @property
    def numbering(self) -> str:
        """How the rows of this format are numbered, said once in a refusal."""
        if self.fmt in ("csv", "tsv"):
            return "rows are numbered as a spreadsheet shows them: the header is row 1, the first question row 2"
        return "rows are numbered by record: the first record is row 1"

    def name(self, position: int) -> str:
        """Data row ``position`` (0-based) as a user finds it: "row N", and its first line in the
        file where that is another number."""
        row = position + 2 if self.fmt in ("csv", "tsv") else position + 1
        line = self._lines[position] if self._lines else row
        return f"row {row}" if line == row else f"row {row} (line {line} of the file)"

    @functools.cached_property
    def _lines(self) -> list[int] | None:
        # The first line of each data row, read again only when a problem is named. None for
        # Parquet (no lines), or where these records are not the rows pandas read: then the
        # messages give row numbers alone rather than a wrong line.
        if self.fmt == "parquet":
            return None
        with self.path.open(encoding="utf-8", newline="") as handle:
            if self.fmt == "jsonl":  # pandas skips blank lines between records
                starts = [number for number, line in enumerate(handle, start=1) if line.strip()]
            else:
                reader = csv.reader(handle, delimiter="\t" if self.fmt == "tsv" else ",")
                starts, end = [], 0
                for _ in reader:  # line_num: the lines read so far, a record's quoted line breaks included
                    starts.append(end + 1)
                    end = reader.line_num
                starts = starts[1:]  # the header is not a data row
        return starts if len(starts) == self.count else None


def encoding_problems(path: Path) -> list[str]:
    """The lines of a text file that are not UTF-8, each with the fix (empty for a Parquet file)."""
    if CLUSTER_FORMATS[path.suffix.lower()] == "parquet":
        return []
    problems = []
    with path.open("rb") as handle:
        for number, line in enumerate(handle, start=1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as err:
                byte = line[err.start:err.start + 1].hex()
                problems.append(f"line {number}: byte 0x{byte} is not UTF-8 text; save the file as UTF-8 "
                                "(e.g. in a spreadsheet: Save as > CSV UTF-8)")
    return problems


def question_problems(questions: pd.Series, rows: Rows) -> list[str]:
    """Rows whose question is missing, not text or unusable."""
    problems = []
    for position, text in enumerate(questions):
        row = rows.name(position)
        if isinstance(text, (list, tuple, dict, np.ndarray)):
            problems.append(f"{row}: the question is a {type(text).__name__}, not text; give one question per row")
            continue
        text = "" if pd.api.types.is_scalar(text) and pd.isna(text) else str(text)
        problem = text_problem(text)
        if problem:
            problems.append(f"{row}: the question {problem}")
        elif not tokenize(text):
            problems.append(f"{row}: the question is empty; write it or delete the row")
        elif len(text) > MAX_QUERY_CHARS:
            problems.append(f"{row}: the question has {len(text):,} characters; shorten it to at most "
                            f"{MAX_QUERY_CHARS:,}")
    return problems


def repeated_rows(frame: pd.DataFrame, rows: Rows) -> dict[int, str]:
    """Position -> what is wrong, for each row whose question repeats an earlier row's (the same
    words, as the encoder sees them), saying so when the earlier one is in another cluster. Rows
    whose question is no usable text are ``question_problems``' and left out here."""
    found, first = {}, {}
    clusters = frame["cluster"] if "cluster" in frame.columns else pd.Series([None] * len(frame))
    for position, (text, cluster) in enumerate(zip(frame["question"], clusters)):
        key = " ".join(tokenize(text)) if isinstance(text, str) and not text_problem(text) else ""
        if not key:
            continue
        if key not in first:
            first[key] = position
            continue
        earlier = first[key]
        before = clusters.iloc[earlier]
        where = ("" if _same_cluster(before, cluster) else
                 f" in another cluster ({_label(cluster)}, not {_label(before)})")
        found[position] = f"{rows.name(position)}: the same question as {rows.name(earlier)}{where}"
    return found


def _same_cluster(a: object, b: object) -> bool:
    return (pd.isna(a) and pd.isna(b)) or (not pd.isna(a) and not pd.isna(b) and str(a) == str(b))


def _label(cluster: object) -> str:
    return "no cluster" if pd.isna(cluster) or not str(cluster).strip() else repr(str(cluster))


def cluster_problems(clusters: pd.Series, rows: Rows) -> list[str]:
    """Rows whose cluster cell is not a single label (a list or an object)."""
    return [f"{rows.name(position)}: the cluster is a {type(value).__name__}; give one cluster label per row"
            for position, value in enumerate(clusters) if isinstance(value, (list, tuple, dict, np.ndarray))]


def too_few_clusters(corpus: pd.DataFrame, what: str) -> list[str]:
    """A problem when ``corpus`` has fewer than ``MIN_TRAIN_CLUSTERS`` clusters of 2+ questions."""
    sizes = corpus["cluster"].value_counts()
    trainable = int((sizes >= 2).sum())
    if trainable >= MIN_TRAIN_CLUSTERS:
        return []
    return [f"too few clusters to train: {trainable} {what} of 2 or more questions, at least {MIN_TRAIN_CLUSTERS} "
            "are needed (80:10:10 into train, val and test); add clusters, or import the file as bare questions "
            "to start with BM25 search and build clusters by annotating"]


def refuse(source: str, problems: list[str], numbering: str = "") -> QPRError:
    """One error listing ``problems`` (the first ``LISTED``; the rest counted); ``numbering``
    (``Rows.numbering``) says how the rows named are counted."""
    shown = "\n".join(f"- {p}" for p in problems[:LISTED])
    more = f"\n- ... and {len(problems) - LISTED} more" if len(problems) > LISTED else ""
    how = f" ({numbering})" if numbering else ""
    return QPRError(f"{source}: {len(problems)} problem(s), nothing was imported; fix them and upload again{how}:\n{shown}{more}")


def read_upload(path: str | Path, kind: str, name: str | None = None, columns: dict[str, str] | None = None,
                seed: int = 0, min_coherence: float | None = None, drop_repeats: bool = False) -> Upload:
    """Read and validate the upload ``path`` of ``kind`` (``KINDS``); ``name`` is how messages name
    the file (default: its file name); ``columns`` maps a role (question, cluster, answer) to the
    file's column when it is named otherwise (e.g. BANKING77's ``{"question": "text"}``). Raises
    one ``QPRError`` listing every problem; writes nothing. ``seed`` splits the clusters;
    ``min_coherence`` is the qa-log coherence filter (``qpr.data.supervise``'s default when None).
    A repeated question (not in a qa-log, where a question may come with several answers) is a
    problem, unless ``drop_repeats``: then the first of each is kept and the others dropped, and
    ``Upload.dropped`` says how many, naming the rows whose repeat was in another cluster."""
    path = Path(path)
    source = name or path.name
    if kind not in KINDS:
        raise QPRError(f"unknown kind of file {kind!r}; use one of {', '.join(KINDS)}")
    fmt = CLUSTER_FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise QPRError(f"{source}: unknown file type {path.suffix or '(none)'!r}; upload a "
                       f"{', '.join(e.lstrip('.').upper() for e in CLUSTER_FORMATS)} file")
    limit = max_upload_bytes()
    if path.stat().st_size > limit:
        raise refuse(source, [f"the file has {path.stat().st_size / 1e6:,.1f} MB, over the limit of {megabytes(limit)} "
                              "(QPR_MAX_UPLOAD_MB); split it or ask the app's admin to raise the limit"])
    problems = shape_problems(path, fmt, limit) or encoding_problems(path)
    if problems:
        raise refuse(source, problems)
    try:
        frame = read_table(path, blank_lines=True)  # a blank line is a row: reported, never skipped
        require_rows(frame, path)
    except QPRError as err:
        raise refuse(source, [str(err).replace(f"{path}: ", "")]) from err
    named = {role: (columns or {}).get(role) or role for role in COLUMNS_OF[kind]}
    missing = [f"{column} (the {role})" if column != role else role for role, column in named.items()
               if column not in frame.columns]
    if missing:
        found = ", ".join(map(str, frame.columns)) or "none"
        raise refuse(source, [f"missing column(s) {', '.join(missing)} (found: {found}); a {kind} file needs "
                              f"{', '.join(COLUMNS_OF[kind])}: rename them in the header or name the columns to use"])
    # The chosen columns take the roles' names; another column already called so gives way.
    frame = frame.drop(columns=[r for r, c in named.items() if c != r and r in frame.columns])
    frame = frame.rename(columns={c: r for r, c in named.items()})
    rows = Rows(path, fmt, len(frame))
    problems = question_problems(frame["question"], rows)
    if kind == "clusters":
        problems += cluster_problems(frame["cluster"], rows)
    repeated = {} if kind == "qa-log" else repeated_rows(frame, rows)
    if repeated and not drop_repeats:
        problems += [f"{line}; delete one of them, or choose to drop repeated questions" for line in repeated.values()]
    if problems:
        raise refuse(source, problems, rows.numbering)
    if kind == "qa-log":
        return _supervised(path, source, named, len(frame), seed, min_coherence)
    read = len(frame)
    frame = frame.drop(index=frame.index[list(repeated)]).reset_index(drop=True)
    frame = frame.assign(qid=np.arange(1, len(frame) + 1), question=frame["question"].astype(str))
    if kind == "questions":
        frame = frame.assign(cluster=pd.NA, split="none")
    corpus = check_corpus(frame, source)
    if kind == "clusters":
        if "split" not in frame.columns:
            corpus = split_clusters(corpus, seed)
        problems = too_few_clusters(corpus, "clusters")
        if problems:
            raise refuse(source, problems)
    return Upload(kind, corpus, read, repeats=list(repeated.values()))


def _supervised(path: Path, source: str, named: dict[str, str], rows: int, seed: int,
                min_coherence: float | None) -> Upload:
    """A qa-log's corpus by distant supervision, with its report; refused when too few clusters
    pass the coherence filter."""
    options = {} if min_coherence is None else {"min_coherence": min_coherence}
    result = supervise(read_qa_log(path, named["question"], named["answer"]), seed=seed, **options)
    problems = too_few_clusters(result.corpus, "coherent answer clusters")
    if problems:
        raise refuse(source, problems)
    return Upload("qa-log", result.corpus, rows, summary(result, source),
                  sample_clusters(result, kept=True, n=10), sample_clusters(result, kept=False, n=10))
