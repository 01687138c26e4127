"""Safe display of data in the page: questions, cluster ids and messages that echo what a user
typed are always shown as text, never as markup.

``plain`` escapes text for Markdown, ``text_table`` makes a frame ready for a table,
``when`` formats a stored timestamp, and ``shows_errors`` turns a handler's QPRError into a
warning in the page (Gradio renders warnings as HTML, so the message is escaped).
"""

from __future__ import annotations

import functools
import html
import logging
import re

import gradio as gr
import pandas as pd

from qpr.errors import QPRError

log = logging.getLogger("qpr.app")
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|~>])")


def plain(text: object) -> str:
    """``text`` escaped for a gr.Markdown so that data (cluster ids, questions) never becomes markup."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", html.escape(str(text), quote=False))


def shows_errors(handler=None, *, keep=None, action: str | None = None):
    """Input a user must fix (QPRError) becomes a warning in the page that starts with the action
    refused ("Could not ``action``", else the handler's name) and stays until the user closes it (a list
    of problems takes longer to read than a few seconds), and one line in the server log; the
    handler's outputs are left as they were (no error state on them). Any other exception is a
    bug and keeps its traceback. ``keep``, called with the handler's arguments, gives the few
    outputs to set all the same (the Annotate tab turns its keys back on for the item still shown)."""
    if handler is None:
        return functools.partial(shows_errors, keep=keep, action=action)
    title = f"Could not {action or handler.__name__.replace('_', ' ')}"

    @functools.wraps(handler)
    def wrapper(*args, **kwargs):
        try:
            return handler(*args, **kwargs)
        except QPRError as err:
            log.warning("%s refused input: %s", handler.__name__, str(err).splitlines()[0])
            # gr.Warning renders its message as HTML, and messages can echo what the user typed;
            # a message listing several problems keeps one per line.
            message = html.escape(str(err), quote=False).replace("\n", "<br>")
            gr.Warning(f"{title}: {message}", title=title, duration=None)
            return keep(*args, **kwargs) if keep else gr.skip()

    return wrapper


def text_table(frame: pd.DataFrame, columns: list[str] | None = None) -> pd.DataFrame:
    """``frame[columns]`` (all columns by default) with missing values blank, ready for a gr.Dataframe."""
    columns = list(frame.columns) if columns is None else columns
    return frame[columns].astype(object).where(frame[columns].notna(), "").reset_index(drop=True)


def when(value) -> str:
    """A stored timestamp as shown in tables (UTC, to the minute); blank when missing."""
    return pd.Timestamp(value).tz_convert("UTC").strftime("%Y-%m-%d %H:%M UTC") if pd.notna(value) else ""

