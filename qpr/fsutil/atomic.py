"""Atomic file and directory writes that survive ``kill -9``: readers see the old version or the new one.

``atomic_path(target)`` is the one write primitive of the project. The new version is written into a
temporary sibling (``.{name}.tmp-{pid}-{token}``, ``qpr.fsutil.leftovers``) and moved into place
only when it is complete and synced to the disk (``qpr.fsutil.sync``).

A file replaces its target in one ``os.replace``. A directory cannot replace a non-empty one in one
rename, so a swap takes two (old aside, new in); a kill between them is finished by the next reader
or writer (``qpr.fsutil.leftovers.recover``). Groups of files that must change together are
``qpr.fsutil.file_group``'s.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from qpr.errors import QPRError
from qpr.fsutil.leftovers import OURS, clean_leftovers, leftover_name, new_token
from qpr.fsutil.sync import fsync_dir, fsync_tree


def current_umask() -> int:
    """The process's file-creation mask (it can only be read by setting it, so it is set back at once)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def check_same_kind(target: Path, directory: bool) -> None:
    """Refuse to replace something of another kind: that would move a user's file or folder away."""
    if target.is_symlink():
        raise QPRError(f"{target} is a symbolic link; give the path it points to, or a new path (nothing was changed)")
    if directory and target.exists() and not target.is_dir():
        raise QPRError(f"{target} is an existing file, not a folder; choose a new path (nothing was changed)")
    if not directory and target.is_dir():
        raise QPRError(f"{target} is an existing folder; give a file name (nothing was changed)")


def check_writable(target: str | os.PathLike) -> None:
    """Raise QPRError unless ``target``'s folder exists and can be written, or can be created.

    Probes the nearest existing ancestor by creating and removing a temporary folder there, so a
    long job (training) is refused before it starts rather than failing at its end."""
    target = Path(target).absolute()
    ancestor = target.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise QPRError(f"cannot write {target}: {ancestor} is a file, not a folder; choose another path")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=f".{target.name}.probe-", dir=ancestor))
    except OSError as err:
        raise QPRError(f"cannot write {target}: {err.strerror or err} in {ancestor}; choose a path in a folder you "
                       "can write") from err


@contextmanager
def atomic_path(target: str | os.PathLike, directory: bool = False,
                replaceable: Callable[[Path], bool] | None = None, what: str = "folder this program wrote") -> Iterator[Path]:
    """Yield a temporary sibling of ``target`` to write; move it into place only on success.

    The temporary lives in the same folder so the final rename is atomic on one file system, and it
    is synced to the disk before it is moved in. A file replaces its target with one ``os.replace``.
    A directory replacing an existing one is swapped in two renames (old aside, new in); a kill
    between them is repaired by ``recover`` (module doc). On any exception (Ctrl-C too) the
    temporary is removed and ``target`` is untouched. ``target`` must be absent or of the same kind
    (file or directory); anything else, or a folder that cannot be written, raises QPRError. A
    directory replaces an existing non-empty one only if ``replaceable(target)`` says it is one
    this program wrote (``what`` names it in the refusal): a user's folder is never moved away.

    Before writing, leftovers of dead writers of ``target`` are removed (``clean_leftovers``).
    """
    target = Path(target)
    check_same_kind(target, directory)
    if directory and target.is_dir() and any(target.iterdir()) and not (replaceable and replaceable(target)):
        shown = ", ".join(sorted(p.name for p in target.iterdir())[:5])
        raise QPRError(f"{target} is an existing folder that is not a {what} (it holds {shown}); choose a new path, "
                       "or move that folder away yourself (nothing was changed)")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise QPRError(f"cannot create the folder {target.parent}: {err.strerror or err}; choose a path in a folder "
                       "you can write") from err
    clean_leftovers(target)
    token = new_token()
    tmp = leftover_name(target, "tmp", token=token)
    OURS.add(str(tmp))
    try:
        try:
            if directory:
                tmp.mkdir(mode=0o777 & ~current_umask())  # mkdtemp's 0o700 would hide a bundle from the server's user
            else:
                tmp.touch(mode=0o666 & ~current_umask(), exist_ok=False)
        except OSError as err:
            raise QPRError(f"cannot write in {target.parent}: {err.strerror or err}; choose a path in a folder you "
                           "can write") from err
        yield tmp
        fsync_tree(tmp)
        if directory and target.exists():
            old = leftover_name(target, "old", token=token)
            OURS.add(str(old))
            try:
                os.rename(target, old)
                try:
                    os.rename(tmp, target)
                except OSError:
                    if not target.exists():
                        os.rename(old, target)  # put the old one back: target is never left missing
                    raise
                fsync_dir(target.parent)
                shutil.rmtree(old, ignore_errors=True)
            finally:
                OURS.discard(str(old))
        else:
            os.replace(tmp, target)
            fsync_dir(target.parent)
    except BaseException as err:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)
        if isinstance(err, OSError):
            raise QPRError(f"cannot write {target}: {err.strerror or err}; nothing was changed") from err
        raise
    finally:
        OURS.discard(str(tmp))
