"""Helpers of the reliability suite: snapshots of a folder. (Child processes killed at a chosen
point are ``harness.killed_child``'s, which bench's crash figures use too.)
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def snapshot(folder: Path) -> dict[str, tuple[int, str]]:
    """Every file under ``folder`` (hidden ones too) with its size and SHA-256; folders as ``dir``."""
    found = {}
    for path in sorted(Path(folder).rglob("*")):
        relative = str(path.relative_to(folder))
        if path.is_symlink():
            found[relative] = (0, "link:" + os.readlink(path))
        elif path.is_dir():
            found[relative] = (0, "dir")
        else:
            found[relative] = (path.stat().st_size, hashlib.sha256(path.read_bytes()).hexdigest())
    return found
