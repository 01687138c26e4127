"""Task distribution with overlap: which queue items an annotator should see, so that each item
is labelled by at most ``overlap`` annotators (Argilla's "task distribution": an item leaves
everyone else's queue once it has ``min_submitted`` responses).

The setting is the admin's: environment variable ``QPR_OVERLAP`` (a positive integer). Unset or
empty means no limit, as before this setting existed: every annotator sees every item (useful
for measuring agreement on everything). With ``QPR_OVERLAP=1`` two annotators split the work;
with 2 each item is labelled twice (agreement and adjudication become possible).

The rule, deterministic and stateless:

1. An item already labelled (current label) by ``overlap`` other annotators is left out. For a
   corpus-question query the item is the unordered question pair, so (a, b) and (b, a) count
   together; a typed query's item is its item key.
2. Among the items left, those for which this annotator is among the ``overlap`` annotators
   ranked first by ``sha256(item | name)`` (over the annotators known to the store plus this one)
   come first, the others after, each part in the queue's own order. So annotators working at
   the same time on fresh items mostly get different ones, and nobody is ever starved of work.
"""

from __future__ import annotations

import hashlib

import pandas as pd

from annotations.errors import AnnotationError
from annotations.names import annotator_name, item_key
from annotations.store import AnnotationStore
from qpr.errors import QPRError
from qpr.settings import parse_overlap, settings


def overlap_setting(value: str | None = None) -> int | None:
    """``QPR_OVERLAP`` (``qpr.settings``), or ``value``, as a positive int; None when unset (no limit)."""
    try:
        return settings().overlap if value is None else parse_overlap(value)
    except QPRError as err:  # this package's callers expect its own error type
        raise AnnotationError(str(err)) from None


def pair_name(query_qid, query_text, candidate_qid) -> str:
    """The item as counted for overlap: the unordered question pair, or a typed query's item key."""
    if pd.notna(query_qid):
        low, high = sorted((int(query_qid), int(candidate_qid)))
        return f"pair:{low}:{high}"
    return item_key(int(candidate_qid), query_text=str(query_text))


def labelled_by(store: AnnotationStore) -> dict[str, set[str]]:
    """Per item (``pair_name``), the annotators with a current label of it."""
    current = store.judgments.frame()
    names = [pair_name(q, t, c) for q, t, c in zip(current["query_qid"], current["query_text"], current["candidate_qid"])]
    out: dict[str, set[str]] = {}
    for name, who in zip(names, current["annotator"]):
        out.setdefault(name, set()).add(who)
    return out


def _rank(item: str, annotator: str) -> str:
    return hashlib.sha256(f"{item}|{annotator}".encode()).hexdigest()


def assign(store: AnnotationStore, queue: pd.DataFrame, annotator: str, overlap: int | None = None) -> pd.DataFrame:
    """The rows of ``queue`` (columns query_qid, query_text, candidate_qid) that ``annotator``
    should see, reordered by the module's rule; ``overlap`` defaults to ``QPR_OVERLAP``."""
    overlap = overlap_setting() if overlap is None else overlap_setting(str(overlap))
    if overlap is None or queue.empty:
        return queue
    me = annotator_name(annotator)
    done = labelled_by(store)
    team = sorted(set(store.judgments.annotators()) | {me})
    keep, preferred = [], []
    for q, t, c in zip(queue["query_qid"], queue["query_text"], queue["candidate_qid"]):
        item = pair_name(q, t, c)
        others = done.get(item, set()) - {me}
        keep.append(len(others) < overlap)
        chosen = sorted(team, key=lambda who: _rank(item, who))[:overlap]
        preferred.append(me in chosen)
    mask = pd.Series(keep, index=queue.index)
    first = pd.Series(preferred, index=queue.index)
    ordered = pd.concat([queue[mask & first], queue[mask & ~first]])
    return ordered.reset_index(drop=True)
