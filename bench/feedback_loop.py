"""Benchmark (issue 6): how much of what label noise costs does simulated annotation win back?

On Quora-lite, a ``--noise`` share of the training clusters with 3+ questions is split in two
(``qpr.data.noise``; every pair across a split is a known false negative). One model trains on the
clean clusters, one on the noisy copy. For each strategy and budget, a simulated annotator that
knows the clean clusters judges that many candidate pairs from the noisy model's top ``k``
(``annotations.simulation.strategies``), through the annotation store; the judgments are merged and exported
(``workflows.simulated_loop.annotate``) and a model trains from scratch on the exported clusters. Every
model trains with the same settings and seed and is scored on the untouched test clusters with an
exact index over the clean corpus. Nothing is tuned on the test clusters.

    python -m bench.feedback_loop --noise 0.4 --budgets 500 2000   # the headline run: writes
        # bench/results/feedback_loop.json, docs/feedback_loop/gap_recovered_noise_0.4.png and the
        # doc's section marked feedback-loop-noise-0.4
    python -m bench.feedback_loop --quick         # a small slice and a small encoder, about a minute;
                                                  # writes only into a new temporary folder
    python -m bench.feedback_loop --render-only --results bench/results/feedback_loop_noise_0.2.json
                                                  # redo a plot and doc section from a results file

Each noise rate has its own doc section and plot, so runs at several rates stand side by side
(the r = 0.2 run is kept in bench/results/feedback_loop_noise_0.2.json). The full run trains
2 + strategies x budgets models. Trained models and finished runs are kept in ``--work`` (default
runs/feedback-loop-noise-R), so an interrupted run continues where it stopped when started again
with the same settings.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable

import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from annotations.db import open_store
from workflows.simulated_loop import Model, annotate, fit, loop_project, measures, scores
from annotations.simulation.oracle import SimulatedAnnotator, true_same
from annotations.simulation.strategies import STRATEGIES, candidate_pool
from bench.common import ROOT, machine, markdown_table, replace_marked_section, write_json
from qpr.bundles.bundle import Bundle
from qpr.data.corpus import data_dir, load_corpus
from qpr.model.encoder import PAPER_ENCODER, EncoderConfig
from qpr.fsutil.atomic import atomic_path
from qpr.data.noise import SPLIT_SUFFIX, inject_false_negatives, inject_false_positives
from qpr.model.text import PAPER_TEXT
from qpr.training.train import TrainConfig

RESULTS = ROOT / "bench" / "results" / "feedback_loop.json"
DOC = ROOT / "docs" / "FEEDBACK_LOOP.md"
# One doc section and one plot per noise rate, so results at several rates stand side by side.
PLOT = "gap_recovered_noise_{noise:g}.png"
MARKER = "feedback-loop-noise-{noise:g}"
BUDGETS = (500, 2000, 5000)
BAR_SHARE = 0.02  # the bar: at most 2% of the training questions in judgments...
BAR_GAP, BAR_PRECISION = 0.5, 5.0  # ...recovering half the gap; and 5x the precision of random picks
# Full run: 3 epochs per model (the best by val ROC AUC is kept) keep 2 + 3 x 3 trainings of
# Quora-lite near 1.5-2 hours on one core of the 2-core machine (docs/FEEDBACK_LOOP.md).
EPOCHS = 3
# --quick: a seeded sample of Quora-lite clusters (and distractors) and a small encoder, so the
# whole pipeline runs in about a minute; budgets scaled to the slice's ~7,500 training questions.
QUICK_CLUSTERS = {"train": 3000, "val": 300, "test": 300}
QUICK_DISTRACTORS = 2000
QUICK_BUDGETS = (40, 150, 400)
QUICK_ENCODER = EncoderConfig(embedding_dim=64, windows=(5,), channels=64, output_dim=64)
MIN_HALF = 4  # split only clusters of 4+, so both halves keep 2+ questions (no singleton-half artefact)


def quick_slice(corpus: pd.DataFrame, seed: int) -> pd.DataFrame:
    """``QUICK_CLUSTERS`` clusters of each split and ``QUICK_DISTRACTORS`` unclustered questions,
    drawn at random (seeded); clusters stay whole, so the slice keeps the split's guarantees."""
    clusters = corpus[corpus["cluster"].notna()].drop_duplicates("cluster")
    chosen = set()
    for split, n in QUICK_CLUSTERS.items():
        of_split = clusters[clusters["split"] == split]
        chosen |= set(of_split["cluster"].sample(min(n, len(of_split)), random_state=seed))
    distractors = corpus.loc[corpus["cluster"].isna(), "qid"]
    picked = distractors.sample(min(QUICK_DISTRACTORS, len(distractors)), random_state=seed)
    keep = corpus["cluster"].isin(chosen).fillna(False) | corpus["qid"].isin(picked)
    return corpus[keep.to_numpy(bool)].reset_index(drop=True)


def noisy_copy(clean: pd.DataFrame, noise: str, rate: float, seed: int = 0, split: str = "train", min_size: int = MIN_HALF) -> pd.DataFrame:
    """``clean`` with ``noise`` ("fn", "fp" or "both": each at ``rate``) in ``split``'s clusters."""
    noisy = clean
    if noise in ("fn", "both"):
        noisy = inject_false_negatives(noisy, rate, seed, min_size=min_size, split=split)[0]
    if noise in ("fp", "both"):
        noisy = inject_false_positives(noisy, rate, seed + 1, split=split)[0]
    return noisy


def cached_fit(path: Path, corpus: pd.DataFrame, clean: pd.DataFrame, config: TrainConfig, encoder: EncoderConfig) -> Model:
    """``workflows.simulated_loop.fit``, saved as a bundle at ``path`` (with its test scores) and loaded
    from there when a previous run already trained it."""
    if (path / "manifest.json").is_file():
        bundle = Bundle.load(path)
        return Model(bundle, bundle.manifest.metrics["test"], bundle.manifest.training)
    model = fit(corpus, clean, config, PAPER_TEXT, encoder)
    model = replace(model, bundle=model.bundle.with_manifest(metrics=model.bundle.manifest.metrics | {"test": model.test}))
    model.bundle.save(path)
    return model


def singleton_share(judged: pd.DataFrame, noisy: pd.DataFrame) -> float | None:
    """Share of judged pairs with a question that is alone in its noisy training cluster. Splitting
    a cluster of 3 leaves a half of one question, something real clusters never have; a strategy
    that favours such questions profits from how the noise was made (docs/FEEDBACK_LOOP.md)."""
    if judged.empty:
        return None
    size = noisy.groupby("cluster")["qid"].transform("size")
    alone = set(noisy.loc[(noisy["split"] == "train") & (size == 1), "qid"])
    return float((judged["query_qid"].isin(alone) | judged["candidate_qid"].isin(alone)).mean())


def noise_summary(noisy: pd.DataFrame, split: list[str]) -> dict:
    """What the noise made: false-negative pairs (half a times half b, per split cluster) and
    halves holding a single question."""
    sizes = noisy["cluster"].value_counts()
    halves = [(int(sizes[name]), int(sizes[name + SPLIT_SUFFIX])) for name in split]
    return {"false_negative_pairs": sum(a * b for a, b in halves), "singleton_halves": sum(b == 1 for _, b in halves)}


@dataclass
class Setup:
    """What every run shares: the corpora, the split clusters, the noisy model and its candidate
    pool, the training settings (``fit`` keywords) and the reference scores."""

    clean: pd.DataFrame
    noisy: pd.DataFrame
    split: list[str]
    noisy_model: Model
    pool: pd.DataFrame
    fitting: dict
    reference: dict


def one_run(setup: Setup, folder: Path, strategy: str, budget: int, error_rate: float, seed: int) -> dict:
    """Judge ``budget`` pairs picked by ``strategy`` into a fresh store in ``folder``, merge,
    export, retrain from scratch and score; returns the run's row."""
    shutil.rmtree(folder, ignore_errors=True)  # an unfinished earlier attempt: start it over
    folder.mkdir(parents=True)
    annotator = SimulatedAnnotator(setup.clean, "oracle", error_rate, seed=seed)
    with open_store(f"sqlite:///{(folder / 'annotations.db').resolve()}", project="demo") as store:
        # seed + 1: the random pick of round 1 of `qpr-annotations loop` with the same seed
        done = annotate(loop_project(store, setup.noisy_model.bundle, folder), annotator, strategy, budget,
                        folder / "corrected.parquet", seed=seed + 1, pool=setup.pool)
        row = {"strategy": strategy, "budget": budget, "round": 1}
        row |= measures(done, store.judgments.frame(annotator=annotator.name), setup.clean, setup.split)
    expected = setup.reference["pool_precision"]
    row["precision_vs_random"] = row["precision"] / expected if row["precision"] is not None and expected else None
    row["singleton_share"] = singleton_share(done.judged, setup.noisy)
    after = fit(done.corrected, setup.clean, **setup.fitting)
    return row | scores(after, setup.reference["H1_noisy"], setup.reference["H1_clean"])


def run(args: argparse.Namespace, work: Path, log: Callable[[str], None]) -> dict:
    """The whole experiment (module doc); returns the results payload."""
    start = time.perf_counter()
    clean = load_corpus(args.data)
    if args.quick:
        clean = quick_slice(clean, args.seed)
    # The paper's text handling and encoder, as in the recorded runs (the product defaults have since changed).
    encoder = QUICK_ENCODER if args.quick else PAPER_ENCODER
    config = TrainConfig(batch_size=args.batch_size, max_epochs=args.epochs, patience=args.patience, seed=args.seed)
    settings = {"data": str(args.data), "quick": args.quick, "questions": len(clean), "noise": args.noise,
                "seed": args.seed, "k": args.k, "error_rate": args.error_rate, "train_config": asdict(config),
                "encoder_config": encoder.to_dict()}
    recorded = work / "settings.json"
    if recorded.is_file() and json.loads(recorded.read_text()) != json.loads(json.dumps(settings)):
        sys.exit(f"{work} holds a run with other settings ({recorded}); pass another --work or delete that folder")
    work.mkdir(parents=True, exist_ok=True)
    write_json(settings, recorded)

    noisy, split = inject_false_negatives(clean, args.noise, seed=args.seed)
    train_questions = int(((clean["split"] == "train") & clean["cluster"].notna()).sum())
    log(f"{len(clean):,} questions, {train_questions:,} in training clusters; {len(split)} clusters split")
    log("model on the clean clusters")
    clean_model = cached_fit(work / "clean-model", clean, clean, config, encoder)
    log(f"clean: {clean_model.test}; model on the noisy clusters")
    noisy_model = cached_fit(work / "noisy-model", noisy, clean, config, encoder)
    log(f"noisy: {noisy_model.test} (training took {noisy_model.training['seconds']:.0f} s; every run below trains once)")
    pool = candidate_pool(noisy_model.retriever, noisy, k=args.k)
    in_pool = true_same(clean, pool["query_qid"], pool["candidate_qid"])
    reachable = set(clean.set_index("qid")["cluster"].reindex(pool.loc[in_pool, "query_qid"]))
    reference = {"H1_clean": clean_model.test["H1"], "H1_noisy": noisy_model.test["H1"],
                 "pool_precision": float(in_pool.mean()) if len(pool) else None}

    finished = work / "runs.jsonl"
    rows = [json.loads(line) for line in finished.read_text().splitlines()] if finished.is_file() else []
    setup = Setup(clean, noisy, split, noisy_model, pool, {"config": config, "text_config": PAPER_TEXT, "encoder_config": encoder}, reference)
    for strategy in args.strategies:
        for budget in args.budgets:
            if any(r["strategy"] == strategy and r["budget"] == budget for r in rows):
                log(f"{strategy} {budget}: done in an earlier run")
                continue
            log(f"{strategy} {budget}: judging, merging, exporting, retraining")
            row = one_run(setup, work / f"{strategy}-{budget}", strategy, budget, args.error_rate, args.seed)
            log(json.dumps(row))
            rows.append(row)
            with atomic_path(finished) as tmp:
                tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    wanted = [r for s in args.strategies for b in args.budgets for r in rows if (r["strategy"], r["budget"]) == (s, b)]
    return {
        "noise": args.noise, "H1_clean": clean_model.test["H1"], "H1_noisy": noisy_model.test["H1"],
        "train_questions": train_questions, "runs": wanted,
        "MRR_clean": clean_model.test["MRR"], "MRR_noisy": noisy_model.test["MRR"],
        "test_queries": clean_model.test["queries"], "seed": args.seed, "quick": args.quick, "data": str(args.data),
        "questions": len(clean), "split_clusters": len(split), **noise_summary(noisy, split), "k": args.k,
        "error_rate": args.error_rate,
        "pool_pairs": len(pool), "pool_precision": reference["pool_precision"],
        "pool_split_clusters": len(reachable & set(split)), "epochs": args.epochs, "train_config": asdict(config),
        "encoder_config": encoder.to_dict(), "machine": machine(), "seconds": round(time.perf_counter() - start),
    }


def plot(results: dict, path: Path) -> None:
    """H@1 after retraining (left) and the share of the clean-vs-noisy gap recovered (right)
    against judgments, one line per strategy, with the issue's bar marked."""
    fig = Figure(figsize=(10, 4), layout="constrained")
    FigureCanvasAgg(fig)
    h1, gap = fig.subplots(1, 2)
    bar_budget = BAR_SHARE * results["train_questions"]
    for strategy in dict.fromkeys(r["strategy"] for r in results["runs"]):
        runs = sorted((r for r in results["runs"] if r["strategy"] == strategy), key=lambda r: r["judgments"])
        h1.plot([r["judgments"] for r in runs], [r["H1_after"] for r in runs], marker="o", label=strategy)
        recovered = [(r["judgments"], r["gap_recovered"]) for r in runs if r["gap_recovered"] is not None]
        if recovered:
            gap.plot(*zip(*recovered), marker="o", label=strategy)
    for name, style in (("clean", "-"), ("noisy", "--")):
        h1.axhline(results[f"H1_{name}"], color="gray", linestyle=style, linewidth=1, label=f"{name} labels")
    h1.set(xlabel="judgments", ylabel="test H@1", title="H@1 after retraining on corrected clusters")
    gap.axhline(BAR_GAP, color="gray", linestyle="--", linewidth=1, label=f"bar: {BAR_GAP:.0%} of the gap")
    gap.axhline(0, color="black", linewidth=0.5)
    gap.set(xlabel="judgments", ylabel="share of the H@1 gap recovered",
            title=f"gap recovered (clean {results['H1_clean']:.3f}, noisy {results['H1_noisy']:.3f})")
    if results["H1_clean"] <= results["H1_noisy"]:
        gap.text(0.5, 0.6, "noisy labels scored no lower than clean ones:\nno gap to recover", ha="center",
                 transform=gap.transAxes)
    for ax in (h1, gap):
        ax.axvline(bar_budget, color="gray", linestyle=":", linewidth=1, label=f"{BAR_SHARE:.0%} of training questions")
        ax.set_xlim(0, max([r["judgments"] for r in results["runs"]] + [bar_budget]) * 1.05)
        ax.legend(fontsize="small")
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)


def training(results: dict) -> str:
    t, e = results["train_config"], results["encoder_config"]
    return (f"every model: {t['loss'].upper()} (eps {t['smoothing']:g}), batch {t['batch_size']}, at most {t['max_epochs']} "
            f"epochs (patience {t['patience']}, best val ROC AUC kept), encoder {e['embedding_dim']}-d embeddings, "
            f"{e['channels']} channels, {e['output_dim']}-d output, trained from scratch")


def markdown(results: dict, plot_name: str) -> str:
    """The generated part of docs/FEEDBACK_LOOP.md: setting, table, plot and the issue's bars."""
    bar_budget = BAR_SHARE * results["train_questions"]
    gap_met = [f"{r['strategy']} at {r['budget']:,}" for r in results["runs"]
               if r["budget"] <= bar_budget and (r["gap_recovered"] or 0) >= BAR_GAP]
    precise = [s for s in dict.fromkeys(r["strategy"] for r in results["runs"])
               if all((r["precision_vs_random"] or 0) >= BAR_PRECISION for r in results["runs"] if r["strategy"] == s)]
    gap = results["H1_clean"] - results["H1_noisy"]
    note = (
        f"{'QUICK CHECK, not the real results: ' if results['quick'] else ''}{results['data']}, "
        f"{results['questions']:,} questions ({results['train_questions']:,} in training clusters), noise {results['noise']:g}: "
        f"{results['split_clusters']:,} clusters split ({results['false_negative_pairs']:,} false-negative pairs; "
        f"{results['singleton_halves']:,} halves of one question); seed {results['seed']}; {training(results)}; "
        f"test queries {results['test_queries']:,}. Clean model H@1 {results['H1_clean']:.3f} / MRR {results['MRR_clean']:.3f}, "
        f"noisy model H@1 {results['H1_noisy']:.3f} / MRR {results['MRR_noisy']:.3f} (gap {gap:+.3f}). "
        f"Candidate pool: {results['pool_pairs']:,} cross-cluster pairs in the noisy model's top {results['k']}, "
        f"{results['pool_precision']:.4f} of them false negatives (the precision random picks expect), reaching "
        f"{results['pool_split_clusters']:,} of the split clusters. Machine: {results['machine']}; "
        f"{results['seconds']:,} s (the last invocation; models and runs resumed from --work not counted)."
    )
    table = markdown_table(results["runs"], [
        ("strategy", "strategy"), ("budget", "budget"), ("judgments", "judged"), ("precision", "precision"),
        ("precision_vs_random", "x random"), ("recall", "recall"), ("recall_per_1000", "recall / 1k"),
        ("reconnected", "reconnected"), ("singleton_share", "singleton share"), ("H1_after", "H@1 after"),
        ("MRR_after", "MRR after"), ("gap_recovered", "gap recovered"), ("ms_per_judgment", "store ms / judgment"),
    ])
    bars = (
        f"- Precision at least {BAR_PRECISION:g}x random at every budget: "
        f"{', '.join(precise) if precise else 'no strategy'}.\n"
        f"- At least {BAR_GAP:.0%} of the H@1 gap recovered with at most {BAR_SHARE:.0%} of the training questions "
        f"({bar_budget:,.0f} judgments): {', '.join(gap_met) if gap_met else 'no run'}"
        f"{'' if gap > 0 else ' (the noisy model scored no lower than the clean one: no gap to recover)'}."
    )
    return f"{note}\n\n{table}\n\n![gap recovered against judgments]({plot_name})\n\n{bars}"


def render(results: dict, doc: Path, plot_path: Path) -> None:
    plot(results, plot_path)
    marker = MARKER.format(noise=results["noise"])
    replace_marked_section(doc, marker, markdown(results, plot_path.relative_to(doc.parent).as_posix()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small slice, small encoder, 2 epochs; output to a temp folder")
    parser.add_argument("--render-only", action="store_true", help="only redo the plot and the doc from --results")
    parser.add_argument("--data", type=Path, default=data_dir() / "quora-lite", help="clean clusters (default: quora-lite)")
    parser.add_argument("--noise", type=float, default=0.2)
    parser.add_argument("--strategies", nargs="+", choices=STRATEGIES, default=list(STRATEGIES))
    parser.add_argument("--budgets", nargs="+", type=int, help=f"judgments per run (default {BUDGETS}, quick {QUICK_BUDGETS})")
    parser.add_argument("--k", type=int, default=20, help="results per training question that candidates come from")
    parser.add_argument("--error-rate", type=float, default=0.0, help="share of wrong simulated answers")
    parser.add_argument("--epochs", type=int, help=f"maximum epochs per model (default {EPOCHS}, quick 2)")
    parser.add_argument("--patience", type=int, default=TrainConfig().patience)
    parser.add_argument("--batch-size", type=int, help="default: TrainConfig's, quick 128")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", type=Path, help="models and finished runs, for resuming (default runs/feedback-loop-noise-R)")
    parser.add_argument("--results", type=Path, help=f"results file (default {RESULTS.relative_to(ROOT)})")
    parser.add_argument("--doc", type=Path, help=f"doc whose marked section is rewritten (default {DOC.relative_to(ROOT)})")
    args = parser.parse_args()
    if args.quick:
        # A quick check never touches the committed results: everything goes to a new temp folder.
        scratch = Path(tempfile.mkdtemp(prefix="feedback-loop-quick-"))
        shutil.copy(DOC, scratch / DOC.name)
        defaults = {"budgets": list(QUICK_BUDGETS), "epochs": 2, "batch_size": 128, "work": scratch / "work",
                    "results": scratch / RESULTS.name, "doc": scratch / DOC.name}
    else:
        defaults = {"budgets": list(BUDGETS), "epochs": EPOCHS, "batch_size": TrainConfig().batch_size,
                    "work": ROOT / "runs" / f"feedback-loop-noise-{args.noise:g}", "results": RESULTS, "doc": DOC}
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.render_only:
        results = json.loads(args.results.read_text())
    else:
        results = run(args, args.work, log=lambda line: print(line, file=sys.stderr, flush=True))
        write_json(results, args.results)
    plot_path = args.doc.parent / "feedback_loop" / PLOT.format(noise=results["noise"])
    render(results, args.doc, plot_path)
    print(f"results {args.results}, doc {args.doc}, plot {plot_path}", file=sys.stderr)


if __name__ == "__main__":
    main()
