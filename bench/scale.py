"""Benchmark: retrieval at 157k, 1M and 10M questions (issue 22).

The Quora-lite corpus stays in the index and its test questions stay the queries; distractors fill
the index up to each size: first the real questions of the other shared sets (WikiAnswers, the
QA logs, BANKING77), then questions generated from real ones by recombination (the first words
of one real question joined to the last words of another, cut at random points; only questions
that are not Quora-lite val/test queries are used, so no generated question is a near copy of a
query). Every distractor is a distinct string whose tokens (``qpr.model.text.words``) differ from every
other question's. The corpus order is fixed by the seed, so each size is a prefix of the next.

Steps, each resumable (its output is written atomically and a rerun skips what exists):

    python -m bench.scale encode  --bundle B --n 1000000 [--part 0/2]  # vectors in shards on disk
    python -m bench.scale exact   --bundle B --n 1000000                # streaming brute-force top 21
    python -m bench.scale measure --bundle B --n 1000000 --index HNSW48 --search efSearch=512 --search efSearch=1024
    python -m bench.scale bm25    --bundle B --n 1000000
    python -m bench.scale store                                          # 32 writers on PostgreSQL + export
    python -m bench.scale ddp                                            # the DDP equivalence test
    python -m bench.scale report                                         # merged into bench/results/scale.json, docs/SCALE.md

``encode --part k/K`` encodes every K-th shard from the k-th, so K processes (or machines sharing
the folder) encode in parallel. ``measure`` builds one index setting in its own process (so its
peak RSS is its own) and records build time, index bytes, peak RSS, single-query p50/p99 (one
thread, taken under ``flock /tmp/qpr-timing.lock`` once the 1-min load is below 1.5 or after 45 minutes, with the load average beside it), batched
throughput (all test queries in one call, two threads), recall@20 against the exact top 20 on
a sample of 2,000 test queries (by streaming brute force over the shards), and test H@1 (all
13,916 test queries). Work files go under ``--work`` (default ../scale-work, outside
the repository).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import faiss
import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from bench.reliability import postgres_url
from bench.write_load import run_load
from bench.common import ROOT, latency_ms, machine, markdown_table, replace_marked_section, write_json
from qpr.bundles.bundle import Bundle
from qpr.data.corpus import data_dir
from qpr.evaluation.metrics import TOP, query_set, rank_metrics
from qpr.fsutil.atomic import atomic_path
from qpr.retrieval.index import IndexConfig, VectorIndex, auto_config
from qpr.data.qalogs import PRESETS, read_log
from qpr.retrieval.lexical import BM25Retriever
from qpr.model.text import words

SHARD = 50_000
CHUNK = 100_000  # generated questions are drawn per chunk, each chunk from its own seeded stream
SEED = 0
LATENCY_QUERIES = 1000
EXACT_QUERIES = 2000  # test queries (a seeded sample) whose exact top 20 the recall is measured against
RESULTS = ROOT / "bench" / "results" / "scale.json"
TIMING_LOCK = Path("/tmp/qpr-timing.lock")
QUIET_LOAD, QUIET_WAIT_S = 1.5, 45 * 60


# --- the corpus ------------------------------------------------------------------------------

def real_distractors() -> list[str]:
    """Questions of the other shared sets, in a fixed order: WikiAnswers, then the QA logs and intents."""
    wiki = data_dir() / "wikianswers"
    texts = []
    for name in ("train.tsv", "val.tsv", "test.tsv"):
        pairs = pd.read_csv(wiki / name, sep="\t", header=None, quoting=3, dtype=str, keep_default_na=False)
        texts += pairs[0].tolist() + pairs[1].tolist()
    for preset in PRESETS:
        texts += read_log(preset=preset)["question"].astype(str).tolist()
    return texts


def generated(pool: list[list[str]], chunk: int) -> list[str]:
    """``CHUNK`` candidate questions recombined from the token lists of ``pool`` (module doc)."""
    rng = np.random.default_rng([SEED, chunk])
    first, second = rng.integers(0, len(pool), CHUNK), rng.integers(0, len(pool), CHUNK)
    cuts = rng.random((CHUNK, 2))
    out = []
    for a, b, (ca, cb) in zip(first, second, cuts):
        head, tail = pool[a], pool[b]
        out.append(" ".join(head[: 1 + int(ca * (len(head) - 1))] + tail[1 + int(cb * (len(tail) - 1)) :]))
    return out


def scale_corpus(base: pd.DataFrame, n: int) -> pd.DataFrame:
    """``base`` (Quora-lite) followed by distractors up to ``n`` rows (module doc); distractors have
    no cluster, split ``none`` and qids above the base's."""
    seen = {" ".join(words(q)) for q in base["question"]}
    keep: list[str] = []

    def offer(texts) -> None:
        for text in texts:
            key = " ".join(words(text))
            if key and key not in seen and len(keep) < n - len(base):
                seen.add(key)
                keep.append(text)

    offer(real_distractors())
    queries = base["split"].isin(["val", "test"])
    pool = [words(q) for q in base.loc[~queries, "question"]] + [words(q) for q in keep]
    pool = [tokens for tokens in pool if len(tokens) >= 2]
    chunk = 0
    with tqdm(total=n - len(base), initial=len(keep), desc="distractors", unit="q") as bar:
        while len(keep) < n - len(base):
            before = len(keep)
            offer(generated(pool, chunk))
            bar.update(len(keep) - before)
            chunk += 1
    start = int(base["qid"].max()) + 1
    extra = pd.DataFrame({"qid": np.arange(start, start + len(keep), dtype=np.int64), "question": keep,
                          "cluster": None, "split": "none"})
    return pd.concat([base[["qid", "question", "cluster", "split"]], extra], ignore_index=True)


def corpus_for(work: Path, bundle: Bundle, n: int) -> pd.DataFrame:
    """The corpus of ``n`` questions, cached as parquet under ``work`` (the prefix of a larger one
    already there: each size is a prefix of the next)."""
    larger = sorted((int(p.stem.split("-")[1]), p) for p in work.glob("corpus-*.parquet"))
    for size, path in larger:
        if size >= n:
            return pd.read_parquet(path).head(n)
    path = work / f"corpus-{n}.parquet"
    if not path.exists():
        with atomic_path(path) as tmp:
            scale_corpus(bundle.corpus, n).to_parquet(tmp, index=False)
    return pd.read_parquet(path)


# --- vectors in shards -----------------------------------------------------------------------

def shard_path(work: Path, i: int) -> Path:
    return work / "vectors" / f"shard-{i:05d}.npy"


def encode(work: Path, bundle: Bundle, n: int, part: tuple[int, int]) -> None:
    corpus = corpus_for(work, bundle, n)
    retriever = bundle.dense_retriever()
    (work / "vectors").mkdir(parents=True, exist_ok=True)
    todo = [i for i in range(-(-n // SHARD)) if i % part[1] == part[0] and not shard_path(work, i).exists()]
    for i in tqdm(todo, desc=f"encode {n:,} (part {part[0]}/{part[1]})", unit="shard"):
        texts = corpus["question"].iloc[i * SHARD : (i + 1) * SHARD].tolist()
        start = time.perf_counter()
        vectors = retriever.encode(texts)
        seconds = time.perf_counter() - start
        with atomic_path(shard_path(work, i)) as tmp:
            with open(tmp, "wb") as f:
                np.save(f, vectors.astype(np.float32))
        # One line per shard, so a run cut short still leaves its rate behind.
        with open(work / "encode.jsonl", "a") as log:
            log.write(json.dumps({"shard": i, "questions": len(texts), "seconds": seconds,
                                  "torch_threads": torch.get_num_threads(), "load": os.getloadavg()[0]}) + "\n")


def shards(work: Path, n: int) -> list[np.ndarray]:
    """Memory maps of the shards that hold the first ``n`` vectors (the last one cut to fit)."""
    count = -(-n // SHARD)
    missing = [i for i in range(count) if not shard_path(work, i).exists()]
    if missing:
        raise SystemExit(f"shards {missing[:5]}... of {n:,} questions are not encoded: run `python -m bench.scale encode`")
    maps = [np.load(shard_path(work, i), mmap_mode="r") for i in range(count)]
    maps[-1] = maps[-1][: n - (count - 1) * SHARD]
    return maps


def test_vectors(work: Path, bundle: Bundle, n: int) -> tuple[pd.DataFrame, list[np.ndarray], np.ndarray, np.ndarray]:
    """The corpus of ``n`` questions, its shards, and the Quora-lite test queries' qids and vectors."""
    corpus = corpus_for(work, bundle, n)
    maps = shards(work, n)
    queries = query_set(corpus, "test")
    return corpus, maps, queries["qid"].to_numpy(), rows(maps, queries.index.to_numpy())


def rows(maps: list[np.ndarray], positions: np.ndarray) -> np.ndarray:
    """The vectors at corpus ``positions``, read shard by shard from the memory maps."""
    positions = np.asarray(positions)
    out = np.empty((len(positions), maps[0].shape[1]), dtype=np.float32)
    shard = positions // SHARD
    for s in np.unique(shard):
        mask = shard == s
        out[mask] = maps[s][positions[mask] % SHARD]
    return out


def hits(corpus: pd.DataFrame, own: np.ndarray, found: np.ndarray) -> np.ndarray:
    """The protocol's hit matrix from raw top-(TOP+1) ids: the query removed, a hit shares its cluster."""
    cluster_of = pd.Series(corpus["cluster"].to_numpy(), index=corpus["qid"].to_numpy())
    mine = cluster_of.reindex(own).to_numpy()
    out = np.zeros((len(own), TOP), dtype=bool)
    for row, retrieved in enumerate(found):
        retrieved = retrieved[(retrieved != own[row]) & (retrieved >= 0)][:TOP]
        out[row, : len(retrieved)] = cluster_of.reindex(retrieved).to_numpy() == mine[row]
    return out


# --- exact reference -------------------------------------------------------------------------

def exact(work: Path, bundle: Bundle, n: int) -> None:
    """Top TOP+1 by brute force over the shards for ``EXACT_QUERIES`` sampled test queries, merged
    shard by shard."""
    path = work / f"exact-{n}.npz"
    if path.exists():
        return
    corpus, maps, _, queries = test_vectors(work, bundle, n)
    sample = exact_sample(len(queries))
    queries = queries[sample]
    best_d = np.full((len(queries), TOP + 1), np.inf, dtype=np.float32)
    best_i = np.full((len(queries), TOP + 1), -1, dtype=np.int64)
    qids = corpus["qid"].to_numpy()
    start = time.perf_counter()
    for s, block in enumerate(tqdm(maps, desc=f"exact {n:,}", unit="shard")):
        d, i = faiss.knn(queries, np.ascontiguousarray(block), TOP + 1)
        d = np.hstack([best_d, d])
        i = np.hstack([best_i, qids[s * SHARD + i]])
        order = np.argsort(d, axis=1, kind="stable")[:, : TOP + 1]
        best_d, best_i = np.take_along_axis(d, order, 1), np.take_along_axis(i, order, 1)
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            np.savez(f, ids=best_i, distances=best_d, sample=sample, seconds=time.perf_counter() - start)


def exact_sample(queries: int) -> np.ndarray:
    """Which test queries (sorted positions) the exact reference covers."""
    return np.sort(np.random.default_rng(SEED).choice(queries, min(queries, EXACT_QUERIES), replace=False))


# --- one index setting -----------------------------------------------------------------------

def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_")


def timing_lock():
    """The lock the lead's timing runs take too, so two timings do not share the cores; once held,
    wait up to ``QUIET_WAIT_S`` for the 1-min load to fall below ``QUIET_LOAD`` (the cores are
    shared: a timing under load measures the neighbours). The load at timing is recorded either way."""
    handle = open(TIMING_LOCK, "a")
    fcntl.flock(handle, fcntl.LOCK_EX)
    deadline = time.monotonic() + QUIET_WAIT_S
    while os.getloadavg()[0] >= QUIET_LOAD and time.monotonic() < deadline:
        time.sleep(10)
    return handle


def measure(work: Path, bundle: Bundle, n: int, factory: str, searches: list[str], build_threads: int = 1) -> None:
    """Build ``factory`` over ``n`` questions once, on ``build_threads`` threads, and measure it with
    each of ``searches`` (module doc); one result file per search setting, settings already
    measured are skipped."""
    outs = {search: work / "runs" / f"{n}-{slug(factory)}-{slug(search)}.json" for search in searches}
    todo = [search for search, out in outs.items() if not out.exists()]
    if not todo:
        return
    corpus, maps, own, queries = test_vectors(work, bundle, n)
    exact_file = np.load(work / f"exact-{n}.npz")
    reference, sample = exact_file["ids"][:, :TOP], exact_file["sample"]
    faiss.omp_set_num_threads(build_threads)  # one by default: the cores are shared (docs/SCALE.md)
    start = time.perf_counter()
    built = VectorIndex.build(Stacked(maps), corpus["qid"].to_numpy(), IndexConfig(factory, todo[0]))
    build = time.perf_counter() - start
    index_file = work / "runs" / f"{n}-{slug(factory)}.faiss"
    built.save(index_file)
    index_bytes = index_file.stat().st_size
    index_file.unlink()
    single = [queries[i : i + 1] for i in range(min(LATENCY_QUERIES if factory != "Flat" else 100, len(queries)))]
    for search in todo:
        index = VectorIndex(built.index, factory, search)
        with timing_lock():
            load = os.getloadavg()[0]
            faiss.omp_set_num_threads(1)
            p50, p99 = latency_ms(lambda vector: index.search(vector, TOP), single)
            faiss.omp_set_num_threads(2)
            start = time.perf_counter()
            _, found = index.search(queries, TOP + 1)
            batched = time.perf_counter() - start
        recall = float(np.mean([len(np.intersect1d(w, g[:TOP])) / TOP for w, g in zip(reference, found[sample])]))
        result = {"n": n, "index": index.describe(), "bundle": bundle.version, "recall_at_20_vs_exact": recall, "p50_ms": p50, "p99_ms": p99,
                  "build_s": build, "build_threads": build_threads, "index_bytes": index_bytes,
                  "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                  "H1": rank_metrics(hits(corpus, own, found))["H1"], "batched_qps": len(queries) / batched,
                  "queries": len(queries), "exact_queries": len(sample), "latency_queries": len(single), "load_at_timing": load}
        write_json(result, outs[search])
        print(result, flush=True)


class Stacked:
    """The shards as one read-only ``(n, d)`` array for ``VectorIndex.build``: row slices and
    row lists are read from the memory maps, so the whole corpus is never in memory at once."""

    def __init__(self, maps: list[np.ndarray]) -> None:
        self.maps = maps
        self.shape = (sum(len(m) for m in maps), maps[0].shape[1])
        self.ndim = 2

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key) -> np.ndarray:
        positions = np.arange(self.shape[0])[key]
        return rows(self.maps, positions)


# --- BM25 ------------------------------------------------------------------------------------

def bm25(work: Path, bundle: Bundle, n: int) -> None:
    out = work / "runs" / f"{n}-bm25.json"
    if out.exists():
        return
    corpus = corpus_for(work, bundle, n)
    start = time.perf_counter()
    retriever = BM25Retriever(corpus)
    build = time.perf_counter() - start
    queries = query_set(corpus, "test")
    start = time.perf_counter()
    _, found = retriever.search_ids(queries["question"].tolist(), TOP + 1)
    seconds = time.perf_counter() - start
    result = {"n": n, "index": "bm25", "bundle": bundle.version, "H1": rank_metrics(hits(corpus, queries["qid"].to_numpy(), found))["H1"],
              "build_s": build, "batched_qps": len(queries) / seconds,
              "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    write_json(result, out)
    print(result, flush=True)


# --- the store under load, DDP ----------------------------------------------------------------

def store(work: Path) -> None:
    """32 concurrent writers on PostgreSQL (``QPR_TEST_POSTGRES_URL``, a fresh schema per run)
    while a merge + export runs in a loop (``bench.write_load``), and the same writers alone for
    comparison."""
    figures = {}
    for name, exporting in (("with_export", True), ("writers_only", False)):
        target = postgres_url()
        if target is None:
            raise SystemExit("set QPR_TEST_POSTGRES_URL to a PostgreSQL database for the store load")
        url, drop = target
        try:
            with tempfile.TemporaryDirectory() as tmp:
                figures[name] = run_load(url, writers=32, per_writer=100, export_to=Path(tmp) if exporting else None)
        finally:
            drop()
        print(name, figures[name], flush=True)
    main = figures["with_export"]
    write_json({"writers": main["writers"], "judgments": main["acknowledged"], "lost": main["lost"],
                "p99_write_ms": main["p99_ms"], "load": os.getloadavg()[0]} | figures, work / "store.json")


def ddp(work: Path) -> None:
    """Run the DDP equivalence test (two gloo workers x N/2 against one worker x N) and keep its verdict."""
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_distributed.py"],
                         cwd=ROOT, capture_output=True, text=True)
    write_json({"ddp_equivalent": run.returncode == 0, "pytest": run.stdout.strip().splitlines()[-1]}, work / "ddp.json")


# --- the report ------------------------------------------------------------------------------

def report(work: Path) -> None:
    """Write ``RESULTS`` and the docs table from ``work``'s run files, merged into the rows the
    results file already holds: a row measured in this work folder replaces the row of the same size
    and index, and rows measured elsewhere (an earlier work folder, another machine) are kept, so a
    lost or partial work folder never erases a measurement."""
    earlier = read(RESULTS)
    measured = [json.loads(p.read_text()) for p in (work / "runs").glob("*.json")]
    exact_runs = []
    for path in sorted(work.glob("exact-*.npz")):
        n = int(path.stem.split("-")[1])
        exact_runs.append({"n": n, "index": "exact (streaming brute force)", "seconds": float(np.load(path)["seconds"])})
    runs = merged(earlier.get("runs", []) + earlier.get("bm25", []), measured)
    encoded = [json.loads(line) for line in (work / "encode.jsonl").read_text().splitlines()] if (work / "encode.jsonl").exists() else []
    ddp_run = read(work / "ddp.json")
    payload = {
        "runs": [r for r in runs if r["index"] != "bm25"],
        "bm25": [r for r in runs if r["index"] == "bm25"],
        "exact_reference": merged(earlier.get("exact_reference", []), exact_runs),
        "encode_qps": (sum(e["questions"] for e in encoded) / max(sum(e["seconds"] for e in encoded), 1e-9)
                       if encoded else earlier.get("encode_qps", 0.0)),
        "encode_log": encoded or earlier.get("encode_log", []),
        "ddp_equivalent": ddp_run.get("ddp_equivalent", earlier.get("ddp_equivalent", False)),
        "ddp_test": ddp_run.get("pytest", earlier.get("ddp_test")),
        "store_load": read(work / "store.json") or earlier.get("store_load", {}),
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d"),
    }
    write_json(payload, RESULTS)
    render(payload)


def merged(earlier: list[dict], measured: list[dict]) -> list[dict]:
    """``earlier`` rows with ``measured`` ones put in place of those of the same size and index, by size and index."""
    rows = {(r["n"], r["index"]): r for r in earlier} | {(r["n"], r["index"]): r for r in measured}
    return [rows[key] for key in sorted(rows)]


def read(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


def render(payload: dict) -> None:
    table = markdown_table(payload["runs"] + payload["bm25"], [
        ("n", "questions"), ("index", "index"), ("recall_at_20_vs_exact", "recall@20 vs exact"), ("p50_ms", "p50 ms"),
        ("p99_ms", "p99 ms"), ("batched_qps", "batched q/s"), ("build_s", "build s"), ("index_bytes", "index bytes"),
        ("peak_rss_bytes", "peak RSS bytes"), ("H1", "test H@1"), ("load_at_timing", "load at timing"),
        ("bundle", "bundle")])
    note = (f"Measured by `python -m bench.scale`, report written {payload['date']} on {payload['machine']}; "
            f"the load average at each timing is in its row, and the bundle measured (blank: not recorded, "
            f"rows measured before the results kept it). "
            f"Encoding rate: {payload['encode_qps']:,.0f} questions/s (one process, one torch thread).")
    replace_marked_section(ROOT / "docs" / "SCALE.md", "scale", f"{note}\n\n{table}\n\n{falling(payload)}")


def falling(payload: dict) -> str:
    """Test H@1 by corpus size for the product default (the index and search ``auto`` picks at that
    size) and for BM25: how distractors cost retrieval, the paper's large-scale point."""
    sizes = sorted({r["n"] for r in payload["runs"] + payload["bm25"]})
    rows = []
    for n in sizes:
        config = auto_config(n)
        label = "exact" if config.factory == "Flat" else f"{config.factory}/{config.search}"
        default = next((r for r in payload["runs"] if r["n"] == n and r["index"] == label), None)
        lexical = next((r for r in payload["bm25"] if r["n"] == n), None)
        rows.append({"n": n, "default": label, "default_H1": default["H1"] if default else None,
                     "bm25_H1": lexical["H1"] if lexical else None})
    table = markdown_table(rows, [("n", "questions"), ("default", "what `auto` serves"),
                                  ("default_H1", "test H@1, product default"), ("bm25_H1", "test H@1, BM25")])
    return f"Test H@1 as distractors grow (blank: not measured at that size):\n\n{table}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step", choices=["encode", "exact", "measure", "bm25", "store", "ddp", "report"])
    parser.add_argument("--bundle", type=Path, default=ROOT / "bundles" / "quora")
    parser.add_argument("--work", type=Path, default=ROOT.parent / "scale-work")
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--part", default="0/1", help="k/K: encode every K-th shard from the k-th")
    parser.add_argument("--index", default="HNSW48")
    parser.add_argument("--search", action="append", default=[],
                        help="search parameters to measure the built index with (repeat for several)")
    parser.add_argument("--build-threads", type=int, default=1, help="threads the index build may use")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    (args.work / "runs").mkdir(exist_ok=True)
    if args.step in ("report", "store", "ddp"):
        {"report": report, "store": store, "ddp": ddp}[args.step](args.work)
        return
    bundle = Bundle.load(args.bundle)
    if args.step == "encode":
        k, total = (int(x) for x in args.part.split("/"))
        encode(args.work, bundle, args.n, (k, total))
    elif args.step == "exact":
        exact(args.work, bundle, args.n)
    elif args.step == "measure":
        measure(args.work, bundle, args.n, args.index, args.search or [""], args.build_threads)
    else:
        bm25(args.work, bundle, args.n)


if __name__ == "__main__":
    main()
