"""Where the code writes CSV or TSV files, found from the source (``ast``): through the
spreadsheet-safe writer (``qpr.data.spreadsheet.write_csv``) or not. A test fails on any unsafe
one in the product; ``python -m bench.reliability_ops csvwriters`` counts them."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PRODUCT = ("qpr", "annotations", "workflows", "ui", "app.py")  # the code that ships, where every CSV must be safe
SAFE_WRITER = ROOT / "qpr" / "data" / "spreadsheet.py"
UNSAFE_CALLS = {"to_csv", "savetxt"}  # pandas' and numpy's writers, whatever the object
CSV_MODULE_WRITERS = {"writer", "DictWriter"}


def _writer(node: ast.AST) -> str | None:
    """The CSV/TSV writer ``node`` calls or imports: "write_csv" (the safe one), an unsafe one, or None."""
    if isinstance(node, ast.ImportFrom) and node.module == "csv":
        return next((f"csv.{a.name}" for a in node.names if a.name in CSV_MODULE_WRITERS), None)
    func = node.func if isinstance(node, ast.Call) else None
    if isinstance(func, ast.Name):
        return "write_csv" if func.id == "write_csv" else None
    if not isinstance(func, ast.Attribute):
        return None
    if func.attr in UNSAFE_CALLS or func.attr == "write_csv":
        return func.attr
    return f"csv.{func.attr}" if func.attr in CSV_MODULE_WRITERS and getattr(func.value, "id", None) == "csv" else None


def csv_writers(roots: list[Path], safe: Path = SAFE_WRITER) -> tuple[list[str], list[str]]:
    """Every place in the Python files under ``roots`` that writes CSV/TSV, as "path:line": those
    through the spreadsheet-safe writer (calls of ``write_csv``), and those that are not (a pandas
    ``to_csv``, ``numpy.savetxt`` or the csv module's ``writer`` / ``DictWriter``, called or
    imported, anywhere but ``safe``, the module that holds the safe writer)."""
    through, unsafe = [], []
    files = [f for root in roots for f in ([root] if root.suffix == ".py" else sorted(root.rglob("*.py")))]
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            name = _writer(node)
            where = f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{getattr(node, 'lineno', 0)}"
            if name == "write_csv":
                through.append(where)
            elif name and path.resolve() != safe.resolve():
                unsafe.append(where)
    return through, unsafe
