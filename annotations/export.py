"""Export corrected clusters for retraining: a cluster file, training pairs, and a manifest.

``write_export(store, corpus, "parquet", "corrected.parquet", version)`` writes, as one change:

- ``corrected.parquet``: the corpus with corrected clusters in the cluster-file format
  (qid, question, cluster, split) that ``qpr.data.corpus.read_cluster_file`` and ``python -m qpr train``
  read as is;
- ``corrected.pairs.parquet``: every decided item as a pair in the Quora release layout
  (id, qid1, qid2, question1, question2, is_duplicate: 1 = same, 0 = different);
- ``corrected.parquet.manifest.json``, placed last (its presence means the export is complete):
  the export id, time, bundle version, file names with their sizes and SHA-256 (``check_export``),
  counts, merges, splits (members voted out of their cluster), conflicts and the ids of every
  judgment the export took into account. The same is recorded in the database, in the
  transaction that places the files.

It also hands the export over in memory (``Export``: the corrected corpus and the manifest as
written), so a caller in the same process trains on it without reading the files back;
``Export.provenance`` is what a bundle trained on it records. ``export`` is the same for callers that
want the file only (the command line, scripts).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from annotations.errors import AnnotationError
from annotations.constraints import corrected_clusters
from annotations.merge import MergeResult
from annotations.models import utcnow
from annotations.pair_scores import PairScorer
from annotations.purity import cluster_purity
from annotations.store import AnnotationStore
from qpr.data.corpus import QUORA_COLUMNS, check_corpus, write_cluster_file, write_table
from qpr.errors import one_line
from qpr.fsutil.file_group import atomic_files, recover_files

FORMATS = ("csv", "jsonl", "parquet")


@dataclass(frozen=True)
class Export:
    """One complete export: ``path`` (the cluster file; its pairs and manifest lie beside it),
    ``corpus`` (the corrected clusters as written, in the dtypes ``read_cluster_file`` gives) and
    ``manifest`` (as written in the manifest file) and ``pairs`` (the judged pairs as written in
    the pairs file, which a retrain trains on directly: ``qpr.training.train.train``'s ``judged``)
    and ``purity`` (each cluster's estimated purity, ``annotations.purity``: the retrain's
    ``cluster_weights``)."""

    path: Path
    corpus: pd.DataFrame
    manifest: dict
    pairs: pd.DataFrame | None = None
    purity: pd.Series | None = None

    @property
    def provenance(self) -> dict:
        """What a bundle trained on this export records as its ``provenance``, the one schema of that
        trace: ``export_id``, ``export_file`` (the cluster file's absolute path, as the database's
        export record holds it) and ``judgment_ids``."""
        return {"export_id": self.manifest["export_id"], "export_file": str(self.path.resolve()),
                "judgment_ids": self.manifest["judgment_ids"]}

    @property
    def files(self) -> list[Path]:
        """The files written: the cluster file, its pairs and its manifest."""
        return [self.path, pairs_path(self.path), manifest_path(self.path)]


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
    """Questions and clusters before and after the merges and splits, in terms that add up:
    ``clusters_after = clusters_before - clusters_absorbed + clusters_formed``, where a cluster is
    absorbed when a merge folds it into another (or splits leave it no member) and formed when
    questions in no cluster, or voted out of theirs, judged the same become a cluster of their own
    (named ``new-<qid>``); ``questions_moved``: questions whose cluster changed."""
    old = set(before["cluster"].dropna())
    new = set(after["cluster"].dropna())
    return {
        "questions": len(after),
        "clusters_before": len(old),
        "clusters_after": len(new),
        "clusters_absorbed": len(old - new),
        "clusters_formed": len(new - old),
        # "" stands for no cluster: the corpus schema never keeps an empty cluster name
        "questions_moved": int((before["cluster"].fillna("").to_numpy() != after["cluster"].fillna("").to_numpy()).sum()),
    }


def export(store: AnnotationStore, corpus: pd.DataFrame, fmt: str, out: str | Path, bundle_version: str) -> Path:
    """``write_export``, returning the cluster file's path only."""
    return write_export(store, corpus, fmt, out, bundle_version).path


def write_export(store: AnnotationStore, corpus: pd.DataFrame, fmt: str, out: str | Path, bundle_version: str,
                 scorer: PairScorer | None = None) -> Export:
    """Write the corrected clusters of ``corpus`` to ``out`` (plus pairs and manifest, see the
    module doc) and record the export in ``store``; returns the export, in memory too.
    ``bundle_version`` names the bundle whose corpus this is: one of the store's project's, whose
    judgments alone the export reads and to which it is recorded; ``scorer``: the served model's
    pair probabilities, which the corrected clusters weigh beside the judgments
    (``annotations.constraints``; None: the judgments alone).

    All or nothing (``qpr.fsutil.file_group.atomic_files``): the three files are written beside ``out`` in a
    staging folder, then moved into place with the manifest last (an earlier manifest is moved
    aside first, so no manifest ever sits beside files it does not describe), inside the database
    transaction that records the export; that transaction commits only once the files are in
    place, and if it fails they are rolled back to the previous export. A writer killed on the
    way is finished (database row committed) or rolled back (not committed) by the next export to
    ``out``, or by ``recover_export``.
    """
    if fmt not in FORMATS:
        raise AnnotationError(f"unknown export format {fmt!r}; use one of {', '.join(FORMATS)}")
    out = Path(out)
    if out.suffix.lower() != f".{fmt}":
        raise AnnotationError(f"{out}: a {fmt} export needs a file name ending in .{fmt}")
    if bundle_version not in store.corpora.versions()["version"].tolist():
        raise AnnotationError(f"bundle version {bundle_version!r} is not registered in project {store.project!r}")
    result = corrected_clusters(store, corpus, scorer)
    purity, purity_prior = cluster_purity(corpus, result)
    # In read_cluster_file's dtypes: what a caller trains on is what a reader of the file would get.
    corrected = check_corpus(result.corpus, out)
    counts = cluster_counts(corpus, corrected)
    created = utcnow().replace(microsecond=0)  # the manifest and the database row carry the same time
    path = str(out.resolve())
    pairs = training_pairs(result, corpus)
    with atomic_files([out, pairs_path(out), manifest_path(out)], committed=store.exports.recorded) as group:
        write_cluster_file(corrected, group.path(out))
        write_table(pairs, group.path(pairs_path(out)))
        files = {target.name: _describe(group.path(target)) for target in (out, pairs_path(out))}

        manifest = {}

        def place(export_id: int) -> None:
            manifest.update({
                "export_id": export_id,
                "created": created.isoformat(timespec="seconds"),
                "bundle_version": bundle_version,
                "format": fmt,
                "cluster_file": out.name,
                "pairs_file": pairs_path(out).name,
                "files": files,
                **counts,
                "judgment_ids": result.judgment_ids,
                "merges": result.merges.to_dict("records"),
                "splits": result.splits.to_dict("records"),
                "conflicts": result.conflicts.to_dict("records"),
                "same_threshold": result.threshold,
                "purity_prior": purity_prior,
            })
            group.path(manifest_path(out)).write_text(json.dumps(manifest, indent=2, ensure_ascii=False, default=int))
            group.publish({"export_id": export_id, "path": path, "created": created.isoformat()})

        stored = {key: counts[key] for key in ("questions", "clusters_before", "clusters_after")}
        store.exports.record(bundle_version, fmt, path, stored, result.judgment_ids, result.decisions(),
                            created=created, before_commit=place)
        group.commit()
    # The manifest as a reader of the file gets it (numpy numbers as plain ints, as written).
    return Export(out, corrected, json.loads(json.dumps(manifest, default=int)), pairs, purity)


def recover_export(store: AnnotationStore, out: str | Path) -> list[Path]:
    """Finish or roll back exports to ``out`` whose writer died (see ``export``); returns the
    staging folders handled. ``export`` does this itself before writing."""
    return recover_files(manifest_path(out), committed=store.exports.recorded)


def check_export(out: str | Path) -> dict:
    """The manifest of the export at ``out`` once its files are checked against it (sizes and
    SHA-256); AnnotationError if there is no complete export there."""
    out = Path(out)
    try:
        manifest = json.loads(manifest_path(out).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise AnnotationError(f"{out}: no complete export there (no {manifest_path(out).name}); export again") from None
    except (OSError, ValueError) as err:
        raise AnnotationError(f"{manifest_path(out)} cannot be read ({one_line(err)}); export again") from err
    for name, expected in (manifest.get("files") or {}).items():
        target = out.with_name(name)
        if not target.is_file() or _describe(target) != expected:
            raise AnnotationError(f"{target} is not the file the manifest {manifest_path(out).name} describes; export again")
    return manifest


def _describe(path: Path) -> dict:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return {"bytes": path.stat().st_size, "sha256": digest.hexdigest()}
