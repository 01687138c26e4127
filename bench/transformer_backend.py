"""Benchmark for issue 24, part 5: the optional transformer backend (``qpr.systems.transformer``), priced.

The corpora, queries and metrics of ``bench/out_of_domain.py``. all-MiniLM-L6-v2 is fine-tuned with
SDML on a small budget (``BUDGET``: a few hundred batches of 32, what this shared 2-core machine
affords), early-stopped on val, in two settings, and compared with zero-shot MiniLM and BM25 on
the same queries (``PLACES``):

- one fold of leave-one-domain-out: trained on the train clusters of every domain but ``LEFT_OUT``,
  measured on ``LEFT_OUT``'s queries, and on the test clusters of ``IN_DOMAIN``, one of the domains
  it was trained on (its test split was not);
- a user's own clusters: trained on ``LEFT_OUT``'s own train clusters, measured on its test clusters.

Each with SDML over squared distances of unit vectors (the paper's loss) and over cosine distances
times a learned scale (``distance="cosine"``, the backend's default since these runs): ``VARIANTS``.
The price: questions encoded per second at one and two torch threads, the model's size on disk,
and the peak resident memory of a process that loads a transformer bundle and answers searches.

Stages (each kept in runs/transformer, so an interrupted run resumes):
  finetune  each variant's fine-tuned model (runs/transformer[/<variant>]) and its training history
  domains   BM25, zero-shot MiniLM and each fine-tuned model on the two measured domains
  price     encoding rates (run under ``flock /tmp/qpr-timing.lock``), size on disk, peak RSS
  report    rows ``transformer-sdml`` in bench/results/out_of_domain.json (its other rows kept) and
            the section "The transformer backend" of docs/OUT_OF_DOMAIN.md; price and report read the
            default variant (the variants differ in training only: same model, same cost)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path


import numpy as np
import pandas as pd
import torch

from bench.common import ROOT, machine, markdown_table, replace_marked_section, write_json
from bench.out_of_domain import DOC, RESULTS, TRANSFORMER as SYSTEM, Fold, VectorLookup, domain, minilm
from qpr.bundles.bundle import Bundle
from qpr.data.corpus import data_dir, load_corpus
from qpr.model.encoder import EncoderConfig, QuestionEncoder, encode_texts
from qpr.evaluation.metrics import h1_change, hits_of, rank_metrics, ranked_qids
from qpr.retrieval.index import IndexConfig
from qpr.data.sources import DOMAINS
from qpr.model.text import TextConfig, Vocabulary
from qpr.systems.transformer import TransformerEncoder, TransformerSettings, fit_transformer, load_model

WORK = ROOT / "runs" / "transformer"
BUDGET = TransformerSettings(distance="squared", batch_size=32, lr=2e-5, epochs=3, steps_per_epoch=100, patience=2, val_questions=1000, seed=0)
LEFT_OUT = "banking77"  # the fold whose ablation docs/OUT_OF_DOMAIN.md has too, and the "own clusters" domain
IN_DOMAIN = "wikianswers"  # its test clusters: 590 queries (covid-faq's have 25)
SERVED_ON = "covid-faq"  # the corpus of the bundle whose memory is measured (small: the model dominates)
RATE_QUESTIONS = 350  # as bench/out_of_domain.py times MiniLM
REPEATS = 5
COSINE = replace(BUDGET, distance="cosine")
OTHERS = "others"  # trained on the other domains' train clusters (the fold)
# system -> (settings, what it is trained on: OTHERS, or LEFT_OUT's own train clusters)
VARIANTS = {SYSTEM: (BUDGET, OTHERS), f"{SYSTEM}-cosine": (COSINE, OTHERS),
            f"{SYSTEM}-{LEFT_OUT}": (BUDGET, LEFT_OUT), f"{SYSTEM}-cosine-{LEFT_OUT}": (COSINE, LEFT_OUT)}
# Where systems are measured: (domain, split of the queries: None = all its clustered questions, as
# out_of_domain.py's zero-shot rows) -> what the variants there were trained on.
PLACES = {(LEFT_OUT, None): OTHERS, (IN_DOMAIN, "test"): OTHERS, (LEFT_OUT, "test"): LEFT_OUT}


def folder(system: str) -> Path:
    """Where a variant's model and training record are kept."""
    return WORK if system == SYSTEM else WORK / system


def training_corpus() -> pd.DataFrame:
    """The other domains' capped corpora as one, each cluster named after its domain, splits kept."""
    frames = [domain(name).assign(cluster=lambda c, name=name: name + ":" + c["cluster"])
              for name in DOMAINS if name != LEFT_OUT]
    corpus = pd.concat(frames, ignore_index=True).drop_duplicates("question").reset_index(drop=True)
    corpus["qid"] = np.arange(1, len(corpus) + 1, dtype="int64")
    return corpus


def finetune() -> None:
    """Fine-tune MiniLM with each variant's settings on its training clusters, early-stopped on
    their val (variants already trained are skipped)."""
    for system, (settings, trained_on) in VARIANTS.items():
        if (folder(system) / "finetune.json").is_file():
            continue
        corpus = training_corpus() if trained_on == OTHERS else domain(trained_on)
        encoder, summary = fit_transformer(corpus, settings)
        folder(system).mkdir(parents=True, exist_ok=True)
        encoder.save(folder(system))
        clustered = corpus[corpus["cluster"].notna()]
        domains = [n for n in DOMAINS if n != LEFT_OUT] if trained_on == OTHERS else [trained_on]
        write_json({"settings": asdict(settings), "domains": domains,
                    "train_questions": int((clustered["split"] == "train").sum()), "fit": summary, "machine": machine()},
                   folder(system) / "finetune.json")


def trained() -> list[str]:
    return [system for system in VARIANTS if (folder(system) / "finetune.json").is_file()]


def finetuned(system: str = SYSTEM) -> TransformerEncoder:
    return TransformerEncoder(load_model(folder(system) / "transformer", "the fine-tuned model"), VARIANTS[system][0])


def domains() -> list[dict]:
    """BM25, zero-shot MiniLM and the fine-tuned variants at each of ``PLACES`` (rows kept as measured)."""
    path = WORK / "domains.json"
    rows = json.loads(path.read_text()) if path.is_file() else []
    for (name, split), trained_on in PLACES.items():
        systems = ["bm25", "minilm", *(s for s in trained() if VARIANTS[s][1] == trained_on)]
        missing = [s for s in systems if not any(place(r) == (name, split) and r["system"] == s for r in rows)]
        if not missing:
            continue
        fold = Fold(name)
        queries = queries_of(fold, split)
        lists = ranked_lists(name, split)
        for system in missing:
            extra = {}
            if system == "bm25":
                retriever = fold.bm25
            elif system == "minilm":
                retriever = VectorLookup(fold.corpus, minilm(name, fold.corpus))
            else:
                start = time.perf_counter()
                retriever = VectorLookup(fold.corpus, Bundle.create(finetuned(system), None, fold.corpus, IndexConfig("Flat")))
                extra = {"in_domain": split == "test", "index_seconds": round(time.perf_counter() - start, 1)}
            lists[system] = ranked_qids(retriever, queries)
            row = {"left_out": name, "system": system} | ({"split": split} if split else {})
            row |= rank_metrics(hits_of(lists[system], fold.corpus, queries)) | extra
            print(row, flush=True)
            rows.append(row)
            np.savez(lists_path(name, split), **lists)  # the ranked qids, for the paired intervals of ``report``
            write_json(rows, path)
    return rows


def place(row: dict) -> tuple[str, str | None]:
    return row["left_out"], row.get("split")


def queries_of(fold: Fold, split: str | None):
    return fold.queries if split is None else fold.test_queries


def lists_path(name: str, split: str | None) -> Path:
    return WORK / f"lists-{name}-{split or 'queries'}.npz"


def ranked_lists(name: str, split: str | None) -> dict:
    path = lists_path(name, split)
    return dict(np.load(path)) if path.is_file() else {}


def cnn_encoder() -> tuple[QuestionEncoder, Vocabulary]:
    """The default CNN (``EncoderConfig()``, ``TextConfig()``) with Quora-lite's training vocabulary,
    the price's reference: untrained, as weights change neither its speed nor its size."""
    corpus = load_corpus(data_dir() / "quora-lite")
    vocab = Vocabulary.build(corpus.loc[corpus["split"] == "train", "question"], TextConfig())
    return QuestionEncoder(vocab.size, EncoderConfig()).eval(), vocab


def price() -> dict:
    """Encoding rates of the transformer and the default CNN, side by side at 1 and 2 torch threads
    (``REPEATS`` interleaved rounds: median, min, max), their bundles' size on disk, and the peak RSS
    of a process serving each bundle."""
    texts = pd.concat([domain(n)["question"].sample(200, random_state=0) for n in DOMAINS]).tolist()[:RATE_QUESTIONS]
    transformer = finetuned()
    cnn, vocab = cnn_encoder()
    encoders = {"transformer": transformer.encode, "cnn": lambda batch: encode_texts(cnn, vocab, batch)}
    rates = {(name, threads): [] for name in encoders for threads in (1, 2)}
    for _ in range(REPEATS):
        for threads in (1, 2):
            torch.set_num_threads(threads)
            for name, encode in encoders.items():
                encode(texts[:20])  # warm-up
                start = time.perf_counter()
                encode(texts)
                rates[name, threads].append(len(texts) / (time.perf_counter() - start))
    torch.set_num_threads(1)
    out = {"questions": len(texts), "repeats": REPEATS}
    for (name, threads), values in rates.items():
        out[f"{name}_encode_qps_{threads}_threads"] = {"median": round(float(np.median(values)), 1),
                                                       "min": round(min(values), 1), "max": round(max(values), 1)}
    corpus = domain(SERVED_ON)
    out["served_corpus"] = f"{SERVED_ON} ({len(corpus)} questions)"
    for name, bundle in (("transformer", lambda: Bundle.create(transformer, None, corpus, IndexConfig("Flat"))),
                         ("cnn", lambda: Bundle.create(cnn, vocab, corpus, IndexConfig("Flat")))):
        path = WORK / f"bundle-{name}"
        if not path.is_dir():
            bundle().save(path)
        out[f"{name}_bundle_mb_on_disk"] = round(folder_mb(path), 1)
        out[f"{name}_serving_rss_mb"] = serving_rss(path)
    out["imports_only_rss_mb"] = serving_rss(None)
    out["transformer_model_mb_on_disk"] = round(folder_mb(WORK / "bundle-transformer" / "transformer"), 1)
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
from qpr.bundles.bundle import Bundle
from qpr.bundles.bundle import serving_retriever
if sys.argv[1:]:
    bundle = Bundle.load(sys.argv[1])
    retriever = serving_retriever(bundle)
    for query in bundle.corpus["question"].head(200):
        retriever.search(query, 10)
resident = next(line for line in open("/proc/self/status") if line.startswith("VmRSS:"))
print(peak_rss_mb(), int(resident.split()[1]) / 1024)
"""


def serving_rss(bundle: Path | None) -> dict:
    """Peak and final RSS (MB) of a fresh process that loads ``bundle`` and answers 200 searches one
    by one (None: that process's imports alone, the floor both bundles stand on)."""
    done = subprocess.run([sys.executable, "-c", SERVE, *([str(bundle)] if bundle else [])], cwd=ROOT,
                          capture_output=True, text=True, check=True)
    peak, resident = (round(float(v), 1) for v in done.stdout.split()[-2:])
    return {"peak": peak, "resident_after": resident}


def report() -> None:
    runs = {system: json.loads((folder(system) / "finetune.json").read_text()) for system in trained()}
    rows = json.loads((WORK / "domains.json").read_text())
    cost = json.loads((WORK / "price.json").read_text())
    results = json.loads(RESULTS.read_text())
    qps = cost["transformer_encode_qps_1_threads"]["median"]
    ours = [r | {"encode_qps": qps, "default": False} for r in rows if r["system"] in VARIANTS]
    results["runs"] = [r for r in results["runs"] if r["system"] not in VARIANTS] + ours
    results["transformer"] = {"finetune": runs, "price": cost, "compared": rows, "date": time.strftime("%Y-%m-%d")}
    write_json(results, RESULTS)
    replace_marked_section(DOC, "transformer", section(runs, rows, cost))


WHERE = {(LEFT_OUT, None): f"{LEFT_OUT}, left out (all its clustered questions)",
         (IN_DOMAIN, "test"): f"{IN_DOMAIN} test clusters (its train clusters were in the fine-tune)",
         (LEFT_OUT, "test"): f"{LEFT_OUT} test clusters (fine-tuned on its own train clusters)"}


def section(runs: dict, rows: list[dict], cost: dict) -> str:
    # A run from before the distance option trained with the squared distance, the only one then.
    training = [{"system": system, "distance": run["settings"].get("distance", "squared"), "on": ", ".join(run["domains"]),
                 "questions": run["train_questions"],
                 "history": ", ".join(f"{h['val_nn_accuracy']:.3f}" for h in run["fit"]["history"]),
                 "kept": run["fit"]["best_epoch"], "minutes": f"{run['fit']['seconds'] / 60:.1f}"} for system, run in runs.items()]
    quality = []
    for (name, split), _ in PLACES.items():
        fold = Fold(name)
        queries, lists = queries_of(fold, split), ranked_lists(name, split)
        zero_shot = hits_of(lists["minilm"], fold.corpus, queries)
        for row in (r for r in rows if place(r) == (name, split)):
            change = ""
            if row["system"] != "minilm":
                gain, low, high = h1_change(zero_shot, hits_of(lists[row["system"]], fold.corpus, queries))
                change = f"{gain:+.3f} [{low:+.3f}, {high:+.3f}]"
            quality.append(row | {"where": WHERE[name, split], "change": change})
    def rate(name: str, threads: int) -> str:
        value = cost[f"{name}_encode_qps_{threads}_threads"]
        return f"{value['median']:,.0f} ({value['min']:,.0f}-{value['max']:,.0f})"

    def memory(rss: dict) -> str:
        return f"{rss['resident_after']:,.0f} ({rss['peak']:,.0f})"

    price_rows = [
        {"what": f"questions encoded per second, {threads} torch thread{'s' if threads > 1 else ''}: median (range)",
         "cnn": rate("cnn", threads), "transformer": rate("transformer", threads)} for threads in (1, 2)
    ] + [
        {"what": "model on disk (MB)", "transformer": f"{cost['transformer_model_mb_on_disk']:.1f}"},
        {"what": f"bundle on disk (MB), {cost['served_corpus']}", "cnn": f"{cost['cnn_bundle_mb_on_disk']:.1f}",
         "transformer": f"{cost['transformer_bundle_mb_on_disk']:.1f}"},
        {"what": "RSS of a process serving that bundle after 200 searches (MB; its peak in brackets)",
         "cnn": memory(cost["cnn_serving_rss_mb"]), "transformer": memory(cost["transformer_serving_rss_mb"])},
        {"what": "the same process's imports alone, no bundle (MB; peak)", "cnn": memory(cost["imports_only_rss_mb"]),
         "transformer": memory(cost["imports_only_rss_mb"])},
    ]
    return "\n".join([
        f"Measured {time.strftime('%Y-%m-%d')} on {cost['machine']}; seed {BUDGET.seed}.",
        "",
        f"**Fine-tunes** of {runs[SYSTEM]['fit']['base']}: SDML (smoothing {BUDGET.smoothing}) on unit vectors, "
        f"batches of {BUDGET.batch_size} pairs (one per cluster), AdamW lr {BUDGET.lr}, up to {BUDGET.epochs} epochs of "
        f"{BUDGET.steps_per_epoch} batches, patience {BUDGET.patience}, early-stopped on the nearest-neighbour accuracy "
        f"among {BUDGET.val_questions:,} of the training domains' val questions (epoch 0 is MiniLM as shipped):",
        "",
        markdown_table(training, [("system", "system"), ("distance", "SDML distance"), ("on", "train clusters of"),
                                  ("questions", "clustered train questions"),
                                  ("history", "val nearest-neighbour accuracy, epoch 0, 1, ..."),
                                  ("kept", "epoch kept"), ("minutes", "minutes (one loaded core)")]),
        "",
        "**Quality** (out_of_domain.py's corpora and protocol, top 20; H@1 change against zero-shot MiniLM on the "
        "same queries with its 95% paired bootstrap interval):",
        "",
        markdown_table(quality, [("where", "queries from"), ("queries", "queries"), ("system", "system"), ("H1", "H@1"),
                                 ("MRR", "MRR"), ("change", "H@1 - MiniLM [95% CI]")]),
        "",
        f"**Price** ({cost['questions']} questions from all domains, {cost['repeats']} interleaved rounds, under the "
        "timing lock; the CNN is the default architecture with Quora-lite's training vocabulary):",
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
