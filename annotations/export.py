"""Export corrected clusters for retraining: a cluster file, training pairs, and a manifest.

``export(store, corpus, "parquet", "corrected.parquet")`` writes, each file atomically:

- ``corrected.parquet``: the corpus with corrected clusters in the cluster-file format
  (qid, question, cluster, split) that ``qpr.data.read_cluster_file`` and ``python -m qpr train``
  read as is;
- ``corrected.pairs.parquet``: every decided item as a pair in the Quora release layout
  (id, qid1, qid2, question1, question2, is_duplicate: 1 = same, 0 = different);
- ``corrected.parquet.manifest.json``, written last (its presence means the export is complete):
  the export id, time, bundle version, file names, counts, merges, conflicts and the ids of every
  judgment the export took into account. The same is recorded in the database.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from annotations.errors import AnnotationError
from annotations.merge import MergeResult, corrected_clusters
from annotations.models import utcnow
from annotations.store import AnnotationStore
from qpr.data import QUORA_COLUMNS, write_cluster_file, write_table
from qpr.fsutil import atomic_path

FORMATS = ("csv", "jsonl", "parquet")


def manifest_path(out: str | Path) -> Path:
    return Path(f"{out}.manifest.json")


def pairs_path(out: str | Path) -> Path:
    out = Path(out)
    return out.with_name(f"{out.stem}.pairs{out.suffix}")


def training_pairs(result: MergeResult, corpus: pd.DataFrame) -> pd.DataFrame:
    """The decided items of a merge result as labelled question pairs (Quora release columns)."""
    decided = result.items[result.items["decision"] != "tie"]
    text = corpus.set_index("qid")["question"]
    return pd.DataFrame({
        "id": range(1, len(decided) + 1),
        "qid1": decided["query_qid"].to_numpy(),
        "qid2": decided["candidate_qid"].to_numpy(),
        "question1": decided["query_qid"].map(text).to_numpy(),
        "question2": decided["candidate_qid"].map(text).to_numpy(),
        "is_duplicate": (decided["decision"] == "same").astype(int).to_numpy(),
    }, columns=QUORA_COLUMNS)


def cluster_counts(before: pd.DataFrame, after: pd.DataFrame) -> dict:
    """Questions and clusters before and after the merges, in terms that add up:
    ``clusters_after = clusters_before - clusters_absorbed + clusters_formed``, where a cluster is
    absorbed when a merge folds it into another and formed when unclustered questions judged the
    same become a cluster of their own (named ``new-<qid>``)."""
    old = set(before["cluster"].dropna())
    new = set(after["cluster"].dropna())
    return {
        "questions": len(after),
        "clusters_before": len(old),
        "clusters_after": len(new),
        "clusters_absorbed": len(old - new),
        "clusters_formed": len(new - old),
    }


def export(
    store: AnnotationStore, corpus: pd.DataFrame, fmt: str, out: str | Path, bundle_version: str | None = None
) -> Path:
    """Write the corrected clusters of ``corpus`` to ``out`` (plus pairs and manifest, see the
    module doc) and record the export in ``store``; returns ``out``. ``bundle_version`` names the
    bundle whose corpus this is, for the record."""
    if fmt not in FORMATS:
        raise AnnotationError(f"unknown export format {fmt!r}; use one of {', '.join(FORMATS)}")
    out = Path(out)
    if out.suffix.lower() != f".{fmt}":
        raise AnnotationError(f"{out}: a {fmt} export needs a file name ending in .{fmt}")
    if bundle_version is not None and bundle_version not in store.bundle_versions()["version"].tolist():
        raise AnnotationError(f"bundle version {bundle_version!r} is not registered in the annotation database")
    result = corrected_clusters(store, corpus)
    # A manifest describes complete exports only: drop the old one before replacing its files.
    manifest_path(out).unlink(missing_ok=True)
    write_cluster_file(result.corpus, out)
    write_table(training_pairs(result, corpus), pairs_path(out))
    counts = cluster_counts(corpus, result.corpus)
    export_id = store.record_export(
        bundle_version, fmt, str(out.resolve()), {key: counts[key] for key in ("questions", "clusters_before", "clusters_after")},
        result.judgment_ids, result.decisions()
    )
    manifest = {
        "export_id": export_id,
        "created": utcnow().isoformat(timespec="seconds"),
        "bundle_version": bundle_version,
        "format": fmt,
        "cluster_file": out.name,
        "pairs_file": pairs_path(out).name,
        **counts,
        "judgment_ids": result.judgment_ids,
        "merges": result.merges.to_dict("records"),
        "conflicts": result.conflicts.to_dict("records"),
    }
    with atomic_path(manifest_path(out)) as tmp:
        tmp.write_text(json.dumps(manifest, indent=2, ensure_ascii=False, default=int))
    return out
