"""The app as its users start it: ``python app.py`` in a process of its own on a free localhost
port, stopped as Ctrl-C stops it; and its first start on an empty cache, followed until the
trained encoder is served. The browser tests drive the app through these, and ``bench.startup``
times them.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from gradio_client import Client

from workflows.demos import BANKING_EXAMPLES

ROOT = Path(__file__).resolve().parents[1]
# What the app logs once the trained encoder is served (workflows.first_training).
TRAINED = "serving the trained demo model"


def free_port() -> int:
    """A localhost port free now (the app is started on it at once)."""
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
        process = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=full_env, stdout=out, stderr=subprocess.STDOUT,
                                   preexec_fn=as_from_a_terminal)
    while True:
        try:
            urllib.request.urlopen(url, timeout=5)
            return process, url, time.perf_counter() - start
        except OSError:
            if process.poll() is not None or time.perf_counter() - start > limit_s:
                stop_app(process)
                raise RuntimeError(f"the app did not come up; end of its log:\n{log.read_text()[-3000:]}")
            time.sleep(0.1)


def as_from_a_terminal() -> None:
    """Run in the app's process before ``app.py`` starts: Ctrl-C (SIGINT) handled as a terminal's
    foreground command finds it. A shell without job control starts a background command with SIGINT
    ignored, and that is inherited: under such a CI run, Python never raised KeyboardInterrupt in the
    app, so every ``stop_app`` waited its 30 s and killed it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def stop_app(process: subprocess.Popen) -> None:
    """Ctrl-C the app (Gradio closes its server) and wait; kill it if it lingers."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def cold_start(tmp: Path, cache: Path, limit_s: float = 900) -> dict:
    """The first start on an empty cache: seconds until HTTP, until the first search answers,
    until the trained encoder is served (the app is stopped once it is, so its bundle is cached)."""
    log = tmp / "cold.log"
    process, url, http_s = start_app({"QPR_CACHE_DIR": str(cache), "QPR_DB_URL": f"sqlite:///{tmp / 'cold.db'}"}, log)
    launched = time.perf_counter() - http_s
    try:
        table = Client(url, verbose=False).predict(BANKING_EXAMPLES[0], 10, False, api_name="/search")[0]
        first_answer = time.perf_counter() - launched
        if not table["data"]:
            raise RuntimeError(f"the first search returned no results: {table}")
        while TRAINED not in log.read_text():
            if process.poll() is not None or time.perf_counter() - launched > limit_s:
                raise RuntimeError(f"the trained encoder was not served; end of the log:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)
        trained = time.perf_counter() - launched
    finally:
        stop_app(process)
    lines = [line for line in log.read_text().splitlines() if "[qpr demo]" in line]
    return {"http": http_s, "first_answer": first_answer, "trained": trained, "log": lines}
