"""Asymmetric search: the corpus encoded once by the teacher, queries by the fast student.

A student distilled from MiniLM (the general CNN, the static student) regresses into MiniLM's
space, so its vector of a query can be scored against MiniLM's vector of a corpus question as
well as against its own. An asymmetric bundle scores a query ``q`` against a corpus question
``c`` by ``(1 - w) cos(s_q, s_c) + w cos(s_q, m_c)`` (``s``: the student's unit vectors, ``m``:
the teacher's). Both sides are stored as one unit vector: the corpus row
``[sqrt(1 - w) s_c, sqrt(w) m_c]`` and the query ``[sqrt(1 - w) s_q, sqrt(w) s_q]``, whose inner
product is that score and whose squared distance is ``2 - 2 * score``; so the index, the hybrid's
features and every retriever over the bundle work on them unchanged.

Measured (issue 58; one seed, leave-one-domain-out over the seven domains of
docs/OUT_OF_DOMAIN.md): a static student scored this way with ``w`` = 0.5 reached mean H@1 0.686
where it reached 0.672 alone and MiniLM 0.712. Without labels, ``choose_weight`` keeps the weight
whose ranking agrees most with the teacher's own nearest corpus question (as
``qpr.retrieval.fusion_choice`` chooses a fusion); the reference is the teacher itself, so it
leans to larger weights, which bench/out_of_domain.py's ``asymmetric`` stage measures against the
labels.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qpr.errors import QPRError
from qpr.retrieval.fusion_choice import SAMPLE, reference_neighbours

WEIGHTS = (0.0, 0.25, 0.5, 0.75, 1.0)  # the teacher's share of the score that ``choose_weight`` compares
MEASURED = 0.5  # the weight issue 58's probe measured; ties are broken towards it
CHUNK = 4096  # corpus rows scored at once by ``choose_weight`` (bounds its memory at any corpus size)


def _check(student: np.ndarray, teacher: np.ndarray | None, weight: float) -> None:
    if not 0.0 <= weight <= 1.0:
        raise QPRError(f"the teacher's weight must be in [0, 1], got {weight}")
    if teacher is not None and teacher.shape != student.shape:
        raise QPRError(f"the teacher's vectors have shape {teacher.shape}, the student's {student.shape}: "
                       "an asymmetric bundle needs one teacher vector of the student's width per corpus question")


def unit(vectors: np.ndarray) -> np.ndarray:
    """``vectors``' rows at unit length (a distilled student's already are; a zero row stays zero)."""
    vectors = np.asarray(vectors, dtype=np.float32)
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


def corpus_side(student: np.ndarray, teacher: np.ndarray, weight: float) -> np.ndarray:
    """The index rows of corpus questions: their student and teacher unit vectors, weighted (module doc)."""
    _check(student, teacher, weight)
    return np.ascontiguousarray(np.hstack([np.sqrt(1.0 - weight) * unit(student), np.sqrt(weight) * unit(teacher)]), dtype=np.float32)


def query_side(student: np.ndarray, weight: float) -> np.ndarray:
    """The search vectors of queries: their student unit vectors, twice, weighted (module doc)."""
    _check(student, None, weight)
    student = unit(student)
    return np.ascontiguousarray(np.hstack([np.sqrt(1.0 - weight) * student, np.sqrt(weight) * student]), dtype=np.float32)


@dataclass(frozen=True)
class WeightChoice:
    """The weight ``choose_weight`` kept and each weight's agreement with the reference."""

    weight: float
    agreement: dict[str, float]
    questions: int

    def to_dict(self) -> dict:
        return {"chosen": self.weight, "agreement_at_1": self.agreement, "questions": self.questions,
                "reference": "the teacher's nearest corpus question"}


def choose_weight(student: np.ndarray, teacher: np.ndarray, weights: tuple[float, ...] = WEIGHTS, sample: int = SAMPLE,
                  seed: int = 0) -> WeightChoice:
    """Of ``weights``, the one under which the first corpus question (other than itself) of
    ``sample`` corpus questions, searched with their student vectors, is most often the
    teacher's nearest corpus question to it; ties go to the weight nearest ``MEASURED``. A corpus
    under 2 questions keeps ``MEASURED``, compared with nothing. Exact scores, corpus in chunks."""
    _check(student, teacher, MEASURED)
    if len(student) < 2:
        return WeightChoice(MEASURED, {}, 0)
    rows = np.random.default_rng(seed).permutation(len(student))[: min(sample, len(student))]
    student, teacher = unit(student), unit(teacher)
    neighbours = reference_neighbours(teacher, rows)
    queries = student[rows]
    best = {w: (np.full(len(rows), -np.inf), np.zeros(len(rows), dtype=np.int64)) for w in weights}
    for start in range(0, len(student), CHUNK):
        own, taught = queries @ student[start:start + CHUNK].T, queries @ teacher[start:start + CHUNK].T
        itself = rows[:, None] == np.arange(start, start + own.shape[1])[None, :]
        for w, (top, where) in best.items():
            scores = np.where(itself, -np.inf, (1.0 - w) * own + w * taught)
            found = scores.argmax(axis=1)
            better = scores[np.arange(len(rows)), found] > top
            top[better], where[better] = scores[np.arange(len(rows)), found][better], start + found[better]
    agreement = {str(w): float((where == neighbours).mean()) for w, (_, where) in best.items()}
    chosen = max(weights, key=lambda w: (agreement[str(w)], -abs(w - MEASURED)))
    return WeightChoice(chosen, agreement, len(rows))
