"""The shared question sets as domains: one corpus each (``qpr.data.corpus.COLUMNS``), for training a
general encoder on several of them and measuring it on one it never saw (leave-one-domain-out,
``bench/out_of_domain.py``).

What a cluster is differs by domain, and says how close a "hit" is to a paraphrase:

- ``quora-lite``: duplicate-question clusters, the canonical split (``split.tsv``);
- ``wikianswers``: connected components of the Paralex paraphrase pairs (all three files);
- ``banking77``: one intent (train + test files), served by one answer;
- ``insuranceqa``, ``covid-faq``: questions answered by the same answer (distant supervision,
  ``qpr.data.supervise``, with the settings docs/DISTANT_SUPERVISION.md chose for each log);
- ``squad``: questions asked about the same SQuAD dev paragraph (topical, not paraphrases);
- ``semeval2016``: an original Qatar Living question and its related questions labelled
  PerfectMatch or Relevant (both files).

Every domain but Quora-lite is split 80:10:10 by cluster with ``qpr.data.corpus.split_clusters``. Large
domains are capped at ``max_questions`` by sampling whole clusters (``cap_corpus``), so that a
benchmark can encode them with a transformer on a CPU.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from qpr.data.corpus import COLUMNS, data_dir, load_corpus, split_clusters
from qpr.errors import QPRError
from qpr.data.qalogs import read_log
from qpr.data.semeval import load_semeval
from qpr.data.squad import load_squad
from qpr.data.supervise import supervise


def numbered_corpus(questions: pd.Series, clusters: pd.Series) -> pd.DataFrame:
    """A corpus (split "none") of one row per distinct question text; a text found in several
    clusters keeps its first. Clusters of one question become <NA>."""
    frame = pd.DataFrame({"question": questions.astype(str).str.strip(), "cluster": clusters.astype("string")})
    frame = frame[frame["question"] != ""].drop_duplicates("question").reset_index(drop=True)
    sizes = frame.groupby("cluster")["question"].transform("size")
    frame["cluster"] = frame["cluster"].mask(sizes < 2)
    frame.insert(0, "qid", np.arange(1, len(frame) + 1, dtype="int64"))
    frame["split"] = "none"
    return frame[COLUMNS]


def _banking77() -> pd.DataFrame:
    folder = data_dir() / "intents" / "banking77"
    frame = pd.concat([pd.read_csv(folder / name) for name in ("train.csv", "test.csv")], ignore_index=True)
    return numbered_corpus(frame["text"], frame["category"])


def _supervised(preset: str, min_coherence: float, multi_answer: str) -> Callable[[], pd.DataFrame]:
    def load() -> pd.DataFrame:
        corpus = supervise(read_log(preset=preset), min_coherence, 0, multi_answer).corpus
        return corpus.assign(split="none")  # re-split below, like every other domain
    return load


def _squad() -> pd.DataFrame:
    _, questions = load_squad("dev")
    return numbered_corpus(questions["question"], questions["pid"].astype(str))


def _semeval() -> pd.DataFrame:
    frame = pd.concat([load_semeval(part) for part in ("dev", "train-part2")], ignore_index=True)
    originals = frame.drop_duplicates("org_id")
    texts = pd.concat([originals["org_text"], frame["rel_text"]], ignore_index=True)
    clusters = pd.concat([originals["org_id"], frame["org_id"].where(frame["relevant"])], ignore_index=True)
    return numbered_corpus(texts, clusters)


def _wikianswers() -> pd.DataFrame:
    folder = data_dir() / "wikianswers"
    pairs = pd.concat([pd.read_csv(folder / f"{part}.tsv", sep="\t", header=None, names=["a", "b"], dtype=str,
                                   keep_default_na=False, quoting=3) for part in ("train", "val", "test")])
    texts, codes = np.unique(np.concatenate([pairs["a"].to_numpy(), pairs["b"].to_numpy()]), return_inverse=True)
    n = len(texts)
    graph = coo_matrix((np.ones(len(pairs)), (codes[: len(pairs)], codes[len(pairs):])), shape=(n, n))
    _, component = connected_components(graph, directed=False)
    return numbered_corpus(pd.Series(texts), pd.Series(component).astype(str))


def _quora() -> pd.DataFrame:
    return load_corpus(data_dir() / "quora-lite")


LOADERS: dict[str, Callable[[], pd.DataFrame]] = {
    "banking77": _banking77,
    "insuranceqa": _supervised("insuranceqa-v2", 0.1, "join"),
    "covid-faq": _supervised("covid-faq", 0.1, "exclude"),
    "squad": _squad,
    "semeval2016": _semeval,
    "wikianswers": _wikianswers,
    "quora-lite": _quora,
}
DOMAINS = tuple(LOADERS)
# Domains whose split is given with the data; the others are split here.
CANONICAL_SPLIT = ("quora-lite",)
# Questions kept per domain by default (``domain_cap``): enough for thousands of queries, few
# enough that a transformer encodes a domain in minutes on a CPU (MiniLM: ~35 questions/s on a
# loaded core); the two largest sets lower still.
MAX_QUESTIONS = 12_000
SMALLER_CAPS = {"wikianswers": 6_000, "quora-lite": 6_000}
# Further questions per domain, beyond its cap, that a general encoder distils on (``extra_questions``).
EXTRA_QUESTIONS = 40_000


def domain_cap(name: str) -> int:
    """The default number of questions kept of domain ``name``."""
    return SMALLER_CAPS.get(name, MAX_QUESTIONS)


def cap_corpus(corpus: pd.DataFrame, max_questions: int, seed: int = 0) -> pd.DataFrame:
    """At most about ``max_questions`` rows of ``corpus``: whole clusters drawn at random (so no
    cluster loses members) and unclustered questions in their original share. Unchanged if
    already small enough."""
    if max_questions < 1:
        raise QPRError(f"max_questions must be at least 1, got {max_questions}")
    if len(corpus) <= max_questions:
        return corpus
    rng = np.random.default_rng(seed)
    clustered = corpus["cluster"].notna()
    budget = int(round(max_questions * clustered.mean()))
    sizes = corpus[clustered].groupby("cluster")["qid"].size()
    order = sizes.index.to_numpy()[rng.permutation(len(sizes))]
    kept = order[: np.searchsorted(sizes[order].cumsum().to_numpy(), budget, side="right")]
    loose = np.flatnonzero(~clustered.to_numpy())
    loose = rng.choice(loose, min(len(loose), max_questions - int(sizes[kept].sum())), replace=False)
    keep = corpus["cluster"].isin(kept).to_numpy().copy()
    keep[loose] = True
    return corpus[keep].reset_index(drop=True)


def load_domain(name: str, max_questions: int | None = None, seed: int = 0) -> pd.DataFrame:
    """The corpus of domain ``name`` (``DOMAINS``), capped (``cap_corpus``) and split."""
    if name not in LOADERS:
        raise QPRError(f"unknown domain {name!r}; use one of {', '.join(DOMAINS)}")
    corpus = LOADERS[name]()
    if max_questions is not None:
        corpus = cap_corpus(corpus, max_questions, seed)
    return corpus if name in CANONICAL_SPLIT else split_clusters(corpus, seed)


def extra_questions(name: str, max_questions: int = EXTRA_QUESTIONS, seed: int = 0) -> pd.DataFrame:
    """Up to ``max_questions`` rows of domain ``name`` that its capped corpus (``domain_cap``)
    leaves out, drawn at random: unlabelled material for distillation (a general encoder gains from
    more questions than a benchmark can afford to search with a transformer), never a question of
    the capped corpus that the benchmark searches and queries."""
    capped = load_domain(name, domain_cap(name), seed)
    full = LOADERS[name]()
    rest = full[~full["question"].isin(set(capped["question"]))]
    return rest.sample(min(max_questions, len(rest)), random_state=seed).reset_index(drop=True)


def domain_queries(corpus: pd.DataFrame, name: str, max_queries: int, seed: int = 0) -> pd.DataFrame:
    """The questions that query a left-out domain: every question of a cluster of 2+ (the domain
    is unseen, so all its clusters are held out), except on domains with a canonical split, where
    only its ``test`` clusters are (a model trained on that domain's train split is compared
    there). At most ``max_queries``, drawn at random."""
    clustered = corpus[corpus["cluster"].notna()]
    sizes = clustered.groupby("cluster")["qid"].transform("size")
    queries = clustered[sizes >= 2]
    if name in CANONICAL_SPLIT:
        queries = queries[queries["split"] == "test"]
    if queries.empty:
        raise QPRError(f"domain {name!r} has no clusters of 2+ questions to query")
    return queries.sample(min(max_queries, len(queries)), random_state=seed) if len(queries) > max_queries else queries
