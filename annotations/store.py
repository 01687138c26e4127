"""The annotation store: corpus snapshots, judgments with history, progress, model swaps, export
records, review, served labels and roles per project, in one database.

``AnnotationStore`` is composed of one repository per concern (``annotations/repositories/``),
each an attribute named by its concern, so a call says where its method lives::

    store.corpora.register(version, corpus)
    store.judgments.record("ann", candidate_qid=7, label="same", bundle_version=version, query_qid=3)
    store.judgments.frame(annotator="ann")
    store.labels.corpus(version)          # the corpus under its newest label version

``judgments``, ``corpora``, ``labels``, ``swaps``, ``exports``, ``review`` and ``roles`` all read
from one engine and write through one ``GroupCommitWriter`` (``annotations/writer.py``: every
write is one committed transaction, grouped with the other writes of the process, and retried while
the database is busy), scoped to the store's one project. Input a user must fix raises
AnnotationError and writes nothing; invariants are database constraints (``annotations/models.py``).
"""

from __future__ import annotations

from sqlalchemy import Engine

from annotations.repositories.base import project_slug
from annotations.repositories.corpus import CorpusRepository
from annotations.repositories.exports import ExportRepository
from annotations.repositories.judgments import JudgmentRepository
from annotations.repositories.labels import LabelRepository
from annotations.repositories.review import ReviewRepository
from annotations.repositories.roles import RoleRepository
from annotations.repositories.swaps import SwapRepository
from annotations.writer import GroupCommitWriter


class AnnotationStore:
    """Judgments and corpus snapshots in one database, seen through one project (``project``: every
    query is scoped to it, see ``Repository``); open it with ``annotations.db.open_store`` and
    reach another project's with ``for_project``.

    ``write_option``: the execution option that marks a write transaction (``annotations.db``);
    ``group_commit=False`` gives each write a transaction of its own (see ``annotations.writer``).
    """

    def __init__(self, engine: Engine, write_option: str, project: str, group_commit: bool | None = None,
                 writer: GroupCommitWriter | None = None) -> None:
        self.engine, self.write_option, self.project = engine, write_option, project_slug(project)
        self.writer = writer or GroupCommitWriter(engine, write_option, group_commit)
        shared = (self.engine, self.writer, self.project)
        self.judgments = JudgmentRepository(*shared)
        self.corpora = CorpusRepository(*shared)
        self.labels = LabelRepository(*shared, corpora=self.corpora)
        self.swaps = SwapRepository(*shared)
        self.exports = ExportRepository(*shared)
        self.review = ReviewRepository(*shared)
        self.roles = RoleRepository(*shared)

    def for_project(self, project: str) -> "AnnotationStore":
        """The same database seen through project ``project`` (the engine and writer are shared)."""
        return AnnotationStore(self.engine, self.write_option, project, writer=self.writer)

    def close(self) -> None:
        """Finish the queued writes, then release the database's connections."""
        self.writer.close()
        self.engine.dispose()

    def __enter__(self) -> "AnnotationStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
