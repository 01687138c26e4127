"""Export records: which judgments and merge decisions each export of corrected clusters holds."""

from __future__ import annotations

from datetime import datetime
from typing import Callable

from sqlalchemy import insert, select
from sqlalchemy.orm import Session

from annotations.models import BundleVersion, Export, ExportJudgment, MergeDecision
from annotations.repositories.base import Repository


class ExportRepository(Repository):
    """Records an export in the same transaction as its judgments, decisions and files."""

    def record(
        self,
        bundle_version: str,
        fmt: str,
        path: str,
        counts: dict,
        judgment_ids: list[int],
        decisions: list[dict],
        created: datetime | None = None,
        before_commit: Callable[[int], None] | None = None,
    ) -> int:
        """Record an export of this project's ``bundle_version`` (``counts``: questions, clusters_before, clusters_after), the judgments
        it included and its merge decisions (dicts with decision, cluster_a, cluster_b,
        judgment_ids, reason) in one transaction; returns the export id.

        ``before_commit(export_id)`` runs inside the transaction, after the rows are written and
        before the commit: ``annotations.export`` places the files there, so the database holds an
        export only once its files are in place, and an error placing them records nothing. It
        may run again if the transaction is retried."""

        def work(session: Session) -> int:
            self.own_version(session, bundle_version)
            export = Export(bundle_version=bundle_version, format=fmt, path=path, **counts)
            if created is not None:
                export.created_at = created
            session.add(export)
            session.flush()
            if judgment_ids:
                session.execute(insert(ExportJudgment), [{"export_id": export.id, "judgment_id": int(j)} for j in judgment_ids])
            if decisions:
                session.execute(insert(MergeDecision), [d | {"export_id": export.id} for d in decisions])
            if before_commit is not None:
                before_commit(export.id)
            return export.id

        return self.writer.write(work, solo=True)

    def recorded(self, note: dict) -> bool:
        """Whether the export that ``note`` describes (export_id, path, created: what
        ``annotations.export`` journals while placing files) was committed to the database."""
        try:
            export_id, path, created = int(note["export_id"]), str(note["path"]), datetime.fromisoformat(note["created"])
        except (KeyError, TypeError, ValueError):
            return False
        with Session(self.engine) as session:
            row = session.get(Export, export_id)
            theirs = row is not None and session.scalar(
                select(BundleVersion.project).where(BundleVersion.version == row.bundle_version)) == self.project
        return theirs and row.path == path and row.created_at == created
