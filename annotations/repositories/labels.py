"""Served labels (migration 0006): corrected clusters and splits as numbered label versions of a
bundle's corpus, each stored as its changes against the registered snapshot."""

from __future__ import annotations

import json

import pandas as pd
from sqlalchemy import Engine, func, insert, select
from sqlalchemy.orm import Session

from annotations.errors import AnnotationError
from annotations.models import LABEL_VERSION_KINDS, Annotator, LabelChange, LabelVersion
from annotations.names import annotator_name
from annotations.repositories.base import Repository, annotator_row, corpus_snapshot
from annotations.repositories.corpus import CorpusRepository
from annotations.writer import GroupCommitWriter

LABEL_VERSION_COLUMNS = [
    "number", "created_at", "annotator", "kind", "restores", "note", "judgment_ids", "decisions", "changes",
]


class LabelRepository(Repository):
    """Label versions of a bundle's corpus; they are read against its snapshot, which ``corpora``
    (the store's corpus repository, of the same project) holds."""

    def __init__(self, engine: Engine, writer: GroupCommitWriter, project: str, corpora: CorpusRepository) -> None:
        super().__init__(engine, writer, project)
        self.corpora = corpora

    def record(self, annotator: str, bundle_version: str, labels: pd.DataFrame, kind: str = "apply",
                      judgment_ids: list[int] = (), decisions: list[dict] = (), restores: int | None = None,
                      note: str | None = None) -> int:
        """Record ``labels`` (the corpus of ``bundle_version`` with corrected clusters and splits)
        as that bundle's next label version, by ``annotator``; returns its number (1, 2, ...).
        ``kind``, ``judgment_ids``, ``decisions``, ``restores``: see ``models.LabelVersion``. Only
        questions whose cluster or split differ from the registered snapshot are stored.
        AnnotationError if ``labels`` holds other questions (or texts) than the snapshot, or
        ``restores`` names no earlier version."""
        name = annotator_name(annotator)
        if kind not in LABEL_VERSION_KINDS:
            raise AnnotationError(f"kind must be one of {', '.join(LABEL_VERSION_KINDS)}; got {kind!r}")
        version, snapshot = self.corpora.snapshot(bundle_version)
        labels = corpus_snapshot(labels).sort_values("qid").reset_index(drop=True)
        if not labels[["qid", "question"]].equals(snapshot[["qid", "question"]]):
            raise AnnotationError(f"these labels are not over the corpus of bundle {version!r} (other questions or texts); "
                                  "compute them from that bundle's corpus")
        moved = (labels["cluster"].fillna("") != snapshot["cluster"].fillna("")) | (labels["split"] != snapshot["split"])
        changes = labels.loc[moved, ["qid", "cluster", "split"]]
        changes = changes.astype(object).where(changes.notna(), None).to_dict("records")
        # JSON columns take plain numbers only (numpy integers are not JSON)
        decided = json.loads(json.dumps(list(decisions), default=int))

        def work(session: Session) -> int:
            number = (session.scalar(select(func.max(LabelVersion.number)).where(LabelVersion.bundle_version == version))
                      or 0) + 1
            if restores is not None and not 0 <= restores < number:
                raise AnnotationError(f"bundle {version!r} has no label version {restores} to restore "
                                      f"(versions 0 to {number - 1})")
            row = LabelVersion(bundle_version=version, number=number, kind=kind, restores=restores,
                               annotator_id=annotator_row(session, name).id, note=(note or "").strip() or None,
                               judgment_ids=[int(i) for i in judgment_ids], decisions=decided)
            session.add(row)
            session.flush()
            if changes:
                session.execute(insert(LabelChange), [c | {"label_version_id": row.id} for c in changes])
            return number

        return self.writer.write(work)

    def versions(self, bundle_version: str) -> pd.DataFrame:
        """The label versions of ``bundle_version``, one of this project's (``LABEL_VERSION_COLUMNS``),
        oldest first; ``changes``: how many questions each one labels differently from the bundle's snapshot."""
        with Session(self.engine) as session:
            bundle_version = self.own_version(session, bundle_version)
        changed = (select(LabelChange.label_version_id, func.count().label("n"))
                   .group_by(LabelChange.label_version_id).subquery())
        statement = (
            select(LabelVersion.number, LabelVersion.created_at, Annotator.name, LabelVersion.kind, LabelVersion.restores,
                   LabelVersion.note, LabelVersion.judgment_ids, LabelVersion.decisions, func.coalesce(changed.c.n, 0))
            .join(Annotator, Annotator.id == LabelVersion.annotator_id)
            .outerjoin(changed, changed.c.label_version_id == LabelVersion.id)
            .where(LabelVersion.bundle_version == bundle_version).order_by(LabelVersion.number)
        )
        with Session(self.engine) as session:
            rows = session.execute(statement).all()
        frame = pd.DataFrame(rows, columns=LABEL_VERSION_COLUMNS)
        frame["created_at"] = pd.to_datetime(frame["created_at"], utc=True)
        return frame.astype({"number": "int64", "restores": "Int64", "changes": "int64"})

    def latest_number(self, bundle_version: str) -> int:
        """The number of ``bundle_version``'s newest label version (0: none recorded); one of this
        project's bundle versions."""
        with Session(self.engine) as session:
            version = self.own_version(session, bundle_version)
            return session.scalar(select(func.max(LabelVersion.number)).where(LabelVersion.bundle_version == version)) or 0

    def corpus(self, bundle_version: str, number: int | None = None,
               snapshot: pd.DataFrame | None = None) -> tuple[int, pd.DataFrame]:
        """``(number, corpus)``: the corpus of ``bundle_version`` under its label version ``number``
        (default: the newest; 0, or none recorded: the registered snapshot itself). ``snapshot``:
        that registered corpus when the caller holds it (a served bundle's own, which its
        registration matched), so that it is not read back from the database (a minute at ten
        million questions)."""
        if number is None:
            number = self.latest_number(bundle_version)
        if snapshot is None:
            version, corpus = self.corpora.snapshot(bundle_version)
        else:
            with Session(self.engine) as session:
                version = self.own_version(session, bundle_version)
            corpus = corpus_snapshot(snapshot)
        if number == 0:
            return 0, corpus
        with Session(self.engine) as session:
            row_id = session.scalar(select(LabelVersion.id).where(LabelVersion.bundle_version == version,
                                                                  LabelVersion.number == number))
            if row_id is None:
                raise AnnotationError(f"bundle {version!r} has no label version {number}")
            rows = session.execute(select(LabelChange.qid, LabelChange.cluster, LabelChange.split)
                                   .where(LabelChange.label_version_id == row_id)).all()
        changes = pd.DataFrame(rows, columns=["qid", "cluster", "split"]).set_index("qid")
        position = corpus.set_index("qid").index.get_indexer(changes.index)
        corpus.loc[position, "cluster"] = pd.array(changes["cluster"], dtype="string")
        corpus.loc[position, "split"] = changes["split"].to_numpy()
        return int(number), corpus
