"""Benchmark for issue 8: encoder ablations, then the product's best configuration against BM25 and MiniLM.

    python -m bench.quality ablation [--epochs 3] [--variants NAME ...]   # options alone, on the pair, all together
    python -m bench.quality final [--variant all] [--epochs 10] [--seed 0] [--reuse | --replace]
    python -m bench.quality train-time [--threads 2]   # run it on an idle machine
    python -m bench.quality pair-weights            # how each pairing weights clusters by size
    python -m bench.quality render                  # docs/QUALITY.md from bench/results/quality.json

``ablation`` trains every variant in ``VARIANTS`` for the same number of epochs (keeping its best
epoch by val ROC AUC), evaluates val and test with exact search and appends to
bench/results/quality.json; finished variants are skipped, so it resumes after an interruption.
Choose by val, never by test.

``train-time`` times the product default's training, early stopping included, with ``--threads``
torch threads, for goal 1's "trains in under an hour on 2 CPU cores": the other stages share the
machine with each other, so their training times are not that measurement.

``final`` trains one variant to convergence (early stopping), fits the hybrid scorer on val,
and measures the dense encoder, the hybrid and BM25 on val and test (H@1/H@10/MRR, encoding rate,
single-query latency). all-MiniLM-L6-v2 is measured too when the benchmark extra is installed
(``pip install -e '.[bench]'``); it is never a dependency of the app. Its rows, and
the others, are appended to bench/results/quora_lite.json (rows with the same ``system`` name and
seed are replaced, so another training seed adds rows beside the first). A final of the same
variant and seed trained under another definition or epoch budget is not replaced without
``--replace``.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, replace
from pathlib import Path


import numpy as np
import torch

from bench.common import ROOT, latency_ms, machine, markdown_table, replace_marked_section, write_json
from qpr.bundles.bundle import Bundle
from qpr.bundles.general import minilm_vectors
from qpr.data.corpus import data_dir, fingerprint, load_corpus
from qpr.errors import QPRError
from qpr.model.encoder import PAPER_ENCODER, EncoderConfig
from qpr.evaluation.metrics import evaluate, index_recall, query_set
from qpr.research.experiment import load_results
from qpr.retrieval.hybrid import Fusion, HybridRetriever, fit_fusion
from qpr.retrieval.index import IndexConfig, VectorIndex, auto_config
from qpr.retrieval.base import Retriever
from qpr.retrieval.lexical import BM25Retriever
from qpr.model.text import PAPER_TEXT, TextConfig
from qpr.training.sampling import all_pairs, cluster_members, epoch_pairs
from qpr.training.train import TrainConfig, train

RESULTS = ROOT / "bench" / "results" / "quality.json"
ENGINE_RESULTS = ROOT / "bench" / "results" / "quora_lite.json"
DOC = ROOT / "docs" / "QUALITY.md"
LATENCY_QUERIES = 500
ENCODE_SAMPLE = 5000

OPTIONS = {
    "windows 1,3,5": {"encoder": {"windows": (1, 3, 5)}},
    "cosine + learned temperature": {"encoder": {"normalize": True}, "train": {"distance": "cosine"}},
    "min_count 2 (trained hash bins)": {"text": {"min_count": 2}},
    "50k hash bins": {"text": {"hash_bins": 50_000}},
    "cosine lr schedule": {"train": {"lr_schedule": "cosine"}},
    "neighbour batches (hard negatives)": {"train": {"batching": "neighbours"}},
    "subword trigrams": {"text": {"subword_ngrams": 3}},
    "unlabeled questions (word-dropout views)": {"train": {"unlabeled_dropout": 0.2}},
    "all pairs per cluster": {"train": {"pairs": "all"}},
    "corpus word vectors (skip-gram init)": {"train": {"word_vectors": True}},
}


def _merge(settings: list[dict]) -> dict:
    merged: dict = {"text": {}, "encoder": {}, "train": {}}
    for setting in settings:
        for part, values in setting.items():
            merged[part] |= values
    return merged


# The two options that each gained most alone (val), together: does their gain add up? And each
# other option on top of that pair (the product default since): does it still add?
PAIR = ("windows 1,3,5", "subword trigrams")
COMBINATIONS = {" + ".join(PAIR): PAIR} | {
    " + ".join((*PAIR, option)): (*PAIR, option) for option in OPTIONS if option not in PAIR}
VARIANTS = (
    {"paper": _merge([])}
    | {name: _merge([s]) for name, s in OPTIONS.items()}
    | {name: _merge([OPTIONS[o] for o in options]) for name, options in COMBINATIONS.items()}
    | {"all": _merge(list(OPTIONS.values()))}
)


def configs(variant: str, epochs: int, patience: int, seed: int) -> tuple[TrainConfig, TextConfig, EncoderConfig]:
    if variant not in VARIANTS:
        raise SystemExit(f"unknown variant {variant!r}: choose from {', '.join(VARIANTS)}")
    settings = VARIANTS[variant]
    # Every variant starts from the paper's text handling and encoder, whatever the product defaults are now.
    return (TrainConfig(max_epochs=epochs, patience=patience, seed=seed, **settings["train"]),
            replace(PAPER_TEXT, **settings["text"]), replace(PAPER_ENCODER, **settings["encoder"]))


def encode_sample(corpus, seed: int) -> list[str]:
    """The questions every encoding rate is measured on (MiniLM would need minutes for the corpus)."""
    return corpus["question"].sample(ENCODE_SAMPLE, random_state=seed).tolist()


def encode_rate(encode, texts: list[str]) -> float:
    """Questions per second that ``encode`` (a list of texts -> vectors) turns into vectors."""
    start = time.perf_counter()
    encode(texts)
    return len(texts) / (time.perf_counter() - start)


def ablation(args: argparse.Namespace) -> None:
    corpus = load_corpus(data_dir() / "quora-lite")
    results = load_results(RESULTS)
    unknown = [v for v in args.variants or [] if v not in VARIANTS]
    if unknown:
        raise SystemExit(f"unknown variant {unknown[0]!r}: choose from {', '.join(VARIANTS)}")
    for variant in args.variants or VARIANTS:
        def same_variant(row: dict) -> bool:
            return (row["variant"], row["epochs"], row["seed"]) == (variant, args.epochs, args.seed)

        def same_run(row: dict) -> bool:
            # Settings too: a variant whose definition changed since its rows were written (an
            # option joined "all") is run again, and its new rows replace the old ones.
            return same_variant(row) and row["settings"] == json.loads(json.dumps(VARIANTS[variant]))

        if any(same_run(r) for r in results["runs"]):
            print(f"skip (done): {variant}", flush=True)
            continue
        print(f"run: {variant}", flush=True)
        # patience == epochs: every variant trains exactly the same number of epochs.
        train_config, text_config, encoder_config = configs(variant, args.epochs, args.epochs, args.seed)
        result = train(corpus, train_config, text_config, encoder_config, progress=not args.quiet,
                       return_on_interrupt=False)
        retriever = Bundle.create(result.encoder, result.vocab, corpus, IndexConfig("Flat")).dense_retriever()
        shared = {"variant": variant, "settings": VARIANTS[variant], "seed": args.seed, "epochs": args.epochs,
                  "best_epoch": result.best_epoch, "val_auc": result.best_auc, "train_seconds": round(result.seconds, 1),
                  "encode_qps": round(encode_rate(retriever.encode, encode_sample(corpus, args.seed)))}
        rows = [shared | {"split": split} | evaluate(retriever, corpus, split) for split in ("val", "test")]
        print(rows, flush=True)
        results = load_results(RESULTS)  # afresh: `final` may have written to it meanwhile
        results["runs"] = [r for r in results["runs"] if not same_variant(r)] + rows
        results["machine"] = machine()
        write_json(results, RESULTS)
    render()


class MiniLMRetriever(Retriever):
    """all-MiniLM-L6-v2 (benchmark extra), loaded and run as the general bundle's teacher is
    (``qpr.bundles.general.minilm_vectors``: unit vectors, on ``QPR_DEVICE``), with exact
    inner-product search; the corpus' vectors are kept in ``cache``."""

    name = "all-MiniLM-L6-v2"

    def __init__(self, corpus, cache: Path) -> None:
        self.corpus = corpus
        vectors = minilm_vectors(corpus["question"].tolist(), cache)
        self.index = VectorIndex.build(vectors, corpus["qid"].to_numpy(), IndexConfig("Flat"))

    def encode(self, texts: list[str]) -> np.ndarray:
        return minilm_vectors(list(texts))

    def search_ids(self, queries, k):
        return self.index.search(self.encode(list(queries)), k)


def measure(system: str, retriever: Retriever, corpus, sample: list[str], extra: dict) -> list[dict]:
    p50, p99 = latency_ms(lambda q: retriever.search(q, 10), sample)
    rows = [{"system": system, "split": split, **evaluate(retriever, corpus, split), "latency_ms_p50": p50,
             "latency_ms_p99": p99, **extra} for split in ("val", "test")]
    print(rows, flush=True)
    return rows


def final(args: argparse.Namespace) -> None:
    corpus = load_corpus(data_dir() / "quora-lite")
    path = ROOT / "bundles" / f"quality-{args.variant.replace(' ', '-')}-seed{args.seed}"
    train_config, text_config, encoder_config = configs(args.variant, args.epochs, args.patience, args.seed)
    settings = json.loads(json.dumps(VARIANTS[args.variant]))
    definition = (settings, args.epochs, args.patience)
    for key, earlier in load_results(RESULTS).get("finals", {}).items():
        earlier_definition = (earlier["settings"], earlier["train_config"]["max_epochs"], earlier["train_config"]["patience"])
        if (earlier["variant"], earlier["seed"]) == (args.variant, args.seed) and earlier_definition != definition and not args.replace:
            raise SystemExit(f"final {key!r} was trained with other settings or another epoch budget: pass "
                             "--replace to overwrite its results, or run another --seed")
    # The product's settings (epoch budget and seed aside): what `python -m qpr train` builds and
    # the app serves, hybrid first (the index is checked below, once the bundle is there).
    is_default = (text_config, encoder_config) == (TextConfig(), EncoderConfig()) and train_config == TrainConfig(
        max_epochs=args.epochs, patience=args.patience, seed=args.seed)
    if args.reuse:
        bundle = Bundle.load(path)
        if bundle.manifest.data_fingerprint != fingerprint(corpus):
            raise SystemExit(f"{path} was not trained on this Quora-lite split: run without --reuse")
    else:
        result = train(corpus, train_config, text_config, encoder_config, progress=not args.quiet)
        info = {"config": asdict(train_config)} | result.summary()
        bundle = Bundle.create(result.encoder, result.vocab, corpus, IndexConfig("auto"), train_info=info)
    if bundle.manifest.fusion is None or not args.reuse:
        start = time.perf_counter()
        bundle = bundle.with_fusion(fit_fusion(bundle.dense_retriever()).to_dict())
        fuse_seconds = time.perf_counter() - start
        bundle.save(path)
    else:
        fuse_seconds = None
    run = bundle.manifest.training
    sample = list(query_set(corpus, "test")["question"].sample(LATENCY_QUERIES, random_state=args.seed))
    dense = bundle.dense_retriever()
    sample_texts = encode_sample(corpus, args.seed)
    trained = {"train_seconds": round(run["seconds"], 1), "epochs": len(run["history"]),
               "encode_qps": round(encode_rate(dense.encode, sample_texts)), "index": bundle.index.describe()}
    index = bundle.index.describe()
    is_default = is_default and bundle.index.config == auto_config(len(corpus))
    if index != "exact":
        qids = corpus["qid"].to_numpy()
        exact = VectorIndex.build(bundle.index.vectors(qids), qids, IndexConfig("Flat"))
        queries = dense.encode(query_set(corpus, "test")["question"].tolist())
        trained["recall_at_20_vs_exact"] = index_recall(bundle.index, exact, queries)
    # One name per variant and index, so an approximate index's rows never replace the exact ones.
    name = args.variant if index == "exact" else f"{args.variant}, {index}"
    label = f"cnn {name}"
    trained["seed"] = args.seed
    runs = measure(f"{label}, dense", dense, corpus, sample, trained)
    bm25 = BM25Retriever(corpus)
    hybrid = HybridRetriever(dense, Fusion.from_stored(bundle.manifest.fusion), bm25)
    runs += measure(f"{label}, hybrid (dense + bm25, fitted on val)", hybrid, corpus, sample,
                    trained | {"fuse_seconds": fuse_seconds, "default": is_default})
    runs += measure("bm25", bm25, corpus, sample, {})
    try:
        minilm = MiniLMRetriever(corpus, ROOT / "runs" / f"minilm-{fingerprint(corpus)[:12]}.npy")
    except QPRError as err:  # the benchmark extra is not installed
        print(f"all-MiniLM-L6-v2 skipped: {err}", flush=True)
    else:
        runs += measure("all-MiniLM-L6-v2 (benchmark extra), exact", minilm, corpus, sample,
                        {"encode_qps": round(encode_rate(minilm.encode, sample_texts)), "index": "exact"})
    results = load_results(RESULTS)
    finals = results.setdefault("finals", {})
    finals[f"{name}, seed {args.seed}"] = {
        "name": name, "variant": args.variant, "settings": settings, "bundle": bundle.version, "train_config": run.get("config"), "history": run.get("history"),
        "machine": machine(), "seed": args.seed, "corpus_size": len(corpus), "default": is_default, "runs": runs}
    if is_default:  # every seed of this configuration is the default, nothing else
        for other in finals.values():
            other["default"] = (other["name"], other["settings"]) == (name, settings)
            for row in other["runs"]:
                if "default" in row:
                    row["default"] = other["default"]
    write_json(results, RESULTS)
    engine = load_results(ENGINE_RESULTS)
    new = [r for r in runs if r["system"] != "bm25"]  # bench/quora_lite.py owns the BM25 rows there
    systems = {r["system"] for r in new}
    measured = {(r["system"], r.get("seed")) for r in new}  # MiniLM is not trained: no seed
    kept = [r for r in engine["runs"] if (r["system"], r.get("seed")) not in measured]
    if is_default:  # one configuration is the app's default: the rows measured now, any seed
        kept = [{key: value for key, value in r.items() if key != "default" or r["system"] in systems} for r in kept]
    engine["runs"] = kept + new
    write_json(engine, ENGINE_RESULTS)
    render()


def train_time(args: argparse.Namespace) -> None:
    torch.set_num_threads(args.threads)
    corpus = load_corpus(data_dir() / "quora-lite")
    start = time.perf_counter()
    result = train(corpus, TrainConfig(max_epochs=args.epochs, seed=args.seed), progress=not args.quiet)
    total = time.perf_counter() - start  # vocabulary and token ids included, not only the epochs
    elapsed = [row["seconds"] for row in result.history]  # cumulative, from the first epoch
    results = load_results(RESULTS)
    results["train_time"] = {
        "threads": args.threads, "seed": args.seed, "max_epochs": args.epochs, "stopped": result.stopped,
        "best_epoch": result.best_epoch, "total_seconds": round(total, 1),
        "epoch_seconds": np.diff([0.0, *elapsed]).round(1).tolist(),
        "train_questions": int((corpus["split"] == "train").sum()), "corpus_size": len(corpus), "machine": machine()}
    write_json(results, RESULTS)
    render()


def train_time_text(timing: dict) -> str:
    """The timed training run of the default configuration, as a QUALITY.md section."""
    epochs = timing["epoch_seconds"]
    return (f"### Training time of the default configuration (`train-time`)\n\nTraining with the default settings "
            f"(those of `python -m qpr train`), {timing['threads']} torch threads, seed {timing['seed']}, "
            f"{timing['train_questions']:,} training questions: {len(epochs)} epochs until "
            f"{timing['stopped'].replace('_', ' ')} "
            f"(best epoch {timing['best_epoch']}), **{timing['total_seconds'] / 60:.0f} min** in all, "
            f"{min(epochs):,.0f}-{max(epochs):,.0f} s per epoch with validation ROC AUC.\n\nMachine: {timing['machine']}.")


SIZE_BINS = ((2, 2), (3, 4), (5, 9), (10, 19), (20, None))


def pair_weights(args: argparse.Namespace) -> None:
    """What share of an epoch's pairs each cluster size gets with one partner per question and with
    all pairs, beside the share of val and test queries in clusters of that size."""
    corpus = load_corpus(data_dir() / "quora-lite")
    clusters = cluster_members(corpus, "train")
    sizes = np.array([len(c) for c in clusters])
    rng = np.random.default_rng(args.seed)
    partner, everything = (np.bincount(pairing[2], minlength=len(clusters)) for pairing in (
        epoch_pairs(clusters, rng), all_pairs(clusters, TrainConfig().batch_size, rng)))
    query_sizes = {split: np.array([len(c) for c in cluster_members(corpus, split)]) for split in ("val", "test")}

    def inside(size_of: np.ndarray, low: int, high: int | None) -> np.ndarray:
        return (size_of >= low) & (size_of <= (high or size_of.max()))

    def share(size_of: np.ndarray, weight: np.ndarray, low: int, high: int | None) -> float:
        return float(weight[inside(size_of, low, high)].sum() / weight.sum())

    rows = [{"sizes": f"{low}" if low == high else f"{low}-{high or ''}",
             "train_clusters": int(inside(sizes, low, high).sum()),
             "partner_pairs": share(sizes, partner, low, high), "all_pairs": share(sizes, everything, low, high),
             **{f"{split}_queries": share(q, q, low, high) for split, q in query_sizes.items()}}
            for low, high in SIZE_BINS]
    pair_counts = sizes * (sizes - 1) // 2
    results = load_results(RESULTS)
    results["pair_weights"] = {
        "seed": args.seed, "rows": rows, "partner_pairs_per_epoch": int(partner.sum()),
        "all_pairs_per_epoch": int(everything.sum()), "capped_clusters": int((everything < pair_counts).sum()),
        "cap": int(everything.max())}
    write_json(results, RESULTS)
    render()


def pair_weights_text(weights: dict) -> str:
    return ("### Training pairs by cluster size (`pair-weights`)\n\n" + markdown_table(weights["rows"], [
        ("sizes", "cluster size"), ("train_clusters", "train clusters"), ("partner_pairs", "share of pairs, one partner"),
        ("all_pairs", "share of pairs, all pairs"), ("val_queries", "share of val queries"),
        ("test_queries", "share of test queries")])
        + f"\n\nPairs per epoch: {weights['partner_pairs_per_epoch']:,} with one partner per question, "
        f"{weights['all_pairs_per_epoch']:,} with all pairs ({weights['capped_clusters']} clusters capped at "
        f"{weights['cap']} pairs; batch size {TrainConfig().batch_size}, seed {weights['seed']}).")


def render() -> None:
    results = load_results(RESULTS)
    parts = []
    columns = [("split", "split"), ("H1", "H@1"), ("H10", "H@10"), ("MRR", "MRR")]
    if results["runs"]:
        parts.append("### Ablation (same epoch budget per variant, exact search)\n\n" + markdown_table(
            results["runs"], [("variant", "variant"), ("seed", "seed")] + columns + [
                ("epochs", "epochs"), ("best_epoch", "best epoch"), ("train_seconds", "train s"), ("encode_qps", "encode q/s")]))
        parts.append(f"Machine: {results['machine']}.")
    # The product default's comparison first.
    for name, final_run in sorted(results.get("finals", {}).items(), key=lambda item: not item[1]["default"]):
        title = f"### Final comparison: `{name}`{' (the product default)' if final_run['default'] else ''}"
        parts.append(f"{title}\n\n" + markdown_table(final_run["runs"], [("system", "system")] + columns + [
            ("index", "index"), ("recall_at_20_vs_exact", "recall@20 vs exact"), ("encode_qps", "encode q/s"),
            ("latency_ms_p50", "p50 ms"), ("latency_ms_p99", "p99 ms"), ("train_seconds", "train s"), ("epochs", "epochs")])
            + f"\n\nMachine: {final_run['machine']}.")
    if "pair_weights" in results:
        parts.append(pair_weights_text(results["pair_weights"]))
    if "train_time" in results:
        parts.append(train_time_text(results["train_time"]))
    if parts:
        replace_marked_section(DOC, "quality", "\n\n".join(parts))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="stage", required=True)
    p = sub.add_parser("ablation")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--variants", nargs="+", metavar="VARIANT", help="only these (default: all of VARIANTS)")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=ablation)
    p = sub.add_parser("final")
    p.add_argument("--variant", default="all")
    p.add_argument("--epochs", type=int, default=10, help="maximum epochs (early stopping on val ROC AUC)")
    p.add_argument("--patience", type=int, default=TrainConfig().patience)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--reuse", action="store_true", help="measure the bundle already saved for this variant")
    p.add_argument("--replace", action="store_true",
                   help="overwrite a final of this variant and seed trained with other settings or epochs")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=final)
    p = sub.add_parser("train-time")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--epochs", type=int, default=TrainConfig().max_epochs, help="maximum epochs (early stopping)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=train_time)
    p = sub.add_parser("pair-weights")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=pair_weights)
    p = sub.add_parser("render")
    p.set_defaults(func=lambda _: render())
    args = parser.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
