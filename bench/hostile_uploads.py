"""Uploads built to exhaust the server (``harness.hostile_files``), and what each costs.

The bench runs ``qpr.data.upload.read_upload`` on each in a fresh process and records whether it was
refused with a clear message (a ``QPRError`` naming the problem), the seconds it took and the
process's peak resident memory; a process that only imports the reader gives the baseline.

    python -m bench.hostile_uploads [--scale 1.0]

``scale`` shrinks the files for a quick check (the tests use small ones). Prints JSON;
``bench.reliability_ops`` folds the figures into ``bench/results/reliability.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.common import ROOT
from harness.hostile_files import HOSTILE, csv_huge_field

CHILD = """
import json, sys, time
from qpr.data.upload import read_upload
from qpr.errors import QPRError
start = time.perf_counter()
outcome, message = "read", ""
if sys.argv[1] != "-":
    try:
        read_upload(sys.argv[1], sys.argv[2])
    except QPRError as err:
        outcome, message = "refused", str(err)
# VmHWM: this process's own peak (ru_maxrss would count the parent's memory at fork)
peak = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:")) / 1024
print(json.dumps({"outcome": outcome, "message": message[:400], "seconds": time.perf_counter() - start,
                  "peak_rss_mb": peak}))
"""


def try_upload(path: Path | None, kind: str = "clusters", env: dict | None = None) -> dict:
    """``read_upload`` on ``path`` in a fresh process (None: only the imports, the baseline)."""
    run_env = os.environ | {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"} | (env or {})
    result = subprocess.run([sys.executable, "-c", CHILD, str(path) if path else "-", kind], capture_output=True,
                            text=True, env=run_env, cwd=ROOT, timeout=600)
    if result.returncode:
        return {"outcome": "crashed", "message": result.stderr.strip().splitlines()[-1:], "seconds": None,
                "peak_rss_mb": None}
    return json.loads(result.stdout)


def run_hostile(scale: float = 1.0, log=print) -> dict:
    """Every hostile upload, at the default size limit; the 100 MB field also with the limit
    raised to 200 MB, so that it reaches the field bound instead of the size limit."""
    cases = {}
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        runs = [(key, make, {}) for key, make in HOSTILE.items()]
        runs.append(("csv_huge_field_limit_raised", csv_huge_field, {"QPR_MAX_UPLOAD_MB": "200"}))
        for key, make, env in runs:
            path, kind = make(folder, scale)
            case = try_upload(path, kind, env) | {"file_mb": round(path.stat().st_size / 1e6, 2)}
            log(f"{key}: {case['outcome']} in {case['seconds']} s, peak {case['peak_rss_mb']} MB: {case['message'][:120]}")
            cases[key] = case
            path.unlink()
    baseline = try_upload(None)
    refused = [c for c in cases.values() if c["outcome"] == "refused"]
    return {"tried": len(cases), "refused_cleanly": len(refused),
            "peak_rss_mb": round(max((c["peak_rss_mb"] or 0.0) for c in cases.values()), 1),
            "baseline_rss_mb": round(baseline["peak_rss_mb"], 1),
            "max_seconds": round(max((c["seconds"] or 0.0) for c in cases.values()), 2), "cases": cases}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="file sizes relative to the full ones")
    args = parser.parse_args()
    print(json.dumps(run_hostile(args.scale), indent=1))


if __name__ == "__main__":
    main()
