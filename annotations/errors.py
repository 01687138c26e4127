"""The exception the annotation package raises for anything a user or operator must fix."""

from qpr.errors import QPRError


class AnnotationError(QPRError):
    """Bad annotation input or an unusable database; the one-line message says what to fix."""
