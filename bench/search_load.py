"""Concurrent searches against the running app: a lone search, then C clients at once.

Starts ``python app.py`` (the demo corpus) with ``harness.app_process.start_app`` and calls the
Search tab's endpoint through Gradio's API (``gradio_client``): first one client searching alone, then
``clients`` threads each searching ``per_client`` times, back to back (a burst) or after a think
time. Latency is what a client waits from submitting to the result.

    python -m bench.search_load [--clients 20] [--per-client 10] [--think-ms 0] [--cache DIR]
"""

from __future__ import annotations

import argparse
import http.client
import json
import urllib.parse
import urllib.request
import os
import tempfile
import threading
import time
import uuid
from pathlib import Path

import numpy as np

from harness.app_process import start_app, stop_app

QUERIES = ["how do i learn python", "what is the best way to lose weight", "how can i improve my english",
           "why is the sky blue", "how to make money online", "what is machine learning"]


class GradioClient:
    """Gradio's plain HTTP API (POST /gradio_api/call/search, then read the event's SSE stream):
    ``gradio_client`` spent 62 ms of CPU per request here against the server's 17 ms, so on 2
    cores the load generator, not the app, set the latency. Each client keeps one session, as a
    browser page and ``gradio_client.Client`` do: without one, the server builds a new session
    (a copy of every component's config) per request, a quarter of its CPU per search."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self.session = uuid.uuid4().hex

    def predict(self, *data, api_name: str) -> list:
        body = {"data": list(data), "session_hash": self.session}
        request = urllib.request.Request(f"{self.url}/gradio_api/call{api_name}", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            event = json.loads(response.read())["event_id"]
        with urllib.request.urlopen(f"{self.url}/gradio_api/call{api_name}/{event}", timeout=60) as response:
            kind = None
            for line in response:
                line = line.decode().strip()
                if line.startswith("event:"):
                    kind = line.split(":", 1)[1].strip()
                elif line.startswith("data:") and kind in ("complete", "error"):
                    if kind == "error":
                        raise RuntimeError(line[5:].strip())
                    return json.loads(line[5:])
        raise RuntimeError("the event stream ended without a result")

    def search(self, query: str, k: int = 10) -> list:
        return self.predict(query, k, False, api_name="/search")


class HttpClient:
    """The app's own HTTP search API (``ui.http_api``: GET /api/search, JSON), one keep-alive
    connection per client, as a program calling it would keep. ``http.client`` rather than
    httpx: the load generator shares the two cores with the server, so its own CPU per request
    must stay small (as ``GradioClient``'s)."""

    def __init__(self, url: str) -> None:
        parts = urllib.parse.urlsplit(url)
        self.connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)

    def search(self, query: str, k: int = 10) -> list:
        self.connection.request("GET", "/api/search?" + urllib.parse.urlencode({"q": query, "k": k}))
        response = self.connection.getresponse()
        body = response.read()
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}: {body[:200]!r}")
        return json.loads(body)["results"]


CLIENTS = {"gradio": GradioClient, "http": HttpClient}


def server_cpu_s(pid: int | None) -> float:
    """CPU seconds (user + system) the process ``pid`` has used so far; 0 without a pid."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_search_load(url: str, clients: int = 20, per_client: int = 10, lone: int = 20, think_ms: float = 0.0,
                    pid: int | None = None, seed: int = 0, via: str = "gradio") -> dict:
    """A lone client's median latency, then ``clients`` clients searching ``per_client`` times
    each: back to back (``think_ms`` 0: a burst, every client always waiting on the server) or
    after a think time drawn from an exponential distribution of mean ``think_ms`` (people
    reading results between searches). Each client has searched once before the clock starts, as
    an open page has its session before its user searches. With ``pid``, also the server's CPU
    per search. ``via``: the Search tab's endpoint through Gradio's API ("gradio") or the app's own
    HTTP search API ("http")."""
    client = CLIENTS[via]
    alone = client(url)
    alone.search(QUERIES[0])  # warm-up
    single = []
    for i in range(lone):
        start = time.perf_counter()
        alone.search(QUERIES[i % len(QUERIES)])
        single.append((time.perf_counter() - start) * 1000)
    pool = [client(url) for _ in range(clients)]
    for searcher in pool:  # as a page does when it loads: its session exists before its first search
        searcher.search(QUERIES[0])
    pauses = np.random.default_rng(seed).exponential(think_ms / 1000, size=(clients, per_client)) if think_ms else np.zeros((clients, per_client))
    barrier = threading.Barrier(clients)
    latencies, errors, lock = [], [], threading.Lock()

    def worker(n: int) -> None:
        mine = []
        barrier.wait()
        for i in range(per_client):
            time.sleep(pauses[n, i])
            start = time.perf_counter()
            try:
                pool[n].search(QUERIES[(n + i) % len(QUERIES)] + f" {i}")
            except Exception as err:  # counted
                with lock:
                    errors.append(f"{type(err).__name__}: {err}")
            mine.append((time.perf_counter() - start) * 1000)
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(clients)]
    cpu_before, started = server_cpu_s(pid), time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    cpu, burst_s = server_cpu_s(pid) - cpu_before, time.perf_counter() - started
    lat = np.asarray(latencies)
    return {"search_clients": clients, "per_client": per_client, "think_ms": think_ms,
            "search_single_ms": float(np.median(single)),
            "search_p50_ms": float(np.percentile(lat, 50)), "search_p99_ms": float(np.percentile(lat, 99)),
            "search_max_ms": float(lat.max()), "server_cpu_ms_per_search": cpu * 1000 / lat.size if pid else None,
            "errors": len(errors), "error_examples": errors[:3], "burst_s": burst_s,
            "searches_per_s": lat.size / burst_s, "via": via}


def with_app(cache: Path, action):
    """Start the app on the demo corpus (bundle cached in ``cache``), run ``action(url, pid)``, stop it."""
    with tempfile.TemporaryDirectory() as tmp:
        # The hand-written tutorial corpus, as measured before BANKING77 became the default demo.
        env = {"QPR_CACHE_DIR": str(cache), "QPR_DB_URL": f"sqlite:///{Path(tmp) / 'app.db'}", "QPR_DEMO": "tutorial",
               "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        process, url, _ = start_app(env, Path(tmp) / "app.log")
        try:
            return action(url, process.pid)
        finally:
            stop_app(process)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--per-client", type=int, default=10)
    parser.add_argument("--think-ms", type=float, default=0.0, help="mean think time between a client's searches (0: a burst)")
    parser.add_argument("--cache", default="runs")
    args = parser.parse_args()
    print(with_app(Path(args.cache), lambda url, pid: run_search_load(url, args.clients, args.per_client,
                                                                      think_ms=args.think_ms, pid=pid)))


if __name__ == "__main__":
    main()
