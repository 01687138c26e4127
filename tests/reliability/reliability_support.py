"""Helpers of the reliability suite: snapshots of a folder, and child processes killed at a chosen point.

A kill test starts a child Python process whose script patches one function to announce the
point it reached (a marker file) and then sleep; the parent waits for the marker and sends
SIGKILL. No assertion depends on timing: the deadline only turns a child that never reaches the
point into a failure that shows its output.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CHILD_DEADLINE_S = 300

# Prepended to every child script: ``pause(marker)`` writes the marker and sleeps until killed.
PRELUDE = """
import os, sys, time
from pathlib import Path
def pause(reason):
    marker = Path(os.environ["KILL_MARKER"])
    marker.with_name(marker.name + ".tmp").write_text(reason)
    os.replace(marker.with_name(marker.name + ".tmp"), marker)
    time.sleep(3600)
"""


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


def run_until_killed(script: str, args: list[str], marker: Path) -> tuple[int, str, str]:
    """Run ``PRELUDE + script`` with ``args``; SIGKILL it once it writes ``marker``.

    Returns ``(pid, reason written in the marker, the child's output)``. Fails with the child's output if it exits
    or runs past the deadline without reaching the marker."""
    env = os.environ | {
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        "KILL_MARKER": str(marker),
        "OMP_NUM_THREADS": "1",
    }
    child = subprocess.Popen([sys.executable, "-c", PRELUDE + script, *args], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + CHILD_DEADLINE_S
    while not marker.exists() and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    reached = marker.exists()
    if child.poll() is None:
        child.send_signal(signal.SIGKILL)
    output = child.communicate()[0]
    if not reached:
        raise AssertionError(f"the child never reached the kill point (exit {child.returncode}):\n{output[-3000:]}")
    assert child.returncode == -signal.SIGKILL, output[-3000:]
    return child.pid, marker.read_text(), output
