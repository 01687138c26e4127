"""Starting the app: which bundle to serve, the annotation store, identity, and launch.

The settings it reads (``qpr.settings``; the README's "Settings" says what each changes):
``QPR_BUNDLE`` (a folder or a Hub repository id) and ``QPR_CACHE_DIR`` choose the bundle the demo
project serves (else the last one confirmed in the Retrain tab, else the demo ``QPR_DEMO`` names:
BANKING77, whose encoder ``main`` starts training in the background, or the tutorial) and where
projects are kept; ``QPR_GENERAL`` the general bundle new projects
start from (a folder or a Hub repository id too); ``QPR_AUTH``, or a Hugging Face Space's ``SYSTEM``/``SPACE_ID``, how annotators
identify; ``QPR_DB_URL`` the annotation database (``annotations.db.open_store``);
``QPR_MAX_UPLOAD_MB`` the upload limit Gradio enforces (``launch_options``). A bad value, like
any configuration error, prints one line and ``main`` returns 2.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import gradio as gr
import torch
from starlette.middleware import Middleware
from starlette.routing import BaseRoute

from annotations.db import open_store
from qpr.bundles.bundle import Bundle
from qpr.bundles.general import check_general
from qpr.bundles.hub import load_bundle
from qpr.data.upload import max_upload_bytes
from qpr.errors import QPRError
from qpr.serving.served_model import ServedModel
from qpr.serving.slugs import DEMO
from qpr.settings import settings
from ui.common import AppContext, identity_mode
from ui.http_api import search_routes
from ui.logins import ClientAddress, Logins
from ui.page import QPRPage
from ui.pages import example_queries
from workflows.demos import BANKING_EXAMPLES, EXAMPLE_QUERIES, banking_demo, cache_dir, demo_bundle, start_banking_training
from workflows.served_pointer import remembered_bundle

# The Annotate tab's keyboard shortcuts, and what holds them while an item loads.
SHORTCUTS = f"<script>\n{(Path(__file__).with_name('shortcuts.js')).read_text()}</script>\n"
# Questions are text to read: the tables' cells in the page's font, not Gradio's monospace (its
# cells and headers hold their text in nested elements, which get it too; a Dataframe draws its
# cells as <td> or, in its grid view, as div[role=gridcell]); headers wrap between words only
# (Gradio breaks them anywhere, "clus-ter" in a narrow column).
CELLS = ("table td", "table th", "[role=gridcell]", "[role=columnheader]")
CSS = (", ".join(f".gradio-container {cell}, .gradio-container {cell} *" for cell in CELLS)
       + " { font-family: var(--font) !important; }\n"
       ".gradio-container table th *, .gradio-container [role=columnheader] * "
       "{ word-break: normal !important; overflow-wrap: normal !important; }")


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


def launch_options(auth: Logins | None, cache: Path, routes: Sequence[BaseRoute] = ()) -> dict:
    """What ``gr.Blocks.launch`` is given: the logins (checked by ``ui.logins``), the page's script and style, the exports
    under ``cache`` as downloadable, the upload limit (``QPR_MAX_UPLOAD_MB``), which Gradio
    checks in the browser before sending and on the server while receiving, so an over-size
    file is never stored (``qpr.data.upload`` still checks files that reach it another way), and
    ``routes`` of the app's own beside the page (``ui.http_api``), given to the FastAPI app
    Gradio creates (its ``app_kwargs``), so they are matched before Gradio's."""
    return {"auth": auth, "head": SHORTCUTS, "css": CSS, "allowed_paths": [str(cache / "exports")],
            "max_file_size": max_upload_bytes(),
            # Logins are counted per client address (``ui.logins``); the API description stays
            # unpublished (/openapi.json answered without a login; README documents the API).
            "app_kwargs": {"routes": list(routes), "middleware": [Middleware(ClientAddress)], "openapi_url": None}}


def main() -> int:
    """Serve the app; a configuration error prints one line and returns 2."""
    try:
        auth = settings().auth
        logins = Logins(auth) if auth else None
        store = open_store(project=DEMO)  # the demo's view; each project's is AppContext's
        general = general_bundle()
        bundle, examples = served_bundle()
        model = ServedModel(bundle)
        ctx = AppContext(model, store, identity_mode(auth), examples, cache_dir(), general=general)
        options = launch_options(logins, ctx.cache, search_routes(ctx, logins))
    except QPRError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    # Gradio recomputes its per-function statistics (a DataFrame over up to 10,000 past events)
    # after every event by default, so each request cost more the longer the app ran; every
    # 1,000 events is enough for the numbers it shows.
    os.environ.setdefault("GRADIO_ANALYTICS_CACHE_FREQUENCY", "1000")
    demo = QPRPage(ctx).build()
    # Searches and judgments are short: several run at once; retraining runs one at a time.
    demo.queue(default_concurrency_limit=8)
    start_banking_training(model, store)  # the BANKING77 demo's encoder, while BM25 answers
    serve(demo, options)
    return 0


def serve(demo: gr.Blocks, options: dict, *, block: bool = True) -> None:
    """Launch the built page with ``launch_options``'s ``options``; ``block=False`` returns once
    the server is up, quietly (tests serve the app this way).

    A full garbage collection walks every object the process holds: 250 ms on the 2-core machine
    with torch, pandas, FAISS and Gradio loaded, paid by whichever request happens to trigger it
    (most of a search's p99, docs/SERVING.md). Gradio's launch itself gives up ("When localhost
    is not accessible...") when its first request to the page takes over 3 s, which a collection
    in a large process can. What start-up built lives as long as the app, so after collecting
    start-up's garbage it is taken out of the collector's walks."""
    gc.collect()
    gc.freeze()
    demo.launch(prevent_thread_lock=not block, quiet=not block, **options)
