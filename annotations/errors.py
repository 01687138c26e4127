"""The exception the annotation package raises for anything a user or operator must fix."""

from qpr.errors import QPRError


class AnnotationError(QPRError):
    """Bad annotation input or an unusable database; the one-line message says what to fix."""


class DatabaseUnavailable(AnnotationError):
    """The database cannot be reached or written right now (a server restarting, a full disk):
    nothing was changed, and the same call succeeds once it is back (connections are re-made)."""
