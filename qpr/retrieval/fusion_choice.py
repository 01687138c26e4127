"""Fitting or choosing the fusion for an encoder on a corpus that has no labels.

A fusion (``qpr.retrieval.hybrid.Fusion``) is fitted for one encoder: how far apart its
paraphrases sit. An encoder taught further on a user's corpus (``qpr.bundles.general.rebase``
with the teacher) reads distances its carried fusion was not fitted for, and the hybrid can then
rank below its own dense part. Without the corpus's clusters, a reference embedding of the
corpus questions (the teacher's vectors, which teaching computes anyway) stands in for them: each
sampled corpus question's nearest other corpus question by the reference is taken as its
paraphrase. On those pseudo-paraphrases the fusion is refitted (``fit_rows(per_query=True)``),
and the carried fusion, the refit and the dense part alone are compared by how often each ranks
the reference's neighbour first, on sampled questions the refit did not see; the best is kept.
"""

from __future__ import annotations

from dataclasses import dataclass

import faiss
import numpy as np

from qpr.errors import QPRError
from qpr.retrieval.base import Retriever
from qpr.retrieval.dense import DenseRetriever
from qpr.retrieval.hybrid import DEPTH, Fusion, HybridRetriever, fit_rows, fusion_rows
from qpr.retrieval.lexical import BM25Retriever

SAMPLE = 1_000  # sampled corpus questions: half to refit on, half to compare on
DENSE = "dense"  # the choice of no fusion: the dense part alone


@dataclass(frozen=True)
class FusionChoice:
    """What ``choose_fusion`` kept (``name``: "carried", "refit" or ``DENSE``), that fusion
    (None for the dense part alone), and each option's agreement with the reference."""

    name: str
    fusion: Fusion | None
    agreement: dict[str, float]
    questions: int

    def to_dict(self) -> dict:
        return {"chosen": self.name, "agreement_at_1": self.agreement, "questions": self.questions,
                "reference": "the teacher's nearest corpus question"}


def reference_neighbours(vectors: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """For each corpus row in ``rows``, the nearest other corpus row by inner product of
    ``vectors`` (one unit-length row per corpus question)."""
    index = faiss.IndexFlatIP(vectors.shape[1])
    index.add(np.ascontiguousarray(vectors, dtype=np.float32))
    _, found = index.search(np.ascontiguousarray(vectors[rows], dtype=np.float32), 2)
    # The question itself is normally first; a duplicate text may tie with it and come first.
    return np.where(found[:, 0] == rows, found[:, 1], found[:, 0])


def agreement(retriever: Retriever, dense: DenseRetriever, rows: np.ndarray, neighbours: np.ndarray) -> float:
    """How often ``retriever``'s first result other than the question itself, for the corpus
    questions at ``rows``, is the reference's neighbour."""
    qids = dense.corpus["qid"].to_numpy()
    _, found = retriever.search_ids(dense.corpus["question"].to_numpy()[rows].tolist(), 2)
    first = np.where(found[:, 0] == qids[rows], found[:, 1], found[:, 0])
    return float((first == qids[neighbours]).mean())


def choose_fusion(dense: DenseRetriever, vectors: np.ndarray, carried: Fusion, bm25: BM25Retriever | None = None,
                  sample: int = SAMPLE, seed: int = 0, depth: int = DEPTH) -> FusionChoice:
    """The carried fusion, one refitted on the reference's neighbours, or the dense part alone:
    whichever agrees most with ``vectors`` (the reference; see module doc) on half of ``sample``
    corpus questions, the refit fitted on the other half. Ties keep the carried fusion, then the
    refit; a corpus under 4 questions keeps the carried fusion, compared with nothing. QPRError if
    ``vectors`` does not have one row per corpus question."""
    corpus = dense.corpus
    if len(vectors) != len(corpus):
        raise QPRError(f"the reference has {len(vectors):,} vectors for a corpus of {len(corpus):,} questions: one per question")
    if len(corpus) < 4:  # too few questions to refit on one half and compare on the other: keep what was carried
        return FusionChoice("carried", carried, {}, 0)
    bm25 = bm25 or BM25Retriever(corpus)
    rows = np.random.default_rng(seed).permutation(len(corpus))[: min(sample, len(corpus))]
    fit_on, check_on = rows[: len(rows) // 2], rows[len(rows) // 2 :]
    neighbours = reference_neighbours(vectors, rows)
    options: dict[str, Fusion | None] = {"carried": carried}
    try:
        options["refit"] = fit_rows([fusion_rows(dense, corpus.iloc[fit_on], depth, bm25, positives=neighbours[: len(fit_on)])],
                                    depth, "the reference's neighbours", per_query=True)
    except QPRError:  # no sampled question had its neighbour among its candidates: nothing to refit on
        pass
    options[DENSE] = None
    scores = {name: agreement(dense if fusion is None else HybridRetriever(dense, fusion, bm25), dense, check_on, neighbours[len(fit_on) :])
              for name, fusion in options.items()}
    best = max(scores, key=lambda name: (scores[name], -list(options).index(name)))
    return FusionChoice(best, options[best], scores, len(check_on))
