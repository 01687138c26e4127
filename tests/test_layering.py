"""The project's map, checked from the source with ``ast`` (nothing is imported), so a new module is
checked as soon as it exists.

- Data flows app -> ui -> workflows -> annotations -> qpr, never upward, and ui/ talks to
  workflows/: from qpr/ and annotations/ it imports only the few names in ``UI_MAY_IMPORT`` (the
  error it shows, and the type and constants it displays); harness/ (the app as a
  process, outages, hostile files: what the tests and bench both drive the product with) sits
  above them; bench may import all of them and nothing imports bench: not the product, not
  harness, not the tests (bench's own tests live in bench/tests/).
- No import circle between modules, and no import of the project's own modules inside a function
  (the way a circle is usually dodged); a function may import an optional extra (gensim, MiniLM,
  sentence-transformers, matplotlib, playwright) so that the product runs without it.
- ``qpr`` is sub-packages by concern, each saying its purpose in its ``__init__``, and its parts
  import one another one way only, in ``QPR_ORDER``; only the ``qpr`` command (``qpr/cli/``) and
  bench/ import ``qpr.research``: the library's other parts, annotations, workflows and ui never do.
- Only ``qpr/settings.py`` reads the environment in the product (setting a variable for a library,
  a statement whose result is dropped, is not a read).
- Modules stay small: at most 400 lines in qpr/, annotations/ and workflows/, 250 in ui/.
- ui/ reaches a project only as a ``workflows.project.Project``, looked up once per handler
  (``ctx.current()``) and handed to the workflows: never the page's model or store loose
  (``ctx.model``, ``ctx.store``), which each read the page anew.
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

ROOT = Path(__file__).resolve().parents[1]
PROJECT = ("qpr", "annotations", "workflows", "ui", "harness", "bench")
# harness/ drives the product from outside for the tests and bench: above the product, below both.
FORBIDDEN = {
    "qpr": {"annotations", "workflows", "ui", "app", "harness", "bench"},
    "annotations": {"workflows", "ui", "app", "harness", "bench"},
    "workflows": {"ui", "app", "harness", "bench"},
    "ui": {"app", "harness", "bench"},
    "harness": {"app", "bench", "tests"},
}
MAX_LINES = {"qpr": 400, "annotations": 400, "workflows": 400, "ui": 250}
# What ui/ may not read off the context: the page's served model and store, apart from its project.
LOOSE = {"model", "store"}
# What ui/ may import from qpr/ and annotations/ (``BELOW_WORKFLOWS``): what it shows and never
# calls. Every use case it needs (a function, a class that does something, the settings) comes
# through workflows/, so that the page reads its inputs, calls one workflow and renders.
BELOW_WORKFLOWS = ("qpr", "annotations")
UI_MAY_IMPORT = {
    "qpr.errors.QPRError",  # the error a user can fix: every handler shows it as a warning, and raises it on bad input
    "qpr.serving.slugs.DEMO",  # the built-in demo's slug: the page's and the HTTP API's default project
    "qpr.serving.served_model.Served",  # the served snapshot the tabs display: results, corpus, labels version
    "qpr.model.text.MAX_K",  # the most results a search returns: the HTTP API's bound on k, in its description
    "qpr.bundles.training.COMPARISON_COLUMNS",  # the Retrain tab's old-and-new table, shown empty before a retrain
    "annotations.models.ROLES",  # the roles the Team tab offers, and "any role" in the page's access checks
    "annotations.models.LABELS",  # the labels the My work tab offers for a re-judgment
    "annotations.agreement.AGREEMENT_COLUMNS",  # the Review tab's agreement table, shown empty before it loads
    "annotations.corrections.HISTORY_COLUMNS",  # the Clusters tab's labels history, likewise
    "annotations.merge.MERGE_COLUMNS",  # the Clusters tab's proposed merges, likewise
    "annotations.merge.CONFLICT_COLUMNS",  # the Clusters tab's conflicts, likewise
    "annotations.repositories.roles.ROLE_COLUMNS",  # the Team tab's roles table, likewise
}
# Research protocols and the command line that runs them (``qpr experiment``) may use qpr.research;
# the library's other parts, annotations, workflows and ui may not.
RESEARCH = "qpr.research"
MAY_USE_RESEARCH = ("qpr/research/", "qpr/cli/", "bench/")
# Nothing imports bench but bench itself (its own tests included).
NOT_BENCH = ("qpr", "annotations", "workflows", "ui", "harness", "tests")
# qpr's parts, lowest first: a part imports only parts before it. errors and settings are read by
# all; the model's tokenizer and the evaluation's metrics by every stage that measures itself
# (training's validation, a system's early stopping, the hybrid's fit on the protocol's queries),
# so they sit under the data; the command line runs everything, research included.
QPR_ORDER = ("errors", "settings", "fsutil", "model", "evaluation", "data", "training", "retrieval", "systems",
             "bundles", "serving", "api", "research", "cli", "__init__", "__main__")
# The product, where only qpr/settings.py reads the environment.
PRODUCT = ("qpr", "annotations", "workflows", "ui")
SETTINGS = "qpr/settings.py"
ENVIRONMENT = {"environ", "environb", "getenv", "getenvb"}
# Called as a statement (its result dropped), these only set or remove a variable.
ENVIRONMENT_WRITES = {"setdefault", "pop", "update", "__setitem__", "__delitem__", "clear"}


def modules(*packages: str, root: Path = ROOT) -> list[Path]:
    return sorted(path for package in packages if (root / package).is_dir() for path in (root / package).rglob("*.py"))


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
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


def qpr_part(name: str) -> str:
    """The part of qpr that module ``name`` (dotted, under qpr) belongs to: its sub-package, or the
    loose module (errors, settings, __main__); ``__init__`` for the package itself."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def bench_importers(root: Path = ROOT) -> dict[str, list[str]]:
    """Every module outside bench/ that imports bench, with what it imports."""
    found = {str(path.relative_to(root)): sorted({name for name, _ in imports(path) if name.split(".")[0] == "bench"})
             for path in modules(*NOT_BENCH, root=root)}
    return {path: names for path, names in found.items() if names}


def back_arrows(root: Path = ROOT) -> dict[str, list[str]]:
    """Every qpr module that imports a part of qpr at or after its own in ``QPR_ORDER`` (another part),
    or that belongs to a part the order does not place."""
    found = {}
    for path in modules("qpr", root=root):
        own = qpr_part(module_name(path, root))
        targets = {qpr_part(name) for name, _ in imports(path) if name.split(".")[0] == "qpr" and name != "qpr"}
        wrong = sorted(part for part in targets - {own}
                       if own not in QPR_ORDER or part not in QPR_ORDER or QPR_ORDER.index(part) > QPR_ORDER.index(own))
        if wrong:
            found[str(path.relative_to(root))] = wrong
    return found


def environment_reads(path: Path) -> list[int]:
    """Lines of ``path`` that read the environment: ``os.environ`` or ``os.getenv`` used for a value,
    ``from os import environ``, Gradio's ``get_space()``; not a statement that only sets or removes
    a variable (``os.environ.setdefault(...)``, ``os.environ[name] = ...``)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    parent = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}

    def only_writes(node: ast.AST) -> bool:
        above = parent[node]
        if isinstance(above, ast.Subscript):
            return isinstance(above.ctx, (ast.Store, ast.Del))
        if isinstance(above, ast.Attribute) and above.attr in ENVIRONMENT_WRITES:
            call = parent[above]
            return isinstance(call, ast.Call) and isinstance(parent[call], ast.Expr)
        return False

    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "os" and any(a.name in ENVIRONMENT for a in node.names):
            lines.append(node.lineno)
        elif isinstance(node, ast.Attribute) and node.attr in ENVIRONMENT and isinstance(node.value, ast.Name) \
                and node.value.id == "os" and not only_writes(node):
            lines.append(node.lineno)
        elif isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "get_space":
            lines.append(node.lineno)
    return sorted(lines)


def environment_readers(root: Path = ROOT) -> dict[str, list[int]]:
    """Every product module but qpr/settings.py that reads the environment, with the lines."""
    found = {str(path.relative_to(root)): environment_reads(path) for path in modules(*PRODUCT, root=root)}
    found |= {"app.py": environment_reads(root / "app.py")} if (root / "app.py").is_file() else {}
    return {path: lines for path, lines in found.items() if lines and path != SETTINGS}


def names_below_workflows(path: Path) -> set[str]:
    """What ``path`` imports from qpr/ or annotations/, dotted: ``a.b.name`` for ``from a.b import
    name``, the module itself for ``import a.b``."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names if alias.name.split(".")[0] in BELOW_WORKFLOWS}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and node.module.split(".")[0] in BELOW_WORKFLOWS:
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def ui_past_workflows(root: Path = ROOT) -> dict[str, list[str]]:
    """Every ui/ module that imports from qpr/ or annotations/ a name outside ``UI_MAY_IMPORT``, with those names."""
    found = {str(path.relative_to(root)): sorted(names_below_workflows(path) - UI_MAY_IMPORT)
             for path in modules("ui", root=root)}
    return {path: names for path, names in found.items() if names}


def loose_project_parts(root: Path = ROOT) -> dict[str, list[int]]:
    """Every ui/ module that reads the page's model or store off the context (``ctx.model``,
    ``self.ctx.store``, ...: ``LOOSE`` of a name or attribute ``ctx``), with the lines."""
    found = {}
    for path in modules("ui", root=root):
        lines = sorted({node.lineno for node in ast.walk(ast.parse(path.read_text(), filename=str(path)))
                        if isinstance(node, ast.Attribute) and node.attr in LOOSE
                        and (getattr(node.value, "id", None) == "ctx" or getattr(node.value, "attr", None) == "ctx")})
        if lines:
            found[str(path.relative_to(root))] = lines
    return found


def research_users(root: Path = ROOT) -> set[str]:
    """Every module that imports qpr.research and may not."""
    users = {str(path.relative_to(root)) for path in modules(*PROJECT, root=root)
             if any(name == RESEARCH or name.startswith(RESEARCH + ".") for name, _ in imports(path))}
    return {user for user in users if not user.startswith(MAY_USE_RESEARCH)}


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_package_imports_a_layer_above_it(package):
    found = modules(package)
    assert found or package == "workflows", f"no modules found under {package}/"
    offending = {str(path.relative_to(ROOT)): sorted(imported_packages(path) & FORBIDDEN[package]) for path in found}
    assert {path: names for path, names in offending.items() if names} == {}


def test_ui_talks_to_workflows():
    assert ui_past_workflows() == {}, ("call a workflows function that does the use case (or, for an error, a type "
                                       "or a constant the page only displays, add it to UI_MAY_IMPORT saying why)")


def test_ui_reaches_a_project_only_whole():
    assert loose_project_parts() == {}, ("look the page's project up once (project = self.ctx.current()) and pass it, "
                                         "or take project.model / project.store from it")


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


def test_nothing_but_bench_imports_bench():
    assert bench_importers() == {}, "move what a test needs into the product, or test it through the product's API"


def test_qpr_s_parts_import_one_way():
    assert back_arrows() == {}, f"a part of qpr imports only the parts before it in {QPR_ORDER}"


def test_only_the_settings_read_the_environment():
    assert environment_readers() == {}, "read settings through qpr.settings.settings()"


def test_only_the_command_line_and_bench_import_research():
    assert research_users() == set()


def test_each_rule_fails_on_a_module_that_breaks_it(tmp_path):
    """Each checker above, run on a small tree with one module breaking its rule and one keeping it."""
    sources = {
        "tests/test_x.py": "from bench.startup import start_app\n",
        "tests/test_y.py": "import qpr.bundles.bundle\nfrom harness.app_process import start_app\n",
        "harness/timing.py": "import bench.common\n",
        "qpr/bundles/training.py": "from qpr.serving.served_model import ServedModel\nfrom qpr.retrieval import hybrid\n",
        "qpr/serving/projects.py": "from qpr.bundles.bundle import Bundle\n",
        "qpr/newpart/thing.py": "from qpr.errors import QPRError\n",
        "qpr/training/distributed.py": "import os\n\ndef f():\n    return int(os.environ.get('WORLD_SIZE', '1'))\n",
        "workflows/worker.py": "import os\nenv = os.environ | {'A': '1'}\n",
        "ui/startup.py": "import os\nos.environ.setdefault('G', '1')\nos.environ['H'] = '2'\n",
        "annotations/space.py": "from os import getenv\n",
        "qpr/settings.py": "import os\nX = os.getenv('X')\n",
        "workflows/study.py": "from qpr.research.experiment import run_experiment\n",
        "qpr/cli/commands.py": "from qpr.research.experiment import run_experiment\n",
        "ui/team_tab.py": "from annotations.models import ROLES\nfrom qpr.errors import QPRError\n"
                          "from workflows.project_roles import role_for\n",
        "ui/clusters_tab.py": "from annotations.merge import MERGE_COLUMNS\nfrom annotations.constraints import corrected_clusters\n"
                              "import qpr.serving.projects\n",
        "ui/review_tab.py": "def f(self, ctx, project):\n    project.store.review\n    self.ctx.current().model\n"
                            "    ctx.model.current()\n    return self.ctx.store.review\n",
    }
    for name, text in sources.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert bench_importers(tmp_path) == {"tests/test_x.py": ["bench.startup", "bench.startup.start_app"],
                                         "harness/timing.py": ["bench.common"]}
    assert back_arrows(tmp_path) == {"qpr/bundles/training.py": ["serving"], "qpr/newpart/thing.py": ["errors"]}
    assert environment_readers(tmp_path) == {"qpr/training/distributed.py": [4], "workflows/worker.py": [2],
                                             "annotations/space.py": [1]}
    assert research_users(tmp_path) == {"workflows/study.py"}
    assert ui_past_workflows(tmp_path) == {"ui/clusters_tab.py": ["annotations.constraints.corrected_clusters",
                                                                  "qpr.serving.projects"]}
    assert loose_project_parts(tmp_path) == {"ui/review_tab.py": [4, 5]}


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
