"""What every tab shares: the app's context, who the annotator is, and safe display of data.

``AppContext`` is what the handlers act on (the served model, the annotation store, how
annotators identify, the app's cache folder). Data (questions, cluster ids, messages that echo
what a user typed) is always shown as text: ``plain`` for Markdown, ``text_table`` for tables,
and ``shows_errors`` for error messages, which Gradio renders as HTML.
"""

from __future__ import annotations

import functools
import html
import re
from dataclasses import dataclass, field
from pathlib import Path

import gradio as gr
import pandas as pd
from gradio.utils import get_space

from annotations.store import AnnotationStore, annotator_name
from qpr.errors import QPRError
from qpr.serving import ServedModel
from ui.demo import cache_dir

_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|~>])")


@dataclass
class AppContext:
    """What the handlers act on. ``identity`` is how annotators are known: "name" (typed),
    "auth" (``QPR_AUTH`` login) or "oauth" (Hugging Face sign-in on Spaces); ``examples`` are
    queries for the Search tab; ``cache`` holds saved bundles and exports."""

    model: ServedModel
    store: AnnotationStore
    identity: str = "name"
    examples: tuple[str, ...] = ()
    cache: Path = field(default_factory=cache_dir)

    def __post_init__(self) -> None:
        self.cache = Path(self.cache)
        served = self.model.current().bundle
        self.store.register_corpus(served.version, served.corpus)

    def annotator(self, name: str | None, request: gr.Request | None = None, profile: gr.OAuthProfile | None = None) -> str:
        """The annotator's name, or an error that says how to identify (anonymous users may only search)."""
        if self.identity == "auth":
            who, how = getattr(request, "username", None), "sign in"
        elif self.identity == "oauth":
            who, how = getattr(profile, "username", None), "sign in with Hugging Face (button at the top)"
        else:
            who, how = name, "type your name in the 'Your name' box"
        if not who or not str(who).strip():
            raise QPRError(f"To record judgments, {how}. Anyone can search without it.")
        return annotator_name(who)

    def whoami(self, request: gr.Request, profile: gr.OAuthProfile | None) -> str:
        """The page header's line about who is annotating."""
        try:
            return f"Annotating as **{plain(self.annotator(None, request, profile))}**"
        except QPRError:
            if self.identity == "name":
                return "Anyone can search; type your name to annotate."
            return "Not signed in: you can search, but sign in to annotate."


def plain(text: object) -> str:
    """``text`` escaped for a gr.Markdown so that data (cluster ids, questions) never becomes markup."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", html.escape(str(text), quote=False))


def shows_errors(handler):
    """Show the library's QPRError (input a user must fix) as an error message in the page."""

    @functools.wraps(handler)
    def wrapper(*args, **kwargs):
        try:
            return handler(*args, **kwargs)
        except QPRError as err:
            # gr.Error renders its message as HTML, and messages can echo what the user typed.
            raise gr.Error(html.escape(str(err), quote=False)) from err

    return wrapper


def text_table(frame: pd.DataFrame, columns: list[str] | None = None) -> pd.DataFrame:
    """``frame[columns]`` (all columns by default) with missing values blank, ready for a gr.Dataframe."""
    columns = list(frame.columns) if columns is None else columns
    return frame[columns].astype(object).where(frame[columns].notna(), "").reset_index(drop=True)


def when(value) -> str:
    """A stored timestamp as shown in tables (UTC, to the minute); blank when missing."""
    return pd.Timestamp(value).tz_convert("UTC").strftime("%Y-%m-%d %H:%M UTC") if pd.notna(value) else ""


def parse_auth(spec: str | None) -> list[tuple[str, str]] | None:
    """``QPR_AUTH`` ("alice:secret1,bob:secret2") as Gradio login pairs; None when unset."""
    if spec is None or not spec.strip():
        return None
    pairs = []
    for entry in spec.split(","):
        user, colon, password = entry.strip().partition(":")
        if not colon or not user.strip() or not password:
            raise QPRError("QPR_AUTH must be user:password pairs separated by commas, e.g. alice:secret1,bob:secret2")
        pairs.append((user.strip(), password))
    return pairs


def identity_mode(auth: list[tuple[str, str]] | None) -> str:
    """"auth" with QPR_AUTH logins, "oauth" on Hugging Face Spaces, else "name"."""
    if auth:
        return "auth"
    return "oauth" if get_space() else "name"


def admins() -> set[str]:
    """``QPR_ADMINS`` ("alice,bob"): who may adjudicate and edit guidelines in login mode; empty when unset."""
    import os

    return {name.strip() for name in os.environ.get("QPR_ADMINS", "").split(",") if name.strip()}


def reviewer(ctx: AppContext, name: str | None, request: gr.Request | None = None,
             profile: gr.OAuthProfile | None = None) -> str:
    """Who may review (adjudicate, apply merges, edit guidelines): in name mode anyone named (names
    are not verified); in login mode anyone signed in, or only ``QPR_ADMINS`` when that is set."""
    who = ctx.annotator(name, request, profile)
    allowed = admins()
    if ctx.identity != "name" and allowed and who not in allowed:
        raise QPRError(f"{who} may not review: only {', '.join(sorted(allowed))} (QPR_ADMINS) may. Ask one of them.")
    return who


def review_note(ctx: AppContext) -> str:
    """What the page says about who may review."""
    if ctx.identity == "name":
        return "Anyone who types a name may review here; **names are not verified**, so decisions are signed, not authenticated."
    if admins():
        return f"Only {plain(', '.join(sorted(admins())))} (QPR_ADMINS) may record decisions here."
    return "Anyone signed in may record decisions here (set QPR_ADMINS to restrict it)."
