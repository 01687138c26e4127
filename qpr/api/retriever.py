"""``qpr.Retriever``: a trained paraphrase retriever for use inside another program (a FAQ bot, a
deduplication job), with nothing of the app or the annotation store.

    from qpr import Retriever
    retriever = Retriever.load("bundles/demo")          # a bundle folder, or a Hub repo id "owner/name"
    retriever.search("how do I renew my passport?", k=5)  # list[Hit]; a list of queries -> one list each
    retriever.encode(["a question"])                      # float32 array, one row per text
    retriever.add(["a new question"])                     # searchable at once, no retraining
    retriever.save("bundles/grown")                       # a bundle folder, ready for `qpr push`

Searches run through the same retrievers the app serves (``qpr.serving.served_model``): by
default the bundle's served retriever (the hybrid of encoder and BM25 when the bundle carries a
fitted fusion, as ``qpr train`` writes it), or on request the encoder alone or BM25 alone.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Literal, Sequence

import numpy as np
import pandas as pd

from qpr.bundles.bundle import Bundle, serving_retriever
from qpr.bundles.hub import load_bundle, push
from qpr.errors import QPRError
from qpr.retrieval.base import Hit
from qpr.retrieval.base import Retriever as Searcher

Method = Literal["served", "dense", "bm25"]
METHODS = ("served", "dense", "bm25")


class Retriever:
    """A bundle (encoder, index, corpus) and the ways to search it; load one with ``Retriever.load``."""

    def __init__(self, bundle: Bundle) -> None:
        self.bundle = bundle
        self._searchers: dict[str, Searcher] = {}

    @classmethod
    def load(cls, name: str | Path) -> "Retriever":
        """The bundle in the folder ``name``, or in the Hugging Face Hub model repository ``name``
        (``owner/name``: downloaded once into the Hub cache; ``HF_HUB_OFFLINE=1`` reads only that
        cache). QPRError saying what is missing or wrong."""
        return cls(load_bundle(name))

    @property
    def version(self) -> str:
        """The bundle's version (creation time and a digest of its weights)."""
        return self.bundle.version

    @property
    def corpus(self) -> pd.DataFrame:
        """The questions searched: columns qid, question, cluster, split (a copy)."""
        return self.bundle.corpus.copy()

    def search(self, queries: str | Sequence[str], k: int = 10,
               method: Method = "served") -> list[Hit] | list[list[Hit]]:
        """The ``k`` corpus questions nearest in meaning to ``queries``: a list of ``Hit`` (rank,
        qid, question, cluster, distance; lower distance is nearer) for one query, one such list
        per query for a list of them. ``method``: ``"served"`` (default: the hybrid, or the encoder
        where the bundle has no fitted fusion), ``"dense"`` (the encoder alone) or ``"bm25"``.
        QPRError for an empty query, a bad ``k`` or ``method``."""
        return self._searcher(method).search(queries, k)

    def encode(self, texts: str | Sequence[str]) -> np.ndarray:
        """The encoder's float32 vectors of ``texts``, shape ``(len(texts), dim)`` (one row for one
        text): the vectors its index holds for the corpus."""
        if self.bundle.lexical:
            raise QPRError("this bundle has no encoder yet (BM25 alone): train one with `qpr train`")
        return self.bundle.encode([texts] if isinstance(texts, str) else list(texts))

    def add(self, questions: Sequence[str], clusters: Sequence[str | None] | None = None) -> list[int]:
        """Add ``questions`` to the corpus, searchable at once without retraining (only they are
        encoded); ``clusters`` gives each one's cluster (None: in no cluster). Returns their new
        qids. QPRError names empty or malformed questions; nothing is added then."""
        questions = [questions] if isinstance(questions, str) else list(questions)
        clusters = [None] * len(questions) if clusters is None else list(clusters)
        if len(clusters) != len(questions):
            raise QPRError(f"add: {len(questions)} questions but {len(clusters)} clusters; give one cluster per question")
        first = int(self.bundle.corpus["qid"].max()) + 1 if len(self.bundle.corpus) else 1
        qids = list(range(first, first + len(questions)))
        rows = pd.DataFrame({"qid": qids, "question": questions, "cluster": clusters, "split": "none"})
        if self.bundle.lexical:
            self.bundle = Bundle.lexical_of(pd.concat([self.bundle.corpus, rows], ignore_index=True),
                                            self.bundle.manifest.data or "")
        else:
            self.bundle = self.bundle.with_questions(rows, "add")
        self._searchers = {}
        return qids

    def save(self, path: str | Path) -> Path:
        """Write the bundle to the folder ``path`` (new, or a bundle it replaces atomically), with
        its weights in safetensors and a model card: ready for ``push`` or ``qpr push``."""
        return self.bundle.save(path)

    def push(self, repo: str, private: bool = False) -> str:
        """Upload this bundle to the Hub model repository ``repo`` (``owner/name``; a token from
        ``huggingface-cli login`` or ``HF_TOKEN``); returns the commit's URL."""
        with tempfile.TemporaryDirectory(prefix="qpr-retriever-") as tmp:
            return push(self.save(Path(tmp) / "bundle"), repo, private)

    def _searcher(self, method: str) -> Searcher:
        if method not in METHODS:
            raise QPRError(f"method {method!r}: choose one of {', '.join(METHODS)}")
        if method not in self._searchers:
            bm25 = self._searchers.get("bm25") or self.bundle.bm25
            self._searchers["bm25"] = bm25
            if method == "dense":
                if self.bundle.lexical:
                    raise QPRError("this bundle has no encoder yet (BM25 alone): search it with method='bm25'")
                self._searchers["dense"] = self.bundle.dense_retriever()
            elif method == "served":
                self._searchers["served"] = serving_retriever(self.bundle, bm25)
        return self._searchers[method]
