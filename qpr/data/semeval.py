"""The reranking protocol on SemEval-2016 Task 3 subtask B (question-question, Qatar Living).

Each original question comes with 10 related forum questions that a search engine returned, in
``RELQ_RANKING_ORDER``, each labelled PerfectMatch / Relevant / Irrelevant against it (the first
two count as relevant). A system scores the 10 and is judged by P@1, P@5, MAP and MRR of its order
(``qpr.evaluation.ranking``), the protocol of the AskUbuntu paper, whose own data is not available.
The search engine's order and BM25 are the baselines.

``read_semeval`` gives one row per (original, related) pair; a question's text is its subject and
body joined. ``rerank`` scores a frame with any pair scorer.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Callable, Sequence

import bm25s
import numpy as np
import pandas as pd

from qpr.data.corpus import data_dir
from qpr.errors import QPRError
from qpr.evaluation.ranking import auc_at_fpr, rerank_by_scores
from qpr.model.text import words

FOLDER = "reranking/semeval2016-task3-ql"
FILES = {"dev": "SemEval2016-Task3-CQA-QL-dev.xml", "train-part2": "SemEval2016-Task3-CQA-QL-train-part2.xml"}
RELEVANT = ("PerfectMatch", "Relevant")
COLUMNS = ["org_id", "org_text", "rel_id", "rel_text", "engine_rank", "label", "relevant"]

PairScorer = Callable[[Sequence[str], Sequence[str]], np.ndarray]


def _text(node: ET.Element, subject: str, body: str) -> str:
    parts = [(node.findtext(subject) or "").strip(), (node.findtext(body) or "").strip()]
    return " ".join(p for p in parts if p)


def read_semeval(path: str | Path) -> pd.DataFrame:
    """One row per (original question, related question) of a SemEval-2016 Task 3 QL XML file,
    in file order, with the columns ``COLUMNS``."""
    path = Path(path)
    if not path.is_file():
        raise QPRError(f"{path}: no such file")
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as err:
        raise QPRError(f"{path}: not readable XML ({err})") from err
    rows = []
    for org in root.iter("OrgQuestion"):
        org_text = _text(org, "OrgQSubject", "OrgQBody")
        for rel in org.iter("RelQuestion"):
            label = rel.get("RELQ_RELEVANCE2ORGQ")
            rank = rel.get("RELQ_RANKING_ORDER")
            if label is None or rank is None:
                raise QPRError(f"{path}: RelQuestion {rel.get('RELQ_ID')} lacks RELQ_RELEVANCE2ORGQ or RELQ_RANKING_ORDER")
            rows.append((org.get("ORGQ_ID"), org_text, rel.get("RELQ_ID"), _text(rel, "RelQSubject", "RelQBody"),
                         int(rank), label, label in RELEVANT))
    if not rows:
        raise QPRError(f"{path}: no OrgQuestion with RelQuestion elements")
    return pd.DataFrame(rows, columns=COLUMNS)


def load_semeval(part: str = "dev") -> pd.DataFrame:
    """A part of the shared SemEval-2016 QL data (``FILES``: dev, train-part2) from ``data_dir()``."""
    if part not in FILES:
        raise QPRError(f"unknown SemEval part {part!r}; use one of {', '.join(FILES)}")
    return read_semeval(data_dir() / FOLDER / FILES[part])


def queries(frame: pd.DataFrame) -> list[np.ndarray]:
    """Row positions of each original question's candidates, originals in first-seen order."""
    codes, _ = pd.factorize(frame["org_id"])
    return [np.flatnonzero(codes == c) for c in range(codes.max() + 1)]


def rerank(frame: pd.DataFrame, scores: np.ndarray, empty: str = "zero") -> dict:
    """P@1 / P@5 / MAP / MRR when each original's candidates are ordered by ``scores`` (one per
    row, higher first). Candidates are first put in the engine's order, so ties keep it."""
    scores = np.asarray(scores, dtype=float)
    if len(scores) != len(frame):
        raise QPRError(f"{len(scores)} scores for {len(frame)} pairs")
    relevant = frame["relevant"].to_numpy()
    engine = frame["engine_rank"].to_numpy()
    lists, flags = [], []
    for rows in queries(frame):
        rows = rows[np.argsort(engine[rows], kind="stable")]
        lists.append(scores[rows])
        flags.append(relevant[rows])
    return rerank_by_scores(lists, flags, empty=empty)


def engine_scores(frame: pd.DataFrame) -> np.ndarray:
    """The search engine's order as scores (rank 1 scores highest)."""
    return -frame["engine_rank"].to_numpy(dtype=float)


def bm25_scores(frame: pd.DataFrame, collection: Sequence[str] | None = None) -> np.ndarray:
    """BM25 (bm25s defaults, word tokens) of each original against its related question. Term
    statistics come from ``collection`` (default: every distinct related question of ``frame``),
    as a search engine's index would give them; 10 candidates alone would make IDF meaningless."""
    docs = list(dict.fromkeys(collection if collection is not None else frame["rel_text"]))
    position = {text: i for i, text in enumerate(docs)}
    missing = set(frame["rel_text"]) - position.keys()
    if missing:
        raise QPRError(f"{len(missing)} related questions are not in the BM25 collection")
    model = bm25s.BM25()
    model.index([words(d) or ["<empty>"] for d in docs], show_progress=False)
    out = np.zeros(len(frame))
    for rows in queries(frame):
        known = model.get_tokens_ids(words(frame["org_text"].iloc[rows[0]]))
        if known:
            every = model.get_scores_from_ids(known)
            out[rows] = every[[position[t] for t in frame["rel_text"].iloc[rows]]]
    return out


def pair_scores(frame: pd.DataFrame, scorer: PairScorer) -> np.ndarray:
    """``scorer(originals, related)`` over the frame's pairs (higher: more alike)."""
    return np.asarray(scorer(frame["org_text"].tolist(), frame["rel_text"].tolist()), dtype=float)


def pair_auc05(frame: pd.DataFrame, scores: np.ndarray) -> float:
    """AUC(0.05) of ``scores`` as a relevant-pair detector over all pairs (the transfer protocol)."""
    return auc_at_fpr(frame["relevant"].astype(int).to_numpy(), scores)
