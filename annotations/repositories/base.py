"""What every repository shares: the engine it reads from, the writer it writes through, the one
project it is scoped to, and the checks and lookups that several of them make."""

from __future__ import annotations

import operator

import pandas as pd
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from annotations.errors import AnnotationError
from annotations.models import MAX_PROJECT_CHARS, Annotator, BundleVersion
from annotations.names import annotator_key
from annotations.writer import GroupCommitWriter
from qpr.data.corpus import check_corpus
from qpr.errors import QPRError


class Repository:
    """Reads in their own session of ``engine``; writes as work handed to ``writer``, which commits
    it (the writer is shared, so the writes of all repositories of one store are grouped together).

    Every read and write is scoped to ``project`` (a slug, required): what belongs to another
    project is neither read nor written, and a bundle version of another project is refused as
    unknown. Rows reach their project through their bundle version (``models.BundleVersion``)."""

    def __init__(self, engine: Engine, writer: GroupCommitWriter, project: str) -> None:
        self.engine = engine
        self.writer = writer
        self.project = project_slug(project)

    def own_version(self, session: Session, version: object) -> str:
        """``version`` when it is a bundle version registered in this project; AnnotationError
        otherwise (also when another project registered it: it is not named)."""
        version = bundle_version_name(version)
        if session.scalar(select(BundleVersion.project).where(BundleVersion.version == version)) != self.project:
            raise AnnotationError(f"bundle version {version!r} is not registered in this project: register its corpus first")
        return version


def project_slug(project: object) -> str:
    """``project`` if it can name a project (a non-empty slug of at most ``MAX_PROJECT_CHARS``)."""
    if not isinstance(project, str) or not project.strip() or len(project) > MAX_PROJECT_CHARS:
        raise AnnotationError(f"the project must be a slug of 1 to {MAX_PROJECT_CHARS} characters; got {project!r}")
    return project


def bundle_version_name(version: object) -> str:
    """``version`` if it can name a bundle version; AnnotationError if it is empty or too long."""
    if not isinstance(version, str) or not version.strip():
        raise AnnotationError("the bundle version is empty: pass the version of the bundle that was shown")
    if len(version) > 100:
        raise AnnotationError(f"bundle version {version[:40]!r}... is longer than 100 characters")
    return version


def integer_id(value: object, what: str) -> int:
    """``value`` as an integer id (``what`` names it in the error); bools and floats are refused."""
    try:
        if isinstance(value, bool):
            raise TypeError
        return operator.index(value)
    except TypeError:
        raise AnnotationError(f"{what} must be an integer question id, got {value!r}") from None


def corpus_snapshot(corpus: pd.DataFrame) -> pd.DataFrame:
    """The corpus columns to register, checked by the corpus schema's one validator."""
    try:
        return check_corpus(corpus, "the corpus")
    except QPRError as err:
        raise AnnotationError(str(err)) from None


def annotator_row(session: Session, name: str) -> Annotator:
    """The annotator ``name`` identifies (``annotator_key``), created on their first write."""
    person = session.scalar(select(Annotator).where(Annotator.name_key == annotator_key(name)))
    if person is None:
        # A concurrent first write under another spelling violates the unique name_key index;
        # the retry then finds that annotator.
        person = Annotator(name=name, name_key=annotator_key(name))
        session.add(person)
        session.flush()
    return person
