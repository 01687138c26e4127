"""Benchmark: the other papers' systems on every protocol they apply to (docs/SEEDS.md).

Stages (each a separate run, so each measures its own process' peak memory; rows of a stage
replace that stage's earlier rows in bench/results/seed_systems.json):

    baselines  BM25, TF-IDF and the search engine's order on SemEval, the QPR protocol,
               Quora-lite pairs, transfer AUC(0.05) and SQuAD paragraphs
    film       FILM trained on Quora-lite: QPR retrieval, pair accuracy (pairwise kNN and
               threshold), SemEval reranking and transfer AUC(0.05) (direct transfer)
    cnn, lstm  the CNN (paper's encoder) and the bi-LSTM encoder trained with SDML on a slice of
               Quora-lite's training clusters (the same slice and budget for both), same protocols
    cnn-full   the CNN measured by bench/quora_lite.py on the full split, copied with its source
    squad      IDF-weighted embeddings, FCRR and ConvRR on SQuAD paragraphs; trained on Quora-lite,
               on the QPR, pair, SemEval and transfer protocols
    transfer   Quora-lite -> SemEval relevance / BANKING77 same-intent pairs, AUC(0.05), with the
               adversarial domain classifier and without it (same target vocabulary)

  The "paper-comparable" protocol: each paper's own test, as near as our data allows, its row
  beside the paper's printed value (``task`` names which):
    paper-film      FILM and its TF-IDF input on balanced Quora-lite pairs touching no training
                    question (the BiMPM split's test is half duplicates), both decision rules
    paper-idf       IDF-weighted and plain means of pretrained word vectors (all-MiniLM-L6-v2's
                    vector of each word alone) on SQuAD dev paragraphs, against GloVe's Tables 3-4
    paper-transfer  direct and adversarial transfer trained at one budget and scored with one
                    distance (squared, the training loss'), beside source-fitted TF-IDF

    python -m bench.seed_systems --stage film [--seed 0] [--slice-clusters 8000] [--epochs 4]
    python -m bench.seed_systems --stage cnn --seed 1   # another seed: rows beside seed 0's (stage "cnn-seed1")
    python -m bench.seed_systems --stage paper-transfer --slice-clusters 4000 --epochs 3 --seed 1
    python -m bench.seed_systems --render     # rewrite docs/SEEDS.md's table from the JSON

The results file keeps every seed's rows (``seed_runs``) and, in ``runs``, each result pooled
over its seeds: the mean as ``value``, each seed's in ``values``, and ``ci95``, the mean's 95%
interval (Student's t; None with one seed).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pickle
import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from bench.common import ROOT, machine, markdown_table, peak_rss_mb, replace_marked_section, write_json
from qpr.bundles.bundle import Bundle
from qpr.bundles.general import minilm_vectors
from qpr.data.corpus import data_dir, load_corpus, read_quora_pairs
from qpr.data.semeval import bm25_scores, engine_scores, load_semeval, pair_auc05, rerank
from qpr.data.squad import load_squad
from qpr.evaluation.metrics import evaluate
from qpr.evaluation.ranking import auc_at_fpr
from qpr.model.encoder import PAPER_ENCODER, EncoderConfig, encode_texts
from qpr.model.text import PAPER_TEXT, words
from qpr.research.adversarial import AdversarialConfig, train_adversarial
from qpr.research.quora_pairs import balanced, majority_accuracy, pair_sets, threshold_accuracy, threshold_rule
from qpr.retrieval.dense import EncodeRetriever
from qpr.retrieval.index import IndexConfig
from qpr.retrieval.lexical import BM25Retriever, TfidfRetriever, tfidf_vectorizer
from qpr.systems.film import FilmConfig, fit_film, pair_neighbour_ranks, pairwise_knn_accuracy
from qpr.systems.residual import IdfEmbedder, ResidualConfig, fit_residual, recall_at, target_ranks
from qpr.systems.seed_encoders import ResidualEncoder, fit_idf_embedder, fit_qpr_residual
from qpr.training.train import TrainConfig, train

RESULTS = ROOT / "bench" / "results" / "seed_systems.json"
# The evaluation pairs (Quora-lite's val/test pair split, BANKING77's pairs) are dealt with this
# seed whatever --seed trains with, so runs of several seeds score the same pairs.
EVAL_SEED = 0
DOC = ROOT / "docs" / "SEEDS.md"

# Reported numbers from the papers' texts (None where the text gives none). Keys: (system,
# protocol, metric) -> (value, what it was measured on).
ASKUBUNTU = "AskUbuntu test (Smolyakov & Srikant Table 5), not SemEval"
ANDROID = "AskUbuntu -> Android test (Smolyakov & Srikant), not our domains"
PAPER = {
    ("film", "quora-pairs", "accuracy"): (0.8683, "Quora, BiMPM split (FILM paper)"),
    ("cnn-sdml", "qpr-quora-lite", "H1", "test"): (0.6043, "Quora test, 556k index (SDML paper Table 4)"),
    ("cnn-sdml", "qpr-quora-lite", "MRR", "test"): (0.6789, "Quora test, 556k index (SDML paper Table 4)"),
    ("cnn-sdml", "qpr-quora-lite", "H1", "val"): (0.6133, "Quora val, 556k index (SDML paper Table 3)"),
    ("cnn-sdml", "qpr-quora-lite", "MRR", "val"): (0.6837, "Quora val, 556k index (SDML paper Table 3)"),
    ("tfidf", "transfer-auc05", "auc05"): (0.58, ANDROID),
    ("cnn-sdml", "transfer-auc05", "auc05"): (0.62, ANDROID + "; CNN-direct, not SDML-trained"),
    ("lstm", "transfer-auc05", "auc05"): (0.62, ANDROID + "; LSTM-direct"),
}
for system, values in {"bm25": (0.68, 0.54, 0.42, 0.56), "cnn-sdml": (0.63, 0.48, 0.40, 0.43),
                       "lstm": (0.69, 0.54, 0.42, 0.56)}.items():
    for metric, value in zip(("MRR", "P@1", "P@5", "MAP"), values):
        PAPER[(system, "semeval-rerank", metric)] = (value, ASKUBUNTU)
# IDF-weighted GloVe on SQuAD dev paragraphs (Cakaloglu et al. Table 4); FCRR/ConvRR values are lost from the text.
for k, value in zip((1, 2, 5, 10, 20, 50), (0.348, 0.455, 0.595, 0.685, 0.764, 0.843)):
    PAPER[("idf-embed", "squad-paragraphs", f"recall@{k}")] = (value, "SQuAD dev, pretrained GloVe 840B + IDF")
PAPER[("idf-embed", "squad-paragraphs", "recall_avg")] = (float(np.mean([0.348, 0.455, 0.595, 0.685, 0.764, 0.843])),
                                                          "SQuAD dev, pretrained GloVe 840B + IDF")
# The paper-comparable protocol's printed values, by (task, system, metric[, adaptation]).
FILM_TEST = "Quora, BiMPM split: 10,000 balanced test pairs (FILM paper)"
GLOVE = {"idf-embed": ((0.348, 0.455, 0.595, 0.685, 0.764, 0.843), "SQuAD dev, GloVe 840B + IDF (Cakaloglu et al. Table 4)"),
         "mean-embed": ((0.307, 0.408, 0.540, 0.638, 0.719, 0.806), "SQuAD dev, GloVe 840B (Cakaloglu et al. Table 3)")}
ASKUBUNTU_TABLE6 = ANDROID + " (Table 6, test)"
COMPARABLE = {("film-quora-balanced", "film", "accuracy"): (0.8683, FILM_TEST),
              ("transfer-equal-settings", "tfidf", "auc05"): (0.58, ASKUBUNTU_TABLE6),
              ("transfer-equal-settings", "cnn-sdml", "auc05", "direct"): (0.62, ASKUBUNTU_TABLE6 + "; CNN-direct"),
              ("transfer-equal-settings", "cnn-sdml", "auc05", "adversarial"): (0.70, ASKUBUNTU_TABLE6 + "; CNN-adv"),
              ("transfer-equal-settings", "lstm", "auc05", "direct"): (0.62, ASKUBUNTU_TABLE6 + "; LSTM-direct"),
              ("transfer-equal-settings", "lstm", "auc05", "adversarial"): (0.70, ASKUBUNTU_TABLE6 + "; LSTM-adv")}
for system, (values, setting) in GLOVE.items():
    for k, value in zip((1, 2, 5, 10, 20, 50), values):
        COMPARABLE[("idf-squad-pretrained", system, f"recall@{k}")] = (value, setting)
    COMPARABLE[("idf-squad-pretrained", system, "recall_avg")] = (float(np.mean(values)), setting)


def row(system: str, protocol: str, metric: str, value: float, train_s: float | None = None, **extra) -> dict:
    paper = PAPER.get((system, protocol, metric, extra.get("split"))) or PAPER.get((system, protocol, metric))
    return {"system": system, "protocol": protocol, "metric": metric, "value": float(value),
            "paper_value": paper[0] if paper else None, "paper_setting": paper[1] if paper else None,
            "train_s": None if train_s is None else round(float(train_s), 1), **extra}


def comparable(rows: list[dict], task: str) -> list[dict]:
    """``rows`` moved to the ``paper-comparable`` protocol under ``task``, each with the paper's
    printed value for its system, metric and adaptation (None where the paper prints none)."""
    out = []
    for r in rows:
        paper = (COMPARABLE.get((task, r["system"], r["metric"], r.get("adaptation")))
                 or COMPARABLE.get((task, r["system"], r["metric"])))
        out.append(r | {"protocol": "paper-comparable", "task": task, "paper_value": paper[0] if paper else None,
                        "paper_setting": paper[1] if paper else None})
    return out


# ---------------------------------------------------------------- data of the protocols

def quora() -> pd.DataFrame:
    return load_corpus(data_dir() / "quora-lite")


def quora_pair_sets(corpus: pd.DataFrame, seed: int) -> dict[str, pd.DataFrame]:
    pairs, _ = read_quora_pairs(data_dir() / "quora-lite" / "quora_duplicate_questions.tsv")
    return pair_sets(pairs, corpus, seed)


def semeval_all() -> pd.DataFrame:
    parts = [load_semeval(p).assign(part=p) for p in ("dev", "train-part2")]
    return pd.concat(parts, ignore_index=True)


def banking_pairs(seed: int) -> pd.DataFrame:
    """Each BANKING77 test query with a random same-intent query (label 1) and a random
    other-intent query (label 0)."""
    frame = pd.read_csv(data_dir() / "intents" / "banking77" / "test.csv")
    rng = np.random.default_rng(seed)
    texts, intents = frame["text"].to_numpy(), frame["category"].to_numpy()
    by_intent = {c: np.flatnonzero(intents == c) for c in np.unique(intents)}
    a, b, y = [], [], []
    for i in range(len(frame)):
        same = by_intent[intents[i]][by_intent[intents[i]] != i]
        other = rng.integers(len(frame))
        while intents[other] == intents[i]:
            other = rng.integers(len(frame))
        a += [texts[i], texts[i]]
        b += [texts[rng.choice(same)], texts[other]]
        y += [1, 0]
    return pd.DataFrame({"question1": a, "question2": b, "label": y})


# ---------------------------------------------------------------- shared evaluations

def cosine_pair_scorer(encode):
    def score(a, b):
        va, vb = encode(list(a)), encode(list(b))
        return (va * vb).sum(axis=1)
    return score


def qpr_rows(system: str, retriever, corpus: pd.DataFrame, train_s, **extra) -> list[dict]:
    rows = []
    for split in ("val", "test"):
        metrics = evaluate(retriever, corpus, split)
        print(system, split, metrics, flush=True)
        rows += [row(system, "qpr-quora-lite", m, metrics[m], train_s, split=split, queries=metrics["queries"], **extra)
                 for m in ("H1", "H10", "MRR")]
    return rows


def pair_rows(system: str, score, sets: dict, train_s, **extra) -> list[dict]:
    """Quora-lite pair accuracy with a cosine threshold fitted on val."""
    val = score(sets["val"]["question1"], sets["val"]["question2"])
    test = score(sets["test"]["question1"], sets["test"]["question2"])
    threshold = threshold_rule(val, sets["val"]["label"].to_numpy())
    labels = sets["test"]["label"].to_numpy()
    return [row(system, "quora-pairs", "accuracy", threshold_accuracy(test, labels, threshold), train_s, split="test",
                rule="threshold on val", majority_accuracy=majority_accuracy(labels), pairs=len(labels), **extra),
            row(system, "quora-pairs", "auc05", auc_at_fpr(labels, test), train_s, split="test", pairs=len(labels), **extra)]


def semeval_rows(system: str, frame: pd.DataFrame, scores: np.ndarray, train_s, **extra) -> list[dict]:
    rows = []
    for part, group in frame.groupby("part", sort=False):
        metrics = rerank(group.reset_index(drop=True), scores[group.index.to_numpy()])
        rows += [row(system, "semeval-rerank", m, metrics[m], train_s, split=part, queries=metrics["queries"],
                     queries_without_relevant=metrics["queries_without_relevant"], **extra)
                 for m in ("P@1", "P@5", "MAP", "MRR")]
    return rows


def transfer_rows(system: str, score, frame: pd.DataFrame, banking: pd.DataFrame, train_s, **extra) -> list[dict]:
    semeval = pair_auc05(frame, score(frame["org_text"], frame["rel_text"]))
    bank = auc_at_fpr(banking["label"].to_numpy(), score(banking["question1"], banking["question2"]))
    return [row(system, "transfer-auc05", "auc05", semeval, train_s, target="semeval2016-relevance", pairs=len(frame), **extra),
            row(system, "transfer-auc05", "auc05", bank, train_s, target="banking77-same-intent", pairs=len(banking), **extra)]


def sparse_cosine(vectorizer, a, b) -> np.ndarray:
    """Cosine of the (L2-normalised) TF-IDF vectors of each pair a[i], b[i]."""
    return np.asarray(vectorizer.transform(list(a)).multiply(vectorizer.transform(list(b))).sum(axis=1)).ravel()


def tfidf_pair_scorer(vectorizer):
    """``sparse_cosine`` under ``vectorizer`` as a pair scorer ``score(a, b)``."""
    return lambda a, b: sparse_cosine(vectorizer, a, b)


def own_ranks(scores: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """1-based rank of each row's true column (ties count against it), as ``qpr.systems.residual.target_ranks``."""
    return (scores >= scores[np.arange(len(scores)), truth][:, None]).sum(axis=1)


def encode_rate(encode, texts: list[str]) -> float:
    start = time.perf_counter()
    encode(texts)
    return len(texts) / (time.perf_counter() - start)


def all_protocol_rows(system, encode, retriever, corpus, sets, frame, banking, train_s, extra) -> list[dict]:
    score = cosine_pair_scorer(encode)
    rows = qpr_rows(system, retriever, corpus, train_s, **extra)
    rows += pair_rows(system, score, sets, train_s, **extra)
    rows += semeval_rows(system, frame, score(frame["org_text"], frame["rel_text"]), train_s, **extra)
    rows += transfer_rows(system, score, frame, banking, train_s, **extra)
    return rows


# ---------------------------------------------------------------- stages

def stage_baselines(args) -> list[dict]:

    corpus, frame, banking = quora(), semeval_all(), banking_pairs(EVAL_SEED)
    sets = quora_pair_sets(corpus, EVAL_SEED)
    rows = semeval_rows("search-engine", frame, engine_scores(frame), None)
    rows += semeval_rows("bm25", frame, bm25_scores(frame), None)
    semeval_tfidf = tfidf_vectorizer(pd.concat([frame["org_text"], frame["rel_text"]]).unique().tolist())
    rows += semeval_rows("tfidf", frame, sparse_cosine(semeval_tfidf, frame["org_text"], frame["rel_text"]), None,
                         fitted_on="semeval texts")
    # The transfer baseline: TF-IDF fitted on the source domain (Quora-lite), as the paper's.
    start = time.perf_counter()
    source = tfidf_vectorizer(corpus["question"].tolist())
    fit_s = time.perf_counter() - start
    source_score = tfidf_pair_scorer(source)
    rows += transfer_rows("tfidf", source_score, frame, banking, fit_s, fitted_on="quora-lite")
    rows += pair_rows("tfidf", source_score, sets, fit_s, fitted_on="quora-lite")
    rows += qpr_rows("tfidf", TfidfRetriever(corpus, source), corpus, fit_s, fitted_on="quora-lite")
    start = time.perf_counter()
    bm25 = BM25Retriever(corpus)
    rows += qpr_rows("bm25", bm25, corpus, time.perf_counter() - start)
    # SQuAD: each dev question against all dev paragraphs, by TF-IDF (fitted on the paragraphs) and BM25.
    paragraphs, questions = load_squad("dev")
    truth = questions["pid"].to_numpy()
    vectorizer = tfidf_vectorizer(paragraphs["context"].tolist())
    scores = (vectorizer.transform(questions["question"]) @ vectorizer.transform(paragraphs["context"]).T).toarray()
    rows += [row("tfidf", "squad-paragraphs", m, v, None, split="dev", fitted_on="squad dev paragraphs")
             for m, v in recall_at(own_ranks(scores, truth)).items()]
    para = pd.DataFrame({"qid": paragraphs["pid"], "question": paragraphs["context"], "cluster": None, "split": "none"})
    paragraph_bm25 = BM25Retriever(para)
    scores = np.stack([paragraph_bm25.scores(q) for q in questions["question"]])
    ranks = own_ranks(scores, truth)
    rows += [row("bm25", "squad-paragraphs", m, v, None, split="dev") for m, v in recall_at(ranks).items()]
    return rows


def stage_film(args) -> list[dict]:

    corpus, frame, banking = quora(), semeval_all(), banking_pairs(EVAL_SEED)
    sets = quora_pair_sets(corpus, EVAL_SEED)
    config = FilmConfig(rank=args.film_rank, max_iter=args.film_iter, seed=args.seed)
    model = fit_film(corpus, config, log=lambda h: print(h, flush=True) if h["iter"] % 10 == 0 else None)
    train_rss = peak_rss_mb()
    extra = {"encode_qps": round(encode_rate(model.encode, corpus["question"].tolist())), "peak_rss_mb": round(train_rss),
             "iterations": len(model.history) - 1, "objective_start": model.history[0]["objective"],
             "objective_end": model.history[-1]["objective"], "rank": config.rank, "train_data": "quora-lite train clusters (all)"}
    rows = all_protocol_rows("film", model.encode, model.retriever(corpus), corpus, sets, frame, banking, model.seconds, extra)
    saved = ROOT / "runs" / "seed_systems" / "film.pkl"  # for re-evaluation without retraining
    saved.parent.mkdir(parents=True, exist_ok=True)
    saved.write_bytes(pickle.dumps(model))
    rows.append(knn_row(model, sets, args.film_kmax, extra))
    return rows


def knn_row(model, sets: dict, kmax: int, extra: dict) -> dict:
    """FILM's pairwise kNN rule on the test pairs, k chosen on val among 1..kmax (by accuracy; the
    paper used cross-entropy, which a 0/1 rule does not define without more than its text gives)."""
    ks = list(range(1, kmax + 1))
    accuracy = {}
    for split, pairs in sets.items():
        texts = pd.unique(pd.concat([pairs["question1"], pairs["question2"]]))
        position = {t: i for i, t in enumerate(texts)}
        ranks = pair_neighbour_ranks(model.encode(list(texts)), pairs["question1"].map(position).to_numpy(),
                                     pairs["question2"].map(position).to_numpy(), max(ks))
        accuracy[split] = pairwise_knn_accuracy(ranks, pairs["label"].to_numpy(), ks)
    k = max(ks, key=lambda k: accuracy["val"][k])
    return row("film", "quora-pairs", "accuracy", accuracy["test"][k], model.seconds, split="test",
               rule="pairwise kNN, k chosen on val", k=k, majority_accuracy=majority_accuracy(sets["test"]["label"].to_numpy()),
               pairs=len(sets["test"]), **extra)


def quora_slice(corpus: pd.DataFrame, clusters: int, seed: int) -> pd.DataFrame:
    """``clusters`` random train clusters (seeded) plus every val cluster: the training data of the
    encoders compared at a budget this machine affords; other train questions become 'none'."""
    rng = np.random.default_rng(seed)
    train = corpus.loc[corpus["split"] == "train", "cluster"].unique()
    keep = set(rng.choice(train, min(clusters, len(train)), replace=False))
    out = corpus.copy()
    drop = (out["split"] == "train") & ~out["cluster"].isin(keep)
    out.loc[drop, "split"] = "none"
    return out


def stage_encoder(args, architecture: str) -> list[dict]:

    corpus, frame, banking = quora(), semeval_all(), banking_pairs(EVAL_SEED)
    sets = quora_pair_sets(corpus, EVAL_SEED)
    sliced = quora_slice(corpus, args.slice_clusters, args.seed)
    if architecture == "lstm":
        # The AskUbuntu paper's LSTM: bi-directional, 128 hidden units per direction, mean pooling.
        encoder_config = EncoderConfig(architecture="lstm", pooling="mean", channels=128, windows=(5,))
    else:
        encoder_config = PAPER_ENCODER
    config = TrainConfig(max_epochs=args.epochs, patience=args.epochs, seed=args.seed, batch_size=args.batch_size)
    result = train(sliced, config, PAPER_TEXT, encoder_config, progress=False,
                   on_epoch=lambda r: print(architecture, r, flush=True))
    train_rss = peak_rss_mb()
    system = "lstm" if architecture == "lstm" else "cnn-sdml"
    bundle = Bundle.create(result.encoder, result.vocab, corpus, IndexConfig("Flat"), train_info=result.summary())
    bundle.save(ROOT / "runs" / "seed_systems" / system)

    def encode(texts):
        v = encode_texts(result.encoder, result.vocab, list(texts))
        return v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)

    parameters = sum(p.numel() for p in result.encoder.parameters())
    extra = {"encode_qps": round(encode_rate(encode, corpus["question"].tolist())), "peak_rss_mb": round(train_rss),
             "epochs": len(result.history), "best_epoch": result.best_epoch, "parameters": parameters,
             "train_data": f"quora-lite slice: {args.slice_clusters} train clusters",
             "encoder": encoder_config.to_dict()}
    return all_protocol_rows(system, encode, bundle.dense_retriever(), corpus, sets, frame, banking, result.seconds, extra)


def stage_cnn_full(args) -> list[dict]:
    """The full-split CNN measured by bench/quora_lite.py (this repository), copied with its source."""
    recorded = json.loads((ROOT / "bench" / "results" / "quora_lite.json").read_text())
    rows = []
    for r in recorded["runs"]:
        if r["system"] == "sdml" and r["index"] == "exact":
            rows += [row("cnn-sdml", "qpr-quora-lite", m, r[m], r["train_seconds"], split=r["split"], queries=r["queries"],
                         encode_qps=r["encode_qps"], peak_rss_mb=round(r["peak_rss_mb"]), epochs=r["epochs"],
                         train_data="quora-lite train clusters (all)",
                         source="bench/results/quora_lite.json (bench/quora_lite.py, paper's encoder, 1 thread)")
                     for m in ("H1", "H10", "MRR")]
    return rows


def stage_squad(args) -> list[dict]:

    rows = []
    dev_paragraphs, dev_questions = load_squad("dev")
    train_paragraphs, train_questions = load_squad("train-partial")
    # Word vectors: skip-gram on the training articles' paragraphs and questions and the dev
    # paragraphs (the knowledge base, indexed anyway); never the dev questions. IDF over all paragraphs.
    start = time.perf_counter()
    paragraphs_all = train_paragraphs["context"].tolist() + dev_paragraphs["context"].tolist()
    embedder = IdfEmbedder.train(paragraphs_all + train_questions["question"].tolist(), paragraphs_all,
                                 dim=args.word_dim, seed=args.seed)
    embed_s = time.perf_counter() - start
    plain = IdfEmbedder(list(embedder.index), embedder.vectors, paragraphs_all, use_idf=False)
    dev_p = embedder.encode(dev_paragraphs["context"].tolist())
    dev_q = embedder.encode(dev_questions["question"].tolist())
    truth = dev_questions["pid"].to_numpy()
    qps = round(encode_rate(embedder.encode, dev_questions["question"].tolist()))
    common = {"word_vectors": f"skip-gram {args.word_dim}-d trained on the SQuAD text here (no GloVe)", "split": "dev",
              "encode_qps": qps}
    rows += [row("idf-embed", "squad-paragraphs", m, v, embed_s, **common, peak_rss_mb=round(peak_rss_mb()))
             for m, v in recall_at(target_ranks(dev_q, dev_p, truth)).items()]
    rows += [row("mean-embed", "squad-paragraphs", m, v, embed_s, **common)
             for m, v in recall_at(target_ranks(plain.encode(dev_questions["question"].tolist()),
                                                plain.encode(dev_paragraphs["context"].tolist()), truth)).items()]
    # Residual retrievers on the question side, paragraphs fixed; early stopping on held-out
    # training articles (the last 4 of 44), never on dev.
    titles = train_paragraphs["title"].unique()
    held = set(titles[-4:])
    pid_title = train_paragraphs.set_index("pid")["title"]
    is_held = train_questions["pid"].map(pid_title).isin(held).to_numpy()
    tr_p = embedder.encode(train_paragraphs["context"].tolist())
    tr_q = embedder.encode(train_questions["question"].tolist())
    pids = train_questions["pid"].to_numpy()
    held_pids = np.unique(pids[is_held])
    held_local = np.searchsorted(held_pids, pids[is_held])

    def validate(model):
        return recall_at(target_ranks(model.transform(tr_q[is_held]), tr_p[held_pids], held_local), ks=(1, 5))["recall_avg"]

    for kind in ("fcrr", "convrr"):
        config = ResidualConfig(kind=kind, seed=args.seed, max_epochs=args.residual_epochs)
        result = fit_residual(tr_q[~is_held], tr_p[pids[~is_held]], pids[~is_held], config, validate=validate)
        print(kind, result.history[-1], result.best_epoch, flush=True)
        ranks = target_ranks(result.model.transform(dev_q), dev_p, truth)
        own_qps = round(encode_rate(lambda t, m=result.model: m.transform(embedder.encode(t)), dev_questions["question"].tolist()))
        rows += [row(kind, "squad-paragraphs", m, v, embed_s + result.seconds, **(common | {"encode_qps": own_qps}),
                     peak_rss_mb=round(peak_rss_mb()), epochs=len(result.history),
                     best_epoch=result.best_epoch, config=result.summary()["config"])
                 for m, v in recall_at(ranks).items()]
    # The same models on the QPR protocol: word vectors on Quora-lite's non-query questions,
    # IDF over the corpus, residual nets siamese on train-cluster pairs.
    corpus = quora()
    start = time.perf_counter()
    q_embedder = fit_idf_embedder(corpus, args.word_dim, args.seed)
    q_embed_s = time.perf_counter() - start
    qextra = {"word_vectors": f"skip-gram {args.word_dim}-d trained on Quora-lite's non-query questions",
              "encode_qps": round(encode_rate(q_embedder.encode, corpus["question"].tolist()[:20000]))}
    # Quora-lite-trained, they also run on the pair, reranking and transfer protocols (direct transfer).
    frame, banking, sets = semeval_all(), banking_pairs(EVAL_SEED), quora_pair_sets(corpus, EVAL_SEED)
    rows += all_protocol_rows("idf-embed", q_embedder.encode, EncodeRetriever(corpus, q_embedder.encode, "idf-embed"),
                              corpus, sets, frame, banking, q_embed_s, qextra | {"peak_rss_mb": round(peak_rss_mb())})
    for kind in ("fcrr", "convrr"):
        config = ResidualConfig(kind=kind, seed=args.seed, max_epochs=args.residual_epochs)
        result = fit_qpr_residual(corpus, q_embedder, config)  # what `python -m qpr train --system fcrr|convrr` trains
        print(kind, "qpr", result.history[-1], result.best_epoch, flush=True)
        encode = ResidualEncoder(q_embedder, result.model).encode
        own = qextra | {"encode_qps": round(encode_rate(encode, corpus["question"].tolist()[:20000]))}
        rows += all_protocol_rows(kind, encode, EncodeRetriever(corpus, encode, kind), corpus, sets, frame, banking,
                                  q_embed_s + result.seconds, own | {"peak_rss_mb": round(peak_rss_mb()),
                                  "epochs": len(result.history), "best_epoch": result.best_epoch})
    return rows


def stage_transfer(args) -> list[dict]:
    """Transfer from Quora-lite to each target domain with and without the adversary."""
    weights = [float(w) for w in args.adv_weights.split(",")]
    rows = []
    for r in adversarial_transfer_rows(args, args.transfer_systems.split(","), weights):
        adversarial = r["adversary_weight"] > 0
        paper = (0.70, ANDROID + f"; {'CNN' if r['system'] == 'cnn-sdml' else 'LSTM'}-adv") if adversarial else None
        rows.append(r | {"adaptation": "adversarial" if adversarial else "none (target vocabulary)",
                         **({"paper_value": paper[0], "paper_setting": paper[1]} if paper else {})})
    return rows


def adversarial_transfer_rows(args, systems: list[str], weights: list[float]) -> list[dict]:
    """For each system, target and adversary weight (0: none), an encoder trained on the Quora-lite
    slice with the target's questions in its vocabulary, scored on the target's pairs by negative
    squared distance (the training loss'): every arm at one budget and distance."""
    corpus, frame, banking = quora(), semeval_all(), banking_pairs(EVAL_SEED)
    sliced = quora_slice(corpus, args.slice_clusters, args.seed)
    # Unlabeled target text: SemEval's questions (labels unused); BANKING77's train queries (the
    # scored pairs come from its test file).
    bank_train = pd.read_csv(data_dir() / "intents" / "banking77" / "train.csv")["text"].tolist()
    targets = {"semeval2016-relevance": pd.unique(pd.concat([frame["org_text"], frame["rel_text"]])).tolist(),
               "banking77-same-intent": bank_train}
    encoders = {"cnn-sdml": PAPER_ENCODER,
                "lstm": EncoderConfig(architecture="lstm", pooling="mean", channels=128, windows=(5,))}
    config = TrainConfig(max_epochs=args.epochs, patience=args.epochs, seed=args.seed, batch_size=args.batch_size)
    rows = []
    for system in systems:
        for target, texts in targets.items():
            for weight in weights:
                result = train_adversarial(sliced, texts, config, AdversarialConfig(weight=weight), PAPER_TEXT, encoders[system],
                                           on_epoch=lambda r: print(system, target, weight, r, flush=True))

                def score(a, b, result=result):
                    va = encode_texts(result.encoder, result.vocab, list(a))
                    vb = encode_texts(result.encoder, result.vocab, list(b))
                    return -((va - vb) ** 2).sum(axis=1)

                if target.startswith("semeval"):
                    value = pair_auc05(frame, score(frame["org_text"], frame["rel_text"]))
                else:
                    value = auc_at_fpr(banking["label"].to_numpy(), score(banking["question1"], banking["question2"]))
                rows.append(row(system, "transfer-auc05", "auc05", value, result.seconds, target=target,
                                adversary_weight=weight, distance="squared", epochs=args.epochs,
                                domain_accuracy_last_epoch=result.history[-1]["domain_accuracy"],
                                train_data=f"quora-lite slice: {args.slice_clusters} train clusters"))
                print(rows[-1], flush=True)
    return rows


def stage_paper_film(args) -> list[dict]:
    """FILM and the TF-IDF it projects on balanced pairs (half duplicates) touching no training
    question: the FILM paper's test as near as Quora-lite allows. Val is balanced too, so the
    threshold and k are chosen on the distribution they are tested on."""
    corpus = quora()
    sets = {split: balanced(pairs, EVAL_SEED) for split, pairs in quora_pair_sets(corpus, EVAL_SEED).items()}
    config = FilmConfig(rank=args.film_rank, max_iter=args.film_iter, seed=args.seed)
    model = fit_film(corpus, config, log=lambda h: print(h, flush=True) if h["iter"] % 10 == 0 else None)
    extra = {"iterations": len(model.history) - 1, "rank": config.rank, "train_data": "quora-lite train clusters (all)",
             "peak_rss_mb": round(peak_rss_mb())}
    rows = [r for r in pair_rows("film", cosine_pair_scorer(model.encode), sets, model.seconds, **extra) if r["metric"] == "accuracy"]
    rows.append(knn_row(model, sets, args.film_kmax, extra))
    source = tfidf_pair_scorer(tfidf_vectorizer(corpus["question"].tolist()))
    rows += [r for r in pair_rows("tfidf", source, sets, None, fitted_on="quora-lite")
             if r["metric"] == "accuracy"]
    return comparable(rows, "film-quora-balanced")


def stage_paper_idf(args) -> list[dict]:
    """IDF-weighted (and plain) means of pretrained word vectors on SQuAD dev paragraph retrieval,
    the paper's GloVe rows' protocol: all-MiniLM-L6-v2's vector of each word alone (what the general
    build starts its student's embeddings from), IDF over the paragraphs, as in ``stage_squad``.
    The vocabulary is every word of the dev paragraphs and questions: a pretrained table covers any
    word, as GloVe's 2.2M do; the vectors come from MiniLM, never from the dev labels."""
    dev_paragraphs, dev_questions = load_squad("dev")
    train_paragraphs, _ = load_squad("train-partial")
    documents = train_paragraphs["context"].tolist() + dev_paragraphs["context"].tolist()
    texts = dev_paragraphs["context"].tolist() + dev_questions["question"].tolist()
    vocab = sorted({w for text in texts for w in words(text)})
    digest = hashlib.sha256("\n".join(vocab).encode("utf-8")).hexdigest()[:12]
    cache = ROOT / "runs" / "seed_systems" / f"minilm-words-squad-{digest}.npy"
    cache.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    vectors = minilm_vectors(vocab, cache)
    vectors_s = time.perf_counter() - start
    truth = dev_questions["pid"].to_numpy()
    rows = []
    for system, use_idf in (("idf-embed", True), ("mean-embed", False)):
        embedder = IdfEmbedder(vocab, vectors, documents, use_idf=use_idf)
        ranks = target_ranks(embedder.encode(dev_questions["question"].tolist()),
                             embedder.encode(dev_paragraphs["context"].tolist()), truth)
        rows += [row(system, "squad-paragraphs", m, v, vectors_s, split="dev", words=len(vocab),
                     word_vectors="all-MiniLM-L6-v2, each word alone (384-d)")
                 for m, v in recall_at(ranks).items()]
    return comparable(rows, "idf-squad-pretrained")


def stage_paper_transfer(args) -> list[dict]:
    """Direct (adversary weight 0) and adversarial transfer at one budget and one distance, and
    TF-IDF fitted on the source, on both targets: the AskUbuntu paper's Table 6 comparison."""
    corpus, frame, banking = quora(), semeval_all(), banking_pairs(EVAL_SEED)
    source = tfidf_pair_scorer(tfidf_vectorizer(corpus["question"].tolist()))
    rows = transfer_rows("tfidf", source, frame, banking, None, fitted_on="quora-lite")
    for r in adversarial_transfer_rows(args, args.transfer_systems.split(","), [0.0, args.adv_weight]):
        rows.append(r | {"adaptation": "adversarial" if r["adversary_weight"] > 0 else "direct"})
    return comparable(rows, "transfer-equal-settings")


STAGES = {"transfer": stage_transfer, "baselines": stage_baselines, "film": stage_film, "cnn": lambda a: stage_encoder(a, "cnn"),
          "lstm": lambda a: stage_encoder(a, "lstm"), "cnn-full": stage_cnn_full, "squad": stage_squad,
          "paper-film": stage_paper_film, "paper-idf": stage_paper_idf, "paper-transfer": stage_paper_transfer}


# ---------------------------------------------------------------- results file and doc

def load() -> dict:
    """The results file: ``seed_runs`` (one row per stage run and seed, as measured) and ``runs``
    (those rows pooled over seeds: ``aggregate``)."""
    return json.loads(RESULTS.read_text()) if RESULTS.is_file() else {"runs": [], "seed_runs": [], "stages": {}}


# What one result is, whatever seed measured it: rows equal on all of these are seeds of one run.
RUN_KEYS = ("system", "protocol", "task", "metric", "split", "target", "rule", "adaptation", "adversary_weight", "train_data",
            "fitted_on", "word_vectors", "source")
POOLED = ("train_s", "encode_qps", "peak_rss_mb")  # reported as their mean over seeds, like the value


def ci95(values: list[float]) -> list[float] | None:
    """The 95% confidence interval of the mean of ``values`` (Student's t), or None for one value."""
    if len(values) < 2:
        return None
    low, high = stats.t.interval(0.95, len(values) - 1, loc=np.mean(values), scale=stats.sem(values))
    # Equal values give a zero standard error, for which scipy returns NaN bounds.
    return [float(np.mean(values))] * 2 if np.isnan(low) else [float(low), float(high)]


def aggregate(seed_runs: list[dict]) -> list[dict]:
    """One row per run (``RUN_KEYS``): ``value`` the mean over its seeds, ``values`` and ``seeds``
    each seed's, ``ci95`` the mean's 95% interval (None with one seed); for a seed measured twice
    the later row counts."""
    groups: dict[tuple, dict[int, dict]] = {}
    for r in seed_runs:
        groups.setdefault(tuple(r.get(k) for k in RUN_KEYS), {})[r["seed"]] = r
    runs = []
    for by_seed in groups.values():
        rows = [by_seed[seed] for seed in sorted(by_seed)]
        values = [r["value"] for r in rows]
        run = {k: v for k, v in rows[0].items() if k not in ("stage", "seed")}
        run |= {"value": float(np.mean(values)), "seeds": sorted(by_seed), "values": values, "ci95": ci95(values)}
        for key in POOLED:
            measured = [r[key] for r in rows if r.get(key) is not None]
            run[key] = round(float(np.mean(measured)), 1) if measured else None
        runs.append(run)
    return runs


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def save_stage(name: str, rows: list[dict], args) -> None:
    payload = load()
    for r in rows:
        r["stage"], r["seed"] = name, args.seed
    payload["seed_runs"] = [r for r in payload["seed_runs"] if r["stage"] != name] + rows
    payload["runs"] = aggregate(payload["seed_runs"])
    payload.setdefault("stages", {})[name] = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "seed": args.seed, "machine": machine(),
        "cpu": cpu_model(), # --all: plain nproc honours OMP_NUM_THREADS, which every run here sets to 1.
        "nproc": int(subprocess.run(["nproc", "--all"], capture_output=True, text=True).stdout.strip() or 0),
        "peak_rss_mb": round(peak_rss_mb()), "settings": {k: v for k, v in vars(args).items() if k not in ("stage", "render")}}
    write_json(payload, RESULTS)


PROTOCOL_TITLES = {"qpr-quora-lite": "QPR protocol on Quora-lite (157,023 questions indexed)",
                   "quora-pairs": "Quora-lite pair classification (test pairs)",
                   "semeval-rerank": "SemEval-2016 Task 3B reranking",
                   "transfer-auc05": "Transfer from Quora-lite, AUC(0.05)",
                   "squad-paragraphs": "SQuAD v1.1 dev paragraph retrieval (2,067 paragraphs)",
                   "paper-comparable": "Paper-comparable"}
SYSTEM_ORDER = ["search-engine", "bm25", "tfidf", "film", "cnn-sdml", "lstm", "idf-embed", "mean-embed", "fcrr", "convrr"]


def value_cell(run: dict) -> str:
    """The value to 3 decimals, with the half-width of its 95% interval when several seeds ran."""
    if not run.get("ci95"):
        return f"{run['value']:.3f}"
    return f"{run['value']:.3f} ± {(run['ci95'][1] - run['ci95'][0]) / 2:.3f}"


TASK_TITLES = {"film-quora-balanced": "FILM's Quora test: balanced pairs, none touching a training question",
               "idf-squad-pretrained": "IDF-weighted pretrained word vectors on SQuAD dev paragraphs (Cakaloglu et al. Tables 3-4)",
               "transfer-equal-settings": "Direct vs adversarial transfer at one budget and distance, AUC(0.05) (AskUbuntu paper Table 6)"}


def render_tables(runs: list[dict]) -> str:
    """One table per protocol (per task within the paper-comparable one): a line per (system,
    setting), a column per metric, the paper's value beside ours where its text gives one."""
    parts = []
    groups = [(title, [r for r in runs if r["protocol"] == protocol])
              for protocol, title in PROTOCOL_TITLES.items() if protocol != "paper-comparable"]
    groups += [(f"{PROTOCOL_TITLES['paper-comparable']}: {TASK_TITLES.get(task, task)}",
                [r for r in runs if r["protocol"] == "paper-comparable" and r.get("task") == task])
               for task in dict.fromkeys(r.get("task") for r in runs if r["protocol"] == "paper-comparable")]
    for title, rows in groups:
        if not rows:
            continue
        protocol = rows[0]["protocol"]
        metrics = list(dict.fromkeys(r["metric"] for r in rows))
        lines: dict[tuple, dict] = {}
        for r in rows:
            adaptation = r.get("adaptation")
            if adaptation == "adversarial":
                adaptation = f"adversarial, weight {r['adversary_weight']:g}"
            elif protocol == "transfer-auc05" and r["system"] not in ("tfidf",) and not adaptation:
                adaptation = "direct (source vocabulary)"
            setting = " ".join(str(x) for x in (r.get("split") or r.get("target"), r.get("rule"), adaptation) if x)
            key = (SYSTEM_ORDER.index(r["system"]) if r["system"] in SYSTEM_ORDER else 99, r["system"], setting,
                   r.get("train_data") or r.get("fitted_on") or r.get("word_vectors") or "", r.get("source") or "")
            line = lines.setdefault(key, {"system": r["system"], "setting": setting, "data": key[3] + (f"; from {key[4]}" if key[4] else ""),
                                          "train_s": r.get("train_s"), "encode_qps": r.get("encode_qps"),
                                          "peak_rss_mb": r.get("peak_rss_mb")})
            line[r["metric"]] = value_cell(r)
            line["seeds"] = max(line.get("seeds", 0), len(r.get("seeds", [0])))
            if r.get("paper_value") is not None:
                line[f"paper {r['metric']}"] = r["paper_value"]
        columns = [("system", "system"), ("setting", "split / target / rule")]
        for m in metrics:
            columns.append((m, m))
            if any(f"paper {m}" in line for line in lines.values()):
                columns.append((f"paper {m}", f"paper {m}"))
        columns += [("seeds", "seeds"), ("train_s", "train s"), ("encode_qps", "encode q/s"), ("peak_rss_mb", "peak RSS MB"), ("data", "trained on")]
        ordered = [lines[k] for k in sorted(lines, key=lambda k: (k[2], k[0], k[1]))]
        parts.append(f"### {title}\n\n" + markdown_table(ordered, columns))
    return "\n\n".join(parts)


def render() -> None:
    replace_marked_section(DOC, "seed-systems", render_tables(load()["runs"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stage", choices=sorted(STAGES))
    parser.add_argument("--render", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--film-rank", type=int, default=128)
    parser.add_argument("--film-iter", type=int, default=60)
    parser.add_argument("--film-kmax", type=int, default=200, help="largest k the pairwise kNN rule may choose")
    parser.add_argument("--slice-clusters", type=int, default=8000)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--word-dim", type=int, default=300)
    parser.add_argument("--residual-epochs", type=int, default=30)
    parser.add_argument("--adv-weights", default="0,0.1", help="adversary weights to train with (0: no adversary)")
    parser.add_argument("--adv-weight", type=float, default=0.1, help="paper-transfer: the adversarial arm's weight")
    parser.add_argument("--tag", default="", help="suffix of the stage's name in the results, so a second run of a stage "
                                                  "with other settings adds rows instead of replacing them")
    parser.add_argument("--transfer-systems", default="cnn-sdml", help="comma-separated: cnn-sdml,lstm")
    args = parser.parse_args()
    if args.stage:
        rows = STAGES[args.stage](args)
        # Each seed is its own stage run: another seed adds rows beside seed 0's, not over them.
        save_stage(args.stage + (f"-{args.tag}" if args.tag else "") + (f"-seed{args.seed}" if args.seed else ""), rows, args)
        print(f"{args.stage}: {len(rows)} rows written to {RESULTS}")
    if args.render or not args.stage:
        render()


if __name__ == "__main__":
    main()
