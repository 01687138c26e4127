"""The bundle the demo project serves again after a restart: the last one a user confirmed in the
Retrain tab, noted in ``SERVED_POINTER`` under the cache (projects keep theirs in their manifest)."""

from __future__ import annotations

import json
from pathlib import Path

from qpr.fsutil.atomic import atomic_path

SERVED_POINTER = "served-bundle.json"  # under the cache: the last bundle a user confirmed


def remember_served(cache: Path, bundle_path: Path) -> None:
    """Note ``bundle_path`` as the confirmed bundle to serve after a restart (``SERVED_POINTER``
    under ``cache``, replaced atomically)."""
    with atomic_path(Path(cache) / SERVED_POINTER) as tmp:
        tmp.write_text(json.dumps({"bundle": str(Path(bundle_path).resolve())}) + "\n")


def remembered_bundle(cache: Path) -> Path | None:
    """The last confirmed bundle noted under ``cache``, if any and still there."""
    pointer = Path(cache) / SERVED_POINTER
    try:
        path = Path(json.loads(pointer.read_text())["bundle"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return path if path.is_dir() else None
