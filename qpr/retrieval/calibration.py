"""Scores people can read: a retriever's distance as the probability that a retrieved question
means the same as the query.

Each retriever ranks by its own distance (squared Euclidean for the encoder, minus the BM25 score,
minus the fitted score for the hybrid); none of these says how alike two questions are. A
one-feature logistic regression (Platt scaling) fitted on the held-out val clusters maps a
distance to the probability that the retrieved question is in the query's cluster, so all three
retrievers are shown on the same scale: 0 to 1, higher = more alike. The probability is "as
judged by the clusters": where clusters miss paraphrases (the false negatives annotation looks
for), it is low for them too.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.special import expit
from sklearn.linear_model import LogisticRegression

from qpr.errors import QPRError
from qpr.evaluation.metrics import TOP
from qpr.fsutil.atomic import atomic_path

MAX_QUERIES = 500  # val queries sampled for the fit: enough for two parameters, cheap at start-up


@dataclass(frozen=True)
class Calibration:
    """``probability(d) = sigmoid(slope * -d + intercept)`` with ``slope > 0``: a smaller distance
    never gives a lower probability. ``pairs`` is how many (query, retrieved) pairs it was fitted on."""

    slope: float
    intercept: float
    pairs: int

    def probability(self, distances) -> np.ndarray:
        return expit(self.slope * -np.asarray(distances, dtype=float) + self.intercept)


def calibrate(retriever, corpus: pd.DataFrame, split: str = "val", max_queries: int = MAX_QUERIES,
              seed: int = 0) -> Calibration | None:
    """The ``Calibration`` of ``retriever`` (anything with ``search_ids``) on the top ``TOP`` of up to
    ``max_queries`` clustered ``split`` questions of ``corpus`` (the query itself left out), or None
    where that cannot be fitted: no such queries, only hits or only misses, or a fit in which a
    larger distance would mean more alike."""
    queries = corpus[(corpus["split"] == split) & corpus["cluster"].notna()]
    if queries.empty:
        return None
    queries = queries.sample(min(max_queries, len(queries)), random_state=seed)
    cluster_of = pd.Series(corpus["cluster"].astype(object).where(corpus["cluster"].notna(), None).to_numpy(),
                           index=corpus["qid"].to_numpy())
    distances, qids = retriever.search_ids(queries["question"].tolist(), TOP + 1)
    keep = (qids != queries["qid"].to_numpy()[:, None]) & (qids >= 0)
    same = cluster_of.reindex(qids.ravel()).to_numpy().reshape(qids.shape) == queries["cluster"].to_numpy()[:, None]
    x, y = -distances[keep].reshape(-1, 1).astype(float), same[keep].astype(int)
    if len(np.unique(y)) < 2:
        return None
    fit = LogisticRegression().fit(x, y)
    slope = float(fit.coef_[0, 0])
    return Calibration(slope, float(fit.intercept_[0]), int(len(y))) if slope > 0 else None


def kept_calibrations(folder: Path, key: str, retrievers: dict, corpus: pd.DataFrame) -> dict[str, Calibration | None]:
    """``calibrate(retriever, corpus)`` for each of ``retrievers`` (by name), fitted once per
    ``key`` and kept in ``folder/{key}.json``: the fit's searches (BM25's above all) took 20 s of
    a start at a million questions and grow with the corpus, while what they fit changes only
    with the corpus and the retrievers, which ``key`` must name. A file that cannot be read, or
    lacks a retriever, is fitted again."""
    path = Path(folder) / f"{key}.json"
    try:
        kept = json.loads(path.read_text())
        return {name: None if kept[name] is None else Calibration(**kept[name]) for name in retrievers}
    except (OSError, ValueError, KeyError, TypeError):
        pass
    fitted = {name: calibrate(retriever, corpus) for name, retriever in retrievers.items()}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(path) as tmp:
            tmp.write_text(json.dumps({name: None if c is None else asdict(c) for name, c in fitted.items()}))
    except (OSError, QPRError):
        pass  # a cache that cannot be written (atomic_path says so with a QPRError): fitted again next start
    return fitted
