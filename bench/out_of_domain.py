"""Benchmark for issue 24: leave-one-domain-out over the shared question sets.

For each domain of ``qpr.data.sources.DOMAINS`` left out, every system is measured on that domain's
queries (``qpr.data.sources.domain_queries``: all its clustered questions, at most ``MAX_QUERIES``;
Quora-lite: its canonical test clusters) against that domain's whole (capped) corpus, the
paper's protocol (query removed from its own results; hit = same cluster; H@1 and MRR over 20):

- ``bm25``; ``minilm`` (all-MiniLM-L6-v2, the benchmark extra, exact cosine search);
- ``product-dense`` / ``product-hybrid``: today's product settings trained on Quora-lite only
  (the fitted hybrid's weights fitted on Quora-lite's val split), at the budget below;
- ``dense``: the general CNN (``qpr.training.distill``), distilled from MiniLM on the other domains'
  questions (``qpr.bundles.general.BUILD``), its embeddings started from MiniLM's word vectors;
  ``hybrid``: it with BM25, candidates re-scored by the product's hybrid scorer
  (``qpr.retrieval.hybrid.Fusion``) fitted on the OTHER left-out domains' queries, each domain's features
  from its own fold's general encoder, which never saw it (nested: the left-out domain's labels
  never fit it); ``default: true`` marks it; ``rrf``: the general dense and BM25 by rank
  fusion, its setting chosen on the other domains the same way;
- ablations, one ingredient at a time: ``dense-rate-1e-3`` (the default at the earlier rate of
  1e-3), ``dense-random-words`` (that, from random word embeddings instead of MiniLM's word
  vectors), ``dense-pairs-only`` (the other domains' labelled pairs, no teacher) and
  ``dense-with-pairs`` (those pairs and the distillation together, random word embeddings, 1e-3);
- ``adapted-dense``: the general CNN after one epoch of self-supervised views of the left-out
  domain's own questions (no labels: what a cold start can do on a user's corpus);
  ``taught-dense``: the general CNN further distilled from MiniLM on the left-out domain's own
  questions (no labels either, but the teacher must be installed: ``rebase(..., teacher=True)``),
  queries included; ``taught-new-dense``: the same with the queries' texts held out of the
  teaching (questions a user asks later); ``*-rrf``: each fused with BM25 as ``rrf`` is;
- step 3 on the left-out domain's own ``test`` clusters: ``general`` (zero-shot), ``adapted``
  (+ self-supervised views of the domain's questions, no labels), ``finetuned`` (the general
  retrained on its ``train`` clusters as the product retrains a project that started from it:
  ``retrain_bundle`` of ``rebase``) and ``finetuned-rate-4e-3`` (the same at the distillation's rate).

Stages (each resumable: a fold's rows are kept in runs/ood/folds/<domain>.json):
  teacher   MiniLM vectors of every domain and its extra questions (cached in runs/ood)
  folds     every system on every left-out domain (``--only`` a subset of systems)
  rates     encoding rates (run under ``flock /tmp/qpr-timing.lock``)
  choice    the fusion chosen without labels for the taught encoders (``choice``), merged into the results
  levers    issue 42's levers on the general dense (``LEVERS``) against ``dense`` in the same folds, merged into the results
  teach_steps  how long the teaching of ``rebase --adapt teacher`` should last: H@1 of new questions and the label-free loss on them, per length
  report    bench/results/out_of_domain.json, the plot and the tables in docs/OUT_OF_DOMAIN.md

The optional transformer backend is measured apart (``bench/transformer_backend.py``): its rows
(systems ``transformer-sdml*``) and its ``transformer`` entry in the results are kept by ``report``.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, replace
from pathlib import Path


import numpy as np
import pandas as pd
import torch

from bench.common import ROOT, machine, markdown_table, replace_marked_section, write_json
from bench.ood_asymmetric import speed_sample
from bench.quality import MiniLMRetriever
from qpr.bundles.bundle import Bundle
from qpr.bundles.training import retrain_bundle
from qpr.research.confidence import mean_ci
from qpr.data.corpus import fingerprint, load_corpus, data_dir
from qpr.model.encoder import EncoderConfig, encode_texts
from qpr.training.distill import GeneralConfig, Unlabelled, train_general
from qpr.bundles.general import ADAPT, BUILD, NO_TEACHER, STUDENT, TEACH, distilled_student, general_material, minilm_vectors, rebase, training_info
from qpr.evaluation.metrics import TOP, h1_change, hits_of, pair_auc, rank_metrics, ranked_qids
from qpr.retrieval.fusion_choice import SAMPLE, choose_fusion
from qpr.retrieval.hybrid import Fusion, HybridRetriever, RankFusion, fit_fusion, fit_rows, fusion_rows, rank_fuse
from qpr.retrieval.index import IndexConfig
from qpr.retrieval.dense import DenseRetriever
from qpr.retrieval.lexical import BM25Retriever
from qpr.training.sampling import validation_pairs
from qpr.data.sources import DOMAINS, EXTRA_QUESTIONS, cap_corpus, extra_questions, domain_cap, domain_queries, load_domain
from qpr.training.train import TrainConfig, train

WORK = ROOT / "runs" / "ood"
RESULTS = ROOT / "bench" / "results" / "out_of_domain.json"
DOC = ROOT / "docs" / "OUT_OF_DOMAIN.md"
PLOT = ROOT / "docs" / "out_of_domain.png"
MAX_QUERIES = 1_000
FIT_QUERIES = 300  # queries of each other domain the hybrid scorer is fitted on (every domain weighs the same)
GENERAL = BUILD  # each fold's general encoder is trained as `python -m qpr general` trains it
EARLIER = replace(GENERAL, lr=1e-3)  # the distillation's rate before 4e-3: the ablations below ran at it
# The product's budget (about the general encoder's of before; not the 0.817 bundle of docs/QUALITY.md).
PRODUCT_QUESTIONS = 20_000  # Quora-lite capped: about 28k training pairs over 2 epochs
PRODUCT = TrainConfig(max_epochs=2, patience=2, val_pairs=2000)
UNSEEN = 5_000  # questions of a training domain that no student trained on (Fold.teacher_losses)
TEACH_STEPS = (0, 50, 150, 300, 600, 1200)  # teaching lengths in batches (stage teach_steps); 0: the general itself
LENGTHS = ((0, 12), (12, 20), (20, 40), (40, 80), (80, None))  # question lengths in words (Fold.teacher_losses)
SEEDS = (1, 2)  # the general dense trained again at these seeds (``dense`` is seed 0, as built)
# The student pooling by max alone (the build's until max+mean measured better): its rows, at
# every seed, keep the comparison; the ablations below were all measured with it.
MAX_POOL = EncoderConfig(pooling="max")
MAX_POOL_SYSTEM = "dense-max-pool"  # its seed 0; other seeds: dense-max-pool-seed-N
ABLATIONS = {  # system: (labels, teacher, words), general_variant's
    "dense-pairs-only": (True, False, False), "dense-with-pairs": (True, True, False),
    "dense-random-words": (False, True, False), "dense-rate-1e-3": (False, True, True),
}
# Issue 42's levers on the gap to MiniLM, one at a time over the build's recipe (system: its
# settings, student layers, extra questions per domain): each is compared with ``dense`` on the
# same fold (stage ``levers``).
LEVERS = {
    # Data: three times the extra questions of each domain that has them (WikiAnswers, Quora-lite).
    "dense-more-questions": (GENERAL, STUDENT, 3 * EXTRA_QUESTIONS),
    # Capacity: half as many filters again per window, about as wide as the 10x encode-rate bar allows.
    "dense-450-channels": (GENERAL, replace(STUDENT, channels=450), EXTRA_QUESTIONS),
}
# Levers measured and dropped, with the commit whose code trains them: their rows stay in the
# fold files and the stage levers still reports them. The teacher's in-batch neighbourhoods
# beside the regression (``neighbourhood_loss``: the KL divergence of the student's softmax over
# the batch's other questions, cosine / 0.05, from the teacher's) at weight 1 and 0.1, and at 0.1
# with each batch drawn from one k-means group of the teacher's vectors (``teacher_groups``). The
# cross-entropy of picking each question's own teacher vector among the batch's from its student
# vector (``contrastive_loss``, cosine / 0.05) beside the regression at weight 0.1. 2,000 texts
# per set of 2 to 6 of its questions joined (``joined_questions``), for long questions such as
# SemEval's forum posts, where the student's misfit to MiniLM grows with length.
RETIRED_LEVERS = {"dense-neighbourhood": "b53308a", "dense-neighbourhood-0.1": "f932c38", "dense-neighbour-batches": "f932c38",
                  "dense-contrastive-0.1": "d636e2c", "dense-joined-texts": "d636e2c"}
# Rank fusion settings chosen among (nested, on the other domains): the dense weight, and RRF's k,
# which sets how much a top rank outweighs the next (small k: a small dense weight only breaks
# BM25's near-ties; the usual 60: it reorders BM25's top ranks).
FUSIONS = tuple(RankFusion(round(float(w), 1), k) for k in (0, 2, 5, 20, 60) for w in np.linspace(0, 1, 11))


def domain(name: str) -> pd.DataFrame:
    return load_domain(name, domain_cap(name))


def teacher_path(name: str, corpus: pd.DataFrame) -> Path:
    """Where MiniLM's vectors of a domain's corpus are cached (``qpr.bundles.general.general_material``'s naming)."""
    return WORK / f"minilm-{name}-{fingerprint(corpus)[:12]}.npy"


def minilm(name: str, corpus: pd.DataFrame) -> MiniLMRetriever:
    """MiniLM over a domain's corpus; its vectors are cached (they are the teacher's too)."""
    WORK.mkdir(parents=True, exist_ok=True)
    return MiniLMRetriever(corpus, teacher_path(name, corpus))


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
        qids = ranked_qids(retriever, queries)
        row = {"left_out": self.name, "system": system} | rank_metrics(hits_of(qids, self.corpus, queries)) | extra
        print(row, flush=True)
        self.rows = [r for r in self.rows if r["system"] != system] + [row]
        self.lists[system] = qids
        self.save()
        return qids

    def teacher_losses(self, bundle: Bundle) -> dict:
        """The distillation loss (mean 1 - cos to MiniLM's vectors) of ``bundle``'s encoder, a
        student of this fold, on questions it never trained on: this domain's corpus
        (``left_out``, and by the questions' length in words, ``left_out_by_words``), and 5,000
        questions of a training domain that its extra questions left out
        (``unseen_trained_domain``). Beside its training loss they split the misfit into what
        any unseen question costs and what a new domain adds."""
        other = "wikianswers" if self.name == "quora-lite" else "quora-lite"
        more, trained = extra_questions(other, EXTRA_QUESTIONS + UNSEEN), set(extra_questions(other)["question"])
        unseen = more[~more["question"].isin(trained)].head(UNSEEN)
        texts = {"left_out": self.corpus["question"].tolist(), "unseen_trained_domain": unseen["question"].tolist()}
        teacher = {"left_out": np.load(teacher_path(self.name, self.corpus)),
                   "unseen_trained_domain": minilm_vectors(texts["unseen_trained_domain"],
                                                           WORK / f"minilm-{other}-unseen-{fingerprint(unseen)[:12]}.npy")}
        losses = {part: teacher_misfit(bundle, questions, teacher[part]) for part, questions in texts.items()}
        words = np.array([len(q.split()) for q in texts["left_out"]])
        by_words = {f"{low}-{high - 1}" if high else f"{low}+": (words >= low) & (words < (high or np.inf)) for low, high in LENGTHS}
        return {part: round(float(loss.mean()), 4) for part, loss in losses.items()} | {
            "left_out_by_words": {name: {"questions": int(m.sum()), "loss": round(float(losses["left_out"][m].mean()), 4)}
                                  for name, m in by_words.items() if m.any()}}

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_json({"rows": self.rows}, self.path)
        tmp = self.lists_path.with_suffix(".tmp.npz")
        np.savez(tmp, **self.lists)
        tmp.replace(self.lists_path)


def teacher_misfit(bundle: Bundle, questions: list[str], teacher: np.ndarray) -> np.ndarray:
    """1 - cos between ``bundle``'s vector of each question and MiniLM's (``teacher``, unit rows)."""
    student = bundle.encode(questions)
    student /= np.linalg.norm(student, axis=1, keepdims=True)
    return 1.0 - (student * teacher).sum(axis=1)


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
    bundle = bundle.with_fusion(fit_fusion(bundle.dense_retriever(), max_queries=MAX_QUERIES).to_dict())
    bundle.save(path)
    return bundle


def training_material(left_out: str, teacher: bool, extra: int = EXTRA_QUESTIONS) -> tuple[dict, Unlabelled]:
    """The other domains' corpora (their train clusters are the labelled pairs) and their
    questions as unlabelled material, with MiniLM's vectors and up to ``extra`` more questions of
    each when ``teacher``: what ``python -m qpr general`` trains on, less the left-out domain."""
    return general_material([name for name in DOMAINS if name != left_out], teacher, WORK, extra)


def general_variant(left_out: str, labels: bool, teacher: bool, words: bool = False, config: GeneralConfig = GENERAL,
                    encoder: EncoderConfig = STUDENT, extra: int = EXTRA_QUESTIONS):
    """The general encoder of a fold (``teacher`` and ``words`` at ``GENERAL`` and ``STUDENT``, as
    ``python -m qpr general`` trains it: distilled, its embeddings started from MiniLM's word
    vectors), or an ablation: the same at another ``config`` or ``encoder``, or from random
    embeddings, the other domains' labelled pairs alone (``NO_TEACHER``), or pairs and
    distillation together (the pairs at ``NO_TEACHER``'s rate per source)."""
    sources, unlabelled = training_material(left_out, teacher, extra)
    config = replace(config, per_source=NO_TEACHER.per_source) if labels and teacher else config if teacher else NO_TEACHER
    student = distilled_student(unlabelled.questions, WORK, config.seed, encoder) if words else None
    return train_general(sources if labels else {}, unlabelled if teacher else None, config, encoder_config=encoder,
                         warm_start=student, progress=False)


def run_fold(name: str, only: set[str] | None, redo: bool = False) -> None:
    fold = Fold(name)
    wanted = lambda system: (only is None or system in only) and (redo or not fold.has(system))  # noqa: E731
    if wanted("bm25"):
        fold.record("bm25", fold.bm25)
    if wanted("minilm"):
        fold.record("minilm", VectorLookup(fold.corpus, minilm(name, fold.corpus)))
    if wanted("product-dense") or wanted("product-hybrid"):
        product = product_bundle()
        on_domain = bundle_on(product, fold.corpus)
        fold.record("product-dense", on_domain.dense_retriever(), in_domain=name == "quora-lite")
        fusion = Fusion.from_stored(product.manifest.fusion)
        fold.record("product-hybrid", HybridRetriever(on_domain.dense_retriever(), fusion, fold.bm25), in_domain=name == "quora-lite")
    general_path = WORK / "general" / name
    step3 = any(wanted(s) for s in ("general", "adapted", "finetuned", "finetuned-rate-4e-3")) and len(fold.test_queries) >= 20
    if wanted("dense") or (step3 and not general_path.is_dir()):
        result = general_variant(name, labels=False, teacher=True, words=True)
        bundle = bundle_on(result, fold.corpus)
        bundle = bundle.with_manifest(training=training_info(GENERAL, result))  # as `python -m qpr general` records it
        bundle.save(general_path)
        fold.record("dense", bundle.dense_retriever(), train_seconds=round(result.seconds, 1), last_loss=result.history[-1],
                    teacher_loss=fold.teacher_losses(bundle))
    for system, (labels, teacher, words) in ABLATIONS.items():
        if wanted(system):
            result = general_variant(name, labels, teacher, words, EARLIER, MAX_POOL)
            fold.record(system, bundle_on(result, fold.corpus).dense_retriever(), train_seconds=round(result.seconds, 1))
    for system, (config, encoder, extra) in LEVERS.items():
        if wanted(system):
            result = general_variant(name, labels=False, teacher=True, words=True, config=config, encoder=encoder, extra=extra)
            bundle = bundle_on(result, fold.corpus)
            fold.record(system, bundle.dense_retriever(), train_seconds=round(result.seconds, 1), last_loss=result.history[-1],
                        teacher_loss=fold.teacher_losses(bundle))
    # The build's recipe at its other seeds, and the student pooling by max alone at every seed:
    # how far H@1, and the bar's mean gap, scatter.
    seeded = [(seed, system, STUDENT) for seed, system in seed_systems().items() if seed]
    seeded += [(seed, system, MAX_POOL) for seed, system in seed_systems(MAX_POOL_SYSTEM).items()]
    for seed, system, encoder in seeded:
        if wanted(system):
            result = general_variant(name, labels=False, teacher=True, words=True, config=replace(GENERAL, seed=seed), encoder=encoder)
            bundle = bundle_on(result, fold.corpus)
            if system == MAX_POOL_SYSTEM:  # its encode rate is measured on it (stage rates)
                bundle.save(WORK / "general-max-pool" / name)
            fold.record(system, bundle.dense_retriever(), train_seconds=round(result.seconds, 1))
    if wanted("adapted-dense"):  # the cold start without labels: self-supervised views of the domain's questions
        general = Bundle.load(general_path)
        adapted = train_general({}, Unlabelled(fold.corpus["question"].tolist()), ADAPT,
                                warm_start=(general.encoder, general.vocab), progress=False)
        fold.record("adapted-dense", bundle_on(adapted, fold.corpus).dense_retriever(), train_seconds=round(adapted.seconds, 1))
    # The cold start with the teacher: MiniLM on the domain's questions, no labels. "taught" is
    # taught on the whole corpus, queries included (a corpus searched with its own questions, as
    # annotators spot-check it); "taught-new" never sees the queries' texts (new questions).
    taught_systems = [(system, held_out) for system, held_out in (("taught-dense", False), ("taught-new-dense", True)) if wanted(system)]
    if taught_systems:
        general = Bundle.load(general_path)
        questions = fold.corpus["question"].tolist()
        vectors = minilm_vectors(questions, teacher_path(name, fold.corpus))
        for system, held_out in taught_systems:
            keep = ~fold.corpus["qid"].isin(fold.queries["qid"]).to_numpy() if held_out else np.ones(len(questions), dtype=bool)
            taught = train_general({}, Unlabelled([q for q, k in zip(questions, keep) if k], vectors[keep]), TEACH,
                                   warm_start=(general.encoder, general.vocab), progress=False)
            bundle = bundle_on(taught, fold.corpus)
            # Kept for the report and the stage choice, which measure fusions over them.
            bundle.save(WORK / ("taught-new" if held_out else "taught") / name)
            fold.record(system, bundle.dense_retriever(), train_seconds=round(taught.seconds, 1), taught_questions=int(keep.sum()))
    if step3:
        general = Bundle.load(general_path)
        test = dict(queries=fold.test_queries, split="test")
        if wanted("general"):
            fold.record("general", general.dense_retriever(), **test)
        if wanted("adapted"):
            adapted = train_general({}, Unlabelled(fold.corpus["question"].tolist()), ADAPT,
                                    warm_start=(general.encoder, general.vocab), progress=False)
            fold.record("adapted", bundle_on(adapted, fold.corpus).dense_retriever(), train_seconds=round(adapted.seconds, 1), **test)
        # Fine-tuning as the product does it: a project starts from the general (rebase, no
        # adaptation: the views lower H@1, above) and "Train" retrains it on the project's
        # clusters (retrain_bundle: the general's recorded retrain settings, best val epoch kept),
        # and the same at the distillation's rate. val_auc_start is the general's own val score,
        # which the retraining's epochs do not compete with.
        for system, lr in (("finetuned", None), ("finetuned-rate-4e-3", GENERAL.lr)):
            if wanted(system):
                project = rebase(general, fold.corpus)
                if lr is not None:  # the recorded settings, but for the rate
                    training = project.manifest.training
                    project = project.with_manifest(training=training | {"retrain": training["retrain"] | {"lr": lr}})
                tuned = retrain_bundle(project, fold.corpus, fuse=False, progress=False)
                training = tuned.manifest.training
                start = pair_auc(general.encoder, general.vocab, *validation_pairs(fold.corpus, training["config"]["val_pairs"], training["config"]["seed"]))
                fold.record(system, tuned.dense_retriever(), train_seconds=round(training["seconds"], 1), epochs=training["best_epoch"],
                            val_auc_start=start, val_auc_best=training["best_auc"], **test)


def rates() -> dict:
    """Questions per second: the CNN and MiniLM turning questions into vectors, BM25 answering
    them (tokenise + score a 12k-question corpus); every one on the same sample of queries of
    every domain at their real lengths (``bench.ood_asymmetric.speed_sample``; MiniLM was timed on
    the first 350 alone until issue 58, mostly short banking77 questions, which flattered it)."""
    texts = speed_sample()
    general = Bundle.load(WORK / "general" / DOMAINS[0])
    bm25 = BM25Retriever(domain(DOMAINS[0]))
    model = minilm(DOMAINS[0], domain(DOMAINS[0])).model
    out = {"questions": len(texts)}
    measured = [("cnn", lambda t: encode_texts(general.encoder, general.vocab, t), texts),
                ("minilm", lambda t: model.encode(t, batch_size=128, normalize_embeddings=True), texts),
                ("bm25", lambda t: bm25.search_ids(t, TOP), texts)]
    if (WORK / "general-max-pool" / DOMAINS[0]).is_dir():
        max_pool = Bundle.load(WORK / "general-max-pool" / DOMAINS[0])
        measured.append(("cnn-max-pool", lambda t: encode_texts(max_pool.encoder, max_pool.vocab, t), texts))
    for name, run, sample in measured:
        run(sample[:20])  # warm-up
        start = time.perf_counter()
        run(sample)
        out[name] = round(len(sample) / (time.perf_counter() - start), 1)
    out["machine"] = machine()
    print(out, flush=True)
    write_json(out, WORK / "rates.json")
    return out


def fusion_curves(folds: dict[str, Fold], dense: str) -> dict[str, dict[RankFusion, np.ndarray]]:
    """Per fold (that has ``dense`` and BM25 lists), the hit matrix of each rank fusion setting."""
    return {name: {fusion: hits_of(rank_fuse(f.lists[dense], f.lists["bm25"], fusion, TOP)[1], f.corpus, f.queries)
                   for fusion in FUSIONS}
            for name, f in folds.items() if dense in f.lists and "bm25" in f.lists}


def best_fusion(curves: dict[str, dict[RankFusion, np.ndarray]], folds: list[str]) -> RankFusion:
    """The setting with the best mean H@1 over ``folds`` (ties: the weight nearest 0.5, then the larger k)."""
    return max(FUSIONS, key=lambda f: (np.mean([curves[name][f][:, 0].mean() for name in folds]), -abs(f.dense_weight - 0.5), f.k))


def fused_rows(folds: dict[str, Fold], dense: str, system: str) -> tuple[list[dict], dict]:
    """Rank fusion of ``dense`` with BM25 per left-out domain, its setting chosen on the OTHER
    left-out domains (nested), with the paired-bootstrap change in H@1 over BM25 alone."""
    curves = fusion_curves(folds, dense)
    rows = []
    for name in curves:
        chosen = best_fusion(curves, [f for f in curves if f != name])
        hits = curves[name][chosen]
        bm25 = hits_of(folds[name].lists["bm25"], folds[name].corpus, folds[name].queries)
        change, low, high = h1_change(bm25, hits)
        rows.append({"left_out": name, "system": system} | rank_metrics(hits)
                    | {"dense_weight": chosen.dense_weight, "rrf_k": chosen.k, "H1_vs_bm25": change, "H1_vs_bm25_low": low, "H1_vs_bm25_high": high,
                       "default": False})
    table = {name: {f"k={f.k},w={f.dense_weight}": float(h[:, 0].mean()) for f, h in by_setting.items()}
             for name, by_setting in curves.items()}
    overall = best_fusion(curves, list(curves)).to_dict() if curves else None
    return rows, {"H1_by_setting": table, "over_all_domains": overall}


def fusion_fit_rows(folds: dict[str, Fold], general: dict[str, Bundle]) -> dict[str, tuple]:
    """What the hybrid scorer is fitted on from each fold with a ``general`` bundle (``fusion_rows``):
    ``FIT_QUERIES`` of its queries, their features from its own fold's general encoder."""
    return {name: fusion_rows(bundle.dense_retriever(), folds[name].queries.sample(min(FIT_QUERIES, len(folds[name].queries)), random_state=0),
                              bm25=folds[name].bm25) for name, bundle in general.items()}


def fitted_rows(folds: dict[str, Fold]) -> tuple[list[dict], dict]:
    """The product's hybrid scorer with BM25 per left-out domain, fitted on the other left-out
    domains' queries (``FIT_QUERIES`` of each, their features from their own fold's general
    encoder: a domain the encoder never saw, as the served fusion meets), with the
    paired-bootstrap change in H@1 over BM25 alone: over the general dense (``hybrid``, the
    default) and over the one taught on the domain's other questions (``taught-new-hybrid``: the
    same scorer, as ``rebase`` carries it). Also the scorer fitted on all domains, which
    ``qpr.bundles.general.FUSION`` carries."""
    general = {name: Bundle.load(WORK / "general" / name) for name in folds if (WORK / "general" / name).is_dir()}
    fit_on = fusion_fit_rows(folds, general)
    nested = {name: fit_rows([fit_on[other] for other in general if other != name], per_query=True) for name in general}
    taught = {name: Bundle.load(WORK / "taught-new" / name) for name in general if (WORK / "taught-new" / name).is_dir()}
    rows = []
    for system, bundles, default in (("hybrid", general, True), ("taught-new-hybrid", taught, False)):
        for name, bundle in bundles.items():
            fold = folds[name]
            hybrid = HybridRetriever(bundle.dense_retriever(), nested[name], fold.bm25)
            hits = hits_of(ranked_qids(hybrid, fold.queries), fold.corpus, fold.queries)
            change, low, high = h1_change(hits_of(fold.lists["bm25"], fold.corpus, fold.queries), hits)
            rows.append({"left_out": name, "system": system} | rank_metrics(hits)
                        | {"H1_vs_bm25": change, "H1_vs_bm25_low": low, "H1_vs_bm25_high": high, "default": default})
    overall = fit_rows(list(fit_on.values()), per_query=True).to_dict() if fit_on else None
    return rows, {"fitted_on": "the other left-out domains", "queries_per_domain": FIT_QUERIES, "objective": "per query",
                  "over_all_domains": overall}


def choice() -> dict:
    """Issue 42's hybrid that does not lose to its parts, for the encoder taught on a corpus
    (``taught``: its queries taught too; ``taught-new``: not). On each fold with saved taught
    bundles, H@1 of the taught dense alone and of its hybrid with four fusions, none fitted on the
    left-out domain's labels:
    - ``carried``: the general's (nested as ``fitted_rows`` fits it: on the other left-out
      domains, each domain's features from its own fold's general encoder);
    - ``taught_fitted``: fitted the same way, but each other domain's features from its own fold's
      encoder taught in the same mode: a fusion fitted for the kind of encoder at hand;
    - ``teacher_chosen``: ``qpr.retrieval.fusion_choice.choose_fusion`` over the carried one, the
      carried fusion, one refitted on MiniLM's neighbours, or the dense part alone, whichever
      agrees most with MiniLM's nearest corpus question.
    Also ``taught_fitted_over_all``: the taught fusion fitted on every fold there (what a
    product constant would be). Merged into the results as ``fusion_choice``, nothing else changed."""
    folds = {name: Fold(name) for name in DOMAINS if (WORK / "general" / name).is_dir()}
    general_rows = fusion_fit_rows(folds, {name: Bundle.load(WORK / "general" / name) for name in folds})
    rows, over_all = [], {}
    # MiniLM's vectors of each fold's corpus, read once for both modes.
    reference = {name: minilm(name, fold.corpus).index.vectors(fold.corpus["qid"].to_numpy()) for name, fold in folds.items()}
    for mode in ("taught", "taught-new"):
        taught = {name: Bundle.load(WORK / mode / name) for name in folds if (WORK / mode / name).is_dir()}
        taught_rows = fusion_fit_rows(folds, taught)
        over_all[mode] = fit_rows(list(taught_rows.values()), per_query=True).to_dict() if len(taught_rows) > 1 else None
        for name, bundle in taught.items():
            fold, dense = folds[name], bundle.dense_retriever()
            others = [other for other in taught if other != name]
            carried = fit_rows([general_rows[other] for other in others], per_query=True)
            chosen = choose_fusion(dense, reference[name], carried, fold.bm25)
            measured = {"dense": dense, "carried": HybridRetriever(dense, carried, fold.bm25),
                        "taught_fitted": HybridRetriever(dense, fit_rows([taught_rows[other] for other in others], per_query=True), fold.bm25),
                        "teacher_chosen": dense if chosen.fusion is None else HybridRetriever(dense, chosen.fusion, fold.bm25)}
            row = {"left_out": name, "mode": mode, "fitted_on": others, "teacher_chose": chosen.name, "agreement_at_1": chosen.agreement,
                   "H1_bm25": rank_metrics(hits_of(fold.lists["bm25"], fold.corpus, fold.queries))["H1"]}
            row |= {f"H1_{key}": rank_metrics(hits_of(ranked_qids(r, fold.queries), fold.corpus, fold.queries))["H1"] for key, r in measured.items()}
            print(row, flush=True)
            rows.append(row)
    variants = ("carried", "taught_fitted", "teacher_chosen")
    summary = {mode: {v: {"mean_H1": float(np.mean([r[f"H1_{v}"] for r in rows if r["mode"] == mode])),
                          "ge_dense": {r["left_out"]: r[f"H1_{v}"] >= r["H1_dense"] for r in rows if r["mode"] == mode},
                          "ge_better_part": {r["left_out"]: r[f"H1_{v}"] >= max(r["H1_dense"], r["H1_bm25"]) for r in rows if r["mode"] == mode}}
                      for v in variants} | {"dense": {"mean_H1": float(np.mean([r["H1_dense"] for r in rows if r["mode"] == mode]))}}
               for mode in ("taught", "taught-new") if any(r["mode"] == mode for r in rows)}
    out = {"rows": rows, "summary": summary, "taught_fitted_over_all": over_all, "domains": sorted(folds),
           "sample": SAMPLE, "queries": MAX_QUERIES, "fit_queries": FIT_QUERIES, "machine": machine(), "date": time.strftime("%Y-%m-%d")}
    merge_results("fusion_choice", out)
    return out


def levers() -> dict:
    """Issue 42's levers (``LEVERS``, and ``RETIRED_LEVERS`` where the folds have their rows)
    against the build's recipe (``dense``) trained in the same folds: per fold that has both, each
    one's H@1 and MRR, its H@1 change over ``dense`` with a 95% paired-bootstrap interval over the
    queries, the gap to MiniLM, and where recorded its training loss (its last epoch's mean) and
    its distillation loss on unseen questions (``Fold.teacher_losses``); per lever, the mean change
    and gap over those folds. Merged into the results as ``levers``, nothing else changed."""
    folds = {name: Fold(name) for name in DOMAINS if (WORK / "folds" / f"{name}.json").is_file()}
    rows = []
    for name, fold in folds.items():
        measured = {r["system"]: r for r in fold.rows}
        if "dense" not in measured or "minilm" not in measured:
            continue
        dense = hits_of(fold.lists["dense"], fold.corpus, fold.queries)
        for system in ("dense", *LEVERS, *RETIRED_LEVERS):
            if system not in measured:
                continue
            change, low, high = h1_change(dense, hits_of(fold.lists[system], fold.corpus, fold.queries))
            row = {"left_out": name, "system": system, "queries": measured[system]["queries"], "H1": measured[system]["H1"],
                   "MRR": measured[system]["MRR"], "minilm_minus_H1": measured["minilm"]["H1"] - measured[system]["H1"],
                   "train_seconds": measured[system].get("train_seconds")}
            if "teacher_loss" in measured[system]:
                row |= {"last_epoch_loss": measured[system]["last_loss"]["loss_distill"], "teacher_loss": measured[system]["teacher_loss"]}
            rows.append(row | ({} if system == "dense" else {"H1_vs_dense": change, "H1_vs_dense_low": low, "H1_vs_dense_high": high}))
    summary = {}
    for system in (*LEVERS, *RETIRED_LEVERS):
        mine = [r for r in rows if r["system"] == system]
        if mine:
            names = [r["left_out"] for r in mine]
            summary[system] = {"domains": names, "mean_H1_vs_dense": float(np.mean([r["H1_vs_dense"] for r in mine])),
                               "mean_minilm_minus_H1": float(np.mean([r["minilm_minus_H1"] for r in mine])),
                               "mean_minilm_minus_dense_H1": float(np.mean([r["minilm_minus_H1"] for r in rows
                                                                            if r["system"] == "dense" and r["left_out"] in names]))}
    out = {"rows": rows, "summary": summary, "settings": {s: asdict(config) | {"encoder": asdict(encoder), "extra_questions": extra}
                                                  for s, (config, encoder, extra) in LEVERS.items()}
           | {s: {"retired": True, "code": commit} for s, commit in RETIRED_LEVERS.items()},
           "seed": GENERAL.seed, "queries": MAX_QUERIES, "machine": machine(), "date": time.strftime("%Y-%m-%d")}
    print(json.dumps(summary, indent=1), flush=True)
    merge_results("levers", out)
    return out


def merge_results(key: str, out: dict) -> None:
    """Write ``out`` as the results' entry ``key``, keeping every other entry as it is."""
    previous = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}
    write_json(previous | {key: out}, RESULTS)


def teach_steps() -> dict:
    """How long to teach (``TEACH``: at least 600 batches of 64) on each fold whose general is
    saved: the general taught on its domain's corpus less the queries (``taught-new``) for about
    ``TEACH_STEPS`` batches each (rounded up to whole epochs), and per length its H@1 on the
    queries beside the distillation loss on the queries' texts, which it never taught on and which
    needs no labels (MiniLM's vectors only). Whether that loss could stop the teaching where H@1
    is best. Merged into the results as ``teach_steps``."""
    rows = []
    for name in DOMAINS:
        if not (WORK / "general" / name).is_dir():
            continue
        fold, general = Fold(name), Bundle.load(WORK / "general" / name)
        questions, vectors = fold.corpus["question"].tolist(), np.load(teacher_path(name, fold.corpus))
        held_out = fold.corpus["qid"].isin(fold.queries["qid"]).to_numpy()
        taught = Unlabelled([q for q, h in zip(questions, held_out) if not h], vectors[~held_out])
        for steps in TEACH_STEPS:
            model = general if not steps else train_general(
                {}, taught, replace(TEACH, epochs=1, min_steps=steps), warm_start=(general.encoder, general.vocab), progress=False)
            bundle = bundle_on(model, fold.corpus)
            loss = teacher_misfit(bundle, questions, vectors)
            row = {"left_out": name, "batches": steps, "epochs": len(getattr(model, "history", [])),
                   "taught_questions": len(taught.questions), "queries_loss": round(float(loss[held_out].mean()), 4),
                   "taught_loss": round(float(loss[~held_out].mean()), 4)}
            row |= rank_metrics(hits_of(ranked_qids(bundle.dense_retriever(), fold.queries), fold.corpus, fold.queries))
            print(row, flush=True)
            rows.append(row)
    out = {"rows": rows, "teach": asdict(TEACH), "machine": machine(), "date": time.strftime("%Y-%m-%d")}
    merge_results("teach_steps", out)
    return out


def encoder_of(system: str) -> str:
    """The ``rates`` entry of the encoder a system's queries go through."""
    if system in ("bm25", "minilm"):
        return system
    return "cnn-max-pool" if system.startswith(MAX_POOL_SYSTEM) or system in ABLATIONS else "cnn"


TRANSFORMER = "transformer-sdml"  # rows of bench/transformer_backend.py (and its variants: transformer-sdml-*)


def report() -> None:
    folds = {name: Fold(name) for name in DOMAINS if (WORK / "folds" / f"{name}.json").is_file()}
    rate = json.loads((WORK / "rates.json").read_text()) if (WORK / "rates.json").is_file() else {}
    runs = [r | {"default": False} for f in folds.values() for r in f.rows]
    hybrid, hybrid_fusion = fitted_rows(folds)
    rrf, rrf_fusion = fused_rows(folds, "dense", "rrf")
    product, product_fusion = fused_rows(folds, "product-dense", "product-rrf")
    adapted, adapted_fusion = fused_rows(folds, "adapted-dense", "adapted-rrf")
    taught, taught_fusion = fused_rows(folds, "taught-dense", "taught-rrf")
    taught_new, taught_new_fusion = fused_rows(folds, "taught-new-dense", "taught-new-rrf")
    runs += hybrid + rrf + product + adapted + taught + taught_new
    for name, fold in folds.items():  # BM25 on the test clusters too, beside the adaptation steps
        if any(r.get("split") == "test" for r in fold.rows):
            hits = hits_of(ranked_qids(fold.bm25, fold.test_queries), fold.corpus, fold.test_queries)
            runs.append({"left_out": name, "system": "bm25", "split": "test", "default": False} | rank_metrics(hits))
    for row in runs:
        row["encode_qps"] = rate.get(encoder_of(row["system"]), 0.0)
    previous = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}
    runs += [r for r in previous.get("runs", []) if r["system"].startswith(TRANSFORMER)]
    zero_shot = [r for r in runs if r.get("split") != "test"]
    by = {(r["left_out"], r["system"]): r for r in zero_shot}
    names = [n for n in folds if (n, "hybrid") in by]
    bar = {
        "hybrid_ge_bm25_plus_0.02": {n: by[n, "hybrid"]["H1"] >= by[n, "bm25"]["H1"] + 0.02 for n in names},
        "hybrid_ge_dense": {n: by[n, "hybrid"]["H1"] >= by[n, "dense"]["H1"] for n in names},
        "hybrid_ge_better_part": {n: by[n, "hybrid"]["H1"] >= max(by[n, "dense"]["H1"], by[n, "bm25"]["H1"]) for n in names},
        "mean_minilm_minus_dense_H1": float(np.mean([by[n, "minilm"]["H1"] - by[n, "dense"]["H1"] for n in names])) if names else None,
        "cnn_over_minilm_encode_rate": rate["cnn"] / rate["minilm"] if rate else None,
    }
    bar |= seed_scatter(by, names)
    # The student that pools by max alone: its own gap to MiniLM, and the default's change over
    # it at the same seed.
    bar |= seed_scatter(by, names, MAX_POOL_SYSTEM) | seed_scatter(by, names, MAX_POOL_SYSTEM, reference="dense")
    taught_names = [n for n in names if (n, "taught-new-hybrid") in by]
    if taught_names:  # the same bar for the cold start with the teacher, on new questions
        bar["taught_new_hybrid_ge_bm25_plus_0.02"] = {n: by[n, "taught-new-hybrid"]["H1"] >= by[n, "bm25"]["H1"] + 0.02 for n in taught_names}
        bar["taught_new_hybrid_ge_better_part"] = {n: by[n, "taught-new-hybrid"]["H1"] >= max(by[n, "taught-new-dense"]["H1"], by[n, "bm25"]["H1"])
                                                   for n in taught_names}
        bar["mean_minilm_minus_taught_new_H1"] = float(np.mean([by[n, "minilm"]["H1"] - by[n, "taught-new-dense"]["H1"] for n in taught_names]))
    payload = {"runs": runs, "fusion": {"hybrid": hybrid_fusion, "rrf": rrf_fusion, "product-rrf": product_fusion, "adapted-rrf": adapted_fusion,
                                  "taught-rrf": taught_fusion, "taught-new-rrf": taught_new_fusion}, "bar": bar,
               "protocol": {"max_queries": MAX_QUERIES, "caps": {n: domain_cap(n) for n in DOMAINS}, "seed": 0,
                            "general": asdict(GENERAL), "product": asdict(PRODUCT) | {"questions": PRODUCT_QUESTIONS},
                            "adapt": asdict(ADAPT), "teach": asdict(TEACH),
                            "finetune": "qpr.bundles.training.retrain_bundle(rebase(general)): the general's recorded retrain settings, best val epoch"},
               "rates": rate, "machine": machine(), "date": time.strftime("%Y-%m-%d")}
    if "transformer" in previous:
        payload["transformer"] = previous["transformer"]
    write_json(payload, RESULTS)
    plot(by, names)
    replace_marked_section(DOC, "ood", tables(runs, by, names, payload))


def seed_systems(base: str = "dense") -> dict[int, str]:
    """A general recipe's system name at each seed measured (``base`` is seed 0: ``dense``, the
    build's recipe, or ``MAX_POOL_SYSTEM``)."""
    return {0: base} | {seed: f"{base}-seed-{seed}" for seed in SEEDS}


def seed_scatter(by: dict, names: list[str], base: str = "dense", reference: str = "minilm") -> dict:
    """``reference`` - recipe ``base`` H@1, the mean over ``names``, at each seed at which every domain
    has both (``reference``: "minilm", the same at every seed, or another recipe's base, compared
    seed by seed), and, with two or more seeds, their mean with a 95% t-interval over seeds (the
    queries are fixed; what scatters is the training). Keys ``mean_<reference>_minus_<base>_H1_by_seed``
    and ``..._over_seeds``."""
    mine = seed_systems(base)
    theirs = {seed: reference for seed in mine} if reference == "minilm" else seed_systems(reference)
    gaps = {seed: float(np.mean([by[n, theirs[seed]]["H1"] - by[n, system]["H1"] for n in names]))
            for seed, system in mine.items() if names and all((n, system) in by and (n, theirs[seed]) in by for n in names)}
    if len(gaps) < 2:
        return {}
    mean, low, high = mean_ci(list(gaps.values()))
    key = f"mean_{reference}_minus_{base}_H1".replace("-", "_")
    return {f"{key}_by_seed": {str(seed): gap for seed, gap in gaps.items()},
            f"{key}_over_seeds": {"mean": mean, "low": low, "high": high, "seeds": len(gaps)}}


SHOWN = [("bm25", "BM25"), ("product-dense", "product dense"), ("product-hybrid", "product hybrid"),
         ("product-rrf", "product + RRF"), ("dense", "general dense"), ("adapted-dense", "general + views"),
         ("rrf", "general + RRF"), ("hybrid", "general hybrid"), ("minilm", "MiniLM")]
# The cold start with the teacher installed (rebase --adapt teacher), on new questions and on the corpus's own.
TAUGHT = [("bm25", "BM25"), ("dense", "general dense"), ("taught-new-dense", "taught, new questions"),
          ("taught-new-hybrid", "hybrid, new"), ("taught-new-rrf", "+ RRF, new"), ("taught-dense", "taught, its own questions"),
          ("taught-rrf", "hybrid (RRF), own"), ("minilm", "MiniLM")]
PLOTTED = SHOWN[:-1] + [TAUGHT[2], TAUGHT[5], SHOWN[-1]]  # the taught dense, new and own questions


def plot(by: dict, names: list[str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 4.2))
    width = 0.8 / len(PLOTTED)
    for i, (system, label) in enumerate(PLOTTED):
        values = [by.get((n, system), {}).get("H1", np.nan) for n in names]
        ax.bar(np.arange(len(names)) + (i - len(PLOTTED) / 2 + 0.5) * width, values, width, label=label)
    ax.set_xticks(np.arange(len(names)), names)
    ax.set_ylabel("H@1 (left-out domain)")
    ax.set_ylim(0, 1)
    ax.legend(ncol=4, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, 1.18))
    ax.set_title("Leave-one-domain-out: each domain unseen in training", pad=40)
    fig.tight_layout()
    fig.savefig(PLOT, dpi=110)
    plt.close(fig)


def tables(runs: list[dict], by: dict, names: list[str], payload: dict) -> str:
    def cell(name, system, key="H1"):
        row = by.get((name, system))
        return None if row is None else row[key]

    main_rows = [{"domain": n, "queries": by[n, "bm25"]["queries"]} | {s: cell(n, s) for s, _ in SHOWN}
                 | {"w": f"{by[n, 'rrf']['dense_weight']:.1f} (k {by[n, 'rrf']['rrf_k']})",
                    "gain": f"{by[n, 'hybrid']['H1_vs_bm25']:+.3f} [{by[n, 'hybrid']['H1_vs_bm25_low']:+.3f}, "
                            f"{by[n, 'hybrid']['H1_vs_bm25_high']:+.3f}]"} for n in names]
    columns = [("domain", "left out"), ("queries", "queries")] + SHOWN + [("w", "RRF dense weight (k)"), ("gain", "hybrid - BM25 H@1 [95% CI]")]
    mrr_rows = [{"domain": n} | {s: cell(n, s, "MRR") for s, _ in SHOWN} for n in names]
    gain = lambda n, s: (f"{by[n, s]['H1_vs_bm25']:+.3f} [{by[n, s]['H1_vs_bm25_low']:+.3f}, {by[n, s]['H1_vs_bm25_high']:+.3f}]"  # noqa: E731
                         if (n, s) in by else None)
    taught_rows = [{"domain": n, "taught": cell(n, "taught-new-dense", "taught_questions")} | {s: cell(n, s) for s, _ in TAUGHT}
                   | {"new_gain": gain(n, "taught-new-hybrid"), "own_gain": gain(n, "taught-rrf")} for n in names]
    ablation = [{"domain": n} | {s: cell(n, s) for s in (*ABLATIONS, MAX_POOL_SYSTEM, "dense")} for n in names]
    def recipe_cells(n, base, label):  # a recipe's H@1 at each seed, the mean over the seeds every domain has, its gap to MiniLM
        measured = [cell(n, s) for s in seed_systems(base).values() if all((m, s) in by for m in names)]
        return ({f"{label} {seed}": cell(n, system) for seed, system in seed_systems(base).items()}
                | ({f"{label} mean": float(np.mean(measured)), f"{label} gap": cell(n, "minilm") - float(np.mean(measured))}
                   if len(measured) > 1 else {}))

    seed_rows = [{"domain": n, "minilm": cell(n, "minilm")} | recipe_cells(n, "dense", "max+mean") | recipe_cells(n, MAX_POOL_SYSTEM, "max-pool")
                 for n in names]
    seed_rows = [row for row in seed_rows if "max+mean mean" in row]  # the default at two seeds or more
    seed_columns = [("domain", "left out")] + [
        (f"{label} {key}", f"{title}, {key if key in ('mean', 'gap') else f'seed {key}'}")
        for label, title in (("max+mean", "max+mean"), ("max-pool", "max pool")) for key in (*map(str, seed_systems()), "mean", "gap")
    ] + [("minilm", "MiniLM")]
    step3 = {(r["left_out"], r["system"]): r for r in runs if r.get("split") == "test"}
    adapt_rows = [{"domain": n, "queries": step3[n, "general"]["queries"]}
                  | {s: step3.get((n, s), {}).get("H1") for s in ("bm25", "general", "adapted", "finetuned-rate-4e-3", "finetuned")}
                  for n in DOMAINS if (n, "general") in step3]
    rate = payload["rates"]
    bar = payload["bar"]
    lines = [
        f"Measured {payload['date']} on {payload['machine']}; seed 0"
        + (f" (the general dense also at seeds {', '.join(map(str, SEEDS))}, below)" if seed_rows else "")
        + f"; at most {MAX_QUERIES} queries per domain.",
        "",
        "**H@1** on each left-out domain (top 20, query removed from its results):",
        "", markdown_table(main_rows, columns), "",
        "**MRR**:", "", markdown_table(mrr_rows, [("domain", "left out")] + SHOWN), "",
        "**The cold start with the teacher** (`rebase --adapt teacher`: the general dense distilled from MiniLM on the "
        "left-out domain's questions, no labels; H@1). *New questions*: the queries' own texts are held out of the "
        "teaching (they are still indexed), as for questions a user asks later; *its own questions*: the whole corpus is "
        "taught, queries included, as when annotators search a corpus with its own questions:", "",
        markdown_table(taught_rows, [("domain", "left out"), ("taught", "questions taught (new)")] + TAUGHT
                       + [("new_gain", "hybrid - BM25, new [95% CI]"), ("own_gain", "RRF - BM25, own [95% CI]")]), "",
        "**What each ingredient buys** (general dense H@1; the same budget of each ingredient kept; the student pooling "
        "by max alone, and at the earlier rate of 1e-3 but where said):", "",
        markdown_table(ablation, [("domain", "left out"), ("dense-pairs-only", "other domains' pairs only"),
                                  ("dense-with-pairs", "pairs + distillation, random word embeddings"),
                                  ("dense-random-words", "distillation, random word embeddings"),
                                  ("dense-rate-1e-3", "distillation, MiniLM's word vectors"),
                                  (MAX_POOL_SYSTEM, "the same at rate 4e-3"),
                                  ("dense", "the same pooling by max and mean (the default)")]), "",
    ]
    if seed_rows:
        lines += ["**The general dense at each training seed** (H@1; \"max+mean\" seed 0 is the `dense` above, the recipe "
                  "and seed the build uses, its student pooling each window's features by max and by mean; \"max pool\" is the "
                  "same student pooling by max alone; "
                  "mean and gap (MiniLM - mean) over the seeds measured on every domain):", "",
                  markdown_table(seed_rows, seed_columns), ""]
    lines += [
        "**Adapting to the left-out domain** (its own test clusters; H@1):", "",
        markdown_table(adapt_rows, [("domain", "domain"), ("queries", "test queries"), ("bm25", "BM25"), ("general", "general (zero-shot)"),
                                    ("adapted", "+ self-supervised views of its questions"),
                                    ("finetuned-rate-4e-3", "general retrained on its train clusters at the distillation's rate 4e-3"),
                                    ("finetuned", "the same at 1e-3, as the product retrains")]), "",
    ]
    if rate:
        lines += [f"Encoding rates ({rate['questions']} questions from all domains, one thread, under the timing lock): "
                  f"CNN {rate['cnn']:,.0f}/s"
                  + (f" (the max-pool student {rate['cnn-max-pool']:,.0f}/s)" if "cnn-max-pool" in rate else "")
                  + f", MiniLM {rate['minilm']:,.0f}/s "
                  f"({rate['cnn'] / rate['minilm']:.0f}x), BM25 search {rate['bm25']:,.0f} queries/s.", ""]
    lines += ["Bar: hybrid >= BM25 + 0.02 on " f"{sum(bar['hybrid_ge_bm25_plus_0.02'].values())} of {len(names)} domains; "
              f">= the general dense on {sum(bar['hybrid_ge_dense'].values())}; >= the better of its parts on "
              f"{sum(bar['hybrid_ge_better_part'].values())}; MiniLM - general dense H@1, mean over domains: "
              f"{bar['mean_minilm_minus_dense_H1']:+.3f} (bar: <= 0.05)."]
    def over_seeds(key, what):
        if f"{key}_over_seeds" not in bar:
            return ""
        over = bar[f"{key}_over_seeds"]
        return (f" {what} over " + ", ".join(f"seed {k} {v:+.3f}" for k, v in bar[f"{key}_by_seed"].items())
                + f": mean {over['mean']:+.3f} [95% t-interval over seeds {over['low']:+.3f}, {over['high']:+.3f}].")

    lines[-1] += over_seeds("mean_minilm_minus_dense_H1", "The same")
    lines[-1] += over_seeds("mean_minilm_minus_dense_max_pool_H1", "MiniLM - the max-pool student")
    lines[-1] += over_seeds("mean_dense_minus_dense_max_pool_H1", "The default - the max-pool student, seed by seed,")
    if "mean_minilm_minus_taught_new_H1" in bar:
        lines += ["", "With the teacher on the corpus, new questions: hybrid >= BM25 + 0.02 on "
                  f"{sum(bar['taught_new_hybrid_ge_bm25_plus_0.02'].values())} of {len(bar['taught_new_hybrid_ge_bm25_plus_0.02'])}; "
                  f">= the better of its parts on {sum(bar['taught_new_hybrid_ge_better_part'].values())}; MiniLM - taught dense H@1, mean: "
                  f"{bar['mean_minilm_minus_taught_new_H1']:+.3f}."]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("stage", choices=["teacher", "folds", "rates", "choice", "levers", "teach_steps", "report"])
    parser.add_argument("--domains", nargs="*", default=list(DOMAINS))
    parser.add_argument("--only", nargs="*", help="systems to run (default: all)")
    parser.add_argument("--redo", action="store_true", help="measure the --only systems again even where a fold has them")
    args = parser.parse_args()
    if args.redo and not args.only:
        parser.error("--redo needs --only: name the systems to measure again")
    torch.set_num_threads(1)
    if args.stage == "teacher":  # every domain's corpus and extra questions (general_material's cache)
        general_material(args.domains, teacher=True, cache=WORK)
    elif args.stage == "folds":
        for name in args.domains:
            print(f"fold: {name}", flush=True)
            run_fold(name, set(args.only) if args.only else None, args.redo)
    elif args.stage == "rates":
        rates()
    elif args.stage == "choice":
        choice()
    elif args.stage == "levers":
        levers()
    elif args.stage == "teach_steps":
        teach_steps()
    else:
        report()


if __name__ == "__main__":
    main()
