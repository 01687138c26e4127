"""Groups of files in one folder that change together or not at all (an export: data, pairs, manifest).

``atomic_files(targets)`` yields a ``FileGroup``: its files are staged in ``.{marker}.pub-{pid}-{token}``
(``qpr.fsutil.leftovers``) and published with a journal, so that a writer killed at any instant is
finished or rolled back by the next one (``recover_files``). See ``FileGroup`` for the steps.
"""

from __future__ import annotations

import json
import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from qpr.errors import QPRError
from qpr.fsutil.atomic import check_same_kind, current_umask
from qpr.fsutil.leftovers import (OURS, claim_and_remove, clean_leftovers, leftover_name, leftovers,
                                  targets_with_leftovers, writer_alive)
from qpr.fsutil.sync import fsync_dir, fsync_tree

JOURNAL = "journal.json"


class FileGroup:
    """Files in one folder that must change together (an export: data, pairs, manifest).

    No rename replaces several names at once, so a group is published from a staging folder
    ``.{marker}.pub-{pid}-{token}`` (``marker``: the last target, whose presence says the group is
    complete) with a journal:

    1. every new file is written under ``path(target)`` and synced;
    2. ``publish`` writes the journal (targets, the caller's ``note``), moves the old marker aside
       first, then each other target (old aside, new in), and the new marker last;
    3. the caller makes it count (e.g. commits the database row that records it) and ``commit``
       marks the journal committed; the staging folder, with the old versions, is then removed.

    Until step 3 the old versions are kept in the staging folder, so ``rollback`` restores them.
    At every instant the marker is either absent or beside the files it describes. A writer killed
    in between leaves the journal; ``recover_files`` asks the caller whether step 3 happened
    (``committed(note)``) and finishes the publication or rolls it back.
    """

    def __init__(self, targets: list[Path], stage: Path) -> None:
        self.targets = targets
        self.stage = stage
        self.note: dict | None = None
        self.committed = False

    @property
    def marker(self) -> Path:
        return self.targets[-1]

    def path(self, target: str | os.PathLike) -> Path:
        """Where to write the new version of ``target``."""
        return self.stage / "new" / Path(target).name

    def publish(self, note: dict | None = None) -> None:
        """Move the staged files into place (marker last), keeping the old ones to roll back to.
        Calling it again first undoes the earlier call (a retried database transaction)."""
        self.rollback()
        missing = [t.name for t in self.targets if not self.path(t).is_file()]
        if missing:
            raise RuntimeError(f"publish before writing {', '.join(missing)}")
        self.note = note or {}
        fsync_tree(self.stage / "new")
        _write_journal(self.stage, {"state": "publishing", "targets": [t.name for t in self.targets], "note": self.note})
        _place(self.stage, self.targets)

    def rollback(self) -> None:
        """Put every target back as it was before ``publish`` (nothing if it was not called)."""
        if (self.stage / JOURNAL).is_file():
            _unplace(self.stage, self.targets)
            (self.stage / JOURNAL).unlink()

    def commit(self) -> None:
        """Record that the publication counts: from now on a recovery finishes it, never undoes it."""
        _write_journal(self.stage, {"state": "committed", "targets": [t.name for t in self.targets], "note": self.note})
        self.committed = True


def _write_journal(stage: Path, content: dict) -> None:
    tmp = stage / f"{JOURNAL}.tmp"
    tmp.write_text(json.dumps(content))
    fsync_tree(tmp)
    os.replace(tmp, stage / JOURNAL)
    fsync_dir(stage)


def _place(stage: Path, targets: list[Path]) -> None:
    """Old marker aside; every other target old aside, new in; new marker in. Idempotent, so a
    recovery can finish a publication that was interrupted anywhere in it."""
    (stage / "old").mkdir(exist_ok=True)
    marker = targets[-1]
    for target in [marker, *targets[:-1]]:
        new, old = stage / "new" / target.name, stage / "old" / target.name
        if target.exists() and new.exists() and not old.exists():
            os.replace(target, old)  # the old version moves aside once: what rollback restores
        if target is not marker and new.exists():
            os.replace(new, target)
    if (stage / "new" / marker.name).exists():
        os.replace(stage / "new" / marker.name, marker)
    fsync_dir(marker.parent)


def _unplace(stage: Path, targets: list[Path]) -> None:
    """Undo ``_place`` from wherever it stopped: the marker goes first, so it never describes a mix."""
    marker = targets[-1]
    for target in [marker, *targets[:-1]]:
        new, old = stage / "new" / target.name, stage / "old" / target.name
        if old.exists():
            if target.exists() and not new.exists():
                os.replace(target, new)  # the placed new version goes back to the stage
            os.replace(old, target)
        elif not new.exists() and target.exists():
            os.replace(target, new)  # placed, and there was no old version
    fsync_dir(marker.parent)


def recover_files(marker: str | os.PathLike, committed: Callable[[dict], bool] | None = None) -> list[Path]:
    """Finish or undo the publications of dead writers whose marker is ``marker`` (``FileGroup``).

    A publication whose journal says committed, or whose note ``committed`` confirms, is finished;
    one that was being published is rolled back if ``committed`` denies it, and left alone if there
    is no ``committed`` to ask; one never published is dropped. Returns the staging folders
    handled. ``committed`` may raise (e.g. an unreachable database): the journal then stays for
    the next attempt."""
    marker = Path(marker)
    handled = []
    for stage, kind, pid, _token_ in leftovers(marker):
        if kind != "pub" or writer_alive(stage, pid):
            continue
        try:
            journal = json.loads((stage / JOURNAL).read_text())
            targets = [marker.with_name(name) for name in journal["targets"]]
        except FileNotFoundError:
            journal, targets = None, []  # never published: nothing outside the stage changed
        except (ValueError, KeyError, TypeError, OSError):
            continue  # not a journal this code wrote: leave it for a person to look at
        if journal is not None:
            if journal.get("state") == "committed":
                done = True
            elif committed is None:
                continue  # only the caller that recorded it can tell
            else:
                done = committed(journal.get("note") or {})
            (_place if done else _unplace)(stage, targets)
        claim_and_remove(stage, marker)
        handled.append(stage)
    return handled


@contextmanager
def atomic_files(targets: list[str | os.PathLike], committed: Callable[[dict], bool] | None = None) -> Iterator[FileGroup]:
    """Yield a ``FileGroup`` to write ``targets`` (one folder; the last is the marker) as one change.

    The caller writes each new file to ``group.path(target)``, then calls ``group.publish(note)``
    and, once the publication counts, ``group.commit()``. Leaving the block without ``commit``
    (an exception, or no call) rolls everything back; after ``commit`` the old versions are
    removed. Earlier publications of dead writers are first finished or undone
    (``recover_files(marker, committed)``). Targets must be absent or files; a folder that cannot
    be written raises QPRError, and so does any OSError on the way (after the rollback).
    """
    targets = [Path(t) for t in targets]
    if len({t.parent for t in targets}) != 1 or len(set(targets)) != len(targets):
        raise ValueError(f"atomic_files needs distinct files in one folder, got {targets}")
    for target in targets:
        check_same_kind(target, directory=False)
    try:
        targets[0].parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise QPRError(f"cannot create the folder {targets[0].parent}: {err.strerror or err}; choose a path in a "
                       "folder you can write") from err
    recover_files(targets[-1], committed)
    for other in targets_with_leftovers(targets[-1].parent, ("pub",)) - {targets[-1].name}:
        recover_files(targets[-1].with_name(other))  # other exports in the folder: what needs no asking
    for target in targets:
        clean_leftovers(target)
    stage = leftover_name(targets[-1], "pub")
    OURS.add(str(stage))
    group = FileGroup(targets, stage)
    try:
        try:
            (stage / "new").mkdir(parents=True, mode=0o777 & ~current_umask())
        except OSError as err:
            raise QPRError(f"cannot write in {targets[0].parent}: {err.strerror or err}; choose a path in a folder "
                           "you can write") from err
        yield group
        if not group.committed:
            group.rollback()
        shutil.rmtree(stage, ignore_errors=True)
    except BaseException as err:
        try:
            if not group.committed:
                group.rollback()
            shutil.rmtree(stage, ignore_errors=True)
        except OSError:
            pass  # the journal stays: recover_files undoes it on the next write
        if isinstance(err, OSError):
            raise QPRError(f"cannot write {targets[0]}: {err.strerror or err}; nothing was changed") from err
        raise
    finally:
        OURS.discard(str(stage))
