"""Every path that reads or writes a project's data, walked as a login with no role in it (issue
55, part 1), against the app launched as ``ui.startup.main`` launches it in login mode: what the
test checks and ``python -m bench.reliability_ops --parts access`` counts.

The paths, and the rule each goes through (``ui.access.ProjectAccess``):

- the page's handlers: each acts on the page's project only, which a page opens through
  ``AppContext.open`` (``may_read``); walked by opening the project as the stranger (refused, the
  page stays on the demo), reading the page's project list (the demo alone) and the page's
  config and API description (no trace of the project's slug);
- the HTTP API (``/api/search``): ``may_read`` again, a 404 as for a project that does not exist;
- the file routes (an export's files): written to a folder of unguessable name (``reader``), so
  a stranger cannot name one; walked by asking for the export folder and its files without it;
- the API description ``/openapi.json``: unpublished;
- logins: wrong passwords held to ``ui.logins.PER_MINUTE`` a minute per name and per address,
  walked by guessing 200 times, then giving the right password (refused until the minute passes).
"""

from __future__ import annotations

import gc
from pathlib import Path
from types import SimpleNamespace

import httpx

from annotations.db import open_store
from harness.corpora import make_corpus
from qpr.errors import QPRError
from qpr.serving.served_model import ServedModel
from ui.common import AppContext
from ui.http_api import PATH, search_routes
from ui.logins import Logins
from ui.page import QPRPage
from ui.startup import launch_options, serve

# Each kind of path and the rule it goes through; a route of the app's own that is not here has none.
RULES = {
    "page": "AppContext.open asks may_read; every handler acts on the page's project",
    "project list": "ProjectAccess.readable (may_read)",
    PATH: "ProjectAccess.may_read, a refusal answered as a project that does not exist",
    "files": "exports in a folder of unguessable name, written for ProjectAccess.reader",
    "/openapi.json": "not published",
    "/login": "ui.logins.Logins (wrong passwords held to a few a minute)",
}
OWNER, STRANGER, PASSWORDS = "ann", "mallory", {"ann": "owner-secret", "mallory": "stranger-secret"}
SLUG = "secret-faq"
GUESSES = 200


def walk(bundle, folder: Path) -> dict:
    """The walk (module doc) on an app serving ``bundle`` as its demo, with project SLUG owned by
    OWNER, under ``folder``: how many paths were checked, how many have no rule, how many let the
    stranger read the project, and how many of GUESSES wrong passwords were tried."""
    store = open_store(f"sqlite:///{folder / 'annotations.db'}", project="demo")
    logins = Logins(list(PASSWORDS.items()))
    ctx = AppContext(ServedModel(bundle), store, "auth", cache=folder)
    page = QPRPage(ctx)
    demo = page.build()
    upload = folder / "faq.csv"
    make_corpus()[["question", "cluster"]].to_csv(upload, index=False)
    page.projects.create(str(upload), "clusters", SLUG, "", "", "", False, None, SimpleNamespace(username=OWNER))
    exported = page.retrain.export_clusters("csv", None, SimpleNamespace(username=OWNER))[page.retrain.files]
    ctx.open("demo", SimpleNamespace(username=OWNER))
    reads, checked = [], []

    def path(name: str, leaked: bool) -> None:
        checked.append(name)
        if leaked:
            reads.append(name)

    stranger = SimpleNamespace(username=STRANGER, query_params={"project": SLUG})
    try:
        page.open_page(stranger)
        path("page: open the project", ctx.project == SLUG)
    except QPRError:
        path("page: open the project", False)
    path("page: the project list", SLUG in str(page.projects.choice_update(None, stranger)))
    path("page: every handler acts on the page's project", ctx.project == SLUG)
    routes = search_routes(ctx, logins)
    ours = [route.path for route in routes]  # the app's own routes beside Gradio's: each must have a rule
    serve(demo, launch_options(logins, folder, routes), block=False)
    url = demo.local_url.rstrip("/")
    try:
        with httpx.Client(base_url=url, timeout=30) as client:
            client.post("/login", data={"username": STRANGER, "password": PASSWORDS[STRANGER]})
            for route in ("/config", "/gradio_api/info", "/"):
                answer = client.get(route)
                path(f"GET {route}", SLUG in answer.text)
            path("GET /openapi.json", client.get("/openapi.json").status_code != 404)
            found = client.get(PATH, params={"q": "chess", "project": SLUG}, auth=(STRANGER, PASSWORDS[STRANGER]))
            path(f"GET {PATH}", found.status_code != 404)
            owner = client.get(PATH, params={"q": "chess", "project": SLUG}, auth=(OWNER, PASSWORDS[OWNER]))
            assert owner.status_code == 200, "the owner searches the project (the walk's control)"
            export_folder = Path(exported[0]).parent.parent  # <cache>/exports/<slug>/, without the unguessable part
            for file in exported:
                guessed = export_folder / Path(file).name
                path(f"GET file {Path(file).name} by a guessable name",
                     client.get(f"/gradio_api/file={guessed}").status_code == 200)
            tried_before = logins.tried
            for n in range(GUESSES):
                client.get(PATH, params={"q": "chess"}, auth=(OWNER, f"guess-{n}"))
            guesses_tried = logins.tried - tried_before
            right_refused = client.get(PATH, params={"q": "chess"}, auth=(OWNER, PASSWORDS[OWNER])).status_code == 401
    finally:
        demo.close()
        store.close()
        gc.unfreeze()  # what serve froze can be collected again
    kinds = ["page", "project list", "files", "/openapi.json", "/login", *ours]
    return {"paths_checked": len(checked) + len(ours), "paths_without_rule": len([k for k in kinds if k not in RULES]),
            "foreign_reads_allowed": len(reads), "foreign_reads": reads, "paths": checked,
            "login_guesses_per_minute_allowed": guesses_tried, "right_password_refused_while_locked": right_refused}
