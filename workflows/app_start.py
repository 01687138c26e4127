"""What the app starts with (``open_app``), read from the settings (``qpr.settings``; the README's
"Settings" says what each changes): ``QPR_AUTH``, or a Hugging Face Space (``SYSTEM``/``SPACE_ID``),
how annotators identify (``identity_mode``); ``QPR_DB_URL`` the annotation database
(``annotations.db.open_store``); ``QPR_GENERAL`` the general bundle new projects start from (a
folder or a Hub repository id); ``QPR_BUNDLE`` (a folder or a Hub repository id) and
``QPR_CACHE_DIR`` the bundle the demo project serves (``served_bundle``: else the last one
confirmed in the Retrain tab, else the demo ``QPR_DEMO`` names, ``workflows.demos``) and where
projects are kept. A bad value, like any configuration error, is a QPRError. ``ui.startup`` lays
the page over what this opened and launches it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from annotations.db import open_store
from annotations.store import AnnotationStore
from qpr.bundles.bundle import Bundle
from qpr.bundles.general import check_general
from qpr.bundles.hub import load_bundle
from qpr.errors import QPRError
from qpr.serving.served_model import ServedModel
from qpr.serving.slugs import DEMO
from qpr.settings import settings
from workflows.demos import BANKING_EXAMPLES, EXAMPLE_QUERIES, banking_demo, cache_dir, demo_bundle
from workflows.served_pointer import remembered_bundle
from workflows.served_projects import example_queries


@dataclass(frozen=True)
class AppStart:
    """What ``open_app`` opened: ``logins`` (``QPR_AUTH``'s pairs, or None), how annotators are
    known (``identity``: ``identity_mode``), the annotation ``database`` (seen as the demo's), the
    demo's served ``model`` and its ``examples`` for the Search tab, the ``general`` bundle new
    projects start from (or None) and the ``cache`` folder."""

    logins: list[tuple[str, str]] | None
    identity: str
    database: AnnotationStore
    model: ServedModel
    examples: tuple[str, ...]
    general: Bundle | None
    cache: Path


def open_app() -> AppStart:
    """Read the settings, open the annotation database, load the general bundle and the bundle
    the demo serves (module doc); a configuration error is a QPRError."""
    logins = settings().auth
    database = open_store(project=DEMO)  # the demo's view; each project's is ``for_project``'s
    general = general_bundle()
    bundle, examples = served_bundle()
    return AppStart(logins, identity_mode(logins), database, ServedModel(bundle), examples, general, cache_dir())


def identity_mode(auth: list[tuple[str, str]] | None) -> str:
    """"auth" with QPR_AUTH logins, "oauth" on Hugging Face Spaces (``Settings.space``), else "name"."""
    if auth:
        return "auth"
    return "oauth" if settings().space else "name"


def served_bundle() -> tuple[Bundle, tuple[str, ...]]:
    """The bundle to serve and example queries for it: ``QPR_BUNDLE``, else the last bundle
    confirmed in the app (if it still loads), else the demo (``QPR_DEMO``)."""
    if settings().bundle:
        bundle = load_bundle(settings().bundle)
    else:
        bundle = _last_confirmed()
        if bundle is None:
            # The demo model is tiny: a second thread costs more in synchronisation than it saves, and
            # far more when another process holds a core (demo training: 2.6 s on one thread, 106 s on two).
            torch.set_num_threads(1)
            if settings().demo == "tutorial":
                return demo_bundle(), EXAMPLE_QUERIES
            return banking_demo(), BANKING_EXAMPLES
    return bundle, example_queries(bundle)


def _last_confirmed() -> Bundle | None:
    path = remembered_bundle(cache_dir())
    if path is None:
        return None
    try:
        return Bundle.load(path)
    except QPRError as err:
        print(f"[qpr] serving the demo, not the last confirmed bundle: {err}", file=sys.stderr)
        return None


def general_bundle() -> Bundle | None:
    """``QPR_GENERAL``'s bundle (a folder or a Hub repository id), checked to be one a project can
    start from; None without it."""
    path = settings().general
    return check_general(load_bundle(path)) if path else None
