"""The operator's settings: every environment variable the product reads, typed, in one place.

``settings()`` reads the environment once and keeps the result; everything else asks it rather
than ``os.environ``, so a variable's name, default and rule live here alone (the README's
"Settings" section lists them). A bad value is a ``SettingsError`` whose message names each bad
variable and what it expects, one per line.

The settings are read once per process: a test that changes the environment calls
``settings.cache_clear()`` so that the next ``settings()`` reads it again (``tests/conftest.py``
does this for every ``monkeypatch.setenv`` and ``delenv``).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, ValidationError, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from qpr.errors import QPRError

# Where the shared real data sets live when QPR_DATA_DIR is unset: ../shared/data beside the repo.
SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


class SettingsError(QPRError):
    """One or more environment variables hold a value the product cannot use; the message names
    each of them and what it expects, one line each."""


def parse_auth(spec: str | None) -> list[tuple[str, str]] | None:
    """``QPR_AUTH`` ("alice:secret1,bob:secret2") as Gradio login pairs; None when unset or blank."""
    if spec is None or not spec.strip():
        return None
    pairs = []
    for entry in spec.split(","):
        user, colon, password = entry.strip().partition(":")
        if not colon or not user.strip() or not password:
            raise QPRError("QPR_AUTH must be user:password pairs separated by commas, e.g. alice:secret1,bob:secret2")
        pairs.append((user.strip(), password))
    return pairs


def parse_overlap(value: object) -> int | None:
    """``QPR_OVERLAP`` (annotators per item, ``annotations.assign``) as a positive int; None when
    unset or blank (no limit)."""
    if value is None or not str(value).strip():
        return None
    try:
        overlap = int(str(value).strip())
    except ValueError:
        overlap = 0
    if overlap < 1:
        raise QPRError(f"QPR_OVERLAP must be a positive whole number (annotators per item); got {value!r}")
    return overlap


class Settings(BaseSettings):
    """The settings, one field per environment variable (the alias is its exact name; names are
    case-sensitive, as the environment is). Build it through ``settings()``."""

    model_config = SettingsConfigDict(case_sensitive=True, frozen=True)

    data_dir: Path = Field(SHARED_DATA, validation_alias="QPR_DATA_DIR")
    """The shared real data sets (quora-lite, intents, wikianswers...): default data paths of the CLI."""
    cache_dir: Path = Field(Path("runs"), validation_alias="QPR_CACHE_DIR")
    """The app's demo bundle, retrained bundles, exports and projects (relative: to the working folder)."""
    db_url: str | None = Field(None, validation_alias="QPR_DB_URL")
    """The annotation database; None: ``annotations.db.DEFAULT_URL`` (sqlite:///data/annotations.db)."""
    bundle: Path | None = Field(None, validation_alias="QPR_BUNDLE")
    """A saved bundle (a folder, or a Hub repository id owner/name) for the app to serve instead of the last
    confirmed one or the demo."""
    demo: Literal["banking77", "tutorial"] = Field("banking77", validation_alias="QPR_DEMO")
    """The app's demo when nothing else is served: BANKING77's real questions (served by BM25 at once while its
    encoder trains in the background), or the hand-written annotation tutorial (``workflows.demos``)."""
    general: Path | None = Field(None, validation_alias="QPR_GENERAL")
    """A general bundle (a folder, or a Hub repository id owner/name) that serves a project's upload until the
    project trains (docs/OUT_OF_DOMAIN.md)."""
    auth: Annotated[list[tuple[str, str]] | None, NoDecode] = Field(None, validation_alias="QPR_AUTH")
    """The app's logins (user, password); None: no login (Hugging Face sign-in on a Space, else typed names)."""
    admins: Annotated[tuple[str, ...], NoDecode] = Field((), validation_alias="QPR_ADMINS")
    """With logins, the names that alone may review, change the served clusters and replace the served
    model (``ui.common.AppContext.privileged``); empty: anyone signed in."""
    task_size: int | None = Field(None, validation_alias="QPR_TASK_SIZE")
    """Pairs in the corpus-wide annotation task; None: ``annotations.task.TASK_SIZE`` (2000)."""
    max_upload_mb: float = Field(50.0, validation_alias="QPR_MAX_UPLOAD_MB")
    """The largest file the Projects tab imports, in decimal megabytes."""
    max_served_mb: float = Field(2000.0, validation_alias="QPR_MAX_SERVED_MB")
    """The memory the app may spend on projects' served models, in megabytes (estimated per
    project, ``qpr.serving.workspaces``): past it, the least recently opened project is unloaded
    (reloaded when a page opens it again)."""
    overlap: int | None = Field(None, validation_alias="QPR_OVERLAP")
    """At most this many annotators label each item; None: no limit (everyone sees every item)."""
    coalesce_searches: bool = Field(True, validation_alias="QPR_COALESCE_SEARCHES")
    """Answer concurrent searches together (``qpr.serving.batching``); 0: each alone, as before."""
    device: Literal["auto", "cpu", "cuda"] = Field("auto", validation_alias="QPR_DEVICE")
    """Where the app's background training and encoding run: auto (CUDA when available), cpu or cuda."""
    system: str = Field("", validation_alias="SYSTEM")
    """Set by Hugging Face Spaces ("spaces" there); with ``space_id`` it decides the identity mode."""
    space_id: str | None = Field(None, validation_alias="SPACE_ID")
    """The Space's name (owner/name), set by Hugging Face Spaces."""
    world_size: int = Field(1, validation_alias="WORLD_SIZE")
    """The number of training workers, set by ``torchrun`` (``qpr.training.distributed``); 1 outside it."""

    @property
    def space(self) -> str | None:
        """The Hugging Face Space the app runs on, else None: ``SPACE_ID`` when ``SYSTEM`` is
        "spaces" (the rule of Gradio's ``get_space``, which Gradio itself applies)."""
        return self.space_id if self.system == "spaces" else None

    @field_validator("demo", mode="before")
    @classmethod
    def _demo(cls, value: object) -> object:
        if isinstance(value, str) and value.strip() not in ("", "banking77", "tutorial"):
            raise QPRError(f"QPR_DEMO must be banking77 (real questions) or tutorial (the hand-written corpus); got {value!r}")
        return value.strip() or "banking77" if isinstance(value, str) else value

    @field_validator("db_url", "bundle", "general", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        # An empty QPR_DB_URL, QPR_BUNDLE or QPR_GENERAL has always meant "not set".
        return None if value == "" else value

    @field_validator("auth", mode="before")
    @classmethod
    def _auth(cls, value: object) -> object:
        return parse_auth(value) if isinstance(value, str) else value

    @field_validator("admins", mode="before")
    @classmethod
    def _admins(cls, value: object) -> object:
        return tuple(name.strip() for name in value.split(",") if name.strip()) if isinstance(value, str) else value

    @field_validator("task_size", mode="before")
    @classmethod
    def _task_size(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        if not value.strip():
            return None
        if not value.strip().isdigit() or int(value) < 1:
            raise QPRError(f"QPR_TASK_SIZE must be a whole number of pairs, 1 or more, e.g. 2000; got {value!r}")
        return int(value)

    @field_validator("max_upload_mb", "max_served_mb", mode="before")
    @classmethod
    def _megabytes(cls, value: object, info: ValidationInfo) -> object:
        if not isinstance(value, str):
            return value
        field = cls.model_fields[info.field_name]
        if not value.strip():
            return field.default
        try:
            limit_mb = float(value)
        except ValueError:
            limit_mb = -1.0
        if not limit_mb > 0:
            raise QPRError(f"{field.validation_alias} must be a positive number of megabytes, e.g. {field.default:g}; "
                           f"got {value!r}")
        return limit_mb

    @field_validator("overlap", mode="before")
    @classmethod
    def _overlap(cls, value: object) -> object:
        return parse_overlap(value)


@functools.cache
def settings() -> Settings:
    """The settings read from the environment, once per process (``settings.cache_clear()``
    forgets them); ``SettingsError`` naming every bad variable."""
    try:
        return Settings()
    except ValidationError as err:
        raise SettingsError("\n".join(_problem(e) for e in err.errors())) from None


def environment(**overrides: str) -> dict[str, str]:
    """This process' whole environment with ``overrides``: what a worker process the product starts
    (``workflows.background_training``) is handed, so that it reads the same settings."""
    return dict(os.environ) | overrides


def _problem(error: dict) -> str:
    # The validators' own messages name the variable and what it expects; pydantic's (a type it
    # could not convert to) are prefixed with the variable, its ``loc`` being the alias.
    cause = error.get("ctx", {}).get("error")
    return str(cause) if isinstance(cause, QPRError) else f"{error['loc'][0]}: {error['msg']}"
