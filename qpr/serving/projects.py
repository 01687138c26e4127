"""Projects: named corpora uploaded by users, each with its versions and bundles, kept on disk.

Layout under the app's cache (``runs/projects`` by default)::

    <slug>/project.json    name, kind, versions, the served bundle's folder, the next free qid, history
    <slug>/bundles/<ver>/  bundles (``qpr.bundles.bundle``): one per uploaded version, trained ones
    <slug>/training/       the background training job (``workflows.background_training``)

Every file is replaced atomically (``qpr.fsutil.atomic.atomic_path``), a bundle before the manifest that
names it, so a kill leaves the project as it was or as it became, never half-written.

A new version of a corpus keeps the qid of every question whose text is unchanged (and gives new
questions qids never used before), so judgments on questions that still exist keep applying:
``annotations.merge.applicable_judgments`` matches a judgment by qid and question text.

An uploaded version is served until an encoder is trained on its clusters: by BM25 alone (a
lexical bundle), or, when the app has a general bundle (``python -m qpr general``), by that
encoder over the new questions with its fusion (``qpr.bundles.general.rebase``: the cold start
measured in docs/OUT_OF_DOMAIN.md), from which training then continues.
"""

from __future__ import annotations

import json
import threading
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from qpr.bundles.bundle import Bundle, serving_retriever
from qpr.bundles.training import held_out_splits
from qpr.evaluation.metrics import evaluate
from qpr.retrieval.lexical import BM25Retriever
from qpr.errors import QPRError
from qpr.fsutil.atomic import atomic_path
from qpr.bundles.general import rebase
from qpr.serving.slugs import DEMO, MAX_NAME, MAX_SLUG, slug_of
from qpr.data.upload import Upload

MANIFEST = "project.json"


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def write_json(path: Path, content: dict) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(content, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def stable_qids(corpus: pd.DataFrame, previous: pd.DataFrame | None, next_qid: int) -> tuple[pd.DataFrame, int]:
    """``corpus`` with the qid its question text had in ``previous`` (exact text), and fresh qids
    from ``next_qid`` on for new texts; returns it and the next free qid."""
    known = {} if previous is None else dict(zip(previous["question"], previous["qid"]))
    qids, fresh = [], next_qid
    for text in corpus["question"]:
        if text in known:
            qids.append(int(known.pop(text)))  # pop: a repeated text gets one old qid, then fresh ones
        else:
            qids.append(fresh)
            fresh += 1
    return corpus.assign(qid=pd.array(qids, dtype="int64")), fresh


class Projects:
    """The projects under ``root``; thread-safe within one process (which project a page has
    open is the page's: ``ui.common.AppContext``).
    ``general``: the general bundle that serves new versions until they are trained (module doc;
    None: BM25)."""

    def __init__(self, root: str | Path, general: Bundle | None = None) -> None:
        self.root = Path(root)
        self.general = general
        self._lock = threading.Lock()

    def folder(self, slug: str) -> Path:
        return self.root / slug

    def manifest(self, slug: str) -> dict:
        """A project's ``project.json``; QPRError when there is no such project."""
        try:
            return json.loads((self.folder(slug) / MANIFEST).read_text(encoding="utf-8"))
        except FileNotFoundError as err:
            raise QPRError(f"no project {slug!r}; create it from an upload first") from err
        except (OSError, ValueError) as err:
            raise QPRError(f"{self.folder(slug) / MANIFEST} cannot be read ({err}); restore it from a backup") from err

    def exists(self, slug: str) -> bool:
        """Whether ``slug`` names a project: the built-in demo, or one on disk."""
        return slug == DEMO or (self.folder(slug) / MANIFEST).is_file()

    def built_in(self, slug: str) -> bool:
        """Whether ``slug`` is the built-in demo: its corpus is fixed and it has no roles of its own."""
        return slug == DEMO

    def name(self, slug: str) -> str:
        """How project ``slug`` is shown ("Demo" for the built-in one; its slug when its manifest
        cannot be read). Reads its manifest alone: a page looks its project up on every search."""
        if slug == DEMO:
            return "Demo"
        return self._name(self.folder(slug) / MANIFEST) or slug

    @staticmethod
    def _name(manifest: Path) -> str | None:
        try:
            return json.loads(manifest.read_text(encoding="utf-8"))["name"]
        except (OSError, ValueError, KeyError):
            return None  # a damaged manifest is reported when the project is opened

    def bundle_versions(self, slug: str) -> list[str]:
        """The bundle versions project ``slug`` keeps on disk (none for the demo, whose bundles are
        the cache's)."""
        folder = self.folder(slug) / "bundles"
        return sorted(path.name for path in folder.iterdir() if path.is_dir()) if slug != DEMO and folder.is_dir() else []

    def names(self) -> dict[str, str]:
        """Slug -> name of every project on disk, by name."""
        found = {path.parent.name: self._name(path) for path in sorted(self.root.glob(f"*/{MANIFEST}"))}
        return dict(sorted(((slug, name) for slug, name in found.items() if name is not None), key=lambda item: item[1].lower()))

    def create(self, name: str, upload: Upload, who: str) -> str:
        """A new project ``name`` whose first version is ``upload``, served as the module doc
        says until an encoder is trained; returns its slug. Refuses a taken or empty name."""
        name = (name or "").strip()
        slug = slug_of(name)
        if not slug or len(name) > MAX_NAME or len(slug) > MAX_SLUG:
            raise QPRError(f"name the project: 1 to {MAX_NAME} characters with at least one letter or digit")
        if slug == DEMO:
            raise QPRError("'demo' is the built-in demo project; choose another name")
        with self._lock:
            if (self.folder(slug) / MANIFEST).exists():
                raise QPRError(f"a project {self.names().get(slug, slug)!r} exists already; choose another name, "
                               "or upload a new version of it")
            corpus, next_qid = stable_qids(upload.corpus, None, 1)
            manifest = {"name": name, "slug": slug, "kind": upload.kind, "created": now(), "created_by": who,
                        "versions": [], "served": None, "next_qid": next_qid, "history": []}
            self._add_version(manifest, upload, corpus, who, kept=0)
        return slug

    def add_version(self, slug: str, upload: Upload, who: str) -> dict:
        """Upload a new version of project ``slug``'s corpus: questions whose text is unchanged
        keep their qid (so their judgments still apply); served as a new project's first version
        is until trained again.
        Returns the version's record (its number, rows, questions kept / new / dropped)."""
        with self._lock:
            manifest = self.manifest(slug)
            # The last uploaded version's questions (a trained bundle may hold fewer: val/test
            # repeats of training questions are left out of it).
            previous = Bundle.load(self.bundle_path(slug, manifest["versions"][-1]["bundle"])).corpus
            corpus, manifest["next_qid"] = stable_qids(upload.corpus, previous, manifest["next_qid"])
            kept = int(corpus["qid"].isin(previous["qid"]).sum())
            return self._add_version(manifest, upload, corpus, who, kept, dropped=len(previous) - kept)

    def _add_version(self, manifest: dict, upload: Upload, corpus: pd.DataFrame, who: str, kept: int,
                     dropped: int = 0) -> dict:
        number = len(manifest["versions"]) + 1
        data = f"{manifest['name']} version {number}"
        bm25 = BM25Retriever(corpus)  # built once: scored with here, and saved with the bundle
        splits = held_out_splits(corpus)
        # What the project serves until trained, scored as a trained model is.
        if self.general is None:
            bundle = Bundle.lexical_of(corpus, data=data).with_bm25(bm25)
            bundle = bundle.with_manifest(metrics={split: evaluate(bm25, corpus, split) for split in splits})
        else:
            bundle = rebase(self.general, corpus).with_bm25(bm25)
            served = serving_retriever(bundle, bm25)
            bundle = bundle.with_manifest(data=data, metrics={split: evaluate(bundle.dense_retriever(), corpus, split) for split in splits},
                                          hybrid_metrics={split: evaluate(served, corpus, split) for split in splits})
        folder = self.folder(manifest["slug"])
        bundle.save(self.bundle_path(manifest["slug"], bundle.version))
        record = {"number": number, "bundle": bundle.version, "kind": upload.kind, "rows": upload.rows,
                  "questions": len(corpus), "kept": kept, "new": len(corpus) - kept, "dropped": dropped,
                  "clusters": int(corpus["cluster"].nunique()), "report": upload.report, "by": who, "at": now()}
        manifest["versions"].append(record)
        manifest["served"] = bundle.version
        manifest["history"].append({"at": now(), "by": who, "what": f"uploaded version {number}"})
        write_json(folder / MANIFEST, manifest)
        return record

    def served_bundle(self, slug: str) -> Bundle:
        """The bundle project ``slug`` serves."""
        return Bundle.load(self.bundle_path(slug, self.manifest(slug)["served"]))

    def bundle_path(self, slug: str, version: str) -> Path:
        """Where project ``slug`` keeps its bundle ``version``."""
        return self.folder(slug) / "bundles" / version

    def serve(self, slug: str, version: str, who: str, what: str) -> None:
        """Serve the saved bundle ``version`` of project ``slug`` from now on (after a restart
        too); ``what`` goes in the history."""
        with self._lock:
            manifest = self.manifest(slug)
            Bundle.load(self.bundle_path(slug, version))  # never point at a bundle that does not load
            manifest["served"] = version
            manifest["history"].append({"at": now(), "by": who, "what": what})
            write_json(self.folder(slug) / MANIFEST, manifest)
