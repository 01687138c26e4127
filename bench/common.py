"""Helpers every benchmark uses: the machine description, latency and memory probes, result files."""

from __future__ import annotations

import json
import os
import platform
import resource
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from qpr.fsutil.atomic import atomic_path

ROOT = Path(__file__).resolve().parents[1]


def machine() -> str:
    """e.g. 'Linux x86_64, 2 CPUs, Python 3.11.7, torch 2.13.0+cpu, load 0.3'."""
    load = os.getloadavg()[0]
    return (f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
            f"torch {torch.__version__}, {torch.get_num_threads()} torch threads, 1-min load {load:.1f} at write time")


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def latency_ms(search_one: Callable[[object], object], queries: Sequence) -> tuple[float, float]:
    """p50 and p99 wall-clock milliseconds of answering ``queries`` one at a time."""
    search_one(queries[0])  # warm-up: first-call allocations are not what a user waits for
    times = []
    for query in queries:
        start = time.perf_counter()
        search_one(query)
        times.append((time.perf_counter() - start) * 1000)
    return float(np.percentile(times, 50)), float(np.percentile(times, 99))


def write_json(payload: dict, path: Path) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(payload, indent=2) + "\n")


def replace_marked_section(path: Path, name: str, text: str) -> None:
    """Replace the text between ``<!-- name:start -->`` and ``<!-- name:end -->`` in ``path``."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    content = path.read_text()
    if start not in content or end not in content:
        raise SystemExit(f"{path} lacks the markers {start} ... {end}")
    head, rest = content.split(start, 1)
    _, tail = rest.split(end, 1)
    with atomic_path(path) as tmp:
        tmp.write_text(f"{head}{start}\n{text.strip()}\n{end}{tail}")


def markdown_table(rows: list[dict], columns: list[tuple[str, str]]) -> str:
    """A markdown table of ``rows`` with (key, header) ``columns``; floats to 3 decimals."""
    def cell(value):
        if isinstance(value, float):
            return f"{value:.3f}" if abs(value) < 100 else f"{value:,.0f}"
        return "" if value is None else str(value)

    lines = ["| " + " | ".join(h for _, h in columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(r.get(k)) for k, _ in columns) + " |" for r in rows]
    return "\n".join(lines)
