"""Distant supervision on the four shared logs, and SDML against BM25 on the clusters it builds.

    python -m bench.distant_supervision [--seed 0]     (from the repository root)

For every log in ../shared/data (BANKING77 train, InsuranceQA v2, COVID FAQ, SQuAD v1.1 dev):
build clusters (``qpr.data.supervise``), write its report folder into docs/distant_supervision/NAME/,
and score BM25 on the held-out test clusters. On BANKING77 and InsuranceQA it also trains SDML
(paper defaults, a smaller batch and an epoch cap that fit a 2-core CPU) and scores it with an
exact index. Writes bench/results/distant_supervision.json and the generated part of
docs/DISTANT_SUPERVISION.md from the same numbers, so the two always agree.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from bench.common import replace_marked_section, write_json
from qpr.bundles.bundle import Bundle
from qpr.evaluation.metrics import evaluate
from qpr.retrieval.index import IndexConfig
from qpr.data.qalogs import PRESETS, read_log
from qpr.retrieval.lexical import BM25Retriever
from qpr.data.supervise import MULTI_ANSWER, supervise
from qpr.data.supervise_report import render_markdown, summary, write_report
from qpr.training.train import TrainConfig, train

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "distant_supervision.json"
DOC = ROOT / "docs" / "DISTANT_SUPERVISION.md"
REPORTS = ROOT / "docs" / "distant_supervision"
MARKER = "distant-supervision"  # the generated part of the doc sits between its start/end markers
METRICS = ("H1", "H10", "MRR", "queries")


@dataclass(frozen=True)
class Setting:
    """How one log is turned into clusters, and whether SDML trains on them."""

    min_coherence: float
    multi_answer: str
    train: bool


# Why each setting (docs/DISTANT_SUPERVISION.md says more):
# - banking77: intents are labelled by people, and its big intents score low only because
#   c >= 1/n shrinks with size; the paper's 0.1 would keep almost none of them.
# - covid-faq: the same user query is logged with several different answers; joining them chains
#   most answers into one giant component, so such queries stay out of clusters.
SETTINGS = {
    "banking77": Setting(min_coherence=0.0, multi_answer="join", train=True),
    "insuranceqa-v2": Setting(min_coherence=0.1, multi_answer="join", train=True),
    "covid-faq": Setting(min_coherence=0.1, multi_answer="exclude", train=False),
    "squad-v1.1-dev": Setting(min_coherence=0.1, multi_answer="join", train=False),
}
# Paper defaults except these: the sets are small and the CPU has 2 shared cores.
BATCH_SIZE, MAX_EPOCHS, PATIENCE = 128, 15, 3


def score(retriever, corpus) -> dict:
    return {"system": retriever.name} | {k: evaluate(retriever, corpus, "test")[k] for k in METRICS}


def run_dataset(name: str, setting: Setting, seed: int, max_epochs: int) -> tuple[dict, dict]:
    """Build, report and evaluate one log; returns its entry of the results file and its report
    summary (``qpr.data.supervise_report.summary``)."""
    log = read_log(preset=name)
    result = supervise(log, setting.min_coherence, seed, setting.multi_answer)
    write_report(result, REPORTS / name, name, samples=False)
    info = summary(result, name) | {"samples": False}
    other = next(m for m in MULTI_ANSWER if m != setting.multi_answer)
    alternative = supervise(log, setting.min_coherence, seed, other).clusters
    entry = {
        "name": name,
        "questions": info["questions"],
        "clusters": info["clusters"],
        "clusters_kept": info["clusters_kept"],
        "questions_kept": info["questions_kept"],
        "min_coherence": setting.min_coherence,
        "multi_answer": setting.multi_answer,
        "log_rows": info["log_rows"],
        "answers": info["answers"],
        "splits": info["splits"],
        "other_multi_answer": {"multi_answer": other, "clusters": int(len(alternative)),
                               "clusters_kept": int(alternative["kept"].sum()),
                               "questions_kept": int(alternative.loc[alternative["kept"], "size"].sum())},
        "report": str((REPORTS / name).relative_to(ROOT)),
        "eval": [],
    }
    corpus = result.corpus
    if setting.train:
        config = TrainConfig(batch_size=BATCH_SIZE, max_epochs=max_epochs, patience=PATIENCE, seed=seed)
        print(f"{name}: training SDML {config}", file=sys.stderr)
        trained = train(corpus, config, progress=False, on_epoch=lambda row: print(f"  {row}", file=sys.stderr))
        bundle = Bundle.create(trained.encoder, trained.vocab, corpus, IndexConfig("Flat"), train_info=trained.summary())
        entry["eval"].append(score(bundle.dense_retriever(), corpus))
        entry |= {"train_config": asdict(config), "epochs": len(trained.history), "best_epoch": trained.best_epoch,
                  "best_val_auc": trained.best_auc, "stopped": trained.stopped, "train_seconds": round(trained.seconds, 1)}
    entry["eval"].append(score(BM25Retriever(corpus), corpus))
    return entry, info


def _row(cells) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def generated_markdown(results: dict, reports: list[dict]) -> str:
    """The measured part of the doc: results table, policy comparison, one report per data set."""
    machine = results["machine"]
    lines = [
        "",
        f"Measured by `python -m bench.distant_supervision --seed {results['seed']} --max-epochs {results['max_epochs']}` "
        f"on {machine['platform']} ({machine['cpus']} CPUs, torch {machine['torch']} with {machine['torch_threads']} threads); "
        f"total {results['seconds']:.0f} s. Test clusters of each split; index = all questions of the log.",
        "",
        _row(["data set", "questions", "clusters", "kept", "min c", "system", "H@1", "H@10", "MRR", "queries", "epochs", "train s"]),
        "|" + "---|" * 12,
    ]
    for d in results["datasets"]:
        for e in d["eval"]:
            trained = e["system"] != "bm25"  # the encoder: "sdml" in older results, its system name since
            lines.append(_row([
                d["name"], d["questions"], d["clusters"], d["clusters_kept"], f"{d['min_coherence']:g}", e["system"],
                f"{e['H1']:.3f}", f"{e['H10']:.3f}", f"{e['MRR']:.3f}", e["queries"],
                f"{d['epochs']} (best {d['best_epoch']}, {d['stopped']})" if trained else "",
                d["train_seconds"] if trained else "",
            ]))
    lines += [
        "",
        "Effect of the policy for questions with several answers (same threshold):",
        "",
        _row(["data set", "policy used", "clusters", "kept", "questions kept",
              "other policy", "clusters", "kept", "questions kept"]),
        "|" + "---|" * 9,
    ]
    for d in results["datasets"]:
        o = d["other_multi_answer"]
        lines.append(_row([d["name"], d["multi_answer"], d["clusters"], d["clusters_kept"], d["questions_kept"],
                           o["multi_answer"], o["clusters"], o["clusters_kept"], o["questions_kept"]]))
    lines.append("")
    for info in reports:
        lines.append(render_markdown(info, files=f"distant_supervision/{info['name']}", heading="###"))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-epochs", type=int, default=MAX_EPOCHS, help="epoch cap (fewer for a quick check)")
    args = parser.parse_args()
    start = time.perf_counter()
    datasets, reports = zip(*(run_dataset(name, SETTINGS[name], args.seed, args.max_epochs) for name in PRESETS))
    results = {
        "seed": args.seed,
        "max_epochs": args.max_epochs,
        "machine": {"platform": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count(),
                    "torch": torch.__version__, "torch_threads": torch.get_num_threads()},
        "seconds": round(time.perf_counter() - start, 1),
        "datasets": list(datasets),
    }
    write_json(results, RESULTS)
    replace_marked_section(DOC, MARKER, generated_markdown(results, list(reports)))
    print(json.dumps([{k: d[k] for k in ("name", "questions", "clusters", "clusters_kept", "eval")} for d in datasets], indent=1))


if __name__ == "__main__":
    main()
