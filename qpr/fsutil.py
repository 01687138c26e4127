"""Atomic file and directory writes: readers see the old version or the new one, never half."""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


@contextmanager
def atomic_path(target: str | os.PathLike, directory: bool = False) -> Iterator[Path]:
    """Yield a temporary sibling of ``target`` to write; move it into place only on success.

    The temporary lives in the same folder so the final rename is atomic on one file system.
    A file replaces its target with one ``os.replace``. A directory replacing an existing one is
    swapped in two renames (old aside, new in), so at every instant either a complete old or a
    complete new directory exists under ``target`` or beside it. On any exception (Ctrl-C too)
    the temporary is removed and ``target`` is untouched.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    prefix = f".{target.name}.tmp-"
    if directory:
        tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=target.parent))
    else:
        handle, name = tempfile.mkstemp(prefix=prefix, dir=target.parent)
        os.close(handle)  # callers reopen the path; an unclosed descriptor would leak per write
        tmp = Path(name)
    try:
        yield tmp
        if directory and target.exists():
            old = target.with_name(f".{target.name}.old-{os.getpid()}")
            os.replace(target, old)
            os.replace(tmp, target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, target)
    except BaseException:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)
        raise
