"""The one exception type the library raises for input a user must fix.

The CLI prints these as a single line and exits with status 2; the app shows them in the page.
Anything else escaping the library is a bug, not a user error.
"""


class QPRError(ValueError):
    """Bad input (empty query, malformed file, mismatched bundle...): the message says what to fix."""
