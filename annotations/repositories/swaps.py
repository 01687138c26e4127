"""Model swaps: which bundle version an annotator put into service, in place of which, trained
from which judgments."""

from __future__ import annotations

import pandas as pd
from sqlalchemy import select
from sqlalchemy.orm import Session

from annotations.models import Annotator, BundleVersion, ModelSwap
from annotations.names import annotator_name
from annotations.repositories.base import Repository, annotator_row, bundle_version_name


class SwapRepository(Repository):
    """The record of served models, oldest first."""

    def record(self, annotator: str, bundle_version: str, replaced_version: str | None,
                    judgment_ids: list[int]) -> int:
        """Record that ``annotator`` put ``bundle_version`` into service in place of
        ``replaced_version``, trained from ``judgment_ids``; returns the record's id."""
        name = annotator_name(annotator)
        version = bundle_version_name(bundle_version)

        def work(session: Session) -> int:
            for known in (version, replaced_version):
                if known is not None:
                    self.own_version(session, known)
            swap = ModelSwap(annotator_id=annotator_row(session, name).id, bundle_version=version,
                             replaced_version=replaced_version, judgment_ids=[int(i) for i in judgment_ids])
            session.add(swap)
            session.flush()
            return swap.id

        return self.writer.write(work)

    def frame(self) -> pd.DataFrame:
        """This project's model swaps, oldest first: id, created_at, annotator (as first written),
        bundle_version, replaced_version, judgment_ids."""
        with Session(self.engine) as session:
            rows = session.execute(
                select(ModelSwap.id, ModelSwap.created_at, Annotator.name, ModelSwap.bundle_version,
                       ModelSwap.replaced_version, ModelSwap.judgment_ids).join(Annotator)
                .join(BundleVersion, BundleVersion.version == ModelSwap.bundle_version)
                .where(BundleVersion.project == self.project).order_by(ModelSwap.id)
            ).all()
        return pd.DataFrame(rows, columns=["id", "created_at", "annotator", "bundle_version", "replaced_version", "judgment_ids"])
