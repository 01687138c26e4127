"""Spreadsheet-safe text cells: CSV/TSV files a spreadsheet opens without running a formula.

A spreadsheet evaluates a cell whose text begins with ``=``, ``+``, ``-``, ``@``, a tab or a
carriage return (OWASP, "CSV Injection"), so a question such as ``=HYPERLINK("http://x", "y")``
from an upload or a typed query would become a live formula when an annotator opens an export.
``neutralise`` puts a single quote before such a text: the spreadsheet shows it as text.

The rule is made reversible by quoting a text that already begins with a quote as well, so
``restore`` (strip one leading quote where it is followed by one of those characters or by a quote)
gives back exactly the text that was written, whatever it was: ``restore(neutralise(s)) == s``.
``write_csv`` is the one writer of CSV/TSV files in the product (``qpr.data.corpus.write_table``,
the supervision report's tables): it neutralises every text cell, and ``qpr.data.corpus.read_table``
restores them; JSONL and Parquet are not opened by spreadsheets and are left as is.
tests/reliability/test_spreadsheet.py finds any other CSV/TSV writer in the product's code.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

TRIGGERS = ("=", "+", "-", "@", "\t", "\r")  # OWASP: what makes a spreadsheet read a cell as a formula
QUOTE = "'"


def neutralise(text: str) -> str:
    """``text`` with a leading quote when a spreadsheet would evaluate it (or it begins with a quote)."""
    return QUOTE + text if text.startswith(TRIGGERS + (QUOTE,)) else text


def restore(text: str) -> str:
    """The text ``neutralise`` was given: one leading quote removed where ``neutralise`` put it."""
    return text[1:] if text.startswith(QUOTE) and text[1:].startswith(TRIGGERS + (QUOTE,)) else text


def _text_columns(frame: pd.DataFrame) -> list:
    return [c for c in frame.columns if frame[c].dtype == object or isinstance(frame[c].dtype, pd.StringDtype)]


def _map_text(frame: pd.DataFrame, function) -> pd.DataFrame:
    columns = _text_columns(frame)
    if not columns:
        return frame
    out = frame.copy()
    for column in columns:
        out[column] = out[column].map(lambda v: function(v) if isinstance(v, str) else v, na_action="ignore")
    return out


def neutralise_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``frame`` with every text cell neutralised (numbers and missing values as they are)."""
    return _map_text(frame, neutralise)


def restore_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``frame`` with every text cell restored (the inverse of ``neutralise_frame``)."""
    return _map_text(frame, restore)


def write_csv(frame: pd.DataFrame, path: str | Path, sep: str = ",") -> None:
    """Write ``frame`` (without its index) as CSV, or TSV with ``sep="\\t"``, every text cell neutralised.

    RFC 4180's CRLF line ends: the csv writer quotes a cell holding any character of the line
    terminator, so a lone CR inside a question is quoted instead of ending the row."""
    neutralise_frame(frame).to_csv(path, sep=sep, index=False, lineterminator="\r\n")
