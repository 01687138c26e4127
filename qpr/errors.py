"""The one exception type the library raises for input a user must fix.

The CLI prints these as a single line and exits with status 2; the app shows them in the page.
Anything else escaping the library is a bug, not a user error.
"""


class QPRError(ValueError):
    """Bad input (empty query, malformed file, mismatched bundle...): the message says what to fix."""


def one_line(err: BaseException, limit: int = 200) -> str:
    """The first line of ``err``'s message (or its type's name), cut to ``limit`` characters: what a
    QPRError quotes from another library's exception, so its own message stays one line."""
    text = (str(err).strip().splitlines() or [type(err).__name__])[0]
    return text if len(text) <= limit else text[: limit - 3] + "..."
