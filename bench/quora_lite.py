"""Benchmark: the paper's SDML defaults on Quora-lite's canonical split, against BM25.

Trains SDML (eps 0.3, N 512, Adam 1e-3, early stopping on val ROC AUC), evaluates val and test
with an exact index and with the paper's IVF2000,Flat / nprobe 10, runs BM25 on the same queries,
and writes bench/results/quora_lite.json plus the markdown table in README.md.

    python -m bench.quora_lite [--epochs 10] [--seed 0]
"""

from __future__ import annotations

import argparse
from dataclasses import asdict
import time
from pathlib import Path


from bench.common import ROOT, latency_ms, machine, markdown_table, peak_rss_mb, replace_marked_section, write_json
from qpr.bundles.bundle import Bundle
from qpr.data.corpus import data_dir, fingerprint, load_corpus
from qpr.evaluation.metrics import evaluate, index_recall, query_set
from qpr.model.encoder import PAPER_ENCODER
from qpr.research.experiment import load_results
from qpr.retrieval.index import IndexConfig
from qpr.retrieval.lexical import BM25Retriever
from qpr.model.text import PAPER_TEXT
from qpr.training.train import TrainConfig, train

LATENCY_QUERIES = 1000


def measure(system, retriever, corpus, index_label, extra, sample) -> list[dict]:
    p50, p99 = latency_ms(lambda q: retriever.search(q, 10), sample)
    rows = []
    for split in ("val", "test"):
        rows.append({"system": system, "split": split, "index": index_label, **evaluate(retriever, corpus, split),
                     "latency_ms_p50": p50, "latency_ms_p99": p99, "peak_rss_mb": peak_rss_mb(), **extra})
        print(rows[-1], flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=TrainConfig().max_epochs, help="maximum epochs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--bundle", type=Path, default=ROOT / "bundles" / "quora", help="where to save the model")
    parser.add_argument("--reuse", action="store_true",
                        help="measure the bundle already saved there instead of training (training facts from its manifest)")
    args = parser.parse_args()

    corpus = load_corpus(data_dir() / "quora-lite")
    if args.reuse:
        bundle = Bundle.load(args.bundle)
        if bundle.manifest.data_fingerprint != fingerprint(corpus):
            raise SystemExit(f"{args.bundle} was not trained on this Quora-lite split: run without --reuse")
    else:
        config = TrainConfig(max_epochs=args.epochs, seed=args.seed)
        result = train(corpus, config, PAPER_TEXT, PAPER_ENCODER)  # the engine issue's paper-faithful baseline
        info = {"config": asdict(config)} | result.summary()
        bundle = Bundle.create(result.encoder, result.vocab, corpus, IndexConfig("Flat"), train_info=info)
        bundle.save(args.bundle)
    run = bundle.manifest.training

    sample = list(query_set(corpus, "test")["question"].sample(LATENCY_QUERIES, random_state=args.seed))
    exact = bundle.dense_retriever()
    start = time.perf_counter()
    exact.encode(corpus["question"].tolist())
    encode_qps = len(corpus) / (time.perf_counter() - start)
    trained = {"train_seconds": round(run["seconds"], 1), "epochs": len(run["history"]), "encode_qps": round(encode_qps)}

    runs = measure("sdml", exact, corpus, "exact", trained, sample)
    ivf = bundle.with_index(IndexConfig("IVF2000,Flat", "nprobe=10")).dense_retriever()
    recall = index_recall(ivf.index, bundle.index, exact.encode(list(query_set(corpus, "test")["question"])))
    runs += measure("sdml", ivf, corpus, ivf.index.describe(), trained | {"recall_at_20_vs_exact": recall}, sample)
    start = time.perf_counter()
    bm25 = BM25Retriever(corpus)
    runs += measure("bm25", bm25, corpus, "bm25", {"train_seconds": round(time.perf_counter() - start, 1), "epochs": 0}, sample)

    results = ROOT / "bench" / "results" / "quora_lite.json"
    # Other benchmarks (bench/quality.py) append their configurations' rows here: keep them.
    others = [r for r in load_results(results)["runs"] if r["system"] not in {"sdml", "bm25"}]
    payload = {"dataset": "quora-lite", "machine": machine(), "seed": run["config"]["seed"], "corpus_size": len(corpus),
               "bundle": bundle.version, "train_config": run["config"], "history": run["history"],
               "stopped": run["stopped"], "runs": runs + others}
    write_json(payload, results)
    table = markdown_table(
        runs,
        [("system", "system"), ("split", "split"), ("index", "index"), ("H1", "H@1"), ("H10", "H@10"), ("MRR", "MRR"),
         ("queries", "queries"), ("train_seconds", "train s"), ("epochs", "epochs"), ("encode_qps", "encode q/s"),
         ("latency_ms_p50", "p50 ms"), ("latency_ms_p99", "p99 ms"), ("peak_rss_mb", "peak RSS MB")],
    )
    note = (f"Quora-lite canonical split, {len(corpus):,} questions in the index, seed {payload['seed']}, "
            f"SDML with the paper's defaults (stopped: {run['stopped']} after {len(run['history'])} epochs, "
            f"best epoch {run['best_epoch']}). "
            f"IVF recall@20 against exact search: {recall:.3f}. Machine: {payload['machine']}. "
            "Peak RSS is the process peak up to that row (cumulative).")
    replace_marked_section(ROOT / "README.md", "quora-lite", f"{note}\n\n{table}")


if __name__ == "__main__":
    main()
