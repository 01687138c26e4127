"""What to judge next: suspicious retrieved questions for a cluster, and which clusters to check.

A false negative is a retrieved question that means the same as the query but sits in another
cluster. The retriever has learned what the clusters say, so a question from another cluster that
it places closer to a cluster's members than the members are to each other is the likeliest kind
of false negative (or of an encoder error): that is what ``spot_check`` puts first.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from annotations.assign import assign
from annotations.errors import AnnotationError
from annotations.store import AnnotationStore
from qpr.retrieval.base import Retriever
from qpr.model.text import check_queries, words
from qpr.data.coherence import cluster_coherence

QUEUE_COLUMNS = ["query_qid", "query_text", "candidate_qid", "question", "cluster", "distance", "rank", "suspicion"]


def least_coherent(corpus: pd.DataFrame, n: int = 20) -> pd.DataFrame:
    """The ``n`` clusters (of 2+ questions) with the lowest word coherence (qpr.data.supervise), lowest
    first: clusters whose questions share few words are the likeliest to hold unrelated questions."""
    clustered = corpus[corpus["cluster"].notna()]
    groups = clustered.groupby("cluster", sort=True)["question"]
    table = pd.DataFrame({"size": groups.size(), "coherence": groups.agg(cluster_coherence)})
    table = table[table["size"] >= 2].rename_axis("cluster").reset_index()
    return table.sort_values(["coherence", "cluster"], kind="stable").head(n).reset_index(drop=True)


def spot_check(
    store: AnnotationStore,
    retriever: Retriever,
    corpus: pd.DataFrame,
    annotator: str,
    cluster: str | None = None,
    query_text: str | None = None,
    k: int = 20,
    overlap: int | None = None,
) -> pd.DataFrame:
    """Retrieved questions from other clusters to judge against ``cluster`` (or a typed query).

    For a cluster, each member question is a query and retrieves its top ``k``. Hits inside the
    cluster give the reference distance R: the median distance at which members retrieved other
    members (if none retrieved another member, R is the largest distance retrieved at all, since
    every member then lies beyond every hit). Every hit from another cluster, or from no cluster,
    gets

        suspicion = R - distance

    (for a free-text query, which has no cluster, R = 0, so suspicion = -distance). A positive
    suspicion means the retriever puts the candidate closer to the cluster than its typical own
    member. Each candidate appears once, with the member that retrieved it closest; candidates
    this annotator already judged against any member (or against the same typed query) are left
    out. Rows (``QUEUE_COLUMNS``) are sorted by suspicion, most suspicious first; then
    ``annotations.assign.assign`` applies the overlap setting (``overlap``, default ``QPR_OVERLAP``;
    unset: no limit): items labelled by ``overlap`` others are left out, this annotator's share first.
    A typed query that is exactly a question of the corpus is that question (rows name it by
    ``query_qid``; it and its cluster-mates are not candidates). The queue's ``attrs`` count what
    was left out, for ``why_empty``.
    """
    if (cluster is None) == (query_text is None):
        raise AnnotationError("give exactly one of cluster or query_text")
    mine = store.judgments.frame(annotator=annotator)
    if cluster is not None:
        members = corpus[corpus["cluster"] == cluster]
        if members.empty:
            raise AnnotationError(f"cluster {cluster!r} is not in the corpus")
    else:
        # A typed query that is exactly a corpus question is that question: its judgments then
        # count in the merge rules, and it is never offered as its own candidate.
        members = corpus[corpus["question"] == query_text.strip()].head(1)
    if len(members):
        queries = pd.DataFrame({"query_qid": members["qid"].to_numpy(), "query_text": pd.NA})
        texts = members["question"].tolist()
        member_qids = set(members["qid"])
        done = {candidate for query, candidate in judged_pairs(mine) if query in member_qids}
        own_cluster = cluster if cluster is not None else members["cluster"].iloc[0]
    else:
        queries = pd.DataFrame({"query_qid": [pd.NA], "query_text": [query_text]})
        texts, member_qids, own_cluster = [query_text], set(), None
        done = set(mine.loc[mine["query_text"] == query_text, "candidate_qid"])
    check_queries(texts, k)
    hits = hit_rows(queries, *retriever.search_ids(texts, k), corpus)
    own = hits["candidate_qid"].isin(member_qids).to_numpy(bool)
    if query_text is not None:  # a case or punctuation variant of the typed query is no candidate for it
        own = own | (hits["question"].map(_words) == _words(query_text)).to_numpy(bool)
    if own_cluster is not None and not pd.isna(own_cluster):
        own = own | hits["cluster"].eq(own_cluster).fillna(False).to_numpy(bool)
    reference = 0.0
    if cluster is not None:
        reference = reference_distances(hits.assign(query_cluster=cluster)).get(cluster, np.nan)
    outside = hits[~own].drop_duplicates("candidate_qid")
    candidates = hits[~own & ~hits["candidate_qid"].isin(done)].assign(suspicion=lambda f: reference - f["distance"])
    candidates = candidates.sort_values(["suspicion", "candidate_qid"], ascending=[False, True], kind="stable")
    queue = candidates.drop_duplicates("candidate_qid")[QUEUE_COLUMNS].reset_index(drop=True)
    fresh = len(queue)
    queue = assign(store, queue, annotator, overlap)
    queue = queue.astype({"query_qid": "Int64", "query_text": "string", "candidate_qid": "int64"})
    # Why a queue is short or empty, for the page to say (``why_empty``).
    queue.attrs = {"outside": len(outside), "judged_by_you": len(outside) - fresh, "labelled_by_others": fresh - len(queue)}
    return queue


def why_empty(queue: pd.DataFrame) -> str:
    """What an empty ``spot_check`` queue means, in a sentence: nothing retrieved outside, all of
    it judged by this annotator already, or the rest labelled by enough others (``QPR_OVERLAP``)."""
    counts = queue.attrs
    if not counts.get("outside"):
        return ("The retriever finds no question outside this cluster (or query) among its nearest: "
                "nothing to check here. Pick another cluster or query.")
    parts = [f"{counts['judged_by_you']} judged by you already"] if counts.get("judged_by_you") else []
    if counts.get("labelled_by_others"):
        parts.append(f"{counts['labelled_by_others']} labelled by enough other annotators (QPR_OVERLAP)")
    return f"Of the {counts['outside']} question(s) retrieved here, " + " and ".join(parts) + ": nothing left to check."


def reference_distances(hits: pd.DataFrame) -> pd.Series:
    """R of ``spot_check`` for every query cluster at once (a Series indexed by cluster): the
    median distance at which the cluster's members retrieved other members, else the largest
    distance its members retrieved at all. ``hits``: rows of ``hit_rows`` plus ``query_cluster``,
    the cluster of each row's query (``annotations.simulation.strategies`` scores a whole corpus this way)."""
    own = hits["cluster"].eq(hits["query_cluster"]).fillna(False).to_numpy(bool)
    other_member = own & (hits["candidate_qid"] != hits["query_qid"]).fillna(True).to_numpy(bool)
    among_members = hits[other_member].groupby("query_cluster")["distance"].median()
    largest = hits.groupby("query_cluster")["distance"].max()
    return among_members.reindex(largest.index).fillna(largest)


def next_cluster(
    store: AnnotationStore,
    corpus: pd.DataFrame,
    annotator: str,
    rng_seed: int | None = None,
    retriever: Retriever | None = None,
    sample: int = 20,
) -> str:
    """A cluster (of 2+ questions) for ``annotator`` to spot-check next.

    Only clusters where this annotator has judged no query yet are eligible; ``sample`` of them are
    drawn at random (``rng_seed``). Without a retriever the first drawn is returned; with one, the
    drawn cluster whose most suspicious unjudged candidate (``spot_check``) scores highest.
    """
    sizes = corpus.groupby("cluster")["qid"].size()
    clusters = sorted(sizes[sizes >= 2].index)
    cluster_of = corpus.set_index("qid")["cluster"]
    mine = store.judgments.frame(annotator=annotator)
    done = set(cluster_of.reindex(mine["query_qid"].dropna().astype("int64")).dropna())
    fresh = [c for c in clusters if c not in done]
    if not fresh:
        raise AnnotationError(f"{annotator} has spot-checked every cluster of this corpus; nothing left to propose")
    drawn = np.random.default_rng(rng_seed).choice(fresh, size=min(sample, len(fresh)), replace=False).tolist()
    if retriever is None:
        return drawn[0]
    scores = [spot_check(store, retriever, corpus, annotator, cluster=c)["suspicion"].max() for c in drawn]
    scores = [-np.inf if pd.isna(s) else s for s in scores]
    return drawn[int(np.argmax(scores))]


def judged_pairs(judgments: pd.DataFrame) -> set[tuple[int, int]]:
    """Question pairs, in both orders, that have a label among ``judgments`` (corpus queries only)."""
    by_qid = judgments[judgments["query_qid"].notna()]
    pairs = zip(by_qid["query_qid"].astype("int64"), by_qid["candidate_qid"])
    return {p for q, c in pairs for p in ((int(q), int(c)), (int(c), int(q)))}


def hit_rows(queries: pd.DataFrame, distances: np.ndarray, qids: np.ndarray, corpus: pd.DataFrame) -> pd.DataFrame:
    """One row per (query, retrieved corpus question) with its rank, distance, text and cluster."""
    n_queries, k = qids.shape
    hits = queries.iloc[np.repeat(np.arange(n_queries), k)].reset_index(drop=True).assign(
        candidate_qid=qids.ravel(), distance=distances.ravel().astype(float), rank=np.tile(np.arange(1, k + 1), n_queries)
    )
    known = corpus[["qid", "question", "cluster"]].rename(columns={"qid": "candidate_qid"})
    return hits.merge(known, on="candidate_qid", how="inner")  # drops qid -1 (no hit)


def _words(text: str) -> str:
    """``text``'s words (``qpr.model.text.words``): case and punctuation set aside."""
    return " ".join(words(text))
