"""Uploads built to exhaust the server (``harness.hostile_files``), and what each costs.

The bench runs ``qpr.data.upload.read_upload`` on each in a fresh process and records whether it was
refused with a clear message (a ``QPRError`` naming the problem), the seconds it took and the
process's peak resident memory; a process that only imports the reader gives the baseline.

    python -m bench.hostile_uploads [--scale 1.0] [--parquet]

``scale`` shrinks the files for a quick check (the tests use small ones). ``--parquet`` runs only
the Parquet bombs, at full size, each through three readers: ``read_upload`` alone, the same in a
process that has loaded the app's modules first (the projects tab, Gradio, torch: the app's own
baseline), and ``read_cluster_file`` (what ``qpr train --data`` reads). Prints JSON;
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
from harness.hostile_files import HOSTILE, PARQUET_BOMBS, csv_huge_field

CHILD = """
import json, sys, time
from pathlib import Path
if sys.argv[3] == "app":  # the app's process: its page modules (Gradio, torch, the projects tab) loaded first
    import ui.projects_tab
from qpr.data.corpus import read_cluster_file
from qpr.data.upload import read_upload
from qpr.errors import QPRError

def status(key):  # VmHWM: this process's own peak (ru_maxrss would count the parent's memory at fork)
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith(key + ":")) / 1024

before = status("VmRSS")
start = time.perf_counter()
outcome, message = "read", ""
if sys.argv[1] != "-":
    try:
        if sys.argv[3] == "train":  # what qpr train --data reads
            read_cluster_file(sys.argv[1])
        else:  # as the projects tab's import calls it
            read_upload(sys.argv[1], sys.argv[2], name=Path(sys.argv[1]).name, columns={})
    except QPRError as err:
        outcome, message = "refused", str(err)
print(json.dumps({"outcome": outcome, "message": message[:400], "seconds": time.perf_counter() - start,
                  "peak_rss_mb": status("VmHWM"), "rss_before_mb": before, "rss_after_mb": status("VmRSS")}))
"""
READERS = ("upload", "app", "train")  # read_upload alone, in a process with the app's modules, read_cluster_file


def try_upload(path: Path | None, kind: str = "clusters", env: dict | None = None, reader: str = "upload") -> dict:
    """``read_upload`` on ``path`` in a fresh process (None: only the imports, the baseline);
    ``reader`` (``READERS``) "app" loads the app's modules first, "train" reads it as ``qpr train`` does."""
    run_env = os.environ | {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"} | (env or {})
    result = subprocess.run([sys.executable, "-c", CHILD, str(path) if path else "-", kind, reader], capture_output=True,
                            text=True, env=run_env, cwd=ROOT, timeout=600)
    if result.returncode:
        return {"outcome": "crashed", "message": result.stderr.strip().splitlines()[-1:], "seconds": None,
                "peak_rss_mb": None}
    return json.loads(result.stdout)


def run_parquet_bombs(log=print) -> dict:
    """Every Parquet bomb at full size through each reader (``READERS``), each in a fresh process."""
    cases = {}
    with tempfile.TemporaryDirectory() as name:
        for make in PARQUET_BOMBS:
            path, kind = make(Path(name))
            for reader in READERS:
                case = try_upload(path, kind, reader=reader) | {"file_bytes": path.stat().st_size}
                log(f"{make.__name__} ({reader}): {case['outcome']} in {case['seconds']} s, peak {case['peak_rss_mb']} MB "
                    f"(from {case.get('rss_before_mb')}): {str(case['message'])[-120:]}")
                cases[f"{make.__name__}/{reader}"] = case
            path.unlink()
    baselines = {reader: try_upload(None, reader=reader)["peak_rss_mb"] for reader in READERS}
    return {"tried": len(PARQUET_BOMBS), "refused": sum(c["outcome"] == "refused" for c in cases.values()),
            "runs": len(cases), "peak_rss_mb": round(max((c["peak_rss_mb"] or 0.0) for c in cases.values()), 1),
            "max_growth_mb": round(max(c["peak_rss_mb"] - c["rss_before_mb"] for c in cases.values()
                                       if c["peak_rss_mb"] is not None), 1),
            "max_seconds": round(max((c["seconds"] or 0.0) for c in cases.values()), 2),
            "baseline_rss_mb": baselines, "cases": cases}


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
    parser.add_argument("--parquet", action="store_true", help="only the Parquet bombs, through each reader")
    args = parser.parse_args()
    log = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731 - progress apart from the JSON
    print(json.dumps(run_parquet_bombs(log) if args.parquet else run_hostile(args.scale, log), indent=1))


if __name__ == "__main__":
    main()
