"""The annotation store: corpus snapshots, judgments with history, progress, model swaps, export
records, review, served labels and roles per project, in one database.

``AnnotationStore`` is one repository per concern (``annotations/repositories/``), all reading
from one engine and writing through one ``GroupCommitWriter`` (``annotations/writer.py``: every
write is one committed transaction, grouped with the other writes of the process, and retried while
the database is busy). Input a user must fix raises AnnotationError and writes nothing; invariants
are database constraints (``annotations/models.py``).
"""

from __future__ import annotations

from sqlalchemy import Engine

from annotations.repositories.corpus import CorpusRepository
from annotations.repositories.exports import ExportRepository
from annotations.repositories.judgments import JudgmentRepository
from annotations.repositories.labels import LabelRepository
from annotations.repositories.review import ReviewRepository
from annotations.repositories.roles import RoleRepository
from annotations.repositories.swaps import SwapRepository
from annotations.writer import GroupCommitWriter


# LabelRepository extends CorpusRepository (labels are read against the corpus snapshot), so it
# comes before it here: a base class must follow its subclasses in the method resolution order.
class AnnotationStore(JudgmentRepository, SwapRepository, ExportRepository, ReviewRepository, RoleRepository,
                      LabelRepository, CorpusRepository):
    """Judgments and corpus snapshots in one database, seen through one project (``project``: every
    query is scoped to it, see ``Repository``); open it with ``annotations.db.open_store`` and
    reach another project's with ``for_project``.

    ``write_option``: the execution option that marks a write transaction (``annotations.db``);
    ``group_commit=False`` gives each write a transaction of its own (see ``annotations.writer``).
    """

    def __init__(self, engine: Engine, write_option: str, project: str, group_commit: bool | None = None,
                 writer: GroupCommitWriter | None = None) -> None:
        super().__init__(engine, writer or GroupCommitWriter(engine, write_option, group_commit), project)
        self.write_option = write_option

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
