"""The project's map, checked from the source with ``ast`` (nothing is imported), so a new module is
checked as soon as it exists.

- Data flows app -> ui -> workflows -> annotations -> qpr, never upward; bench may import all of
  them and nothing imports bench.
- No import circle between modules, and no import of the project's own modules inside a function
  (the way a circle is usually dodged); a function may import an optional extra (gensim, MiniLM,
  sentence-transformers, matplotlib, playwright) so that the product runs without it.
- ``qpr`` is sub-packages by concern, each saying its purpose in its ``__init__``; the product
  never imports ``qpr.research``.
- Modules stay small: at most 400 lines in qpr/, annotations/ and workflows/, 250 in ui/.
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

ROOT = Path(__file__).resolve().parents[1]
PROJECT = ("qpr", "annotations", "workflows", "ui", "bench")
FORBIDDEN = {
    "qpr": {"annotations", "workflows", "ui", "app", "bench"},
    "annotations": {"workflows", "ui", "app", "bench"},
    "workflows": {"ui", "app", "bench"},
    "ui": {"app", "bench"},
}
MAX_LINES = {"qpr": 400, "annotations": 400, "workflows": 400, "ui": 250}
# Research protocols and the command line that runs them may use qpr.research; the product may not.
RESEARCH = "qpr.research"
MAY_USE_RESEARCH = ("qpr/research/", "qpr/cli/", "bench/")


def modules(*packages: str) -> list[Path]:
    return sorted(path for package in packages if (ROOT / package).is_dir() for path in (ROOT / package).rglob("*.py"))


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> list[tuple[str, bool]]:
    """``(module, inside_a_function)`` for every absolute import in ``path``: the module itself
    and, for ``from a import b``, ``a.b`` too (b may be a module)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                found.extend((alias.name, in_function) for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                found.append((child.module, in_function))
                found.extend((f"{child.module}.{alias.name}", in_function) for alias in child.names)
            visit(child, nested)

    visit(tree, False)
    return found


def imported_packages(path: Path) -> set[str]:
    """Top-level names of every module ``path`` imports, wherever the import statement stands."""
    return {name.split(".")[0] for name, _ in imports(path)}


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_package_imports_a_layer_above_it(package):
    found = modules(package)
    assert found or package == "workflows", f"no modules found under {package}/"
    offending = {str(path.relative_to(ROOT)): sorted(imported_packages(path) & FORBIDDEN[package]) for path in found}
    assert {path: names for path, names in offending.items() if names} == {}


def test_no_import_circle():
    paths = modules(*PROJECT)
    names = {module_name(path): i for i, path in enumerate(paths)}
    edges = {(names[module_name(path)], names[target]) for path in paths for target, _ in imports(path)
             if target in names and target != module_name(path)}
    rows, cols = zip(*edges)
    graph = csr_matrix((np.ones(len(edges)), (rows, cols)), shape=(len(names), len(names)))
    count, labels = connected_components(graph, directed=True, connection="strong")
    by_name = sorted(names, key=names.get)
    circles = [sorted(by_name[i] for i in np.flatnonzero(labels == label)) for label in range(count)]
    assert [circle for circle in circles if len(circle) > 1] == []


def test_no_project_import_inside_a_function():
    inside = {str(path.relative_to(ROOT)): sorted(name for name, in_function in imports(path)
                                                 if in_function and name.split(".")[0] in PROJECT)
              for path in modules(*PROJECT)}
    assert {path: names for path, names in inside.items() if names} == {}


def test_the_product_never_imports_research():
    users = {str(path.relative_to(ROOT)) for path in modules(*PROJECT)
             if any(name == RESEARCH or name.startswith(RESEARCH + ".") for name, _ in imports(path))}
    assert {user for user in users if not user.startswith(MAY_USE_RESEARCH)} == set()


def test_qpr_is_sub_packages_that_say_their_purpose():
    loose = sorted(path.name for path in (ROOT / "qpr").glob("*.py"))
    # errors and settings are read by every part; anything else belongs in a sub-package
    assert loose == ["__init__.py", "__main__.py", "errors.py", "settings.py"], "a qpr module belongs in a sub-package"
    packages = sorted(path.parent for path in (ROOT / "qpr").glob("*/__init__.py"))
    assert len(packages) >= 8
    for package in packages:
        doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text()))
        assert doc and len(doc.splitlines()) <= 3, f"{package.name}/__init__.py: say its purpose in a line or two"


@pytest.mark.parametrize("package", sorted(MAX_LINES))
def test_modules_stay_small(package):
    long = {str(path.relative_to(ROOT)): n for path in modules(package)
            if (n := len(path.read_text().splitlines())) > MAX_LINES[package]}
    assert long == {}, f"split these modules by concern (at most {MAX_LINES[package]} lines)"


def test_the_checker_sees_imports_inside_functions(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("import os\n\ndef f():\n    from annotations.store import item_key\n    import ui.page\n")
    assert imported_packages(module) == {"os", "annotations", "ui"}
    assert ("annotations.store.item_key", True) in imports(module) and ("os", False) in imports(module)


def test_app_py_only_starts_the_ui():
    assert imported_packages(ROOT / "app.py") <= {"sys", "ui"}
    assert len((ROOT / "app.py").read_text().splitlines()) < 60
