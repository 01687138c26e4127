"""Flushing what a write produced to the disk, so that a rename never publishes data still only in memory.

A rename is atomic but not durable by itself: after a power cut the new name may point at a file whose
content never reached the disk. Every write here syncs its new version before moving it in, and the
folder after.
"""

from __future__ import annotations

import os
from pathlib import Path


def fsync_dir(path: Path) -> None:
    """Flush a folder's entries (the renames done in it) to the disk, where its file system can."""
    try:
        handle = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(handle)
    except OSError:
        pass  # some file systems cannot sync a directory; the rename is still atomic
    finally:
        os.close(handle)


def fsync_tree(path: Path) -> None:
    """Flush a written file, or every file and folder of a written directory, to the disk."""
    if path.is_dir():
        for root, _dirs, files in os.walk(path):
            for name in files:
                with open(os.path.join(root, name), "rb") as handle:
                    os.fsync(handle.fileno())
            fsync_dir(Path(root))
    else:
        with open(path, "rb") as handle:
            os.fsync(handle.fileno())
