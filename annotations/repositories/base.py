"""What every repository shares: the engine it reads from, the writer it writes through, and the
checks and lookups that several of them make."""

from __future__ import annotations

import operator

import pandas as pd
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from annotations.errors import AnnotationError
from annotations.models import Annotator
from annotations.names import annotator_key
from annotations.writer import GroupCommitWriter
from qpr.data.corpus import check_corpus
from qpr.errors import QPRError


class Repository:
    """Reads in their own session of ``engine``; writes as work handed to ``writer``, which commits
    it (the writer is shared, so the writes of all repositories of one store are grouped together)."""

    def __init__(self, engine: Engine, writer: GroupCommitWriter) -> None:
        self.engine = engine
        self.writer = writer


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
