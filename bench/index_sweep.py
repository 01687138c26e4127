"""Benchmark: recall and latency of approximate FAISS indexes against exact search.

Uses a trained bundle (default bundles/quora from bench/quora_lite.py), encodes its corpus once,
and for each IVF setting (nlist x nprobe) and HNSW setting (M x efSearch) measures recall@20
against the exact index on the test queries, single-query search latency (p50/p99, encoding excluded: it is the same for all) and the
time to build the index. Writes bench/results/index_sweep.json and the table in docs/INDEX.md and
docs/QUALITY.md (issue 8 asks for it beside the quality results).

    python -m bench.index_sweep [--bundle bundles/quora]
    python -m bench.index_sweep --render     # the tables again from bench/results/index_sweep.json
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path


from bench.common import ROOT, latency_ms, machine, markdown_table, replace_marked_section, write_json
from qpr.bundles.bundle import Bundle
from qpr.evaluation.metrics import TOP, index_recall, query_set
from qpr.retrieval.index import IndexConfig, VectorIndex

NLISTS = (256, 512, 1024, 2000)
NPROBES = (1, 5, 10, 20, 50, 100)
HNSW_M = (16, 32, 48)
EF_SEARCH = (16, 32, 64, 128, 256, 512, 1024)
LATENCY_QUERIES = 1000
RESULTS = ROOT / "bench" / "results" / "index_sweep.json"


def guideline_nlist(n: int) -> int:
    """The FAISS guideline's smallest list count for ``n`` vectors: 4*sqrt(n)."""
    return int(round(4 * math.sqrt(n)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bundle", type=Path, default=ROOT / "bundles" / "quora")
    parser.add_argument("--render", action="store_true", help="only rewrite the tables from the saved results")
    args = parser.parse_args()
    if args.render:
        render(json.loads(RESULTS.read_text()))
        return

    bundle = Bundle.load(args.bundle)
    corpus = bundle.corpus
    retriever = bundle.dense_retriever()
    vectors = retriever.encode(corpus["question"].tolist())
    queries = retriever.encode(query_set(corpus, "test")["question"].tolist())
    ids = corpus["qid"].to_numpy()
    exact = VectorIndex.build(vectors, ids, IndexConfig("Flat"))
    single = [queries[i : i + 1] for i in range(LATENCY_QUERIES)]

    rows = []

    def measure(index: VectorIndex, build_seconds: float, **setting) -> None:
        p50, p99 = latency_ms(lambda vector: index.search(vector, TOP), single)
        rows.append({"index": index.describe(), **setting, "recall_at_20_vs_exact": index_recall(index, exact, queries),
                     "latency_ms_p50": p50, "latency_ms_p99": p99, "build_seconds": round(build_seconds, 1)})
        print(rows[-1], flush=True)

    def built(config: IndexConfig) -> tuple[VectorIndex, float]:
        start = time.perf_counter()
        index = VectorIndex.build(vectors, ids, config)
        return index, time.perf_counter() - start

    measure(exact, 0.0)
    for nlist in sorted(set(NLISTS) | {guideline_nlist(len(ids))}):
        ivf, seconds = built(IndexConfig(f"IVF{nlist},Flat"))
        for nprobe in NPROBES:
            measure(VectorIndex(ivf.index, ivf.factory, f"nprobe={nprobe}"), seconds, nlist=nlist, nprobe=nprobe)
    for m in HNSW_M:
        hnsw, seconds = built(IndexConfig(f"HNSW{m}"))
        for ef in EF_SEARCH:
            measure(VectorIndex(hnsw.index, hnsw.factory, f"efSearch={ef}"), seconds, hnsw_m=m, ef_search=ef)

    payload = {"dataset": "quora-lite", "bundle": bundle.version, "corpus_size": len(corpus), "queries": len(queries),
               "latency_queries": LATENCY_QUERIES, "k": TOP, "machine": machine(), "runs": rows}
    write_json(payload, RESULTS)
    render(payload)


def render(payload: dict) -> None:
    table = markdown_table(payload["runs"], [
        ("index", "index"), ("recall_at_20_vs_exact", "recall@20 vs exact"), ("latency_ms_p50", "p50 ms"),
        ("latency_ms_p99", "p99 ms"), ("build_seconds", "build s")])
    note = (f"{payload['corpus_size']:,} questions indexed, {payload['queries']:,} test queries for recall, "
            f"{payload.get('latency_queries', LATENCY_QUERIES)} single-query searches for latency (vectors pre-encoded), "
            f"bundle {payload['bundle']}. Machine: {payload['machine']}.")
    for doc in ("INDEX.md", "QUALITY.md"):
        replace_marked_section(ROOT / "docs" / doc, "index-sweep", f"{note}\n\n{table}")


if __name__ == "__main__":
    main()
