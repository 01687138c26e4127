"""The honest measurement of what judgments buy (issue 57), the ``payoff`` part of
``bench.loop_payoff``.

Per regime (``REGIMES``) and **draw** d (the noise, the noisy model and the judged set are drawn
again for each d): the noisy corpus (``REGIMES[regime](data, d)``), a noisy model trained from
scratch on it (seed d), and, per annotator error rate, ``budget`` judgments in ``ROUNDS`` rounds of the app's
own queue (``annotations.rounds.queue_round`` through ``annotations.task``'s code path: uncertain
pairs, audits, a random share; the threshold and purity re-scored between rounds by the export),
judged by a simulated annotator whose errors fall on near pairs, exported by the product's export
(``workflows.retraining.export_corrected`` with the noisy model's ``PairScorer``: constrained
clustering, purity). Then per training **seed**, three warm starts from the draw's noisy model
through the product's retrain path (``qpr.bundles.training.retrain_bundle``, as ``workflows.retraining`` calls it, fixed-shape
batches of ``RETRAIN_BATCH`` pairs, the same steps for every arm):

- ``uncorrected``: the noisy clusters, no judgments (the control);
- ``corrected``: the export's clusters, judged pairs and purity weights (the product);
- ``ceiling``: the clean clusters (what all the noise costs; ``recovered_share`` is the share of
  ceiling - uncorrected that corrected - uncorrected recovers).

Regimes: ``banking77-auto`` (the primary endpoint's: BANKING77's training queries clustered
automatically, TF-IDF + LSA k-means with k = sqrt(n), scored against its intents: large impure
clusters, false positives mostly), ``banking77-auto-fine`` (the same with clusters of about
``FINE_PER_CLUSTER`` questions: purer and split, false negatives mostly) and ``quora-fp-0.4``
(Quora-lite's quick slice with 40% of its training clusters joined in random pairs).

Every model is cached under the work folder as it finishes (``cell``), so a run resumes; progress
is printed from the start. Intervals are a two-level bootstrap (draws, then seeds within each)
of the paired differences, as well as the mean over draws.
"""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Callable, Iterable, Iterator

import numpy as np
import pandas as pd
from scipy import stats
from sklearn.cluster import KMeans
from sklearn.decomposition import TruncatedSVD
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.preprocessing import normalize

from annotations.db import open_store
from annotations.constraints import corrected_clusters
from annotations.pair_scores import PairScorer
from annotations.purity import cluster_purity
from annotations.rounds import queue_round
from annotations.simulation.oracle import SimulatedAnnotator
from bench.feedback_loop import QUICK_ENCODER, noisy_copy, quick_slice
from qpr.bundles.bundle import Bundle
from qpr.data.corpus import load_corpus
from qpr.errors import QPRError
from qpr.model.encoder import EncoderConfig
from qpr.model.text import PAPER_TEXT, TextConfig
from qpr.research.cluster_quality import cluster_quality
from qpr.retrieval.calibration import calibrate
from qpr.training.fixed_shape import training_clusters
from qpr.training.train import TrainConfig
from workflows.retraining import export_corrected
from workflows.simulated_loop import Model, fit

ROUNDS = 2
# Pairs per batch of every retrain, the same in every regime: qpr.training.fixed_shape shrinks a batch
# to half the owners (training clusters of 2+) of an arm that has fewer than twice as many, which would
# give the arms different shapes; BANKING77's clean arm has 77 intents, so 38 is the largest that keeps
# every arm's shape. check_batch fails a regime with an arm that has fewer clusters.
RETRAIN_BATCH = 38
# banking77-auto-fine's automatic clusters hold about this many questions (k = n / 10): bench.loop_control's
# regime of that name (issue 39), so one name means one clustering across the results file.
FINE_PER_CLUSTER = 10
EPOCHS = 3
BOOTSTRAP = 4000
ARMS = ("uncorrected", "corrected", "ceiling")
# What the models are built with, per row: the quick 64-d CNN of issues 21 and 39 (for sweeps), or the
# product's defaults (``qpr train``'s: trigram text, windows 1, 3 and 5, 300-d), which the issue asks of
# the primary rows. The training recipe (``config``, the retrain's shape) is the same for both.
ENCODERS: dict[str, tuple[TextConfig, EncoderConfig]] = {"quick": (PAPER_TEXT, QUICK_ENCODER),
                                                         "product": (TextConfig(), EncoderConfig())}


def banking77_auto(data: Path, seed: int = 0, per_cluster: int | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(clean, noisy) BANKING77 corpora (from ``data``/intents/banking77): train.csv queries as
    training questions, test.csv ones as val / test queries (half each, at random); clean clusters
    are the intents, the noisy corpus's training clusters are k-means clusters of TF-IDF + LSA
    vectors, no label used: k = sqrt(n), or n / ``per_cluster`` (small clusters, purer and more
    split)."""
    folder = data / "intents" / "banking77"
    parts = [pd.read_csv(folder / f"{name}.csv").assign(source=name) for name in ("train", "test")]
    frame = pd.concat(parts, ignore_index=True)
    frame["text"] = frame["text"].astype(str).str.strip()
    frame = frame.drop_duplicates("text").reset_index(drop=True)
    rng = np.random.default_rng(seed)
    held = np.where(rng.random(len(frame)) < 0.5, "val", "test")
    clean = pd.DataFrame({"qid": np.arange(1, len(frame) + 1, dtype="int64"), "question": frame["text"],
                          "cluster": frame["category"].astype("string"),
                          "split": np.where(frame["source"] == "train", "train", held)})
    train = (clean["split"] == "train").to_numpy()
    vectors = TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True).fit_transform(clean.loc[train, "question"])
    vectors = normalize(TruncatedSVD(100, random_state=seed).fit_transform(vectors))
    k = round(math.sqrt(train.sum())) if per_cluster is None else round(train.sum() / per_cluster)
    labels = KMeans(k, n_init=3, random_state=seed).fit_predict(vectors)
    noisy = clean.copy()
    noisy.loc[train, "cluster"] = pd.array([f"auto-{label}" for label in labels], dtype="string")
    return clean, noisy


def quora_fp(data: Path, seed: int = 0, rate: float = 0.4) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(clean, noisy) Quora-lite: the quick slice (``bench.feedback_loop.quick_slice``, seed 0: the
    same questions and splits in every draw, as issue 21's and 39's rows) and a copy with ``rate``
    of its training clusters joined in random pairs, drawn with ``seed``."""
    clean = quick_slice(load_corpus(data / "quora-lite"), 0)
    return clean, noisy_copy(clean, "fp", rate, seed=seed)


# The regimes: name -> function(data folder, draw seed) returning (clean, noisy) corpora with the same
# questions and splits; only the noisy corpus's training clusters differ.
REGIMES: dict[str, Callable[[Path, int], tuple[pd.DataFrame, pd.DataFrame]]] = {
    "banking77-auto": banking77_auto,
    "banking77-auto-fine": partial(banking77_auto, per_cluster=FINE_PER_CLUSTER),
    "quora-fp-0.4": partial(quora_fp, rate=0.4),
}


def check_batch(regime: str, arms: dict[str, pd.DataFrame]) -> None:
    """Fail, before any training, a regime with an arm whose training clusters are too few for
    ``RETRAIN_BATCH`` (module comment): its arms would not train the same shape."""
    for arm, corpus in arms.items():
        owners = len(training_clusters(corpus)[0])
        if owners < 2 * RETRAIN_BATCH:
            raise QPRError(f"{regime}: the {arm} arm has {owners} training clusters of 2+ questions, fewer than "
                           f"2 x RETRAIN_BATCH = {2 * RETRAIN_BATCH}, so its batches would shrink and the arms' "
                           "shapes differ; give the regimes a smaller RETRAIN_BATCH")


def config(seed: int) -> TrainConfig:
    """The noisy model's settings (docs/LOOP_PAYOFF.md's quick setting): SDML, batch 128, 3 epochs."""
    return TrainConfig(batch_size=128, max_epochs=EPOCHS, patience=EPOCHS, seed=seed, smoothing=0.3)


def cell(folder: Path, name: str, corpus: pd.DataFrame, clean: pd.DataFrame, seed: int, log: Callable[[str], None],
         encoder: str = "quick", warm: Model | None = None, judged: pd.DataFrame | None = None,
         weights: pd.Series | None = None, retrain: dict | None = None) -> Model:
    """The model ``name`` (cached in ``folder``): from scratch with the ``encoder`` of ``ENCODERS``, or
    a warm start from ``warm`` (which keeps its own encoder) through the product's retrain path with
    the seed ``seed``, batches of ``RETRAIN_BATCH`` pairs and the retrain settings ``retrain``
    (``WEIGHTS``) put over the noisy model's."""
    path = folder / "models" / name
    if (path / "manifest.json").is_file():
        bundle = Bundle.load(path)
        return Model(bundle, bundle.manifest.metrics["test"], bundle.manifest.training)
    log(f"training {name}")
    if warm is not None:
        # The warm start continues with the settings the noisy model was trained with; the retrain's
        # seed and batch size are the only ones set here (the same for every arm).
        warm = replace(warm, bundle=warm.bundle.with_manifest(
            training=warm.bundle.manifest.training | {"retrain": {"seed": seed, "batch_size": RETRAIN_BATCH} | (retrain or {})}))
    model = fit(corpus, clean, config(seed), *ENCODERS[encoder], warm_start=warm, judged=judged,
                cluster_weights=weights)
    model = replace(model, bundle=model.bundle.with_manifest(metrics=model.bundle.manifest.metrics | {"test": model.test}))
    shutil.rmtree(path, ignore_errors=True)
    model.bundle.save(path)
    log(f"{name}: H@1 {model.test['H1']:.4f} ({model.training['seconds']:.0f} s)")
    return model


def imported_clusters(corpus: pd.DataFrame) -> pd.Series:
    """``corpus``' training clusters of two or more questions: name -> qids."""
    train = corpus[(corpus["split"] == "train") & corpus["cluster"].notna()]
    clusters = train.groupby("cluster")["qid"].agg(list)
    return clusters[clusters.map(len) >= 2]


def noisy_scorer(folder: Path, noisy: pd.DataFrame) -> PairScorer:
    """The pair scorer of a draw's cached noisy model (in ``folder``) over ``noisy``, calibrated on it,
    as the export judged with it."""
    retriever = Bundle.load(folder / "models" / "noisy").dense_retriever()
    return PairScorer.of(retriever, noisy)  # calibrated on noisy's val clusters, as PairScorer.of does by default


def coherence_purity(folder: Path, noisy: pd.DataFrame, export: Path) -> pd.Series:
    """The ``coherence-prior`` design's purity (``annotations.purity``'s ``priors``): the cached
    export's clusters rebuilt from its judgments with the noisy model's scorer, each imported
    cluster's purity shrunk towards the model's coherence of it. Cached beside the export."""
    done = export / "purity-coherence.json"
    if done.is_file():
        return pd.Series(json.loads(done.read_text()), dtype=float)
    scorer = noisy_scorer(folder, noisy)
    with open_store(f"sqlite:///{(export / 'annotations.db').resolve()}", project="demo") as store:
        result = corrected_clusters(store, noisy, scorer)
    purity = cluster_purity(noisy, result, priors=scorer.coherence(imported_clusters(noisy)))[0]
    done.write_text(json.dumps(purity.to_dict()))
    return purity


def export_folder(folder: Path, budget: int, error: float, audit_order: str = "purity") -> Path:
    """Where a draw's judged export of ``budget`` judgments at annotator error ``error`` is cached."""
    return folder / (f"export-j{budget}-e{error:g}" + ("" if audit_order == "purity" else f"-audit-{audit_order}"))


def judged_export(folder: Path, model: Model, clean: pd.DataFrame, noisy: pd.DataFrame, budget: int, error: float,
                  draw: int, audit_order: str = "purity") -> tuple[pd.DataFrame, pd.DataFrame, pd.Series, dict]:
    """``budget`` judgments in ``ROUNDS`` rounds of the app's queue over ``noisy`` (its audits in
    ``audit_order``), by an annotator wrong on ``error`` of them (near pairs mostly), exported by the
    product with ``model``'s pair scorer; (corrected corpus, judged pairs, purity, what was judged).
    Cached in ``folder``."""
    done = folder / "export.json"
    out = folder / "corrected.parquet"
    if done.is_file():
        about = json.loads(done.read_text())
        purity = pd.Series(about.pop("purity"), dtype=float)
        return pd.read_parquet(out), pd.read_parquet(folder / "pairs.parquet"), purity, about
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    calibration = calibrate(model.retriever, noisy)
    scorer = PairScorer.of(model.retriever, noisy, calibration)
    annotator = SimulatedAnnotator(clean, "oracle", error, seed=draw, near=True)
    version = model.bundle.version
    kinds, target = [], 0.5
    with open_store(f"sqlite:///{(folder / 'annotations.db').resolve()}", project="demo") as store:
        store.corpora.register(version, noisy)
        for number in range(ROUNDS):
            size = budget // ROUNDS + (budget % ROUNDS if number == ROUNDS - 1 else 0)
            picked = queue_round(model.retriever, noisy, calibration, size, store.judgments.frame(), target=target,
                                 seed=draw * 100 + number, audit_order=audit_order)
            judged = annotator.judge(store, picked, version)
            kinds.append(judged.assign(round=number))
            export = export_corrected(store, noisy, version, "parquet", out=out, scorer=scorer)
            target = export.manifest["same_threshold"]
    judged = pd.concat(kinds, ignore_index=True)
    wrong = judged["true_same"].to_numpy() != (judged["label"] == "same").to_numpy()
    about = {"judged": len(judged), "same": int((judged["label"] == "same").sum()), "wrong": int(wrong.sum()),
             "kinds": judged["kind"].value_counts().to_dict(), "threshold": target,
             "merges": len(export.manifest["merges"]), "splits": len(export.manifest["splits"]),
             "pair_f1_before": cluster_quality(clean, noisy)["pair_f1"],
             "pair_f1_after": cluster_quality(clean, export.corpus)["pair_f1"]}
    export.pairs.to_parquet(folder / "pairs.parquet")
    done.write_text(json.dumps(about | {"purity": export.purity.to_dict()}))
    return export.corpus, export.pairs, export.purity, about


def bootstrap_ci(differences: np.ndarray, rng: np.random.Generator) -> list[float]:
    """95% interval of the mean of ``differences`` (draws x seeds), resampling draws, then seeds in each."""
    draws, seeds = differences.shape
    means = np.empty(BOOTSTRAP)
    for b in range(BOOTSTRAP):
        picked = differences[rng.integers(draws, size=draws)]
        means[b] = np.take_along_axis(picked, rng.integers(seeds, size=(draws, seeds)), axis=1).mean()
    return [float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))]


# What the corrected arm trains on, per design: (labels: the export's or the uncorrected clusters,
# the judged pairs, the purity weights: the export's, none, or with the model's coherence as each
# cluster's prior, ``coherence_purity``). "product" is the default retrain; the others take one part
# away or change it.
DESIGNS = {"product": ("export", True, "export"), "no-purity": ("export", True, None),
           "judged-on-uncorrected": ("uncorrected", True, "export"), "coherence-prior": ("export", True, "coherence")}
# The product's design with one of its retrain weights moved from its default
# (``qpr.training.train.JUDGED_REPEAT`` = 2, ``MIN_PURITY`` = 0.2): what measures those defaults.
WEIGHTS = {"judged-repeat-1": {"judged_repeat": 1}, "judged-repeat-4": {"judged_repeat": 4},
           "min-purity-0": {"min_purity": 0.0}, "min-purity-0.4": {"min_purity": 0.4}}
DESIGNS |= {name: DESIGNS["product"] for name in WEIGHTS}
# The product's design judged from a queue whose audits go elsewhere (``annotations.rounds.AUDIT_ORDERS``):
# a judged set, and so an export, of its own.
QUEUES = {"audit-by-coherence": "coherence"}
DESIGNS |= {name: DESIGNS["product"] for name in QUEUES}


# What makes two payoff rows the same row (a rerun replaces it; --keep-recorded-draws extends it).
ROW_SETTING = ("regime", "budget", "annotator_error", "design", "encoder")


def regime_rows(data: Path, work: Path, regime: str, budget: int, errors: list[float], draws: int, seeds: int,
                log: Callable[[str], None], designs: tuple[str, ...] = ("product",), encoder: str = "quick",
                recorded: list[dict] = (), first_draw: int = 0) -> Iterator[dict]:
    """The rows of ``regime`` (a name of ``REGIMES``) with ``encoder`` (of ``ENCODERS``), yielded as they
    finish: one per annotator error rate and design, in the order given (the primary endpoint's first),
    each over the draws ``first_draw`` to ``draws`` - 1 and every seed. A row of ``recorded`` (earlier
    result rows) with the same setting and seeds gives the draws it holds as they were measured, so
    that only the other draws are trained (``recorded_draw``)."""
    for error in errors:
        for design in designs:
            h1 = {arm: np.zeros((draws - first_draw, seeds)) for arm in ARMS}
            shapes, abouts = set(), []
            setting = {"regime": regime, "budget": budget, "annotator_error": error, "design": design, "encoder": encoder}
            earlier = next((r for r in recorded if r.get("part") == "payoff" and r["seeds"] == seeds
                            and all(r.get(k) == setting[k] for k in ROW_SETTING)), None)
            for draw in range(first_draw, draws):
                if earlier is not None and draw in row_draws(earlier):
                    cells, draw_shapes, about = recorded_draw(earlier, draw)
                    log(f"{encoder} {regime} draw {draw} error {error:g} {design}: as recorded")
                else:
                    cells, draw_shapes, about = draw_cells(data, work, regime, budget, error, design, draw, range(seeds),
                                                           log, encoder)
                for arm in ARMS:
                    h1[arm][draw - first_draw] = cells[arm]
                shapes |= draw_shapes
                abouts.append(about)
            row = summary_row(regime, design, encoder, budget, error, h1, shapes, abouts, first_draw)
            log(json.dumps(row))
            yield row


def draw_cells(data: Path, work: Path, regime: str, budget: int, error: float, design: str, draw: int,
               seeds: Iterable[int], log: Callable[[str], None], encoder: str = "quick") -> tuple[dict, set, dict]:
    """One draw of a row: its noisy model, judged export and, per seed (in the order given: two
    processes may fill one draw's cache from either end), the three arms' retrains; (H@1 per arm in
    seed order, the retrains' (steps, batch) shapes, what was judged). Every model is cached."""
    labels_from, use_pairs, purity_from = DESIGNS[design]
    clean, noisy = REGIMES[regime](data, draw)
    check_batch(regime, {"ceiling": clean, "uncorrected": noisy})
    folder = work / encoder / regime / f"draw{draw}"
    noisy_model = cell(folder, "noisy", noisy, clean, draw, log, encoder)
    audit_order = QUEUES.get(design, "purity")
    export = export_folder(folder, budget, error, audit_order)
    corrected, pairs, purity, about = judged_export(export, noisy_model, clean, noisy, budget, error, draw, audit_order)
    check_batch(regime, {"corrected": corrected})
    log(f"{encoder} {regime} draw {draw} error {error:g} {design}: {json.dumps(about)}")
    purity = coherence_purity(folder, noisy, export) if purity_from == "coherence" else purity if purity_from else None
    name = "corrected" if design == "product" else design  # the product's models keep their first names
    arms = {"uncorrected": (noisy, None, None, "uncorrected"), "ceiling": (clean, None, None, "ceiling"),
            "corrected": (corrected if labels_from == "export" else noisy, pairs if use_pairs else None,
                          purity, f"{name}-j{budget}-e{error:g}")}
    h1, shapes = {arm: [] for arm in ARMS}, set()
    for seed in seeds:
        for arm, (labels, judged, weights, model_name) in arms.items():
            model = cell(folder, f"{model_name}-s{seed}", labels, clean, seed, log, encoder, warm=noisy_model,
                         judged=judged, weights=weights, retrain=WEIGHTS.get(design) if arm == "corrected" else None)
            h1[arm].append(model.test["H1"])
            shapes.add(tuple((row["steps"], row["batch_pairs"]) for row in model.training["history"]))
    return h1, shapes, about


def row_draws(row: dict) -> range:
    """The draws a result row measured (rows before ``first_draw`` existed start at draw 0)."""
    first = row.get("first_draw", 0)
    return range(first, first + row["draws"])


def recorded_draw(row: dict, draw: int) -> tuple[dict, set, dict]:
    """One draw of a result row as ``draw_cells`` gives it (H@1 per arm in seed order, the retrains'
    shapes, what was judged), read from the row's recorded cells: for adding draws to a row whose
    earlier draws' models are no longer cached (the row keeps every cell it was computed from)."""
    shapes = {tuple(map(tuple, shape)) for shape in row["steps_and_batch"]}
    at = draw - row.get("first_draw", 0)
    return {arm: row["H1_per_cell"][arm][at] for arm in ARMS}, shapes, row["judged"][at]


def summary_row(regime: str, design: str, encoder: str, budget: int, error: float, h1: dict, shapes: set,
                abouts: list[dict], first_draw: int = 0) -> dict:
    """One result row: means, the paired difference with its intervals, the ceiling and the share
    recovered; its cells are the draws ``first_draw`` on, in order."""
    rng = np.random.default_rng(0)
    gain = h1["corrected"] - h1["uncorrected"]
    room = h1["ceiling"] - h1["uncorrected"]
    per_draw = gain.mean(axis=1)
    t_half = stats.t.ppf(0.975, len(per_draw) - 1) * per_draw.std(ddof=1) / np.sqrt(len(per_draw))
    return {
        "part": "payoff", "regime": regime, "design": design, "encoder": encoder, "annotator_error": error, "budget": budget,
        "judgments": budget, "first_draw": first_draw, "draws": int(gain.shape[0]), "seeds": int(gain.shape[1]), "equal_steps": len(shapes) == 1,
        "steps_and_batch": [list(map(list, shape)) for shape in sorted(shapes)],
        "H1_uncorrected_mean": float(h1["uncorrected"].mean()), "H1_after_mean": float(h1["corrected"].mean()),
        "ceiling_h1": float(h1["ceiling"].mean()),
        "corrected_minus_uncorrected": float(gain.mean()), "corrected_minus_uncorrected_ci95": bootstrap_ci(gain, rng),
        "corrected_minus_uncorrected_draws_t95": [float(per_draw.mean() - t_half), float(per_draw.mean() + t_half)],
        "recovered_share": float(gain.mean() / room.mean()) if room.mean() > 0 else None,
        "H1_per_cell": {arm: values.tolist() for arm, values in h1.items()}, "judged": abouts,
        "pair_f1_before": float(np.mean([a["pair_f1_before"] for a in abouts])),
        "pair_f1_after": float(np.mean([a["pair_f1_after"] for a in abouts])),
    }
