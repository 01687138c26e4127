"""Corrections served at once: label versions of a bundle's corpus, their history, rollbacks.

A label version is the bundle's corpus with corrected clusters (``annotations.constraints``), recorded
in the store (``label_versions``, ``label_changes``) so that a restart serves it again; the
bundle on disk is never rewritten and retraining stays a separate, later step. Version 0 is the
bundle's own corpus. Every change is a new version, by a named person:

- ``apply_corrections``: the corrected clusters of the judgments and adjudications now in force;
- ``rollback``: the labels of an earlier version served again (the versions between stay);
- ``revert_decision``: one merge or split undone for good, as a reviewer's "reject" of that
  cluster pair (rule 0 of ``annotations.constraints``, so later applications keep it undone), then applied.

Nothing is deleted: the history (``history``) lists every version with who, when, what changed
and from which judgments.
"""

from __future__ import annotations

import pandas as pd

from annotations.errors import AnnotationError
from annotations.constraints import corrected_clusters
from annotations.merge import MergeResult
from annotations.store import AnnotationStore

HISTORY_COLUMNS = ["version", "created_at", "annotator", "kind", "changes", "what", "judgments", "note"]
REVERTIBLE = ("merged", "split")


def apply_corrections(store: AnnotationStore, corpus: pd.DataFrame, bundle_version: str, annotator: str,
                      kind: str = "apply", note: str | None = None) -> tuple[int, MergeResult]:
    """Record the corrected clusters of ``corpus`` (the snapshot of ``bundle_version``) as its next
    label version, by ``annotator``; returns the version's number and the merge result."""
    result = corrected_clusters(store, corpus)
    number = store.labels.record(annotator, bundle_version, result.corpus, kind=kind, judgment_ids=result.judgment_ids,
                                 decisions=result.decisions(), note=note)
    return number, result


def rollback(store: AnnotationStore, bundle_version: str, number: int, annotator: str) -> tuple[int, pd.DataFrame]:
    """Serve the labels of version ``number`` of ``bundle_version`` again, as a new version
    recorded as a rollback by ``annotator``; returns the new number and the labels."""
    _, labels = store.labels.corpus(bundle_version, number)
    new = store.labels.record(annotator, bundle_version, labels, kind="rollback", restores=number,
                              note=f"rollback to version {number}")
    return new, labels


def revert_decision(store: AnnotationStore, corpus: pd.DataFrame, bundle_version: str, annotator: str,
                    cluster_a: str, cluster_b: str, reason: str | None = None) -> tuple[int, MergeResult]:
    """Undo the merge (or split) of ``cluster_a`` and ``cluster_b`` that the served label version
    of ``bundle_version`` made (``served_decisions``): ``annotator`` rejects the pair as a reviewer, and the corrections
    are applied again as a "revert" version. AnnotationError if the newest version made no such
    merge or split."""
    versions = store.labels.versions(bundle_version)
    made = served_decisions(versions)
    pair = {cluster_a.strip(), cluster_b.strip()}
    found = next((d for d in made if d["decision"] in REVERTIBLE and {d["cluster_a"], d["cluster_b"]} == pair), None)
    if found is None:
        raise AnnotationError(f"the labels served now made no merge or split of {cluster_a} and {cluster_b}; "
                              "pick one from the newest version's decisions")
    number = int(versions.iloc[-1]["number"])
    note = f"revert of the {'merge' if found['decision'] == 'merged' else 'split'} of {cluster_a} and {cluster_b} " \
           f"(version {number})" + (f": {reason.strip()}" if reason and reason.strip() else "")
    store.review.adjudicate(annotator, "reject", cluster_a=found["cluster_a"], cluster_b=found["cluster_b"], note=note)
    return apply_corrections(store, corpus, bundle_version, annotator, kind="revert", note=note)


def served_decisions(versions: pd.DataFrame) -> list[dict]:
    """The decisions behind the labels the newest of ``versions`` serves: its own, or for a
    rollback those of the version it restores (none for version 0)."""
    by_number = versions.set_index("number")
    number = int(versions["number"].max()) if len(versions) else 0
    while number and by_number.loc[number, "kind"] == "rollback":
        number = int(by_number.loc[number, "restores"])
    return by_number.loc[number, "decisions"] if number else []


def history(store: AnnotationStore, bundle_version: str) -> pd.DataFrame:
    """Every label version of ``bundle_version``, newest first (``HISTORY_COLUMNS``): who, when,
    the kind, how many questions it labels differently from the bundle, ``what`` (its merges as
    "A + B", splits as "qid:7 out of A", or the version it restores) and its judgment ids."""
    versions = store.labels.versions(bundle_version)
    rows = [{
        "version": v.number, "created_at": v.created_at, "annotator": v.annotator, "kind": v.kind, "changes": v.changes,
        "what": f"restores version {v.restores}" if v.kind == "rollback" else summary(v.decisions),
        "judgments": ", ".join(str(i) for i in v.judgment_ids), "note": v.note or "",
    } for v in versions.itertuples()]
    return pd.DataFrame(rows[::-1], columns=HISTORY_COLUMNS)


def summary(decisions: list[dict]) -> str:
    """Merges and splits of a version in a line ("merged A + B; split qid:7 out of A"), then the
    number of conflicts left for review."""
    merged = [f"{d['cluster_a']} + {d['cluster_b']}" for d in decisions if d["decision"] == "merged"]
    split = [f"{d['cluster_b']} out of {d['cluster_a']}" for d in decisions if d["decision"] == "split"]
    conflicts = sum(d["decision"] not in REVERTIBLE for d in decisions)
    parts = ([f"merged {', '.join(merged)}"] if merged else []) + ([f"split {', '.join(split)}"] if split else [])
    return "; ".join(parts or ["no change"]) + (f" ({conflicts} conflict(s) left for review)" if conflicts else "")
