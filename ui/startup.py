"""Starting the app: what it starts with (``workflows.app_start.open_app``: the settings, the
annotation database, the bundle the demo project serves, the general bundle), the page laid over
it, and launch. The BANKING77 demo's encoder starts training in the background once the page is
up (``workflows.demos``). ``QPR_MAX_UPLOAD_MB`` is the upload limit Gradio enforces
(``launch_options``). A bad setting, like any configuration error, prints one line and ``main``
returns 2.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import gradio as gr
from starlette.middleware import Middleware
from starlette.routing import BaseRoute

from qpr.errors import QPRError
from ui.common import AppContext
from ui.http_api import search_routes
from ui.logins import ClientAddress, Logins
from ui.page import QPRPage
from workflows.app_start import open_app
from workflows.demos import start_banking_training
from workflows.first_training import STOP_WAIT_S, FirstTraining
from workflows.project_versions import upload_limit

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


def launch_options(auth: Logins | None, cache: Path, routes: Sequence[BaseRoute] = ()) -> dict:
    """What ``gr.Blocks.launch`` is given: the logins (checked by ``ui.logins``), the page's script and style, the exports
    under ``cache`` as downloadable, the upload limit (``QPR_MAX_UPLOAD_MB``), which Gradio
    checks in the browser before sending and on the server while receiving, so an over-size
    file is never stored (``qpr.data.upload`` still checks files that reach it another way), and
    ``routes`` of the app's own beside the page (``ui.http_api``), given to the FastAPI app
    Gradio creates (its ``app_kwargs``), so they are matched before Gradio's."""
    return {"auth": auth, "head": SHORTCUTS, "css": CSS, "allowed_paths": [str(cache / "exports")],
            "max_file_size": upload_limit()[0],
            # Logins are counted per client address (``ui.logins``); the API description stays
            # unpublished (/openapi.json answered without a login; README documents the API).
            "app_kwargs": {"routes": list(routes), "middleware": [Middleware(ClientAddress)], "openapi_url": None}}


def main() -> int:
    """Serve the app; a configuration error prints one line and returns 2."""
    try:
        app = open_app()
        logins = Logins(app.logins) if app.logins else None
        ctx = AppContext(app.model, app.database, app.identity, app.examples, app.cache, general=app.general)
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
    training = start_banking_training(app.model, app.database)  # the BANKING77 demo's encoder, while BM25 answers
    try:
        serve(demo, options)
    except KeyboardInterrupt:
        pass  # Ctrl-C before Gradio's launch had finished starting: a close like any other, no traceback
    finally:
        if training is not None:
            stop_first_training(training)
    return 0


def stop_first_training(training: FirstTraining, wait_s: float = STOP_WAIT_S) -> None:
    """Wait for the demo's first training to stop at its next batch as the app closes; a second
    Ctrl-C quits at once, skipping the interpreter's clean-up, which would abort under a thread
    still inside torch (every acknowledged judgment is already committed)."""
    if not training.thread.is_alive():
        return
    print("closing: stopping the demo's first training (Ctrl-C again to quit at once)", file=sys.stderr, flush=True)
    try:
        stopped = training.stop(wait_s)
    except KeyboardInterrupt:
        sys.stdout.flush()
        os._exit(130)
    else:
        if not stopped:  # say where it hung, so that a close that gave up can be told apart from a slow batch
            print(f"closing: the demo's first training did not stop in {wait_s:g} s; closing without it (the next "
                  f"start trains it again). It was at:\n{training.where()}", file=sys.stderr, flush=True)


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
