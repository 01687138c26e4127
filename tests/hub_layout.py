"""A folder laid out as the Hugging Face Hub cache, for loading repositories offline in tests."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

REVISION = "0" * 40


def cache_repo(cache: Path, repo: str, folder: Path, kind: str = "models") -> Path:
    """Put ``folder``'s files into ``cache`` as the Hub cache holds revision main of ``repo``
    (``models--owner--name/snapshots/<rev>/...`` and ``refs/main``); returns the snapshot folder."""
    root = cache / f"{kind}--{repo.replace('/', '--')}"
    snapshot = root / "snapshots" / REVISION
    shutil.copytree(folder, snapshot, dirs_exist_ok=True)
    (root / "refs").mkdir(parents=True, exist_ok=True)
    (root / "refs" / "main").write_text(REVISION)
    return snapshot


@pytest.fixture
def offline_hub(tmp_path, monkeypatch) -> Path:
    """An empty Hub cache under ``tmp_path`` with the Hub offline: what ``HF_HUB_CACHE=<it>`` and
    ``HF_HUB_OFFLINE=1`` give (huggingface_hub reads both once, at import: set on its constants here)."""
    import huggingface_hub.constants as constants

    cache = tmp_path / "hub-cache"
    cache.mkdir()
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    return cache
