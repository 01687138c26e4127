"""Closing the annotation loop with a simulated annotator, end to end through the real code paths.

``run_loop`` takes clean clusters, splits a share of the training clusters in two
(``qpr.data.noise.inject_false_negatives``: every pair across a split is a known false negative) and
trains an encoder on that noisy copy. Each round works on a ``workflows.project.Project``, as the
app's tabs do (``loop_project``): the store's project, named "simulated loop", serving the
round's model (a ``ServedModel`` of its bundle, over the corpus it learned from), its files in the
run folder (``FolderHome``). Then, each round:

1. the served encoder lists candidate pairs and a strategy picks ``budget`` of them
   (``annotations.simulation.strategies``);
2. a ``SimulatedAnnotator`` judges them into the annotation store (an SQLite file in the run
   folder), as a person in the app would;
3. the judgments are merged into corrected clusters and exported through the app's own export
   for training (``workflows.retraining.export_for_training``: the served corpus, recorded against
   the served version, ``annotations.constraints.corrected_clusters`` weighing the served
   model's own calibrated pair probabilities beside the judgments), handed over in memory as the
   app's retraining gets them (``annotations.export.Export``): the training data of the next
   model, whose bundle records the export as the app's does (``Export.provenance``);
4. the encoder is retrained on it as the app's retrain does (``qpr.bundles.training``:
   from scratch, or continuing the previous one with ``warm_start``), and
   scored on the untouched test clusters with an exact index over the clean corpus
   (``qpr.evaluation.metrics``).

A ``ServedModel`` per round, rather than the loop's own retriever and a scorer passed in, costs
what serving a bundle costs: BM25 over its corpus and the calibrations of its retrievers on the
val clusters (kept under the cache, ``qpr.retrieval.calibration.kept_calibrations``; BM25's build
and calibration took 4 s on all of Quora-lite), and one encoding of the corpus for the pair
scores, beside minutes to hours of training. It changes the loop's results against earlier runs,
which exported on the judgments alone: the model's pair probabilities now weigh in, as in the app.
The results recorded by ``bench/feedback_loop.py``, the export and retrain parts of
``bench/loop_payoff.py`` and ``bench/loop_control.py`` before this change are such earlier runs;
``bench/payoff.py`` keeps calling ``export_corrected`` with its own scorer.

Issue 6 names this ``python -m qpr loop``; it is ``qpr-annotations loop`` (``workflows.cli``)
instead, because the loop drives the annotation store and ``qpr`` must never import
``annotations``; it lives in ``workflows`` with the app's retraining (ui -> workflows ->
annotations -> qpr). ``bench/feedback_loop.py`` runs the full comparison.
"""

from __future__ import annotations

import functools
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import pandas as pd

from annotations.db import open_store
from annotations.errors import AnnotationError
from annotations.export import Export
from annotations.simulation.oracle import SimulatedAnnotator, precision, recall, reconnected
from annotations.queue import judged_pairs
from annotations.store import AnnotationStore
from annotations.simulation.strategies import STRATEGIES, candidate_pool, select
from qpr.bundles.bundle import Bundle
from qpr.bundles.training import retrain_bundle, train_bundle
from qpr.model.encoder import EncoderConfig
from qpr.evaluation.metrics import evaluate
from qpr.fsutil.atomic import atomic_path
from qpr.retrieval.index import IndexConfig
from qpr.data.noise import inject_false_negatives
from qpr.retrieval.dense import DenseRetriever
from qpr.model.text import MAX_K, TextConfig
from qpr.serving.served_model import ServedModel
from qpr.serving.slugs import DEMO
from qpr.training.train import TrainConfig
from workflows.project import FolderHome, Project
from workflows.retraining import export_for_training

DB_NAME = "annotations.db"
NAME = "simulated loop"  # the project each round works on
SUMMARY_NAME = "loop.json"


@dataclass(frozen=True)
class LoopConfig:
    """One loop run: ``budget`` judgments per round picked by ``strategy`` from each training
    question's top ``k``; ``noise`` share of eligible training clusters split (seed ``seed``);
    the simulated ``annotator`` is wrong on an ``error_rate`` share of its answers."""

    strategy: str = "suspicion"
    budget: int = 2000
    rounds: int = 1
    noise: float = 0.2
    k: int = 20
    error_rate: float = 0.0
    annotator: str = "oracle"
    warm_start: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise AnnotationError(f"unknown strategy {self.strategy!r}; use one of {', '.join(STRATEGIES)}")
        if self.budget < 0 or self.rounds < 1:
            raise AnnotationError(f"need a budget of 0 or more judgments and 1 or more rounds, got {self.budget} and {self.rounds}")
        if not 1 <= self.k <= MAX_K:
            raise AnnotationError(f"k (results per question) must be between 1 and {MAX_K}, got {self.k}")


@dataclass
class Model:
    """A trained encoder behind an exact index over the clean corpus, with its test scores."""

    bundle: Bundle
    test: dict
    training: dict

    @functools.cached_property
    def retriever(self) -> DenseRetriever:
        return self.bundle.dense_retriever()


def fit(
    corpus: pd.DataFrame,
    clean: pd.DataFrame,
    config: TrainConfig,
    text_config: TextConfig = TextConfig(),
    encoder_config: EncoderConfig = EncoderConfig(),
    warm_start: Model | None = None,
    provenance: dict | None = None,
    progress: bool = False,
    judged: pd.DataFrame | None = None,
    cluster_weights: pd.Series | None = None,
) -> Model:
    """Train on ``corpus``' clusters (continuing ``warm_start`` if given, through the app's retrain
    path ``qpr.bundles.training.retrain_bundle``), behind an exact index, and score
    H@1 / H@10 / MRR on the test clusters of ``clean``: whatever labels the model learned from, it
    is judged against the same clean queries and relevance. ``corpus`` holds the questions of
    ``clean`` (only clusters differ), so the index searches all of them. ``provenance``: the export the
    corpus came from, for the bundle's manifest; ``judged``: its judged pairs (``Export.pairs``),
    which a warm start trains on directly, as the app's retrain does, weighing clusters by
    ``cluster_weights`` (``Export.purity``)."""
    common = {"provenance": provenance, "fuse": False, "progress": progress, "return_on_interrupt": False}
    if warm_start is None:
        bundle = train_bundle(corpus, config, text_config, encoder_config, index_config=IndexConfig("Flat"),
                              data="simulated loop", **common)
    else:
        bundle = retrain_bundle(warm_start.bundle, corpus, judged=judged, cluster_weights=cluster_weights, **common)
    return Model(bundle, evaluate(bundle.dense_retriever(), clean, "test"), bundle.manifest.training)


@dataclass
class Round:
    """What one round of annotation produced: the ``judged`` pairs (with ``label`` and
    ``true_same``), the ``export`` of the corrected clusters, and the wall-clock ``seconds`` that
    recording the judgments in the store took."""

    judged: pd.DataFrame
    export: Export
    seconds: float

    @property
    def corrected(self) -> pd.DataFrame:
        """The corrected corpus: the training data of the next model."""
        return self.export.corpus

    @property
    def manifest(self) -> dict:
        return self.export.manifest


def loop_project(store: AnnotationStore, bundle: Bundle, folder: Path) -> Project:
    """The project a round of the loop works on: the store's, named "simulated loop", serving
    ``bundle`` (the round's model over the corpus it learned from), its bundles and exports in
    ``folder`` (``FolderHome``: nothing is served after the run)."""
    return Project(store.project, NAME, ServedModel(bundle), store, FolderHome(Path(folder)))


def annotate(
    project: Project,
    annotator: SimulatedAnnotator,
    strategy: str,
    budget: int,
    out: Path,
    k: int = 20,
    seed: int = 0,
    pool: pd.DataFrame | None = None,
) -> Round:
    """One round of annotation in ``project`` (``loop_project``), without retraining: register
    the corpus it serves under the served version, let ``annotator`` judge the ``budget`` pairs
    ``strategy`` picks from ``pool`` (default: the served model's candidate pool over that corpus
    minus pairs the annotator judged before), and export the corrected clusters to ``out`` (its
    extension names the format) as the app's retraining does
    (``workflows.retraining.export_for_training``: weighing the served model's pair probabilities,
    refused with too few clusters to train on).
    """
    served = project.served()
    version, corpus, store = served.bundle.version, served.bundle.corpus, project.store
    store.corpora.register(version, corpus)
    if pool is None:
        pool = candidate_pool(served.model_retriever, corpus, k,
                              exclude=judged_pairs(store.judgments.frame(annotator=annotator.name)))
    start = time.perf_counter()
    judged = annotator.judge(store, select(pool, strategy, budget, seed), version)
    seconds = time.perf_counter() - start
    done = export_for_training(project, Path(out).suffix.lstrip("."), out=out, served=served)
    return Round(judged, done, seconds)


def measures(done: Round, judgments: pd.DataFrame, truth: pd.DataFrame, split: list[str]) -> dict:
    """Ground-truth measures of a round; ``judgments``: all of the annotator's so far.
    ``precision`` is this round's; ``recall`` and ``recall_per_1000`` count every judgment so far.
    Shares of nothing (no judgments) are None."""
    found = recall(judgments, truth, split)
    return {
        "judgments": len(done.judged),
        "precision": precision(done.judged) if len(done.judged) else None,
        "recall": found,
        "recall_per_1000": found * 1000 / len(judgments) if len(judgments) else None,
        "reconnected": reconnected(done.corrected, truth, split),
        "merges": len(done.manifest["merges"]),
        "conflicts": len(done.manifest["conflicts"]),
        "ms_per_judgment": round(1000 * done.seconds / len(done.judged), 2) if len(done.judged) else None,
    }


def gap_recovered(h1_after: float, h1_noisy: float, h1_clean: float | None) -> float | None:
    """(H1_after - H1_noisy) / (H1_clean - H1_noisy); None when there is no positive gap to recover."""
    if h1_clean is None or h1_clean <= h1_noisy:
        return None
    return (h1_after - h1_noisy) / (h1_clean - h1_noisy)


def scores(model: Model, h1_noisy: float, h1_clean: float | None) -> dict:
    """The retrained ``model``'s test scores and the share of the clean-vs-noisy gap it recovered."""
    return {
        "H1_after": model.test["H1"], "MRR_after": model.test["MRR"], "H10_after": model.test["H10"],
        "gap_recovered": gap_recovered(model.test["H1"], h1_noisy, h1_clean),
        "train_epochs": len(model.training["history"]), "train_seconds": round(model.training["seconds"], 1),
    }


def run_loop(
    clean: pd.DataFrame,
    config: LoopConfig,
    train_config: TrainConfig,
    out_dir: Path,
    text_config: TextConfig = TextConfig(),
    encoder_config: EncoderConfig = EncoderConfig(),
    with_clean: bool = False,
    progress: bool = False,
    log: Callable[[str], None] = print,
) -> dict:
    """Noisy training, then ``config.rounds`` rounds (module doc) with the store, exports and
    ``loop.json`` (rewritten atomically after every round) in ``out_dir``. ``with_clean`` also
    trains on the clean clusters, for the gap recovered. Returns the summary (as in loop.json).

    Refuses an ``out_dir`` that already holds a judgment database: its judgments would count.
    """
    out_dir = Path(out_dir)
    db = out_dir / DB_NAME
    if db.exists():
        raise AnnotationError(f"{db} already exists: its judgments would count in this run; choose another output folder")
    noisy, split = inject_false_negatives(clean, config.noise, seed=config.seed)
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = {
        "noise": config.noise, "split_clusters": len(split),
        "train_questions": int(((clean["split"] == "train") & clean["cluster"].notna()).sum()),
        "loop": asdict(config), "train_config": asdict(train_config), "H1_clean": None, "MRR_clean": None,
    }
    fitting = {"config": train_config, "text_config": text_config, "encoder_config": encoder_config, "progress": progress}
    if with_clean:
        log("training on the clean clusters (reference)")
        reference = fit(clean, clean, **fitting)
        summary |= {"H1_clean": reference.test["H1"], "MRR_clean": reference.test["MRR"]}
    log(f"training on noisy clusters ({len(split)} of the training clusters split)")
    model = fit(noisy, clean, **fitting)
    summary |= {"H1_noisy": model.test["H1"], "MRR_noisy": model.test["MRR"], "runs": []}
    annotator = SimulatedAnnotator(clean, config.annotator, config.error_rate, seed=config.seed)
    with open_store(f"sqlite:///{db.resolve()}", project=DEMO) as store:
        for round_no in range(1, config.rounds + 1):
            log(f"round {round_no}: {config.budget} judgments by {config.strategy}")
            done = annotate(
                loop_project(store, model.bundle, out_dir), annotator, config.strategy, config.budget,
                out_dir / f"round-{round_no}.parquet", k=config.k, seed=config.seed + round_no,
            )
            corpus = done.corrected
            row = {"strategy": config.strategy, "budget": config.budget, "round": round_no}
            row |= measures(done, store.judgments.frame(annotator=annotator.name), clean, split)
            log(f"round {round_no}: {row['judgments']} judged, precision {row['precision']}, {row['reconnected']} of "
                f"{len(split)} split clusters reconnected; retraining")
            model = fit(corpus, clean, **fitting, warm_start=model if config.warm_start else None, provenance=done.export.provenance)
            summary["runs"].append(row | scores(model, summary["H1_noisy"], summary["H1_clean"]))
            with atomic_path(out_dir / SUMMARY_NAME) as tmp:
                tmp.write_text(json.dumps(summary, indent=2) + "\n")
    return summary
