"""Benchmark for issue 24, part 5: the optional transformer backend (``qpr.transformer``), priced.

One fold of the leave-one-domain-out protocol of ``bench/out_of_domain.py`` (its corpora, queries
and metrics): all-MiniLM-L6-v2 is fine-tuned with SDML on a small budget (``BUDGET``: a few hundred
batches of 32, what this shared 2-core machine affords) of training pairs from the other domains'
train clusters, early-stopped on their val clusters, then measured on the left-out domain
(``LEFT_OUT``) against zero-shot MiniLM and BM25 on the same queries, and on the test clusters of
``IN_DOMAIN``, one of the domains it was fine-tuned on (its test split was not).
The price: questions encoded per second at one and two torch threads, the model's size on disk,
and the peak resident memory of a process that loads a transformer bundle and answers searches.

Stages (each kept in runs/transformer, so an interrupted run resumes):
  finetune  the fine-tuned model (runs/transformer/model) and its training history
  domains   BM25, zero-shot MiniLM and the fine-tuned model on each measured domain
  price     encoding rates (run under ``flock /tmp/qpr-timing.lock``), size on disk, peak RSS
  report    rows ``transformer-sdml`` in bench/results/out_of_domain.json (its other rows kept) and
            the section "The transformer backend" of docs/OUT_OF_DOMAIN.md
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import torch  # noqa: E402

from bench.common import ROOT, machine, markdown_table, replace_marked_section, write_json  # noqa: E402
from bench.out_of_domain import DOC, RESULTS, Fold, VectorLookup, domain, hits_of, minilm, ranked  # noqa: E402
from qpr.bundle import Bundle  # noqa: E402
from qpr.evaluate import rank_metrics  # noqa: E402
from qpr.index import IndexConfig  # noqa: E402
from qpr.sources import DOMAINS  # noqa: E402
from qpr.transformer import TransformerEncoder, TransformerSettings, fit_transformer, load_model  # noqa: E402

WORK = ROOT / "runs" / "transformer"
SYSTEM = "transformer-sdml"
BUDGET = TransformerSettings(batch_size=32, lr=2e-5, epochs=3, steps_per_epoch=100, patience=2, val_questions=1000, seed=0)
LEFT_OUT = "banking77"  # the fold whose ablation docs/OUT_OF_DOMAIN.md has too
IN_DOMAIN = "covid-faq"
SERVED_ON = "covid-faq"  # the corpus of the bundle whose memory is measured (small: the model dominates)
RATE_QUESTIONS = 350  # as bench/out_of_domain.py times MiniLM


def training_corpus() -> pd.DataFrame:
    """The other domains' capped corpora as one, each cluster named after its domain, splits kept."""
    frames = [domain(name).assign(cluster=lambda c, name=name: name + ":" + c["cluster"])
              for name in DOMAINS if name != LEFT_OUT]
    corpus = pd.concat(frames, ignore_index=True).drop_duplicates("question").reset_index(drop=True)
    corpus["qid"] = np.arange(1, len(corpus) + 1, dtype="int64")
    return corpus


def finetune() -> None:
    """Fine-tune MiniLM on the other domains' train clusters with ``BUDGET``, early-stopped on their val."""
    if (WORK / "finetune.json").is_file():
        return
    corpus = training_corpus()
    encoder, summary = fit_transformer(corpus, BUDGET)
    encoder.save(WORK)
    clustered = corpus[corpus["cluster"].notna()]
    write_json({"settings": asdict(BUDGET), "domains": [n for n in DOMAINS if n != LEFT_OUT],
                "train_questions": int((clustered["split"] == "train").sum()), "fit": summary, "machine": machine()},
               WORK / "finetune.json")


def finetuned() -> TransformerEncoder:
    return TransformerEncoder(load_model(WORK / "transformer", "the fine-tuned model"), BUDGET)


def domains() -> list[dict]:
    """BM25, zero-shot MiniLM and the fine-tuned model on the left-out domain's queries and on the
    in-domain one's test clusters (rows kept as measured)."""
    path = WORK / "domains.json"
    rows = json.loads(path.read_text()) if path.is_file() else []
    encoder = finetuned()
    for name in (LEFT_OUT, IN_DOMAIN):
        if any(r["left_out"] == name for r in rows):
            continue
        fold = Fold(name)
        queries = fold.queries if name == LEFT_OUT else fold.test_queries
        start = time.perf_counter()
        bundle = Bundle.create(encoder, None, fold.corpus, IndexConfig("Flat"))
        seconds = time.perf_counter() - start
        for system, retriever in (("bm25", fold.bm25), ("minilm", VectorLookup(fold.corpus, minilm(name, fold.corpus))),
                                  (SYSTEM, VectorLookup(fold.corpus, bundle))):
            hits = hits_of(ranked(retriever, queries), fold.corpus, queries)
            row = {"left_out": name, "system": system} | rank_metrics(hits) | {"in_domain": name != LEFT_OUT}
            if name != LEFT_OUT:
                row["split"] = "test"
            if system == SYSTEM:
                row["index_seconds"] = round(seconds, 1)
            print(row, flush=True)
            rows.append(row)
        write_json(rows, path)
    return rows


def price() -> dict:
    """Encoding rates at 1 and 2 torch threads, size on disk, and peak RSS of a serving process."""
    texts = pd.concat([domain(n)["question"].sample(200, random_state=0) for n in DOMAINS]).tolist()[:RATE_QUESTIONS]
    encoder = finetuned()
    out = {"questions": len(texts)}
    for threads in (1, 2):
        torch.set_num_threads(threads)
        encoder.encode(texts[:20])  # warm-up
        start = time.perf_counter()
        encoder.encode(texts)
        out[f"encode_qps_{threads}_threads"] = round(len(texts) / (time.perf_counter() - start), 1)
    torch.set_num_threads(1)
    bundle_path = WORK / "bundle"
    if not bundle_path.is_dir():
        Bundle.create(encoder, None, domain(SERVED_ON), IndexConfig("Flat")).save(bundle_path)
    out["model_mb_on_disk"] = round(folder_mb(bundle_path / "transformer"), 1)
    out["bundle_mb_on_disk"] = round(folder_mb(bundle_path), 1)
    out["served_corpus"] = f"{SERVED_ON} ({len(domain(SERVED_ON))} questions)"
    out["serving_peak_rss_mb"] = serving_rss(bundle_path)
    out["machine"] = machine()
    print(out, flush=True)
    write_json(out, WORK / "price.json")
    return out


def folder_mb(folder: Path) -> float:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 2**20


SERVE = """
import sys, torch
torch.set_num_threads(1)
from bench.common import peak_rss_mb
from qpr.bundle import Bundle
from qpr.serving import serving_retriever
bundle = Bundle.load(sys.argv[1])
retriever = serving_retriever(bundle)
for query in bundle.corpus["question"].head(200):
    retriever.search(query, 10)
print(peak_rss_mb())
"""


def serving_rss(bundle: Path) -> float:
    """Peak RSS (MB) of a fresh process that loads ``bundle`` and answers 200 searches one by one."""
    done = subprocess.run([sys.executable, "-c", SERVE, str(bundle)], cwd=ROOT, capture_output=True, text=True, check=True)
    return round(float(done.stdout.strip().splitlines()[-1]), 1)


def report() -> None:
    run = json.loads((WORK / "finetune.json").read_text())
    rows = json.loads((WORK / "domains.json").read_text())
    cost = json.loads((WORK / "price.json").read_text())
    results = json.loads(RESULTS.read_text())
    ours = [r | {"encode_qps": cost["encode_qps_1_threads"], "default": False}
            for r in rows if r["system"] == SYSTEM]
    results["runs"] = [r for r in results["runs"] if r["system"] != SYSTEM] + ours
    results["transformer"] = {"finetune": run, "price": cost, "compared": rows, "date": time.strftime("%Y-%m-%d")}
    write_json(results, RESULTS)
    replace_marked_section(DOC, "transformer", section(run, rows, cost, results.get("rates", {})))


def section(run: dict, rows: list[dict], cost: dict, rates: dict) -> str:
    fit = run["fit"]
    by = {(r["left_out"], r["system"]): r for r in rows}
    names = [n for n in MEASURED if (n, SYSTEM) in by]
    quality = [{"domain": n + (" (in-domain)" if by[n, SYSTEM]["in_domain"] else ""), "queries": by[n, SYSTEM]["queries"]}
               | {f"{s}-{k}": by[n, s][k] for s in ("bm25", "minilm", SYSTEM) for k in ("H1", "MRR")}
               | {"change": by[n, SYSTEM]["H1"] - by[n, "minilm"]["H1"]} for n in names]
    history = ", ".join(f"{h['epoch']}: {h['val_nn_accuracy']:.3f}" for h in fit["history"])
    price_rows = [
        {"what": "questions encoded per second, 1 torch thread", "cnn": rates.get("cnn"), "transformer": cost["encode_qps_1_threads"]},
        {"what": "questions encoded per second, 2 torch threads", "cnn": None, "transformer": cost["encode_qps_2_threads"]},
        {"what": "model on disk (MB)", "cnn": None, "transformer": cost["model_mb_on_disk"]},
        {"what": f"bundle on disk (MB), {cost['served_corpus']}", "cnn": None, "transformer": cost["bundle_mb_on_disk"]},
        {"what": "peak RSS of a process serving that bundle (MB; 200 searches)", "cnn": None,
         "transformer": cost["serving_peak_rss_mb"]},
    ]
    return "\n".join([
        f"Measured {time.strftime('%Y-%m-%d')} on {cost['machine']}; seed {BUDGET.seed}.",
        "",
        f"**Fine-tune** ({fit['base']}): SDML (smoothing {BUDGET.smoothing}) on unit vectors, batches of "
        f"{BUDGET.batch_size} Quora-lite training pairs (one per cluster), AdamW lr {BUDGET.lr}, up to {BUDGET.epochs} "
        f"epochs of {BUDGET.steps_per_epoch} batches, early-stopped on the nearest-neighbour accuracy "
        f"among {BUDGET.val_questions:,} Quora-lite val questions (per epoch, epoch 0 = MiniLM as shipped: {history}); kept epoch {fit['best_epoch']}, "
        f"{fit['seconds'] / 60:.1f} minutes on one loaded core ({run['train_questions']:,} Quora-lite questions capped).",
        "",
        "**Quality** (the leave-one-domain-out protocol above: the domain's capped corpus, its queries, top 20):",
        "",
        markdown_table(quality, [("domain", "domain"), ("queries", "queries"), ("bm25-H1", "BM25 H@1"),
                                 ("minilm-H1", "MiniLM zero-shot H@1"), (f"{SYSTEM}-H1", "fine-tuned H@1"),
                                 ("change", "fine-tuned - zero-shot H@1"), ("bm25-MRR", "BM25 MRR"),
                                 ("minilm-MRR", "MiniLM MRR"), (f"{SYSTEM}-MRR", "fine-tuned MRR")]),
        "",
        "**Price** (the CNN's rate: stage `rates` of `bench/out_of_domain.py`, one thread):",
        "",
        markdown_table(price_rows, [("what", ""), ("cnn", "CNN (default)"), ("transformer", "transformer")]),
    ])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("stage", choices=["finetune", "domains", "price", "report", "all"])
    args = parser.parse_args()
    torch.set_num_threads(1)
    WORK.mkdir(parents=True, exist_ok=True)
    for stage in (finetune, domains, price, report):
        if args.stage in (stage.__name__, "all"):
            stage()


if __name__ == "__main__":
    main()
