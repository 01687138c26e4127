"""The app's HTTP search API (ui.http_api), served beside the page by the launch the app does:
what the Search tab's retriever answers, refusals that say what to change, and logins."""

from __future__ import annotations

import gc

import httpx
import pytest

from annotations.db import open_store
from qpr.serving.served_model import ServedModel
from ui.common import AppContext
from ui.http_api import PATH, search_routes
from ui.logins import Logins
from ui.page import QPRPage
from ui.search_tab import _table
from ui.startup import launch_options, serve

LOGINS = [("ann", "secret-1"), ("bob", "secret-2")]


@pytest.fixture(params=[None, LOGINS], ids=["open", "logins"])
def app(request, tiny_bundle, tmp_path):
    """The app launched as ``ui.startup.main`` launches it; yields (url, context, logins)."""
    logins = request.param
    store = open_store(f"sqlite:///{tmp_path / 'annotations.db'}", project="demo")
    ctx = AppContext(ServedModel(tiny_bundle), store, "name" if logins is None else "auth", cache=tmp_path)
    demo = QPRPage(ctx).build()
    checked = Logins(logins) if logins else None
    serve(demo, launch_options(checked, tmp_path, search_routes(ctx, checked)), block=False)
    try:
        yield demo.local_url.rstrip("/"), ctx, logins
    finally:
        demo.close()
        store.close()
        gc.unfreeze()  # what serve froze can be collected again once the test is done


def get(app, auth=None, **params) -> httpx.Response:
    url, _, logins = app
    if auth is None and logins:
        auth = logins[1]
    return httpx.get(url + PATH, params=params, auth=auth, timeout=30)


def test_the_api_answers_what_the_search_tab_shows(app):
    _, ctx, _ = app
    query = "how do i learn chess ?"
    response = get(app, q=query, k=5)
    assert response.status_code == 200
    body = response.json()
    served = ctx.current().served()
    assert (body["project"], body["model"], body["retriever"]) == ("demo", served.bundle.version, served.default.name)
    results = body["results"]
    assert [r["rank"] for r in results] == list(range(1, len(results) + 1)) and 0 < len(results) <= 5
    table = _table(served, served.default, query, 5)
    assert [r["question"] for r in results] == table["question"].tolist()
    assert [r["cluster"] or "" for r in results] == table["cluster"].tolist()
    corpus = served.corpus.set_index("qid")
    assert all(corpus.loc[r["qid"], "question"] == r["question"] for r in results)
    distances = [r["distance"] for r in results]
    assert distances == sorted(distances)
    calibrated = served.calibrations.get(served.default.name) is not None
    assert all((r["same_meaning"] is not None) == calibrated for r in results)
    if calibrated:
        assert [round(r["same_meaning"], 3) for r in results] == table["same meaning"].tolist()


@pytest.mark.parametrize("params, status, detail", [
    ({"q": "   "}, 400, "the query is empty"),
    ({"q": "x" * 10_001}, 400, "shorten it"),
    ({"q": "chess", "project": "nope"}, 404, "There is no project 'nope'"),
    ({"q": "chess", "k": 0}, 422, "greater than or equal to 1"),
    ({"k": 3}, 422, "Field required"),
])
def test_bad_requests_say_what_to_change(app, params, status, detail):
    response = get(app, **params)
    assert response.status_code == status and detail in str(response.json()["detail"])


def test_with_logins_only_a_logins_credentials_search(app):
    _, _, logins = app
    if logins is None:
        assert get(app, q="chess").status_code == 200  # open, as the Search tab is
        return
    assert get(app, auth=("ann", "wrong"), q="chess").status_code == 401
    assert get(app, auth=("eve", "secret-1"), q="chess").status_code == 401
    url, _, _ = app
    bare = httpx.get(url + PATH, params={"q": "chess"}, timeout=30)
    assert bare.status_code == 401 and bare.headers["www-authenticate"].startswith("Basic")
    assert get(app, auth=logins[0], q="chess").status_code == 200


def test_the_page_is_still_served_beside_the_api(app):
    url, _, logins = app
    page = httpx.get(url + "/", timeout=30)
    assert page.status_code == 200
    assert ("login" in page.text.lower()) if logins else ("gradio" in page.text.lower())
