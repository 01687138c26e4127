"""Uploads built to exhaust the server, from small generators (nothing committed), and what each costs.

Each generator writes one hostile file into a folder and returns its path and upload kind. The
bench runs ``qpr.data.upload.read_upload`` on each in a fresh process and records whether it was
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
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from bench.common import ROOT


def parquet_bomb(folder: Path, scale: float = 1.0) -> tuple[Path, str]:
    """A few-kilobyte Parquet whose dictionary-encoded question column decodes to ~10 GB."""
    rows = int(10_000_000 * scale)
    question = pa.DictionaryArray.from_arrays(pa.array(np.zeros(rows, dtype="int32")), pa.array(["why " * 250]))
    cluster = pa.DictionaryArray.from_arrays(pa.array(np.zeros(rows, dtype="int32")), pa.array(["c"]))
    path = folder / "bomb.parquet"
    pq.write_table(pa.table({"question": question, "cluster": cluster}), path, compression="zstd")
    return path, "clusters"


def _repeated(folder: Path, name: str, value: str, rows: int) -> Path:
    """A Parquet of ``rows`` rows whose question is ``value`` in every row (cluster "c"):
    dictionary-encoded, zstd, without statistics, and without pyarrow's Arrow schema (as other
    writers leave it), so a reader not told otherwise decodes the text into every row."""
    question = pa.DictionaryArray.from_arrays(pa.array(np.zeros(rows, dtype="int32")), pa.array([value]))
    cluster = pa.DictionaryArray.from_arrays(pa.array(np.zeros(rows, dtype="int32")), pa.array(["c"]))
    path = folder / name
    pq.write_table(pa.table({"question": question, "cluster": cluster}), path, compression="zstd",
                   write_statistics=False, store_schema=False)
    return path


def parquet_dictionary_256kb(folder: Path, scale: float = 1.0) -> tuple[Path, str]:
    """Under a kilobyte: a dictionary holding one 256 KB text, repeated in 20,000 rows (5 GB decoded)."""
    return _repeated(folder, "dict256k.parquet", "a" * 262_144, max(int(20_000 * scale), 2)), "clusters"


def parquet_dictionary_100kb(folder: Path, scale: float = 1.0) -> tuple[Path, str]:
    """Under a kilobyte: one 100 KB text (under the cell bound) repeated in 20,000 rows (2 GB decoded)."""
    return _repeated(folder, "dict100k.parquet", "d" * 100_000, max(int(20_000 * scale), 600)), "clusters"


def parquet_dictionary_1mb(folder: Path, scale: float = 1.0) -> tuple[Path, str]:
    """Under a kilobyte: a dictionary holding one 1 MB text, repeated in 20,000 rows (20 GB decoded)."""
    return _repeated(folder, "dict1m.parquet", "b" * 1_048_576, max(int(20_000 * scale), 2)), "clusters"


def parquet_many_rows(folder: Path, scale: float = 1.0) -> tuple[Path, str]:
    """A few hundred kilobytes: 200 million rows of one short question (a pointer each in pandas: 1.6 GB)."""
    return _repeated(folder, "rows.parquet", "how do i cook rice", max(int(200_000_000 * scale), 4_000_000)), "clusters"


def parquet_huge_value(folder: Path, scale: float = 1.0) -> tuple[Path, str]:
    """A few kilobytes: one row whose question is a 200 MB text, plain-encoded (no dictionary)."""
    path = folder / "value.parquet"
    pq.write_table(pa.table({"question": ["q" * max(int(200_000_000 * scale), 60_000_000)], "cluster": ["c"]}), path,
                   compression="zstd", use_dictionary=False, write_statistics=False)
    return path, "clusters"


def parquet_many_columns(folder: Path, scale: float = 1.0) -> tuple[Path, str]:
    """A Parquet of one row and tens of thousands of columns."""
    columns = max(int(20_000 * scale), 2_000)
    path = folder / "wide.parquet"
    pq.write_table(pa.table({f"c{i}": pa.array([""]) for i in range(columns)} | {"question": ["q"], "cluster": ["a"]}),
                   path)
    return path, "clusters"


def csv_million_columns(folder: Path, scale: float = 1.0) -> tuple[Path, str]:
    """A CSV whose header has a million columns."""
    columns = int(1_000_000 * scale)
    path = folder / "wide.csv"
    with path.open("w") as handle:
        handle.write("question,cluster," + ",".join(f"c{i}" for i in range(columns)) + "\n")
        handle.write("how do i cook rice,a" + "," * columns + "\n")
    return path, "clusters"


def csv_huge_field(folder: Path, scale: float = 1.0) -> tuple[Path, str]:
    """A CSV with one 100 MB field (an unclosed quote runs on to the end of the file)."""
    path = folder / "field.csv"
    chunk = "a" * 1_000_000
    with path.open("w") as handle:
        handle.write('question,cluster\n"')
        for _ in range(max(int(100 * scale), 1)):
            handle.write(chunk)
        handle.write('",a\n')
    return path, "clusters"


def jsonl_gzip_bomb(folder: Path, scale: float = 1.0) -> tuple[Path, str]:
    """A .jsonl that is a gzip archive of ~1 GB of records (about 3 MB compressed)."""
    path = folder / "bomb.jsonl"
    block = ('{"question": "how do i cook rice", "cluster": "a"}\n' * 20_000).encode()
    with gzip.open(path, "wb", compresslevel=6) as handle:
        for _ in range(max(int(1_000 * scale), 1)):
            handle.write(block)
    return path, "clusters"


def jsonl_deep(folder: Path, scale: float = 1.0) -> tuple[Path, str]:
    """A JSONL record nested 100,000 lists deep."""
    depth = max(int(100_000 * scale), 5_000)
    path = folder / "deep.jsonl"
    path.write_text('{"question": ' + "[" * depth + "]" * depth + ', "cluster": "a"}\n')
    return path, "clusters"


def jsonl_million_keys(folder: Path, scale: float = 1.0) -> tuple[Path, str]:
    """A JSONL record with a million fields."""
    keys = int(1_000_000 * scale)
    path = folder / "keys.jsonl"
    with path.open("w") as handle:
        handle.write('{"question": "how do i cook rice", "cluster": "a", ' + ", ".join(f'"k{i}": 0' for i in range(keys)) + "}\n")
    return path, "clusters"


PARQUET_BOMBS = (parquet_bomb, parquet_dictionary_100kb, parquet_dictionary_256kb, parquet_dictionary_1mb, parquet_many_rows,
                 parquet_huge_value)
HOSTILE = {f.__name__: f for f in (*PARQUET_BOMBS, parquet_many_columns, csv_million_columns, csv_huge_field,
                                   jsonl_gzip_bomb, jsonl_deep, jsonl_million_keys)}

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
