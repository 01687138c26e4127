"""Every benchmark script imports: a script is run by hand, weeks after a change it depended on,
and ``bench.sustained_load`` once stayed broken that way (it imported a client renamed in
``bench.search_load``)."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import bench

SCRIPTS = sorted(module.name for module in pkgutil.iter_modules(bench.__path__, "bench.") if not module.ispkg)


def test_there_are_benchmark_scripts():
    assert "bench.payoff" in SCRIPTS and "bench.sustained_load" in SCRIPTS


@pytest.mark.parametrize("name", SCRIPTS)
def test_each_benchmark_script_imports(name):
    importlib.import_module(name)
