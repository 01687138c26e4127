"""The package's declarations agree with each other: requirements.txt (what a Hugging Face Space
installs) is exactly pyproject.toml's runtime dependencies, and the console scripts name
functions that exist."""

from __future__ import annotations

import importlib
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def requirement_lines(path: Path) -> list[str]:
    """The requirements in a pip requirements file, in order, without comments or blank lines."""
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line]


def test_requirements_txt_is_exactly_the_runtime_dependencies():
    declared = pyproject()["project"]["dependencies"]
    listed = requirement_lines(ROOT / "requirements.txt")
    assert listed == declared, (
        "requirements.txt (installed by a Hugging Face Space) must list exactly pyproject.toml's "
        "[project] dependencies, in the same order: change both together"
    )


def test_only_requirements_txt_remains_and_the_extras_live_in_pyproject():
    assert [path.name for path in ROOT.glob("requirements*.txt")] == ["requirements.txt"], (
        "the extras are pyproject.toml's optional-dependencies (pip install -e '.[dev]'), not requirements files"
    )
    assert {"transformer", "bench", "dev"} <= set(pyproject()["project"]["optional-dependencies"])


def test_the_console_scripts_name_callables():
    for name, target in pyproject()["project"]["scripts"].items():
        module, _, function = target.partition(":")
        found = getattr(importlib.import_module(module), function, None)
        assert callable(found), f"console script {name}: {target} is not a function"
