"""The settings: every variable's default, bad values named, read once (that no other module reads
the environment is checked with the layers, tests/test_layering.py)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from workflows.cli import main as annotations_main
from qpr.cli.main import main as qpr_main
from qpr.settings import SHARED_DATA, Settings, SettingsError, environment, settings

ROOT = Path(__file__).resolve().parents[1]
VARIABLES = ["QPR_DATA_DIR", "QPR_CACHE_DIR", "QPR_DB_URL", "QPR_BUNDLE", "QPR_DEMO", "QPR_GENERAL", "QPR_AUTH", "QPR_ADMINS",
             "QPR_TASK_SIZE", "QPR_MAX_UPLOAD_MB", "QPR_MAX_SERVED_MB", "QPR_OVERLAP", "QPR_COALESCE_SEARCHES", "QPR_DEVICE",
             "SYSTEM", "SPACE_ID", "WORLD_SIZE"]


@pytest.fixture
def bare(monkeypatch):
    """An environment without any of the settings' variables."""
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)


def test_every_variable_is_a_field_under_its_exact_name():
    assert sorted(field.validation_alias for field in Settings.model_fields.values()) == sorted(VARIABLES)


def test_defaults(bare):
    read = settings()
    assert (read.data_dir, read.cache_dir, read.db_url, read.bundle, read.general) == (SHARED_DATA, Path("runs"), None, None, None)
    assert (read.auth, read.admins, read.task_size, read.max_upload_mb, read.overlap) == (None, (), None, 50.0, None)
    assert read.space is None and read.max_served_mb == 2000.0 and read.demo == "banking77"
    assert (read.coalesce_searches, read.device, read.world_size) == (True, "auto", 1)
    assert SHARED_DATA == ROOT.parent / "shared" / "data"


def test_values_are_parsed(bare, monkeypatch):
    monkeypatch.setenv("QPR_AUTH", "alice:s1, bob:pa:ss")
    monkeypatch.setenv("QPR_ADMINS", " Alice ,bob,")
    monkeypatch.setenv("QPR_TASK_SIZE", " 30 ")
    monkeypatch.setenv("QPR_MAX_UPLOAD_MB", "2.5")
    monkeypatch.setenv("QPR_OVERLAP", "2")
    monkeypatch.setenv("QPR_CACHE_DIR", "/tmp/qpr-cache")
    monkeypatch.setenv("WORLD_SIZE", "4")
    read = settings()
    assert read.world_size == 4
    assert read.auth == [("alice", "s1"), ("bob", "pa:ss")] and read.admins == ("Alice", "bob")
    assert (read.task_size, read.max_upload_mb, read.overlap, read.cache_dir) == (30, 2.5, 2, Path("/tmp/qpr-cache"))


def test_empty_and_blank_values_mean_unset_as_before(bare, monkeypatch):
    for name in ("QPR_DB_URL", "QPR_BUNDLE", "QPR_GENERAL"):
        monkeypatch.setenv(name, "")
    for name in ("QPR_AUTH", "QPR_ADMINS", "QPR_TASK_SIZE", "QPR_MAX_UPLOAD_MB", "QPR_OVERLAP"):
        monkeypatch.setenv(name, "  ")
    read = settings()
    assert (read.db_url, read.bundle, read.general, read.auth, read.admins) == (None, None, None, None, ())
    assert (read.task_size, read.max_upload_mb, read.overlap) == (None, 50.0, None)


def test_a_space_is_known_by_system_and_space_id(bare, monkeypatch):
    monkeypatch.setenv("SPACE_ID", "someone/qpr")
    assert settings().space is None, "SPACE_ID alone is not a Space (Gradio's rule)"
    monkeypatch.setenv("SYSTEM", "spaces")
    assert settings().space == "someone/qpr"


def test_names_are_case_sensitive_like_the_environment(bare, monkeypatch):
    monkeypatch.setenv("qpr_task_size", "30")
    assert settings().task_size is None


def test_each_bad_value_is_named_with_what_it_expects(bare, monkeypatch):
    monkeypatch.setenv("QPR_TASK_SIZE", "2.5")
    monkeypatch.setenv("QPR_MAX_UPLOAD_MB", "lots")
    monkeypatch.setenv("QPR_MAX_SERVED_MB", "all")
    monkeypatch.setenv("QPR_OVERLAP", "zero")
    monkeypatch.setenv("QPR_AUTH", "alice")
    with pytest.raises(SettingsError) as err:
        settings()
    assert str(err.value).splitlines() == [
        "QPR_AUTH must be user:password pairs separated by commas, e.g. alice:secret1,bob:secret2",
        "QPR_TASK_SIZE must be a whole number of pairs, 1 or more, e.g. 2000; got '2.5'",
        "QPR_MAX_UPLOAD_MB must be a positive number of megabytes, e.g. 50; got 'lots'",
        "QPR_MAX_SERVED_MB must be a positive number of megabytes, e.g. 2000; got 'all'",
        "QPR_OVERLAP must be a positive whole number (annotators per item); got 'zero'",
    ]


@pytest.mark.parametrize("name, value", [("QPR_TASK_SIZE", "0"), ("QPR_TASK_SIZE", "-5"), ("QPR_MAX_UPLOAD_MB", "0"),
                                         ("QPR_MAX_UPLOAD_MB", "nan"), ("QPR_MAX_SERVED_MB", "0"), ("QPR_OVERLAP", "-1"), ("QPR_AUTH", ":pw")])
def test_out_of_range_values_are_refused(bare, monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError, match=f"^{name} must be"):
        settings()


def test_read_once_until_the_cache_is_cleared(bare):
    first = settings()
    os.environ["QPR_TASK_SIZE"] = "30"  # not through monkeypatch, which clears the cache itself
    try:
        assert settings() is first and first.task_size is None, "read once"
        settings.cache_clear()
        assert settings().task_size == 30
    finally:
        del os.environ["QPR_TASK_SIZE"]
        settings.cache_clear()


def test_the_settings_are_frozen(bare):
    with pytest.raises(ValueError):
        settings().task_size = 5


@pytest.mark.parametrize("command", ["qpr", "annotations"])
def test_a_command_reports_a_bad_setting_in_one_line(bare, monkeypatch, capsys, command):
    monkeypatch.setenv("QPR_TASK_SIZE", "lots")
    main = {"qpr": qpr_main, "annotations": annotations_main}[command]
    assert main(["--help"]) == 2
    assert capsys.readouterr().err == "error: QPR_TASK_SIZE must be a whole number of pairs, 1 or more, e.g. 2000; got 'lots'\n"


def test_the_readme_lists_every_variable():
    section = (ROOT / "README.md").read_text().split("## Settings\n", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `([A-Z_]+)`(?:, `([A-Z_]+)`)?", section, flags=re.M))
    assert {name for row in listed for name in row if name} == set(VARIABLES)


def test_a_worker_is_handed_this_process_environment_with_its_overrides(bare, monkeypatch):
    monkeypatch.setenv("QPR_TASK_SIZE", "30")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    handed = environment(OMP_NUM_THREADS="1")
    assert handed["QPR_TASK_SIZE"] == "30" and handed["OMP_NUM_THREADS"] == "1"
    assert "OMP_NUM_THREADS" not in environment()  # this process' own environment is left as it was
