"""What an interrupted write leaves beside its target, whose it is, and how it is cleaned up or finished.

The names of what a write (``qpr.fsutil.atomic``, ``qpr.fsutil.file_group``) leaves beside ``target``
say whose they are:

- ``.{name}.tmp-{pid}-{token}``: the new version being written (a file, or a directory);
- ``.{name}.old-{pid}-{token}``: an existing directory moved aside during a swap;
- ``.{name}.del-{pid}-{token}``: a dead process's leftover being deleted;
- ``.{name}.pub-{pid}-{token}``: a group of files being published together (``atomic_files``).

A directory swap takes two renames (old aside, new in); a kill between them leaves no directory at
``target`` but both complete versions beside it. ``recover(target)`` finishes such a swap: the new
version is complete before the old is moved aside, so it moves ``tmp`` in (or, if that is gone,
``old`` back). ``qpr.bundles.bundle.Bundle.load`` calls it when a bundle is missing, and every write calls
it first; so after a kill at any instant the next reader or writer finds a complete directory.

Every write also removes the leftovers of processes that no longer run (``writer_alive``). A
leftover is claimed by renaming it to ``del`` before it is deleted, so a concurrent recovery can
never move a half-deleted directory into place. The pid test is per machine: a folder shared by
processes in different pid namespaces (containers) should not be written by more than one of them.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import time
from pathlib import Path

from qpr.fsutil.sync import fsync_dir

KINDS = ("tmp", "old", "del", "pub")
SWAP_WAIT_S = 30.0  # how long a reader waits for a live writer to finish a swap it found half-done
# Leftovers this process is writing now, as ``str`` paths: a writer adds its own and discards them when
# done (a past process may have had our pid, so the pid alone cannot say they are ours).
OURS: set[str] = set()


def new_token() -> str:
    """The random part of a leftover's name: two writes of one process never share a name."""
    return secrets.token_hex(4)


def leftover_name(target: Path, kind: str, pid: int | None = None, token: str | None = None) -> Path:
    """The name of a ``kind`` leftover of ``target`` (module doc); this process's pid and a new token by default."""
    return target.with_name(f".{target.name}.{kind}-{os.getpid() if pid is None else pid}-{token or new_token()}")


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


def writer_alive(path: Path, pid: int) -> bool:
    """Whether the process that made leftover ``path`` may still be writing it.

    Our own pid counts only for the leftovers this process registered (after a restart, a container
    often gets the pid its predecessor had). Another pid is alive if ``os.kill(pid, 0)`` finds it,
    unless (on Linux) it is a zombie or started after the leftover was last changed: then the pid
    was reused by a process that cannot have made it (1 s of slack for the clocks' resolution)."""
    if pid == os.getpid():
        return str(path) in OURS
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


def claim_and_remove(path: Path, target: Path) -> None:
    """Delete a dead writer's leftover: rename it first, so no one moves it in while it is deleted."""
    claimed = leftover_name(target, "del")
    try:
        os.rename(path, claimed)
    except OSError:
        return  # someone else claimed or recovered it
    OURS.add(str(claimed))
    try:
        if claimed.is_dir() and not claimed.is_symlink():
            shutil.rmtree(claimed, ignore_errors=True)
        else:
            claimed.unlink(missing_ok=True)
    finally:
        OURS.discard(str(claimed))


_NAMED = re.compile(r"\.(?P<name>.+)\.(?P<kind>tmp|old|del|pub)-(?P<pid>\d+)-(?P<token>[0-9a-f]{8})")


def targets_with_leftovers(folder: Path, kinds: tuple[str, ...]) -> set[str]:
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
    for name in sorted({target.name} | targets_with_leftovers(target.parent, ("tmp", "old", "del"))):
        each = target.with_name(name)
        recover(each, wait=0)
        for path, kind, pid, _token_ in leftovers(each):
            if kind != "pub" and not writer_alive(path, pid):
                claim_and_remove(path, each)
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
            if writer_alive(old, pid):
                live = True
                continue
            new = leftover_name(target, "tmp", pid, token)
            for candidate in (new, old):
                if candidate.is_dir():
                    try:
                        os.rename(candidate, target)
                    except OSError:
                        pass  # another process recovered it first, or target reappeared
                    if target.exists():
                        fsync_dir(target.parent)
                        return True
        if not live or time.monotonic() >= deadline:
            return target.exists()
        time.sleep(0.05)
