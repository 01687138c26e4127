"""Clusters from bare questions: the cluster-building queue.

A project uploaded as bare questions has no cluster to spot-check and nothing to train on
(training needs ``MIN_TRAIN_CLUSTERS`` clusters of 2+ questions, to hold some out). This queue
builds them: it proposes a *group*, a seed question that is in no cluster yet with its nearest
questions under the served retriever (the general encoder when the app has one, else BM25), and
the annotator confirms ("same meaning") or rejects ("different") each member. Those are ordinary
judgments whose query is a corpus question, so ``annotations.constraints`` forms the clusters from them:
"same" links join questions into connected components (``new-<qid>``), "different" links are
cannot-links, reviewers' decisions win, and ties are reported, by the numbered rules there.

Seeds are taken in a seeded random order (so two annotators with the same seed order share it and
``QPR_OVERLAP`` splits their items), skipping questions already in a cluster (as the judgments now
decide) and questions this annotator already asked as a seed.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from annotations.constraints import corrected_clusters
from annotations.queue import QUEUE_COLUMNS, spot_check
from annotations.store import AnnotationStore
from qpr.data.upload import MIN_TRAIN_CLUSTERS
from qpr.retrieval.base import Retriever

GROUP_SIZE = 8  # questions proposed with each seed: enough to find its paraphrases, few enough to judge in a minute
SEEDS_TRIED = 50  # seeds looked at for one group before the queue says nothing is left near any of them


def trainable_clusters(corpus: pd.DataFrame) -> int:
    """How many clusters of 2 or more questions ``corpus`` has (what training counts)."""
    return int((corpus["cluster"].value_counts() >= 2).sum())


def needs_clusters(corpus: pd.DataFrame) -> bool:
    """Whether ``corpus`` (a bundle's own) has too few clusters to train on, as a project of bare
    questions has: then its annotation builds clusters (this module) instead of spot-checking them."""
    return trainable_clusters(corpus) < MIN_TRAIN_CLUSTERS


def progress(store: AnnotationStore, corpus: pd.DataFrame) -> tuple[int, int]:
    """(clusters of 2+ questions the current judgments form over ``corpus``, how many training needs)."""
    return trainable_clusters(corrected_clusters(store, corpus).corpus), MIN_TRAIN_CLUSTERS


def next_group(store: AnnotationStore, retriever: Retriever, corpus: pd.DataFrame, annotator: str,
               size: int = GROUP_SIZE, seed: int = 0, overlap: int | None = None) -> pd.DataFrame:
    """The next proposed group for ``annotator``: queue rows (``annotations.queue.QUEUE_COLUMNS``,
    the seed as ``query_qid``) of the seed's ``size`` nearest questions not yet judged with it,
    nearest first (among its ``3 * size`` nearest). Empty when none of ``SEEDS_TRIED`` seeds has an unjudged neighbour left (or no
    question is outside a cluster any more)."""
    grouped = corrected_clusters(store, corpus).corpus
    asked = set(store.judgments.frame(annotator=annotator)["query_qid"].dropna().astype("int64"))
    free = grouped.loc[grouped["cluster"].isna() & ~grouped["qid"].isin(asked), "question"]
    order = np.random.default_rng(seed).permutation(len(free))[:SEEDS_TRIED]
    for text in free.iloc[order]:
        # Retrieved deeper than the group: the nearest may be judged with this seed already (as its candidates).
        queue = spot_check(store, retriever, grouped, annotator, query_text=text, k=3 * size + 1, overlap=overlap)
        if len(queue):
            return queue.head(size)
    return pd.DataFrame(columns=QUEUE_COLUMNS).astype(
        {"query_qid": "Int64", "query_text": "string", "candidate_qid": "int64", "distance": float, "suspicion": float})
