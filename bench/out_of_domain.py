"""Benchmark for issue 24: leave-one-domain-out over the shared question sets.

For each domain of ``qpr.sources.DOMAINS`` left out, every system is measured on that domain's
queries (``qpr.sources.domain_queries``: all its clustered questions, at most ``MAX_QUERIES``;
Quora-lite: its canonical test clusters) against that domain's whole (capped) corpus, the
paper's protocol (query removed from its own results; hit = same cluster; H@1 and MRR over 20):

- ``bm25``; ``minilm`` (all-MiniLM-L6-v2, the benchmark extra, exact cosine search);
- ``product-dense`` / ``product-hybrid``: today's product settings trained on Quora-lite only
  (the fitted hybrid's weights fitted on Quora-lite's val split), at the budget below;
- ``dense``: the general CNN (``qpr.distill``), trained on the other domains' train clusters
  (per-source sampling) and distilled from MiniLM on the other domains' questions;
  ``hybrid``: it with BM25 by rank fusion whose weight is chosen on the OTHER left-out domains
  (nested: the left-out domain's labels never choose it); ``default: true`` marks it;
- ablations ``dense-pairs-only`` (no teacher) and ``dense-distill-only`` (no labels);
- step 3 on the left-out domain's own ``test`` clusters: ``general`` (zero-shot), ``adapted``
  (+ self-supervised views of the domain's questions, no labels) and ``finetuned`` (+ its
  ``train`` clusters).

Stages (each resumable: a fold's rows are kept in runs/ood/folds/<domain>.json):
  teacher   MiniLM vectors of every domain (cached in runs/ood)
  folds     every system on every left-out domain (``--only`` a subset of systems)
  rates     encoding rates (run under ``flock /tmp/qpr-timing.lock``)
  report    bench/results/out_of_domain.json, the plot and the tables in docs/OUT_OF_DOMAIN.md
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import torch  # noqa: E402

from bench.common import ROOT, machine, markdown_table, replace_marked_section, write_json  # noqa: E402
from bench.quality import MiniLMRetriever  # noqa: E402
from qpr.bundle import Bundle  # noqa: E402
from qpr.data import fingerprint, load_corpus, data_dir  # noqa: E402
from qpr.distill import GeneralConfig, Unlabelled, train_general  # noqa: E402
from qpr.evaluate import TOP, h1_change, rank_metrics  # noqa: E402
from qpr.hybrid import Fusion, HybridRetriever, RankFusion, fit_fusion, rank_fuse  # noqa: E402
from qpr.index import IndexConfig  # noqa: E402
from qpr.retrievers import BM25Retriever, DenseRetriever  # noqa: E402
from qpr.sources import DOMAINS, cap_corpus, domain_cap, domain_queries, load_domain  # noqa: E402
from qpr.train import TrainConfig, train  # noqa: E402

WORK = ROOT / "runs" / "ood"
RESULTS = ROOT / "bench" / "results" / "out_of_domain.json"
DOC = ROOT / "docs" / "OUT_OF_DOMAIN.md"
PLOT = ROOT / "docs" / "out_of_domain.png"
MAX_QUERIES = 1_000
# The general encoder's budget per fold (about 4 minutes of one loaded core), and the product's.
GENERAL = GeneralConfig(per_source=2000, unlabelled_per_epoch=5000, epochs=2, batch_size=256)
PRODUCT_QUESTIONS = 20_000  # Quora-lite capped: about 28k training pairs over 2 epochs
PRODUCT = TrainConfig(max_epochs=2, patience=2, val_pairs=2000)
ADAPT = replace(GENERAL, per_source=0, unlabelled_per_epoch=5000, epochs=1)
FINETUNE = replace(GENERAL, per_source=4000, unlabelled_per_epoch=0, epochs=1)
WEIGHTS = tuple(round(w, 1) for w in np.linspace(0, 1, 11))


def domain(name: str) -> pd.DataFrame:
    return load_domain(name, domain_cap(name))


def minilm(name: str, corpus: pd.DataFrame) -> MiniLMRetriever:
    """MiniLM over a domain's corpus; its vectors are cached (they are the teacher's too)."""
    WORK.mkdir(parents=True, exist_ok=True)
    return MiniLMRetriever(corpus, WORK / f"minilm-{name}-{fingerprint(corpus)[:12]}.npy")


def teacher_vectors(name: str, corpus: pd.DataFrame) -> np.ndarray:
    path = WORK / f"minilm-{name}-{fingerprint(corpus)[:12]}.npy"
    if not path.is_file():
        raise SystemExit(f"no teacher vectors for {name}: run `python bench/out_of_domain.py teacher` first")
    return np.load(path)


class VectorLookup(DenseRetriever):
    """MiniLM search over cached corpus vectors: queries are corpus questions, so their vectors
    are looked up, not re-encoded (the encoding rate is measured apart, stage ``rates``)."""

    name = "minilm"

    def __init__(self, corpus: pd.DataFrame, retriever: MiniLMRetriever) -> None:
        self.corpus, self.index = corpus, retriever.index
        self.row_of = {q: i for i, q in enumerate(corpus["question"])}
        self.vectors = retriever.index.vectors(corpus["qid"].to_numpy())

    def search_ids(self, queries, k):
        return self.index.search(self.vectors[[self.row_of[q] for q in queries]], k)


def ranked(retriever, queries: pd.DataFrame) -> np.ndarray:
    """Each query's top ``TOP`` qids with the query itself removed (-1 pads)."""
    out = np.full((len(queries), TOP), -1, dtype=np.int64)
    texts, own = queries["question"].tolist(), queries["qid"].to_numpy()
    for start in range(0, len(texts), 1000):
        _, found = retriever.search_ids(texts[start : start + 1000], TOP + 1)
        for row, (qid, hits) in enumerate(zip(own[start : start + 1000], found)):
            hits = hits[(hits != qid) & (hits >= 0)][:TOP]
            out[start + row, : len(hits)] = hits
    return out


def hits_of(qids: np.ndarray, corpus: pd.DataFrame, queries: pd.DataFrame) -> np.ndarray:
    cluster_of = pd.Series(corpus["cluster"].astype(object).to_numpy(), index=corpus["qid"].to_numpy())
    found = cluster_of.reindex(qids.ravel()).to_numpy().reshape(qids.shape)
    return (found == queries["cluster"].astype(object).to_numpy()[:, None]) & (qids >= 0)


class Fold:
    """One left-out domain: its corpus, queries, BM25, and the rows and rank lists measured so far."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.corpus = domain(name)
        self.queries = domain_queries(self.corpus, name, MAX_QUERIES)
        test = self.corpus[(self.corpus["split"] == "test") & self.corpus["cluster"].notna()]
        self.test_queries = test.sample(min(MAX_QUERIES, len(test)), random_state=0)
        self.bm25 = BM25Retriever(self.corpus)
        self.path = WORK / "folds" / f"{name}.json"
        self.lists_path = WORK / "folds" / f"{name}-lists.npz"
        self.rows = json.loads(self.path.read_text())["rows"] if self.path.is_file() else []
        self.lists = dict(np.load(self.lists_path)) if self.lists_path.is_file() else {}

    def has(self, system: str) -> bool:
        return any(r["system"] == system for r in self.rows)

    def record(self, system: str, retriever, queries: pd.DataFrame | None = None, **extra) -> np.ndarray:
        queries = self.queries if queries is None else queries
        qids = ranked(retriever, queries)
        row = {"left_out": self.name, "system": system} | rank_metrics(hits_of(qids, self.corpus, queries)) | extra
        print(row, flush=True)
        self.rows = [r for r in self.rows if r["system"] != system] + [row]
        self.lists[system] = qids
        self.save()
        return qids

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_json({"rows": self.rows}, self.path)
        tmp = self.lists_path.with_suffix(".tmp.npz")
        np.savez(tmp, **self.lists)
        tmp.replace(self.lists_path)


def bundle_on(model, corpus: pd.DataFrame) -> Bundle:
    """``model``'s (anything with ``encoder`` and ``vocab``) exact index over ``corpus``."""
    return Bundle.create(model.encoder, model.vocab, corpus, IndexConfig("Flat"))


def product_bundle() -> Bundle:
    """Today's product settings trained on Quora-lite (capped), its hybrid fitted on val; cached."""
    path = WORK / "product-quora"
    if path.is_dir():
        return Bundle.load(path)
    corpus = cap_corpus(load_corpus(data_dir() / "quora-lite"), PRODUCT_QUESTIONS)
    result = train(corpus, PRODUCT, progress=False, return_on_interrupt=False)
    bundle = Bundle.create(result.encoder, result.vocab, corpus, IndexConfig("Flat"),
                           train_info={"config": asdict(PRODUCT)} | result.summary())
    bundle = bundle.with_fusion(fit_fusion(bundle, max_queries=MAX_QUERIES).to_dict())
    bundle.save(path)
    return bundle


def training_material(left_out: str, teacher: bool) -> tuple[dict, Unlabelled]:
    """The other domains' corpora (their train clusters are the labelled pairs) and their
    questions as unlabelled material, with MiniLM's vectors when ``teacher``."""
    sources = {name: domain(name) for name in DOMAINS if name != left_out}
    questions = [q for c in sources.values() for q in c["question"]]
    vectors = np.concatenate([teacher_vectors(n, c) for n, c in sources.items()]) if teacher else None
    return sources, Unlabelled(questions, vectors)


def general_variant(left_out: str, labels: bool, teacher: bool):
    """The general encoder of a fold, or an ablation of it: without the other domains' labelled
    pairs, or without distillation (the same budget of each remaining ingredient)."""
    sources, unlabelled = training_material(left_out, teacher)
    return train_general(sources if labels else {}, unlabelled if teacher else None, GENERAL, progress=False)


def run_fold(name: str, only: set[str] | None) -> None:
    fold = Fold(name)
    wanted = lambda system: (only is None or system in only) and not fold.has(system)  # noqa: E731
    if wanted("bm25"):
        fold.record("bm25", fold.bm25)
    if wanted("minilm"):
        fold.record("minilm", VectorLookup(fold.corpus, minilm(name, fold.corpus)))
    if wanted("product-dense") or wanted("product-hybrid"):
        product = product_bundle()
        on_domain = bundle_on(product, fold.corpus)
        fold.record("product-dense", DenseRetriever(on_domain), in_domain=name == "quora-lite")
        fusion = Fusion.from_manifest(product.manifest)
        fold.record("product-hybrid", HybridRetriever(on_domain, fusion, fold.bm25), in_domain=name == "quora-lite")
    general_path = WORK / "general" / name
    step3 = any(wanted(s) for s in ("general", "adapted", "finetuned")) and len(fold.test_queries) >= 20
    if wanted("dense") or (step3 and not general_path.is_dir()):
        result = general_variant(name, labels=True, teacher=True)
        bundle = bundle_on(result, fold.corpus)
        bundle.manifest["training"] = {"config": asdict(GENERAL), "history": result.history, "seconds": result.seconds}
        bundle.save(general_path)
        fold.record("dense", DenseRetriever(bundle), train_seconds=round(result.seconds, 1))
    for system, labels, teacher in (("dense-pairs-only", True, False), ("dense-distill-only", False, True)):
        if wanted(system):
            result = general_variant(name, labels, teacher)
            fold.record(system, DenseRetriever(bundle_on(result, fold.corpus)), train_seconds=round(result.seconds, 1))
    if step3:
        general = Bundle.load(general_path)
        test = dict(queries=fold.test_queries, split="test")
        fold.record("general", DenseRetriever(general), **test)
        adapted = train_general({}, Unlabelled(fold.corpus["question"].tolist()), ADAPT,
                                warm_start=(general.encoder, general.vocab), progress=False)
        fold.record("adapted", DenseRetriever(bundle_on(adapted, fold.corpus)), train_seconds=round(adapted.seconds, 1), **test)
        tuned = train_general({name: fold.corpus}, None, FINETUNE, warm_start=(adapted.encoder, adapted.vocab), progress=False)
        fold.record("finetuned", DenseRetriever(bundle_on(tuned, fold.corpus)), train_seconds=round(tuned.seconds, 1), **test)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("stage", choices=["teacher", "folds", "rates", "report"])
    parser.add_argument("--domains", nargs="*", default=list(DOMAINS))
    parser.add_argument("--only", nargs="*", help="systems to run (default: all)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.stage == "teacher":
        for name in args.domains:
            print(name, flush=True)
            minilm(name, domain(name))
    elif args.stage == "folds":
        for name in args.domains:
            print(f"fold: {name}", flush=True)
            run_fold(name, set(args.only) if args.only else None)


if __name__ == "__main__":
    main()
