"""Readers for question -> answer logs, the input of distant supervision (``qpr.data.supervise``).

A log read here is a DataFrame with one row per logged question and the columns ``question``
(str) and ``answers`` (list of str: the answer texts or ids that answered it, possibly empty).
Answers are kept as logged; ``qpr.data.supervise`` normalises them before grouping.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from qpr.data.corpus import check_questions, data_dir, read_table, require_rows
from qpr.errors import QPRError, one_line


def read_log_table(path: str | Path) -> pd.DataFrame:
    """A log as a table: CSV / TSV / JSONL / Parquet via ``qpr.data.corpus.read_table``, or a ``.json``
    file holding one array of records (the shape many FAQ data sets ship in)."""
    path = Path(path)
    if path.suffix.lower() != ".json":
        return read_table(path)
    records = _load_json(path)
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise QPRError(f"{path}: a .json log must be one array of objects (records); use JSONL otherwise")
    return pd.DataFrame.from_records(records)


def squad_table(path: str | Path) -> pd.DataFrame:
    """SQuAD v1.1 as a log: one row per question, answered by its first gold answer's text.

    The first gold answer is the span the question's author marked, the closest thing SQuAD has
    to "the answer a QA system returned". ``title`` and ``paragraph`` say where the span lies.
    """
    path = Path(path)
    payload = _load_json(path)
    try:
        rows = [
            (qa["question"], qa["answers"][0]["text"] if qa["answers"] else None, article["title"], number)
            for article in payload["data"]
            for number, paragraph in enumerate(article["paragraphs"])
            for qa in paragraph["qas"]
        ]
    except (KeyError, TypeError, IndexError) as err:
        raise QPRError(
            f"{path}: not a SQuAD v1.1 file (expected {{'data': [{{'title', 'paragraphs': [{{'qas': "
            f"[{{'question', 'answers': [{{'text'}}]}}]}}]}}]}}; missing {one_line(err)})"
        ) from err
    return pd.DataFrame(rows, columns=["question", "answer", "title", "paragraph"])


def _load_json(path: Path):
    if not path.is_file():
        raise QPRError(f"{path}: no such file")
    try:
        with path.open(encoding="utf-8") as handle:
            return json.load(handle)
    except (ValueError, OSError, UnicodeDecodeError) as err:
        raise QPRError(f"{path}: not a readable JSON file ({one_line(err)})") from err


def _missing(value) -> bool:
    """None, NaN or pd.NA: an empty cell, whatever the file format made of it."""
    return pd.api.types.is_scalar(value) and pd.isna(value)


def _answer_list(cell, separator: str | None) -> list[str]:
    """The answers in one log cell: a list (JSONL / Parquet), a scalar, or a separated string."""
    if isinstance(cell, (list, tuple, np.ndarray)):
        items = list(cell)
    elif isinstance(cell, str) and separator:
        items = cell.split(separator)
    else:
        items = [cell]
    return [str(item).strip() for item in items if not _missing(item) and str(item).strip()]


def read_qa_log(
    path: str | Path,
    question_col: str = "question",
    answer_col: str = "answer",
    answer_sep: str | None = None,
    table_reader: Callable[[Path], pd.DataFrame] = read_log_table,
) -> pd.DataFrame:
    """Read a question -> answer log into columns ``question`` and ``answers`` (list of str).

    ``answer_col`` holds an answer text or id per question, or several: a list (JSONL / Parquet)
    or, with ``answer_sep``, a string such as ``"12|40"``. Empty answers leave the question with
    none (it still goes into the index, in no cluster).
    """
    path = Path(path)
    frame = table_reader(path)
    require_rows(frame, path)
    missing = [c for c in (question_col, answer_col) if c not in frame.columns]
    if missing:
        found = ", ".join(map(str, frame.columns)) or "none"
        raise QPRError(
            f"{path}: missing column(s) {', '.join(missing)}; found {found} "
            "(choose them with --question-col / --answer-col)"
        )
    questions = frame[question_col].map(lambda q: "" if _missing(q) else str(q))
    check_questions(questions, path, column=f"question ({question_col})")
    answers = frame[answer_col].map(lambda cell: _answer_list(cell, answer_sep))
    return pd.DataFrame({"question": questions, "answers": answers}).reset_index(drop=True)


@dataclass(frozen=True)
class Preset:
    """How to read one of the shared real logs: its file under ``data_dir()`` and its columns."""

    path: str
    question_col: str
    answer_col: str
    table_reader: Callable[[Path], pd.DataFrame] = read_log_table


# The logs in ../shared/data (see its README). BANKING77: the intent is the answer that serves
# the query; InsuranceQA: answer ids (a list per question); COVID FAQ: the answer text (its
# "label" column is 1 everywhere); SQuAD: the first gold answer's text.
PRESETS: dict[str, Preset] = {
    "banking77": Preset("intents/banking77/train.csv", "text", "category"),
    "insuranceqa-v2": Preset("qa-logs/insuranceqa-v2/questions.jsonl", "question", "answer_labels"),
    "covid-faq": Preset("qa-logs/covid-faq/query_answer_pairs.json", "question", "answer"),
    "squad-v1.1-dev": Preset("qa-logs/squad-v1.1-dev/dev-v1.1.json", "question", "answer", squad_table),
}


def read_log(
    path: str | Path | None = None,
    preset: str | None = None,
    question_col: str | None = None,
    answer_col: str | None = None,
    answer_sep: str | None = None,
) -> pd.DataFrame:
    """A log from ``path``, from a preset's file in ``data_dir()``, or from ``path`` read the way
    ``preset`` reads (e.g. BANKING77's test.csv). Columns default to the preset's, else
    ``question`` and ``answer``."""
    if preset is None:
        if path is None:
            raise QPRError(f"give a log file, or a preset: {', '.join(PRESETS)}")
        return read_qa_log(path, question_col or "question", answer_col or "answer", answer_sep)
    if preset not in PRESETS:
        raise QPRError(f"unknown preset {preset!r}; use one of {', '.join(PRESETS)}")
    spec = PRESETS[preset]
    return read_qa_log(
        path or data_dir() / spec.path,
        question_col or spec.question_col,
        answer_col or spec.answer_col,
        answer_sep,
        spec.table_reader,
    )
