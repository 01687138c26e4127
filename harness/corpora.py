"""Small corpora that tests and bench's own tests build: clusters of template paraphrases."""

from __future__ import annotations

import numpy as np
import pandas as pd

TOPICS = [
    "python", "guitar", "chess", "spanish", "cooking", "swimming", "calculus", "photography",
    "piano", "yoga", "painting", "running", "java", "french", "knitting", "chemistry",
    "gardening", "poker", "drawing", "surfing", "physics", "baking", "tennis", "german",
    "golf", "rust", "history", "singing", "boxing", "economics",
]
TEMPLATES = [
    "how do i learn {t} ?",
    "what is the best way to learn {t} ?",
    "how can i get better at {t} quickly ?",
    "any tips for a beginner in {t} ?",
    "where should i start with {t} ?",
]


def make_corpus(n_topics: int = 30, seed: int = 0, distractors: int = 10) -> pd.DataFrame:
    """Clusters of template paraphrases, one cluster per topic, plus unclustered distractors.

    Every cluster uses the same templates, so only the topic word tells clusters apart: a model
    must learn which words matter. Splits are assigned 80:10:10 by cluster with ``seed``.
    """
    rng = np.random.default_rng(seed)
    rows = []
    topics = TOPICS[:n_topics]
    order = rng.permutation(len(topics))
    n_train = int(round(0.8 * len(topics)))
    n_val = int(round(0.1 * len(topics)))
    split_of = {}
    for rank, t in enumerate(order):
        split_of[topics[t]] = "train" if rank < n_train else "val" if rank < n_train + n_val else "test"
    for topic in topics:
        for template in TEMPLATES:
            rows.append((template.format(t=topic), f"c-{topic}", split_of[topic]))
    for i in range(distractors):
        rows.append((f"is number {i} a lucky number ?", None, "none"))
    corpus = pd.DataFrame(rows, columns=["question", "cluster", "split"])
    corpus.insert(0, "qid", np.arange(1, len(corpus) + 1, dtype="int64"))
    corpus["cluster"] = corpus["cluster"].astype("string")
    return corpus
