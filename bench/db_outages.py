"""The annotation database goes away mid-session and comes back (``harness.db_outages``): every
outage this machine allows, with what writers saw and what was kept.

    python -m bench.db_outages
"""

from __future__ import annotations

import json

from harness.db_outages import can_mount, postgres_restart, sqlite_disk_full


def run_outages(log=print) -> dict:
    """Every outage this machine allows: PostgreSQL restarted, SQLite's disk full (real when a
    tmpfs can be mounted, and simulated)."""
    runs = [postgres_restart()]
    if can_mount():
        runs.append(sqlite_disk_full("tmpfs"))
    runs.append(sqlite_disk_full("pages"))
    for run in runs:
        log(json.dumps(run))
    return {"tried": len(runs), "lost": sum(r["lost"] for r in runs),
            "recovered": sum(r["recovered"] and not r["other_errors"] for r in runs), "runs": runs}


if __name__ == "__main__":
    print(json.dumps(run_outages(), indent=1))
