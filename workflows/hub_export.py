"""An export of corrected clusters as a Hugging Face Hub dataset, where teams that retrain
elsewhere keep their data.

``dataset_files(export, project, folder)`` lays an export (``annotations.export.Export``) out as
a Hub dataset repository, one configuration per table, Parquet files that
``datasets.load_dataset(REPO, CONFIG)`` reads:

- ``clusters`` (the default): the corrected clusters (qid, question, cluster, split), one file
  per split of the corpus (``clusters/train.parquet``, ``val``, ``test``, ``none``), in the
  corpus' order;
- ``pairs``: the judged pairs in the Quora release layout (``is_duplicate`` 1 = same);
- ``anchor-positive`` and ``triplets``: sentence-transformers' training format
  (``annotations.st_export``), for ``MultipleNegativesRankingLoss``;
- (a table without rows is left out: ``datasets`` cannot read an empty Parquet file);
- ``README.md``, the dataset card: Hub front matter (the configurations and their files,
  license, task, size, and under ``qpr`` the project, bundle version, export id, judgment count
  and ids, and what changed since the previous push) and a text saying the same;
- ``qpr-export.json``: the export's manifest with the project and the table sizes, which the
  next push reads back to say what changed.

``push_export`` commits that folder to a Hub dataset repository (``qpr.bundles.hub.upload``:
each push one new commit replacing the files); ``write_dataset`` writes it to a local folder
instead (atomically), which ``datasets.load_dataset(FOLDER, CONFIG)`` reads the same way.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from huggingface_hub import DatasetCardData, HfApi

from annotations.export import Export
from annotations.st_export import training_tables
from qpr.bundles.hub import fetch_file, is_repo_id, upload
from qpr.errors import QPRError, one_line
from qpr.fsutil.atomic import atomic_path
from workflows.project import Project
from workflows.retraining import export_corrected

RECORD = "qpr-export.json"
LICENSE = "other"  # the questions' own license applies: the project's data, not ours
TAGS = ("question-paraphrase-retrieval", "sentence-transformers", "qpr")
# The Hub's size categories: upper bounds and their names.
SIZES = ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M"),
         (10_000_000, "1M<n<10M"))


def push_corrected(project: Project, repo: str, folder: Path, private: bool = False,
                   api: HfApi | None = None) -> tuple[Export, str]:
    """Export the corrected clusters of ``project``'s served corpus
    (``workflows.retraining.export_corrected``, as Parquet into ``folder``) and push them to the
    Hub dataset ``repo``: the Retrain tab's push. Returns the export and the commit's URL; QPRError
    for a bad repository id, before exporting."""
    check_repo(repo)
    bundle = project.served().bundle
    done = export_corrected(project.store, bundle.corpus, bundle.version, "parquet", folder=folder)
    return done, push_export(done, repo, project.slug, private=private, api=api)


def check_repo(repo: str) -> None:
    """QPRError unless ``repo`` is spelled as a Hub repository id: checked before an export is
    made for it."""
    if not is_repo_id(repo):
        raise QPRError(f"{repo!r} is not a Hub dataset repository id: give owner/name, e.g. you/qpr-corrected")


def push_export(export: Export, repo: str, project: str, private: bool = False, api: HfApi | None = None) -> str:
    """Commit ``export`` of ``project`` to the Hub dataset repository ``repo`` (created if new,
    ``private`` then) as one new commit; the card says what changed since the export the
    repository held. Returns the commit's URL; QPRError when the Hub refuses."""
    held = fetch_file(repo, RECORD, "dataset", api)
    with tempfile.TemporaryDirectory(prefix="qpr-dataset-") as tmp:
        folder = dataset_files(export, project, Path(tmp), read_record(held) if held else None)
        message = f"qpr export {export.manifest['export_id']} of project {project}"
        return upload(folder, repo, "dataset", message, private=private, api=api)


def write_dataset(export: Export, project: str, out: Path) -> Path:
    """Write ``export`` of ``project`` as a Hub dataset folder at ``out`` (new, or one written
    here before, which it replaces atomically; its card then says what changed since)."""
    previous = read_record(out / RECORD) if (out / RECORD).is_file() else None
    with atomic_path(out, directory=True, replaceable=lambda target: (target / RECORD).is_file(),
                     what="dataset folder written by qpr-annotations export --dataset") as tmp:
        dataset_files(export, project, tmp, previous)
    return out


def read_record(path: Path) -> dict:
    """The ``qpr-export.json`` at ``path``; QPRError if it cannot be read."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise QPRError(f"{path} cannot be read as an export record ({one_line(err)}); remove it or push anew") from err


def dataset_files(export: Export, project: str, folder: Path, previous: dict | None = None) -> Path:
    """Write the dataset repository's files (module doc) for ``export`` of ``project`` into
    ``folder``; ``previous``: the record of the export it replaces, if any. Returns ``folder``."""
    tables = training_tables(export.corpus, export.pairs)
    configs = {"clusters": {split: rows for split, rows in export.corpus.groupby("split", sort=False)},
               "pairs": {"train": export.pairs}, "anchor-positive": {"train": tables.anchor_positive},
               "triplets": {"train": tables.triplets}}
    # A table without rows is left out: datasets cannot read an empty Parquet file.
    configs = {name: kept for name, splits in configs.items() if (kept := {s: rows for s, rows in splits.items() if len(rows)})}
    card_configs = []
    for name, splits in configs.items():
        files = []
        for split, rows in splits.items():
            path = folder / name / f"{split}.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            rows.to_parquet(path, index=False)
            files.append({"split": split, "path": f"{name}/{split}.parquet"})
        card_configs.append({"config_name": name, "data_files": files} | ({"default": True} if name == "clusters" else {}))
    manifest = export.manifest
    record = {"project": project, **manifest,
              "rows": {name: {split: len(rows) for split, rows in splits.items()} for name, splits in configs.items()},
              "triplets_without_positive": tables.without_positive}
    record["changed"] = changes(previous, record)
    (folder / RECORD).write_text(json.dumps(record, indent=2, ensure_ascii=False, default=int), encoding="utf-8")
    data = DatasetCardData(
        license=LICENSE, task_categories=["sentence-similarity"], size_categories=[size_category(len(export.corpus))],
        pretty_name=f"{project}: corrected question clusters", tags=list(TAGS), configs=card_configs,
        qpr={"project": project, "bundle_version": manifest["bundle_version"], "export_id": manifest["export_id"],
             "created": manifest["created"], "judgments": len(manifest["judgment_ids"]),
             "judgment_ids": manifest["judgment_ids"], "changed": record["changed"]})
    (folder / "README.md").write_text(f"---\n{data.to_yaml()}\n---\n\n{card_text(record)}", encoding="utf-8")
    return folder


def size_category(rows: int) -> str:
    """The Hub's size category of a dataset of ``rows`` rows."""
    return next((name for bound, name in SIZES if rows < bound), "n>10M")


def changes(previous: dict | None, record: dict) -> dict | None:
    """What changed from the export record ``previous`` to ``record`` (None: nothing before):
    each count as [before, after], the judgments added and those no longer taken into account
    (changed or withdrawn since)."""
    if previous is None:
        return None
    old, new = set(previous.get("judgment_ids", [])), set(record["judgment_ids"])
    keys = ("export_id", "bundle_version", "questions", "clusters_after")
    return {key: [previous.get(key), record[key]] for key in keys} | {
        "judgments": [len(old), len(new)], "judgments_added": len(new - old), "judgments_dropped": len(old - new)}


def card_text(record: dict) -> str:
    """The dataset card's text for the export ``record`` (``dataset_files``)."""
    rows = record["rows"]
    table = "\n".join(f"| `{name}` | {', '.join(f'{split} ({count})' for split, count in splits.items())} |"
                      for name, splits in rows.items())
    changed = record["changed"]
    since = "This is the first export pushed here." if changed is None else (
        f"Since the previous push (export #{changed['export_id'][0]}, bundle `{changed['bundle_version'][0]}`): "
        f"questions {changed['questions'][0]} -> {changed['questions'][1]}, clusters {changed['clusters_after'][0]} -> "
        f"{changed['clusters_after'][1]}, judgments {changed['judgments'][0]} -> {changed['judgments'][1]} "
        f"({changed['judgments_added']} added, {changed['judgments_dropped']} no longer current).")
    return f"""# {record['project']}: corrected question clusters

Questions grouped by meaning, their clusters corrected by annotators' judgments in the QPR
annotation app (project `{record['project']}`, bundle `{record['bundle_version']}`, export
#{record['export_id']} of {record['created']}): {record['questions']} questions in
{record['clusters_after']} clusters ({record['clusters_before']} before {len(record['merges'])} merge(s) and
{len(record['splits'])} split(s)), from {len(record['judgment_ids'])} judgments (their ids are in the
front matter, `qpr.judgment_ids`). {since}

## Configurations

A table without rows (no judged pairs yet, say) is left out.

| configuration | splits (rows) |
|---|---|
{table}

- `clusters`: `qid`, `question`, `cluster` (empty: in no cluster), `split` (val and test clusters
  are held out: score a model on them, do not train on them); the cluster file `qpr train` reads.
- `pairs`: every judged pair, `is_duplicate` 1 (same meaning) or 0 (different).
- `anchor-positive` (`anchor`, `positive`) and `triplets` (`anchor`, `positive`, `negative`, the
  negative a question judged different from the anchor): sentence-transformers' training format,
  from training questions only; {record['triplets_without_positive']} judged-different pair(s) had no
  cluster-mate to be a positive and are left out of `triplets`.

## Use

```python
from datasets import load_dataset

clusters = load_dataset("OWNER/NAME", "clusters")
triplets = load_dataset("OWNER/NAME", "triplets", split="train")  # for MultipleNegativesRankingLoss
```
"""
