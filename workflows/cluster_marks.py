"""What the Clusters tab's marks record: one question moved, two whole clusters merged, and
where the questions of a cluster that is no longer served went.

The rules (``annotations.constraints``) move a question along its "same" links, and vote a member
out of its cluster on a "different" against a member of that cluster (rule 2). So:

- **B (belongs) on an outsider moves that one question** into the viewed cluster: two ordinary
  judgments by the annotator, "same" against the viewed cluster's representative and "different"
  against the representative of the cluster the question is filed in (its bundle's own cluster).
  Rule 2 votes it out of its cluster, rule 4 moves it, alone, to the viewed one. An outsider in no
  cluster needs only the "same".
- **X (does not belong) on a member** is one "different" against the representative (rule 2).
- **Merging two whole clusters** is its own action (``merge_clusters``): a "same" between the two
  representatives and the decision to merge the pair (an applied cluster pair, rule 0 of
  ``annotations.constraints``: one "same" alone would move one question, not the clusters).

Nothing is served until "Apply corrections" (``workflows.labels``). Each action takes the project's
served snapshot once (``Project.served``) and works on it; the helpers are handed both.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from sklearn.feature_extraction.text import TfidfVectorizer

from annotations.constraints import corrected_clusters
from qpr.errors import QPRError
from qpr.serving.served_model import Served
from workflows.project import Project

MARKS = {"same": "belongs to", "different": "does not belong to"}


def cluster_members(project: Project, served: Served, cluster: str) -> tuple[str, pd.DataFrame]:
    """``cluster`` (trimmed) and its members in the labels ``served`` (``project``'s snapshot);
    QPRError saying what to type, or, for a cluster that is no longer served, where its questions
    went."""
    cluster = (cluster or "").strip()
    if not cluster:
        raise QPRError("Type a cluster id, or click one in the list of least coherent clusters.")
    corpus = served.corpus
    members = corpus[corpus["cluster"] == cluster]
    if members.empty:
        raise QPRError(where_went(project, served, cluster) or f"There is no cluster {cluster!r} in the served corpus.")
    return cluster, members


def representative(served: Served, members: pd.DataFrame) -> int:
    """The member the others are judged against: the one whose encoder vector lies closest to the
    cluster's mean (the first such member in corpus order on a tie). A project served by BM25 alone
    has no encoder: there the members' TF-IDF vectors stand in (the member sharing most words)."""
    questions = members["question"].tolist()
    if served.bundle.lexical:
        vectors = TfidfVectorizer(token_pattern=r"(?u)\b\w+\b").fit_transform(questions).toarray()
    else:
        vectors = served.model_retriever.encode(questions)
    spread = ((vectors - vectors.mean(axis=0)) ** 2).sum(axis=1)
    return int(members["qid"].iloc[int(np.argmin(spread))])


def mark(project: Project, who: str, cluster: str, selected: str, label: str, role: str | None = None) -> str:
    """Record ``label`` ("same": belongs, "different": does not belong) for question ``selected``
    against ``project``'s ``cluster`` as the module doc says, by ``who`` under ``role`` (login
    mode); returns the sentence saying what was recorded."""
    served, store = project.served(), project.store
    cluster, members = cluster_members(project, served, cluster)
    try:
        qid = int(str(selected).strip())
    except ValueError:
        raise QPRError("Click a member or an outsider first (or type its qid), then mark it.") from None
    if qid not in set(served.corpus["qid"]):
        raise QPRError(f"There is no question {qid} in the served corpus; click one in the tables.")
    rep = representative(served, members)
    if qid == rep:
        raise QPRError(f"Question {qid} is the representative the others are judged against; mark another one.")
    version, name = served.bundle.version, store.judgments.display_name(who)
    leaving = _leaving(served, members, qid) if label == "same" else None
    store.judgments.record(who, qid, label, version, query_qid=rep, role=role)
    said = f"Recorded: question {qid} {MARKS[label]} {cluster} (against representative {rep})"
    if leaving is not None:
        home, home_rep = leaving
        store.judgments.record(who, qid, "different", version, query_qid=home_rep, role=role)
        said += f" and no longer to {home} (different from its representative {home_rep})"
    return f"{said}, by {name}. {_outcome(project, served, qid, cluster, label)}"


def _outcome(project: Project, served: Served, qid: int, cluster: str, label: str) -> str:
    """Where question ``qid`` is once corrections are applied, under every judgment in force (the
    mark's and earlier ones, anyone's), said plainly when it is not what the mark asked for: an
    earlier "different" by someone else ties with a "same", and the question then waits for a
    reviewer in no cluster rather than moving."""
    after = corrected_clusters(project.store, served.corpus).corpus.set_index("qid")["cluster"]
    now = after.get(qid)
    now = None if pd.isna(now) else str(now)
    if (now == cluster) == (label == "same"):
        return "Apply corrections to serve the result: only this question moves."
    where = "in no cluster" if now is None else f"in {now}"
    return (f"But under the judgments in force it would be **{where}**, not where this mark puts it: another judgment of "
            "the same pair disagrees (see 'Judgments touching this cluster'); a reviewer decides such ties on the Review tab.")


def _leaving(served: Served, members: pd.DataFrame, qid: int) -> tuple[str, int] | None:
    """For an outsider moved in: its bundle's own cluster and that cluster's representative
    (without it), which the "different" is recorded against; None when it has no cluster to
    leave (or that cluster's other members are all in the viewed cluster already)."""
    original = served.bundle.corpus
    home = original.loc[original["qid"] == qid, "cluster"].iloc[0]
    if qid in set(members["qid"]) or pd.isna(home):
        return None
    rest = original[(original["cluster"] == home) & (original["qid"] != qid) & ~original["qid"].isin(members["qid"])]
    return (str(home), representative(served, rest)) if len(rest) else None


def merge_preview(project: Project, cluster: str, other: str) -> pd.DataFrame:
    """Both whole clusters of ``project``'s served labels, as a table (cluster, qid, question),
    before they are merged."""
    return _both(project, project.served(), cluster, other)


def _both(project: Project, served: Served, cluster: str, other: str) -> pd.DataFrame:
    """``merge_preview`` on the snapshot ``served``, which a merge then records against."""
    (cluster, members), (other, more) = cluster_members(project, served, cluster), cluster_members(project, served, other)
    if cluster == other:
        raise QPRError(f"Type another cluster to merge {cluster} with.")
    return pd.concat([members, more])[["cluster", "qid", "question"]].reset_index(drop=True)


def merge_clusters(project: Project, who: str, cluster: str, other: str, role: str | None = None) -> str:
    """Record that the two whole clusters of ``project`` mean the same (module doc), by ``who``
    under ``role``; returns what was recorded."""
    served, store = project.served(), project.store
    both = _both(project, served, cluster, other)
    a, b = (both[both["cluster"] == c] for c in both["cluster"].unique())
    rep_a, rep_b = representative(served, a), representative(served, b)
    store.judgments.record(who, rep_b, "same", served.bundle.version, query_qid=rep_a, role=role)
    # One "same" moves one question (annotations.constraints): the decision about the whole clusters,
    # taken with both in view, is recorded as such.
    store.review.adjudicate(who, "apply", cluster_a=a["cluster"].iloc[0], cluster_b=b["cluster"].iloc[0],
                              note="whole clusters merged on the Clusters tab")
    return (f"Recorded: the whole clusters {a['cluster'].iloc[0]} ({len(a)} questions) and {b['cluster'].iloc[0]} "
            f"({len(b)}) mean the same (their representatives {rep_a} and {rep_b}), by {store.judgments.display_name(who)}. "
            "Apply corrections to serve them as one cluster.")


def where_went(project: Project, served: Served, cluster: str) -> str | None:
    """For a cluster no longer in ``served`` (``project``'s snapshot): how many questions it had (in
    the bundle's own clusters, else the newest label version that had it) and which served clusters
    hold them now; None when no version ever had it."""
    store = project.store
    version = served.bundle.version
    qids = served.bundle.corpus.loc[served.bundle.corpus["cluster"] == cluster, "qid"]
    for number in reversed(store.labels.versions(version)["number"].tolist() if qids.empty else []):
        labels = store.labels.corpus(version, int(number))[1]
        qids = labels.loc[labels["cluster"] == cluster, "qid"]
        if len(qids):
            break
    if qids.empty:
        return None
    now = pd.Series(served.cluster_of(qids), dtype="object").fillna("no cluster").value_counts()
    where = ", ".join(f"{name} ({n})" for name, n in now.items())
    return (f"Cluster {cluster!r} is no longer served (labels version {served.labels_version}): its {len(qids)} "
            f"question(s) are now in {where}.")
