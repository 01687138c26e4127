"""The app's HTTP search API, beside the page: ``GET /api/search?q=...&k=10&project=...`` answers in JSON.

What the Search tab answers, for programs: the served retriever's top ``k`` (1-1000) for ``q`` in
``project`` (default: the demo), with each result's qid, question, served cluster, distance and
probability of the same meaning (null where uncalibrated), and which model answered. A search
through Gradio's event API costs 12-15 ms of server CPU, most of it Gradio's request path (its
queue, the components' pre- and post-processing, the event stream: docs/SERVING.md); this route
runs the search alone, and concurrent searches are still answered together
(``qpr.serving.batching``).

It is open as the Search tab is: to anyone with typed names or Hugging Face sign-in, and with
``QPR_AUTH`` logins to a login's HTTP Basic credentials only (checked by ``ui.logins``, which
holds wrong passwords to a few a minute), for the projects that login may read
(``AppContext.may_read``: the same rule as the page's). A query no retriever can answer is a 400;
an unknown project, and one the login may not read, a 404 that says the same, so a project leaves
no trace to those outside it.
"""

from __future__ import annotations

from fastapi import Depends, HTTPException, Query, Request
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from fastapi.security import HTTPBasic, HTTPBasicCredentials

from qpr.errors import QPRError
from qpr.model.text import MAX_K
from qpr.serving.slugs import DEMO
from ui.common import AppContext
from ui.logins import Logins

PATH = "/api/search"


def search_routes(ctx: AppContext, logins: Logins | None) -> list[APIRoute]:
    """The API's routes over ``ctx``'s projects; with ``logins`` (``QPR_AUTH``'s), each request
    must carry one of them, and reads only the projects it may."""
    def signed_in(request: Request, credentials: HTTPBasicCredentials = Depends(HTTPBasic(realm="qpr"))) -> str:
        address = request.client.host if request.client else "?"
        if not logins.check(credentials.username, credentials.password, address):
            raise HTTPException(401, "unknown user name or password (or too many wrong ones lately: wait a minute)",
                                headers={"WWW-Authenticate": "Basic"})
        return credentials.username

    def search(q: str = Query(description="the question"),
               k: int = Query(10, ge=1, le=MAX_K, description="how many results"),
               project: str = Query(DEMO, description="the project's slug"),
               who: str | None = Depends(signed_in) if logins is not None else None) -> JSONResponse:
        try:
            if not ctx.may_read(project, who):
                raise QPRError(f"There is no project {project!r} you may read.")
            found = ctx.project_of(project)
        except QPRError as err:
            raise HTTPException(404, str(err)) from None
        served = found.served()
        try:
            results = served.results(q, k)
        except QPRError as err:
            raise HTTPException(400, str(err)) from None
        # Plain JSON types already: a JSONResponse skips FastAPI's walk of the answer to encode it.
        return JSONResponse({"project": project, "model": served.bundle.version, "retriever": served.default.name,
                             "results": results})

    return [APIRoute(PATH, search, methods=["GET"], summary="The served model's top k for a question")]
