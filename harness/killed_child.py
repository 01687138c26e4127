"""Child processes killed at a chosen point, for the kill tests and the bench's crash figures.

A child Python process runs a script that patches one function to announce the point it reached
(a marker file) and then sleep; the parent waits for the marker and sends SIGKILL. Nothing
depends on timing: the deadline only turns a child that never reaches the point into a failure
that shows its output.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
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


def run_until_killed(script: str, args: list[str], marker: Path) -> tuple[int, str, str]:
    """Run ``PRELUDE + script`` with ``args``; SIGKILL it once it writes ``marker``.

    Returns ``(pid, reason written in the marker, the child's output)``. Fails with the child's output if it exits
    or runs past the deadline without reaching the marker."""
    env = os.environ | {
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
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
