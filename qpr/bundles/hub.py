"""Bundles on the Hugging Face Hub: fetch one by repository id, push one to a repository.

A bundle folder is already laid out as a Hub model repository (``model.safetensors``, ``config.json``,
the model card ``README.md``: ``qpr.bundles.card``), so the Hub holds it as it is.
``bundle_folder(name)`` is the folder ``name`` names, else the local snapshot of the Hub model
repository ``owner/name`` (``huggingface_hub.snapshot_download``: downloaded once into the Hub
cache; offline, with ``HF_HUB_OFFLINE=1``, read from that cache). ``push`` uploads a bundle,
written afresh first so that it carries safetensors and a card whatever version saved it;
``upload`` is the one commit of a folder to a repository, for bundles and for exports pushed as
Hub datasets (``workflows.hub_export``).
``huggingface_hub`` reads its own variables (``HF_TOKEN``, ``HF_HUB_CACHE``, ``HF_HUB_OFFLINE``).
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from huggingface_hub import HfApi, snapshot_download
from huggingface_hub.errors import (EntryNotFoundError, HfHubHTTPError, HFValidationError, LocalEntryNotFoundError,
                                    RepositoryNotFoundError)

from qpr.bundles.bundle import Bundle
from qpr.errors import QPRError, one_line

REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")  # owner/name, as the Hub spells repository ids
HUB_ERRORS = (HfHubHTTPError, HFValidationError, LocalEntryNotFoundError, OSError)


def is_repo_id(name: str) -> bool:
    """Whether ``name`` is spelled as a Hub repository id (``owner/name``)."""
    return bool(REPO_ID.match(name))


def bundle_folder(name: str | Path) -> Path:
    """The bundle folder ``name`` names: an existing folder as it is, else the snapshot of the Hub
    model repository ``name`` (``owner/name``). QPRError saying what was tried when neither is there."""
    path = Path(name)
    if path.exists() or not is_repo_id(str(name)):
        return path  # Bundle.load names what is wrong with it
    try:
        return Path(snapshot_download(repo_id=str(name), repo_type="model"))
    except HUB_ERRORS as err:
        raise QPRError(f"{name}: no bundle folder there, and no Hub model repository of that name could be fetched "
                       f"({one_line(err)}); give a bundle folder, or a repository id with network access (or "
                       "in the Hugging Face cache when HF_HUB_OFFLINE=1)") from err


def load_bundle(name: str | Path) -> Bundle:
    """The bundle in the folder or Hub repository ``name`` (``bundle_folder``), loaded and checked."""
    return Bundle.load(bundle_folder(name))


def push(bundle: str | Path, repo: str, private: bool = False, api: HfApi | None = None) -> str:
    """Upload the bundle folder ``bundle`` to the Hub model repository ``repo`` (``upload``: one
    commit replacing what it held; returns the commit's URL). The bundle is loaded (checked) and
    saved into a temporary folder first: an older bundle goes up converted (safetensors, a model
    card). QPRError for a bad repository id (before the bundle is loaded), or when the Hub refuses."""
    if not is_repo_id(repo):
        raise QPRError(f"--repo {repo!r}: give a Hub repository id, owner/name")
    loaded = Bundle.load(bundle)
    with tempfile.TemporaryDirectory(prefix="qpr-push-") as tmp:
        folder = loaded.save(Path(tmp) / "bundle")
        return upload(folder, repo, "model", f"qpr bundle {loaded.version}", private=private, api=api)


def upload(folder: Path, repo: str, repo_type: str, message: str, private: bool = False, api: HfApi | None = None) -> str:
    """Commit the files of ``folder`` to the Hub repository ``repo`` of ``repo_type`` ("model",
    "dataset"; created if new, ``private`` then) as one commit with ``message`` that replaces
    whatever the repository held (its ``.gitattributes`` stays); returns the commit's URL.
    QPRError for a bad repository id, or when the Hub refuses (e.g. no token:
    ``huggingface-cli login`` or ``HF_TOKEN``)."""
    if not is_repo_id(repo):
        raise QPRError(f"{repo!r}: give a Hub repository id, owner/name")
    api = api or HfApi()
    try:
        api.create_repo(repo, repo_type=repo_type, private=private, exist_ok=True)
        commit = api.upload_folder(folder_path=folder, repo_id=repo, repo_type=repo_type, delete_patterns=["*"],
                                   commit_message=message)
    except HUB_ERRORS as err:
        raise QPRError(f"pushing to the Hub {repo_type} repository {repo} failed: {one_line(err)}") from err
    return str(getattr(commit, "commit_url", commit))


def fetch_file(repo: str, filename: str, repo_type: str, api: HfApi | None = None) -> Path | None:
    """The local copy of ``filename`` as the Hub repository ``repo`` of ``repo_type`` holds it
    now (downloaded into the Hub cache; offline, read from it); None when the repository or the
    file is not there (or, offline, not in the cache). QPRError when the Hub refuses otherwise."""
    api = api or HfApi()
    try:
        return Path(api.hf_hub_download(repo_id=repo, filename=filename, repo_type=repo_type))
    except (EntryNotFoundError, RepositoryNotFoundError):
        return None
    except HUB_ERRORS as err:
        raise QPRError(f"reading {filename} from the Hub {repo_type} repository {repo} failed: {one_line(err)}") from err
