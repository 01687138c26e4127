"""SQuAD v1.1 as paragraph retrieval (the IDF-weighted-embedding paper's protocol): every question
of the dev file retrieves its paragraph among all 2,067 dev paragraphs; recall@1/2/5/10/20/50
and their mean. Training uses the 44 train articles in ``qa-logs/squad-v1.1-train-partial``
(no article overlaps dev)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from qpr.data.corpus import data_dir
from qpr.errors import QPRError
from qpr.data.qalogs import _load_json

DEV = "qa-logs/squad-v1.1-dev/dev-v1.1.json"
TRAIN = "qa-logs/squad-v1.1-train-partial/train-44-articles-v1.1.json"


def squad_paragraphs(path: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(paragraphs: ``pid, title, context``; questions: ``question, pid``) of a SQuAD v1.1 file,
    paragraphs numbered 0..P-1 in file order."""
    path = Path(path)
    payload = _load_json(path)
    paragraphs, questions = [], []
    try:
        for article in payload["data"]:
            for paragraph in article["paragraphs"]:
                pid = len(paragraphs)
                paragraphs.append((pid, article["title"], paragraph["context"]))
                questions.extend((qa["question"], pid) for qa in paragraph["qas"])
    except (KeyError, TypeError) as err:
        raise QPRError(f"{path}: not a SQuAD v1.1 file (missing {err})") from err
    if not questions:
        raise QPRError(f"{path}: no questions")
    return (pd.DataFrame(paragraphs, columns=["pid", "title", "context"]),
            pd.DataFrame(questions, columns=["question", "pid"]))


def load_squad(part: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``"dev"`` or ``"train-partial"`` from ``data_dir()``."""
    files = {"dev": DEV, "train-partial": TRAIN}
    if part not in files:
        raise QPRError(f"unknown SQuAD part {part!r}; use one of {', '.join(files)}")
    return squad_paragraphs(data_dir() / files[part])
