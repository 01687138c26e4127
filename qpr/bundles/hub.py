"""Bundles on the Hugging Face Hub: fetch one by repository id, push one to a repository.

A bundle folder is already laid out as a Hub model repository (``model.safetensors``, ``config.json``,
the model card ``README.md``: ``qpr.bundles.card``), so the Hub holds it as it is.
``bundle_folder(name)`` is the folder ``name`` names, else the local snapshot of the Hub model
repository ``owner/name`` (``huggingface_hub.snapshot_download``: downloaded once into the Hub
cache; offline, with ``HF_HUB_OFFLINE=1``, read from that cache). ``push`` uploads a bundle,
written afresh first so that it carries safetensors and a card whatever version saved it.
``huggingface_hub`` reads its own variables (``HF_TOKEN``, ``HF_HUB_CACHE``, ``HF_HUB_OFFLINE``).
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from huggingface_hub import HfApi, snapshot_download
from huggingface_hub.errors import HfHubHTTPError, HFValidationError, LocalEntryNotFoundError

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
    """Upload the bundle folder ``bundle`` to the Hub model repository ``repo`` (created if new,
    ``private`` then), as one commit that replaces whatever the repository held; returns the
    commit's URL. The bundle is loaded (checked) and saved into a temporary folder first: an older
    bundle goes up converted (safetensors, a model card). QPRError for a bad repository id, or
    when the Hub refuses (e.g. no token: ``huggingface-cli login`` or ``HF_TOKEN``)."""
    if not is_repo_id(repo):
        raise QPRError(f"--repo {repo!r}: give a Hub repository id, owner/name")
    loaded = Bundle.load(bundle)
    api = api or HfApi()
    with tempfile.TemporaryDirectory(prefix="qpr-push-") as tmp:
        folder = loaded.save(Path(tmp) / "bundle")
        try:
            api.create_repo(repo, repo_type="model", private=private, exist_ok=True)
            commit = api.upload_folder(folder_path=folder, repo_id=repo, repo_type="model", delete_patterns=["*"],
                                       commit_message=f"qpr bundle {loaded.version}")
        except HUB_ERRORS as err:
            raise QPRError(f"pushing {bundle} to {repo} failed: {one_line(err)}") from err
    return str(getattr(commit, "commit_url", commit))
