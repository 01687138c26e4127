"""The project's import rule: data flows app -> ui -> workflows -> annotations -> qpr, never upward.

Read from the source with ``ast`` (nothing is imported), so a new module is checked as soon as
it exists: no module of ``qpr`` imports ``annotations``, ``workflows`` or the UI, ``annotations``
imports neither ``workflows`` nor the UI, ``workflows`` does not import the UI, and ``app.py``
stays the thin entry point that only starts the UI.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {"qpr": {"annotations", "workflows", "ui", "app", "bench"}, "annotations": {"workflows", "ui", "app", "bench"},
             "workflows": {"ui", "app", "bench"}, "ui": {"app", "bench"}}


def imported_packages(path: Path) -> set[str]:
    """Top-level names of every module ``path`` imports, wherever the import statement stands."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_package_imports_a_layer_above_it(package):
    modules = sorted((ROOT / package).rglob("*.py"))
    assert modules, f"no modules found under {package}/"
    offending = {str(path.relative_to(ROOT)): sorted(imported_packages(path) & FORBIDDEN[package]) for path in modules}
    assert {path: names for path, names in offending.items() if names} == {}


def test_the_checker_sees_imports_inside_functions(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from annotations.store import item_key\n    import ui.page\n")
    assert imported_packages(module) == {"annotations", "ui"}


def test_app_py_only_starts_the_ui():
    assert imported_packages(ROOT / "app.py") <= {"sys", "ui"}
    assert len((ROOT / "app.py").read_text().splitlines()) < 60
