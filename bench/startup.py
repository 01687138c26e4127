"""How long `python app.py` takes to serve the demo corpus: cold (empty bundle cache, so the demo
model is trained first) and warm (the cached bundle is loaded).

Each start is timed from launching the process until the server answers HTTP 200 on its page.
Every run uses a fresh temporary SQLite database; the cold run also a fresh bundle cache.

    python -m bench.startup [--warm-runs 3] [--out bench/results/startup.json]

Writes the JSON result (seconds, machine, corpus size) and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from qpr.data.corpus import read_cluster_file
from ui.demo import DEMO_CORPUS
from qpr.fsutil.atomic import atomic_path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_app(env: dict[str, str], log: Path, limit_s: float = 300) -> tuple[subprocess.Popen, str, float]:
    """Run ``python app.py`` with ``env`` added on a free port; return once it answers HTTP.

    Returns (process, URL, seconds from launch to the first answer). Raises RuntimeError with
    the end of the app's log if it exits or stays silent for ``limit_s`` seconds.
    """
    port = free_port()
    full_env = {k: v for k, v in os.environ.items() if k not in ("QPR_AUTH", "QPR_BUNDLE", "SYSTEM")}
    full_env |= env | {"GRADIO_SERVER_PORT": str(port), "GRADIO_SERVER_NAME": "127.0.0.1", "GRADIO_ANALYTICS_ENABLED": "False"}
    url = f"http://127.0.0.1:{port}/"
    with log.open("w") as out:
        start = time.perf_counter()
        process = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=full_env, stdout=out, stderr=subprocess.STDOUT)
    while True:
        try:
            urllib.request.urlopen(url, timeout=5)
            return process, url, time.perf_counter() - start
        except OSError:
            if process.poll() is not None or time.perf_counter() - start > limit_s:
                stop_app(process)
                raise RuntimeError(f"the app did not come up; end of its log:\n{log.read_text()[-3000:]}")
            time.sleep(0.1)


def stop_app(process: subprocess.Popen) -> None:
    """Ctrl-C the app (Gradio closes its server) and wait; kill it if it lingers."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def timed_start(tmp: Path, cache: Path, name: str) -> float:
    env = {"QPR_CACHE_DIR": str(cache), "QPR_DB_URL": f"sqlite:///{tmp / f'{name}.db'}"}
    process, _, seconds = start_app(env, tmp / f"{name}.log")
    stop_app(process)
    return seconds


def machine() -> dict:
    cpu = platform.processor()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        names = [line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines() if line.startswith("model name")]
        cpu = names[0] if names else cpu
    return {
        "cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(), "system": platform.platform(),
        "load_average_at_start": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--warm-runs", type=int, default=3, help="warm starts to time (the median is reported)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "startup.json")
    args = parser.parse_args(argv)
    corpus = read_cluster_file(DEMO_CORPUS)
    host = machine()
    with tempfile.TemporaryDirectory(prefix="qpr-startup-") as tmp_name:
        tmp = Path(tmp_name)
        cold = timed_start(tmp, tmp / "cache", "cold")
        warm = [timed_start(tmp, tmp / "cache", f"warm{i}") for i in range(args.warm_runs)]
    result = {
        "command": "python app.py",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "cold_start_s": round(cold, 2),
        "warm_start_s": round(statistics.median(warm), 2) if warm else None,
        "warm_runs_s": [round(s, 2) for s in warm],
        "corpus": {"file": str(DEMO_CORPUS.relative_to(ROOT)), "questions": len(corpus),
                   "clusters": int(corpus["cluster"].nunique())},
        "machine": host,
    }
    with atomic_path(args.out) as tmp_out:
        tmp_out.write_text(json.dumps(result, indent=2) + "\n")
    warm_text = f"{result['warm_start_s']:.1f} s" if warm else "not run"
    print("| start | seconds until the app answers HTTP | corpus | machine |")
    print("| --- | --- | --- | --- |")
    print(f"| cold (trains the demo model) | {cold:.1f} s | {len(corpus)} questions | {host['cores']} cores, {host['cpu']} |")
    print(f"| warm (cached bundle, median of {len(warm)}) | {warm_text} | {len(corpus)} questions | {host['cores']} cores, {host['cpu']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
