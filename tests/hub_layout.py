"""A folder laid out as the Hugging Face Hub cache, for loading repositories offline in tests, and
a fake ``HfApi`` that pushes into it."""

from __future__ import annotations

import inspect
import shutil
from pathlib import Path

import pytest
from huggingface_hub import HfApi, hf_hub_download

REVISION = "0" * 40


def cache_repo(cache: Path, repo: str, folder: Path, kind: str = "models", revision: str = REVISION) -> Path:
    """Put ``folder``'s files into ``cache`` as the Hub cache holds ``revision``, the main one, of
    ``repo`` (``models--owner--name/snapshots/<rev>/...`` and ``refs/main``); returns the snapshot folder."""
    root = cache / f"{kind}--{repo.replace('/', '--')}"
    snapshot = root / "snapshots" / revision
    shutil.copytree(folder, snapshot, dirs_exist_ok=True)
    (root / "refs").mkdir(parents=True, exist_ok=True)
    (root / "refs" / "main").write_text(revision)
    return snapshot


class FakeHub:
    """``huggingface_hub.HfApi`` at its boundary: each call is checked against the real method's
    signature; each upload is a new commit, a new revision of the repository in a local folder
    laid out as the Hub cache (so a test loads it back by repository id, offline), and a download
    reads that cache with the real ``hf_hub_download``. The network, tokens and the Hub's own
    handling of the commit are not exercised."""

    def __init__(self, cache: Path) -> None:
        self.cache, self.created, self.commits = cache, [], []

    def create_repo(self, *args, **kwargs):
        call = inspect.signature(HfApi.create_repo).bind(self, *args, **kwargs).arguments
        self.created.append((call["repo_id"], call["repo_type"], call["private"]))

    def upload_folder(self, *args, **kwargs):
        call = inspect.signature(HfApi.upload_folder).bind(self, *args, **kwargs).arguments
        folder = Path(call["folder_path"])
        self.commits.append((call["repo_id"], sorted(p.name for p in folder.iterdir()), call["delete_patterns"],
                             call["commit_message"]))
        revision = f"{len(self.commits):040x}"
        cache_repo(self.cache, call["repo_id"], folder, f"{call['repo_type']}s", revision)
        return f"https://huggingface.co/{call['repo_id']}/commit/{revision}"

    def hf_hub_download(self, *args, **kwargs):
        call = inspect.signature(HfApi.hf_hub_download).bind(self, *args, **kwargs).arguments
        return hf_hub_download(repo_id=call["repo_id"], filename=call["filename"], repo_type=call["repo_type"])


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
