"""How long the general bundle takes to build from a fresh clone (issue 42, part 3).

Clones this checkout's HEAD into a temporary folder and runs the README's command there,
``python -m qpr general --out ...``, with an empty teacher cache (``--teacher-cache`` in the
temporary folder: MiniLM encodes every question, as on a new machine), in this Python (which must
have the benchmark extra, ``pip install -e '.[bench]'``: installing is the README's first command
and is not timed here). Measured from launching the process:

- ``first_output_s``: until its first line on standard error (the bar: within 5 s);
- ``steps``: when each step's line appeared (``general: ...``, ``teacher: ...``), the bars' updates left out;
- ``wall_s``: until it exits, ``train_seconds`` as the build reports it, and ``peak_rss_mb`` of
  the build process (its children's peak resident memory).

    python -m bench.cold_build [--out bench/results/cold_build.json] [--threads 1]

Also run it a second time with ``--warm`` to time the build with the teacher's vectors already
in the cache (the same temporary clone's cache).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import ROOT, machine, write_json

RESULTS = ROOT / "bench" / "results" / "cold_build.json"
STEP = re.compile(r"^(general|teacher|rebase):")  # the build's own step lines, not the bars' updates


def timed_build(clone: Path, cache: Path, threads: int) -> dict:
    """Run the general build in ``clone`` with ``cache`` as its teacher cache; the timings above."""
    env = os.environ | {"OMP_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "qpr", "general", "--out", str(clone / "bundles" / "general"), "--teacher-cache", str(cache)]
    start = time.perf_counter()
    process = subprocess.Popen(command, cwd=clone, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first, steps, pending = None, [], b""
    while chunk := process.stderr.read1(4096):
        now = round(time.perf_counter() - start, 1)
        first = now if first is None else first
        pending += chunk
        *pieces, pending = re.split(rb"[\r\n]", pending)  # a bar redraws its line with \r
        for piece in pieces:
            text = piece.decode("utf-8", "replace").strip()
            if STEP.match(text):
                print(f"{now:8.1f}s  {text}", flush=True)
                steps.append({"at_s": now, "line": text})
    output = process.stdout.read().decode()
    if process.wait() != 0:
        raise SystemExit(f"the build failed (exit {process.returncode}); its last output: {pending.decode(errors='replace')[-2000:]}")
    summary = json.loads(output)  # the build's result: its standard output is that one JSON object
    return {"wall_s": round(time.perf_counter() - start, 1), "first_output_s": first, "steps": steps,
            "train_seconds": summary.get("train_seconds"), "questions": summary.get("questions"),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of the build (the 2-core machine's long runs use 1)")
    parser.add_argument("--keep", type=Path, help="clone into this folder (kept: a second run with --warm reuses its cache)")
    parser.add_argument("--warm", action="store_true", help="time the build again in --keep's clone, its teacher cache filled")
    args = parser.parse_args()
    if args.warm and not (args.keep and (args.keep / "teacher-cache").is_dir()):
        parser.error("--warm needs --keep naming the folder of an earlier run, whose teacher cache it reuses")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, check=True, capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.keep or Path(scratch)
        clone, cache = folder / "clone", folder / "teacher-cache"
        if not args.warm:
            subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        else:
            shutil.rmtree(clone / "bundles", ignore_errors=True)  # the cold run's bundle: the build will not overwrite it
        run = timed_build(clone, cache, args.threads)
    previous = json.loads(args.out.read_text()) if args.out.is_file() else {}
    key = "warm" if args.warm else "cold"
    previous[key] = run | {"commit": head, "threads": args.threads, "machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M")}
    write_json(previous, args.out)
    print(json.dumps(previous[key], indent=1))


if __name__ == "__main__":
    main()
