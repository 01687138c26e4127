"""Distant supervision: paraphrase clusters from question -> answer logs (paper section 4.2).

Questions answered by the same answer form a cluster; clusters whose questions share few words
(a generic answer such as "three" collecting unrelated questions) are filtered by coherence; the
kept clusters are split 80:10:10 into a corpus that ``qpr.training.train`` reads. Logs come from
``qpr.data.qalogs`` (columns ``question`` and ``answers``, a list per question).

Decisions, each for a reason:
- Identical questions (the same tokens, so the same input to the encoder) are one question, whose
  answers are the union of theirs: the encoder could not tell the copies apart anyway.
- A question with several answers can sit in only one cluster of the corpus, so either it joins
  their clusters (``multi_answer="join"``: clusters are the connected components of the
  question-answer graph; right when a record lists several correct answers, as InsuranceQA does)
  or it goes in no cluster (``"exclude"``: right when the log answered the same question
  differently on different occasions, where joining chains unrelated answers together).
- Questions in no cluster (one question per component) and those of filtered clusters stay in
  the corpus with cluster <NA> and split "none": they are real questions the index should hold,
  and they act as distractors at evaluation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from qpr.data.corpus import COLUMNS, split_clusters
from qpr.data.coherence import cluster_coherence
from qpr.errors import QPRError
from qpr.model.text import tokenize, words

DEFAULT_MIN_COHERENCE = 0.1
THRESHOLDS = (0.0, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5)
MULTI_ANSWER = ("join", "exclude")
NAME_CHARS = 60  # of a cluster's name: its first question, shortened


def normalise_answer(answer: str) -> str:
    """The grouping key of an answer: its lowercased word tokens, space-joined ("Three." -> "three")."""
    return " ".join(words(answer))


def group_by_answer(log: pd.DataFrame, multi_answer: str = "join") -> tuple[pd.DataFrame, pd.Series, dict]:
    """Unique questions of ``log`` (columns question, answers) clustered by shared answers.

    A question with several answers joins their clusters or stays out of all (``multi_answer``
    "join" | "exclude", see the module doc). Returns the corpus (qid 1..N in log order, cluster =
    named by its first question, ``cluster_name``; <NA> for a question alone in its component;
    split "none"),
    each question's normalised answers, and counts of what was dropped or merged on the way.
    """
    has_tokens = log["question"].map(lambda q: bool(tokenize(q)))
    rows = log[has_tokens]
    if rows.empty:
        raise QPRError("the log has no questions with words in them")
    key = rows["question"].map(lambda q: " ".join(tokenize(q)))
    answers = rows["answers"].map(lambda items: [a for a in map(normalise_answer, items) if a])
    grouped = pd.DataFrame({"key": key, "question": rows["question"], "answers": answers}).groupby("key", sort=False)
    unique = pd.DataFrame({
        "question": grouped["question"].first(),
        "answers": grouped["answers"].agg(lambda lists: sorted({a for items in lists for a in items})),
    }).reset_index(drop=True)
    unique.insert(0, "qid", np.arange(1, len(unique) + 1, dtype="int64"))

    several = unique["answers"].map(len) > 1
    linked = unique if multi_answer == "join" else unique[~several]
    edges = linked[["qid", "answers"]].explode("answers").dropna()
    answer_codes, linked_answers = pd.factorize(edges["answers"])
    n, m = len(unique), len(linked_answers)
    # Bipartite graph: nodes 0..n-1 are questions, n..n+m-1 answers.
    graph = coo_matrix((np.ones(len(edges)), (edges["qid"].to_numpy() - 1, n + answer_codes)), shape=(n + m, n + m))
    _, component = connected_components(graph, directed=False)
    component = component[:n]
    sizes = np.bincount(component)[component]
    first = unique.groupby(component)["qid"].transform("min")
    label = pd.Series([cluster_name(unique["question"].iloc[q - 1], q) for q in first], index=unique.index)
    unique["cluster"] = pd.array(label.where(sizes >= 2), dtype="string")
    unique["split"] = "none"
    counts = {
        "log_rows": int(len(log)),
        "empty_questions": int((~has_tokens).sum()),
        "duplicate_questions": int(len(rows) - len(unique)),
        "questions": int(len(unique)),
        "questions_without_answer": int((unique["answers"].map(len) == 0).sum()),
        "questions_with_several_answers": int(several.sum()),
        "answers": len({a for items in unique["answers"] for a in items}),
    }
    return unique[COLUMNS], unique.set_index("qid")["answers"], counts


def cluster_name(question: str, qid: int, width: int = NAME_CHARS) -> str:
    """A cluster's name as people read it: its first question (shortened to ``width`` characters
    at a word), and that question's id, which keeps two names with the same start apart."""
    text = " ".join(question.split())
    if len(text) > width:
        text = text[:width].rsplit(" ", 1)[0] + "…"
    return f"{text} (#{qid})"


def cluster_table(corpus: pd.DataFrame, answers: pd.Series) -> pd.DataFrame:
    """One row per cluster of ``corpus``: cluster, size, coherence, its answers (" | "-joined)
    and its questions (a list, in qid order)."""
    members = corpus[corpus["cluster"].notna()].groupby("cluster", sort=False)
    questions = members["question"].agg(list)
    table = pd.DataFrame({
        "size": questions.map(len),
        "coherence": questions.map(cluster_coherence),
        "answers": members["qid"].agg(lambda qids: " | ".join(sorted({a for q in qids for a in answers[q]}))),
        "questions": questions,
    })
    # Typed explicitly so that a log without any cluster still gives a usable (empty) table.
    return table.astype({"size": "int64", "coherence": "float64"}).rename_axis("cluster").reset_index()


def threshold_table(clusters: pd.DataFrame, thresholds: Sequence[float] = THRESHOLDS) -> pd.DataFrame:
    """How many clusters and clustered questions each coherence threshold keeps (c >= threshold)."""
    rows = []
    for threshold in thresholds:
        kept = clusters["coherence"] >= threshold
        rows.append({"min_coherence": threshold, "clusters_kept": int(kept.sum()),
                     "questions_kept": int(clusters.loc[kept, "size"].sum())})
    return pd.DataFrame(rows)


@dataclass
class Supervision:
    """What distant supervision made of a log.

    ``corpus``: every unique question (COLUMNS), clusters of kept answers split 80:10:10.
    ``clusters``: every cluster before filtering (``cluster_table``), with ``kept`` and the
    ``split`` it went to (<NA> when removed). ``counts``: questions read, dropped, merged, leaked.
    """

    corpus: pd.DataFrame
    clusters: pd.DataFrame
    counts: dict
    min_coherence: float
    multi_answer: str
    seed: int


def supervise(
    log: pd.DataFrame, min_coherence: float = DEFAULT_MIN_COHERENCE, seed: int = 0, multi_answer: str = "join"
) -> Supervision:
    """Clusters from a log: group by answer, drop clusters with coherence < ``min_coherence``,
    split the rest with ``qpr.data.corpus.split_clusters(seed)`` (which also removes val/test questions
    whose text occurs in train)."""
    if not 0.0 <= min_coherence <= 1.0:
        raise QPRError(f"min_coherence must be between 0 and 1 (coherence is a share), got {min_coherence}")
    if multi_answer not in MULTI_ANSWER:
        raise QPRError(f"multi_answer must be one of {', '.join(MULTI_ANSWER)}, got {multi_answer!r}")
    corpus, answers, counts = group_by_answer(log, multi_answer)
    clusters = cluster_table(corpus, answers)
    clusters["kept"] = clusters["coherence"] >= min_coherence
    removed = corpus["cluster"].isin(clusters.loc[~clusters["kept"], "cluster"])
    corpus["cluster"] = corpus["cluster"].mask(removed)
    split = split_clusters(corpus, seed)
    counts["leaked_questions_removed"] = int(len(corpus) - len(split))
    split_of = split[split["cluster"].notna()].groupby("cluster")["split"].first()
    clusters["split"] = pd.array(clusters["cluster"].map(split_of), dtype="string")
    return Supervision(split, clusters, counts, min_coherence, multi_answer, seed)
