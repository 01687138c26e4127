"""How the annotation store names people and items: annotator names as written, who a name
identifies, and the bundle-independent key of a (query, candidate) item."""

from __future__ import annotations

import hashlib
import unicodedata

from annotations.errors import AnnotationError
from annotations.models import MAX_NAME_CHARS
from qpr.model.text import text_problem


def item_key(candidate_qid: int, query_qid: int | None = None, query_text: str | None = None) -> str:
    """The bundle-independent name of a (query, candidate) item (see models.Judgment)."""
    if query_qid is not None:
        return f"qid:{query_qid}:{candidate_qid}"
    return f"text:{hashlib.sha256(query_text.encode()).hexdigest()}:{candidate_qid}"


def annotator_name(name: object) -> str:
    """The annotator name as written, normalised: surrounding spaces removed, Unicode NFC (so an
    accent typed as one character or as two is the same name). AnnotationError for an empty or
    over-long name, or one holding control characters or invalid Unicode. Who the name identifies
    is ``annotator_key``; the store shows an annotator by the name they first wrote."""
    if not isinstance(name, str) or not name.strip():
        raise AnnotationError("the annotator name is empty: type your name")
    problem = text_problem(name)
    if problem:
        raise AnnotationError(f"the annotator name {problem}")
    name = unicodedata.normalize("NFC", name.strip())
    control = next((c for c in name if unicodedata.category(c) == "Cc"), None)
    if control is not None:
        raise AnnotationError(f"the annotator name contains the control character U+{ord(control):04X}; type it on one line "
                              "without it")
    if len(name) > MAX_NAME_CHARS:
        raise AnnotationError(f"the annotator name has {len(name)} characters; use at most {MAX_NAME_CHARS}")
    if not annotator_key(name):
        raise AnnotationError("the annotator name has no visible characters: type your name")
    return name


def annotator_key(name: str) -> str:
    """Who ``name`` identifies: the normalised name case-folded (``str.casefold``: "Straße" and
    "STRASSE" are one person) and without invisible format characters (zero-width spaces and
    joiners, which would let "alice" and "al\u200bice" look alike and be two people).
    ``annotations/migrations/versions/0003_annotator_identity.py`` holds a frozen copy."""
    folded = unicodedata.normalize("NFC", unicodedata.normalize("NFC", name.strip()).casefold())
    return "".join(c for c in folded if unicodedata.category(c) != "Cf")
