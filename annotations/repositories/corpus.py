"""Corpus snapshots: the questions, clusters and splits that each bundle version of a project serves."""

from __future__ import annotations

import pandas as pd
from sqlalchemy import insert, select, update
from sqlalchemy.orm import Session

from annotations.errors import AnnotationError
from annotations.models import FIRST_PROJECT, Adjudication, BundleVersion, CorpusQuestion, Judgment
from annotations.repositories.base import Repository, bundle_version_name, corpus_snapshot
from qpr.data.corpus import COLUMNS, fingerprint


INSERT_CHUNK = 50_000  # corpus rows per INSERT: bounded memory whatever the corpus' size


class CorpusRepository(Repository):
    """Registers a bundle version's corpus once and reads it back as a qpr corpus."""

    def register(self, bundle_version: str, corpus: pd.DataFrame, digest: str | None = None) -> None:
        """Store the qid/question/cluster/split snapshot that ``bundle_version`` serves, as a
        bundle version of this project.

        Idempotent: registering the same version with the same corpus again does nothing; the same
        version with a different corpus, or a version another project registered, is refused
        (judgments already point into the first one).
        ``digest``: the corpus' fingerprint (``qpr.data.corpus.fingerprint``) when the caller has
        it (a bundle's manifest records it, checked when the bundle is loaded): a version already
        registered is then confirmed without checking and hashing the whole corpus again, which
        at a million questions took longer than the rest of the app's start. A new version's rows
        go in by chunks (one transaction), so a large corpus is never held as one list of rows.
        """
        version = bundle_version_name(bundle_version)
        if digest is not None:
            with Session(self.engine) as session:
                existing = session.get(BundleVersion, version)
                if existing is not None and existing.fingerprint == digest and existing.project == self.project:
                    return
        snapshot = corpus_snapshot(corpus)
        found = fingerprint(snapshot)

        def work(session: Session) -> None:
            existing = session.get(BundleVersion, version)
            if existing is not None:
                if existing.project != self.project:
                    raise AnnotationError(f"bundle version {version!r} belongs to another project; "
                                          "a project serves only bundles of its own")
                if existing.fingerprint != found:
                    raise AnnotationError(
                        f"bundle version {version!r} is already registered with a different corpus; "
                        "a new corpus needs a new bundle version"
                    )
                return
            session.add(BundleVersion(version=version, project=self.project, fingerprint=found, questions=len(snapshot)))
            session.flush()
            for start in range(0, len(snapshot), INSERT_CHUNK):
                rows = snapshot.iloc[start : start + INSERT_CHUNK]
                rows = rows.astype(object).where(rows.notna(), None).assign(bundle_version=version)
                session.execute(insert(CorpusQuestion), rows.to_dict("records"))

        self.writer.write(work)

    def claim_versions(self, versions: list[str]) -> list[str]:
        """Make this project the owner of those ``versions`` that still belong to the first project
        only because they were registered before judgments were scoped (migration 0009): the
        bundle versions a project keeps in its own folder, which no other project can hold. Their
        judgments, comments, exports, swaps and label versions come along (they reach their
        project through the bundle version), and so do the adjudications of items judged only on
        them. Returns the versions claimed; nothing to do for the first project itself."""
        versions = [bundle_version_name(v) for v in versions]
        if self.project == FIRST_PROJECT or not versions:
            return []

        def work(session: Session) -> list[str]:
            claimed = list(session.scalars(select(BundleVersion.version).where(
                BundleVersion.version.in_(versions), BundleVersion.project == FIRST_PROJECT)))
            if not claimed:
                return []
            session.execute(update(BundleVersion).where(BundleVersion.version.in_(claimed)).values(project=self.project))
            session.execute(update(Judgment).where(Judgment.bundle_version.in_(claimed)).values(project=self.project))
            theirs = select(Judgment.item_key).where(Judgment.bundle_version.in_(claimed)).distinct()
            elsewhere = select(Judgment.item_key).where(Judgment.project == FIRST_PROJECT).distinct()
            session.execute(update(Adjudication).where(
                Adjudication.project == FIRST_PROJECT, Adjudication.item_key.in_(theirs),
                Adjudication.item_key.not_in(elsewhere)).values(project=self.project))
            return claimed

        return self.writer.write(work)

    def versions(self) -> pd.DataFrame:
        """This project's registered bundle versions (version, questions, registered_at), newest first."""
        with Session(self.engine) as session:
            rows = session.execute(
                select(BundleVersion.version, BundleVersion.questions, BundleVersion.registered_at)
                .where(BundleVersion.project == self.project)
                .order_by(BundleVersion.registered_at.desc(), BundleVersion.version.desc())
            ).all()
        return pd.DataFrame(rows, columns=["version", "questions", "registered_at"])

    def snapshot(self, bundle_version: str | None = None) -> tuple[str, pd.DataFrame]:
        """``(version, corpus)``: the registered snapshot of this project's ``bundle_version``
        (default: its newest), as a qpr corpus (columns qid, question, cluster, split)."""
        versions = self.versions()["version"].tolist()
        if not versions:
            raise AnnotationError(f"no corpus of project {self.project!r} is registered in the annotation database yet "
                                  "(open the project in the app first)")
        version = versions[0] if bundle_version is None else bundle_version
        if version not in versions:
            raise AnnotationError(f"bundle version {version!r} is not registered in project {self.project!r}; "
                                  f"known: {', '.join(versions)}")
        with Session(self.engine) as session:
            rows = session.execute(
                select(CorpusQuestion.qid, CorpusQuestion.question, CorpusQuestion.cluster, CorpusQuestion.split)
                .where(CorpusQuestion.bundle_version == version)
                .order_by(CorpusQuestion.qid)
            ).all()
        frame = pd.DataFrame(rows, columns=COLUMNS)
        return version, frame.astype({"qid": "int64", "question": str, "cluster": "string", "split": str})
