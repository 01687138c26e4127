"""Atomic file and directory writes that survive ``kill -9``: readers see the old version or the new one.

``atomic_path(target)`` is the one write primitive of the project. The new version is written into a
temporary sibling and moved into place only when it is complete; the names of what a write leaves
beside ``target`` say whose they are:

- ``.{name}.tmp-{pid}-{token}``: the new version being written (a file, or a directory);
- ``.{name}.old-{pid}-{token}``: an existing directory moved aside during a swap;
- ``.{name}.del-{pid}-{token}``: a dead process's leftover being deleted;
- ``.{name}.pub-{pid}-{token}``: a group of files being published together (``atomic_files``).

A file replaces its target in one ``os.replace``. A directory cannot replace a non-empty one in one
rename, so a swap takes two (old aside, new in) and a kill between them leaves no directory at
``target`` but both complete versions beside it. ``recover(target)`` finishes such a swap: the new
version is complete before the old is moved aside, so it moves ``tmp`` in (or, if that is gone,
``old`` back). ``qpr.bundles.bundle.Bundle.load`` calls it when a bundle is missing, and every write calls
it first; so after a kill at any instant the next reader or writer finds a complete directory.

Every write also removes the leftovers of processes that no longer run (``_writer_alive``). A
leftover is claimed by renaming it to ``del`` before it is deleted, so a concurrent recovery can
never move a half-deleted directory into place. The pid test is per machine: a folder shared by
processes in different pid namespaces (containers) should not be written by more than one of them.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from qpr.errors import QPRError

KINDS = ("tmp", "old", "del", "pub")
SWAP_WAIT_S = 30.0  # how long a reader waits for a live writer to finish a swap it found half-done
_OURS: set[str] = set()  # leftovers this process is writing now (a past process may have had our pid)


def _token() -> str:
    return secrets.token_hex(4)


def _leftover_name(target: Path, kind: str, pid: int | None = None, token: str | None = None) -> Path:
    return target.with_name(f".{target.name}.{kind}-{os.getpid() if pid is None else pid}-{token or _token()}")


def leftovers(target: str | os.PathLike) -> list[tuple[Path, str, int, str]]:
    """``(path, kind, pid, token)`` of every write leftover beside ``target`` (see the module doc).

    Names of the older ``.{name}.tmp-{random}`` form are listed with pid 0 (no such process)."""
    target = Path(target)
    found = []
    try:
        entries = list(os.scandir(target.parent))
    except OSError:
        return []
    for entry in entries:
        for kind in KINDS:
            prefix = f".{target.name}.{kind}-"
            if not entry.name.startswith(prefix):
                continue
            rest = entry.name[len(prefix):]
            match = re.fullmatch(r"(\d+)-(\w+)", rest)
            if match:
                found.append((Path(entry.path), kind, int(match.group(1)), match.group(2)))
            elif kind == "tmp" and re.fullmatch(r"\w{8}", rest):  # tempfile's name before pids were added
                found.append((Path(entry.path), kind, 0, rest))
            elif kind == "old" and rest.isdigit():  # a swap's old directory before tokens were added
                found.append((Path(entry.path), kind, int(rest), ""))
    return sorted(found)


def _process_start(pid: int) -> float | None:
    """When process ``pid`` started (epoch seconds; Linux), or None where that cannot be read.
    A zombie (exited, not yet reaped) counts as not started: -inf is never returned, so use inf."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        fields = stat[stat.rindex(")") + 2:].split()
        if fields[0] in ("Z", "X"):
            return float("inf")
        boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime "))
        return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def _writer_alive(path: Path, pid: int) -> bool:
    """Whether the process that made leftover ``path`` may still be writing it.

    Our own pid counts only for the leftovers this process registered (after a restart, a container
    often gets the pid its predecessor had). Another pid is alive if ``os.kill(pid, 0)`` finds it,
    unless (on Linux) it is a zombie or started after the leftover was last changed: then the pid
    was reused by a process that cannot have made it (1 s of slack for the clocks' resolution)."""
    if pid == os.getpid():
        return str(path) in _OURS
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: it exists
    except OverflowError:
        return False
    started = _process_start(pid)
    if started is None:
        return True
    try:
        changed = path.lstat().st_mtime
    except FileNotFoundError:
        return False
    return started <= changed + 1.0


def _claim_and_remove(path: Path, target: Path) -> None:
    """Delete a dead writer's leftover: rename it first, so no one moves it in while it is deleted."""
    claimed = _leftover_name(target, "del")
    try:
        os.rename(path, claimed)
    except OSError:
        return  # someone else claimed or recovered it
    _OURS.add(str(claimed))
    try:
        if claimed.is_dir() and not claimed.is_symlink():
            shutil.rmtree(claimed, ignore_errors=True)
        else:
            claimed.unlink(missing_ok=True)
    finally:
        _OURS.discard(str(claimed))


_NAMED = re.compile(r"\.(?P<name>.+)\.(?P<kind>tmp|old|del|pub)-(?P<pid>\d+)-(?P<token>[0-9a-f]{8})")


def _targets_with_leftovers(folder: Path, kinds: tuple[str, ...]) -> set[str]:
    """Names of the targets in ``folder`` that have leftovers of ``kinds`` in this module's naming
    (pid and 8 hex digits: nothing a person names a file)."""
    try:
        names = os.listdir(folder)
    except OSError:
        return set()
    return {match["name"] for match in map(_NAMED.fullmatch, names) if match and match["kind"] in kinds}


def clean_leftovers(target: str | os.PathLike) -> list[Path]:
    """Remove the leftovers of dead writers in ``target``'s folder (never a live writer's); returns them.

    Those of ``target`` itself, and those of any other target in the folder (the app saves each
    bundle version under a new name, so a leftover's own target may never be written again).
    An interrupted swap is finished first (``recover``), so its leftovers are not lost with it.
    Publications (``pub``) are ``recover_files``' to finish or undo."""
    target = Path(target)
    removed = []
    for name in sorted({target.name} | _targets_with_leftovers(target.parent, ("tmp", "old", "del"))):
        each = target.with_name(name)
        recover(each, wait=0)
        for path, kind, pid, _token_ in leftovers(each):
            if kind != "pub" and not _writer_alive(path, pid):
                _claim_and_remove(path, each)
                removed.append(path)
    return removed


def recover(target: str | os.PathLike, wait: float = SWAP_WAIT_S) -> bool:
    """Finish a directory swap that a dead writer left half-done; True if ``target`` exists after.

    With ``target`` missing and ``.{name}.old-{pid}-{token}`` beside it, the writer died between
    its two renames. Its ``tmp`` of the same token is complete (old is moved aside only after the
    new version was written and synced), so it is moved in; failing that, ``old`` is moved back.
    If the writer still runs, its second rename is imminent: wait up to ``wait`` seconds for it.
    """
    target = Path(target)
    deadline = time.monotonic() + wait
    while True:
        if target.exists() or target.is_symlink():
            return True
        aside = [(path, pid, token) for path, kind, pid, token in leftovers(target) if kind == "old"]
        if not aside:
            return False
        live = False
        for old, pid, token in aside:
            if _writer_alive(old, pid):
                live = True
                continue
            new = _leftover_name(target, "tmp", pid, token)
            for candidate in (new, old):
                if candidate.is_dir():
                    try:
                        os.rename(candidate, target)
                    except OSError:
                        pass  # another process recovered it first, or target reappeared
                    if target.exists():
                        _fsync_dir(target.parent)
                        return True
        if not live or time.monotonic() >= deadline:
            return target.exists()
        time.sleep(0.05)


def _fsync_dir(path: Path) -> None:
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


def _fsync_tree(path: Path) -> None:
    """Flush a written file, or every file and folder of a written directory, to the disk."""
    if path.is_dir():
        for root, _dirs, files in os.walk(path):
            for name in files:
                with open(os.path.join(root, name), "rb") as handle:
                    os.fsync(handle.fileno())
            _fsync_dir(Path(root))
    else:
        with open(path, "rb") as handle:
            os.fsync(handle.fileno())


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _check_target(target: Path, directory: bool) -> None:
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
    _check_target(target, directory)
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
    token = _token()
    tmp = _leftover_name(target, "tmp", token=token)
    _OURS.add(str(tmp))
    try:
        try:
            if directory:
                tmp.mkdir(mode=0o777 & ~_umask())  # mkdtemp's 0o700 would hide a bundle from the server's user
            else:
                tmp.touch(mode=0o666 & ~_umask(), exist_ok=False)
        except OSError as err:
            raise QPRError(f"cannot write in {target.parent}: {err.strerror or err}; choose a path in a folder you "
                           "can write") from err
        yield tmp
        _fsync_tree(tmp)
        if directory and target.exists():
            old = _leftover_name(target, "old", token=token)
            _OURS.add(str(old))
            try:
                os.rename(target, old)
                try:
                    os.rename(tmp, target)
                except OSError:
                    if not target.exists():
                        os.rename(old, target)  # put the old one back: target is never left missing
                    raise
                _fsync_dir(target.parent)
                shutil.rmtree(old, ignore_errors=True)
            finally:
                _OURS.discard(str(old))
        else:
            os.replace(tmp, target)
            _fsync_dir(target.parent)
    except BaseException as err:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)
        if isinstance(err, OSError):
            raise QPRError(f"cannot write {target}: {err.strerror or err}; nothing was changed") from err
        raise
    finally:
        _OURS.discard(str(tmp))


# -- groups of files ----------------------------------------------------------------------------

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
        _fsync_tree(self.stage / "new")
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
    _fsync_tree(tmp)
    os.replace(tmp, stage / JOURNAL)
    _fsync_dir(stage)


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
    _fsync_dir(marker.parent)


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
    _fsync_dir(marker.parent)


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
        if kind != "pub" or _writer_alive(stage, pid):
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
        _claim_and_remove(stage, marker)
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
        _check_target(target, directory=False)
    try:
        targets[0].parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise QPRError(f"cannot create the folder {targets[0].parent}: {err.strerror or err}; choose a path in a "
                       "folder you can write") from err
    recover_files(targets[-1], committed)
    for other in _targets_with_leftovers(targets[-1].parent, ("pub",)) - {targets[-1].name}:
        recover_files(targets[-1].with_name(other))  # other exports in the folder: what needs no asking
    for target in targets:
        clean_leftovers(target)
    stage = _leftover_name(targets[-1], "pub")
    _OURS.add(str(stage))
    group = FileGroup(targets, stage)
    try:
        try:
            (stage / "new").mkdir(parents=True, mode=0o777 & ~_umask())
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
        _OURS.discard(str(stage))
