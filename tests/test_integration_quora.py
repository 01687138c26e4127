"""Train a small model on a slice of the real Quora-lite data and compare it with a random encoder."""

import pandas as pd
import pytest
import torch

from qpr.bundles.bundle import Bundle
from qpr.data.corpus import load_corpus
from qpr.model.encoder import QuestionEncoder
from qpr.evaluation.metrics import evaluate
from qpr.retrieval.index import IndexConfig
from qpr.retrieval.hybrid import HybridRetriever, fit_fusion
from qpr.retrieval.lexical import BM25Retriever
from qpr.training.train import TrainConfig, train

pytestmark = pytest.mark.integration


def quora_slice(data_dir, clusters_per_split={"train": 3000, "val": 300, "test": 300}, distractors=2000):
    """The first clusters of each canonical split (by cluster id order) plus unclustered questions."""
    corpus = load_corpus(data_dir / "quora-lite")
    parts = []
    for split, n in clusters_per_split.items():
        rows = corpus[corpus["split"] == split]
        keep = sorted(rows["cluster"].unique())[:n]
        parts.append(rows[rows["cluster"].isin(keep)])
    parts.append(corpus[corpus["split"] == "none"].head(distractors))
    return pd.concat(parts).reset_index(drop=True)


@pytest.fixture(scope="module")
def sliced(data_dir):
    """The slice and a small model trained on it (shared by the tests below)."""
    corpus = quora_slice(data_dir)
    # Two epochs: a third never beat the second on val, so the kept model was the same (26 s more).
    result = train(corpus, TrainConfig(batch_size=128, max_epochs=2, patience=2, val_pairs=1000), progress=False)
    return corpus, result


def test_a_trained_encoder_beats_a_random_one_by_a_wide_margin(sliced):
    corpus, result = sliced
    trained = evaluate(Bundle.create(result.encoder, result.vocab, corpus, IndexConfig("Flat")).dense_retriever(), corpus, "test")
    torch.manual_seed(0)
    random_encoder = QuestionEncoder(result.vocab.size).eval()
    untrained = evaluate(Bundle.create(random_encoder, result.vocab, corpus, IndexConfig("Flat")).dense_retriever(), corpus, "test")
    print(f"trained {trained}  random {untrained}  best val AUC {result.best_auc:.3f}")
    assert result.best_auc > 0.9
    assert trained["H1"] > untrained["H1"] + 0.15
    assert trained["MRR"] > untrained["MRR"] + 0.15


def test_the_hybrid_fitted_on_val_beats_both_of_its_parts_on_test(sliced):
    # On the full split (docs/QUALITY.md) the hybrid gains several points of H@1 over BM25. This
    # slice's small index is easy for BM25 (H@1 ~0.9) and its 2-epoch encoder weaker (~0.8 with
    # the default windows 1,3,5; ~0.6 with the paper's window 5): the fitted fusion must still lose
    # nothing to the better part and clearly beat the weaker one.
    corpus, result = sliced
    bundle = Bundle.create(result.encoder, result.vocab, corpus, IndexConfig("Flat"))
    bm25 = BM25Retriever(corpus)
    hybrid = HybridRetriever(bundle.dense_retriever(), fit_fusion(bundle.dense_retriever(), bm25=bm25), bm25=bm25)
    scores = {r.name: evaluate(r, corpus, "test") for r in (bundle.dense_retriever(), bm25, hybrid)}
    print({name: (round(m["H1"], 3), round(m["MRR"], 3)) for name, m in scores.items()})
    for metric in ("H1", "MRR"):
        assert scores["hybrid"][metric] >= max(scores["cnn-sdml"][metric], scores["bm25"][metric]) - 0.005
        assert scores["hybrid"][metric] > min(scores["cnn-sdml"][metric], scores["bm25"][metric]) + 0.05
