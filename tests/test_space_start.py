"""The app starts the way a Hugging Face Space starts it: ``python app.py`` with the variables a
Space sets for Hugging Face sign-in. Gradio then attaches OAuth at launch, which needs its
``oauth`` extra (itsdangerous, authlib); without it the Space died at start with "No module named
'itsdangerous'", which no in-process test of the page noticed."""

from __future__ import annotations

import http.client
import urllib.request
from urllib.parse import urlsplit

from harness.app_process import start_app, stop_app

# What a Space with `hf_oauth: true` sets (dummy values: nothing is contacted until someone signs in).
SPACE_VARIABLES = {
    "SYSTEM": "spaces",
    "SPACE_ID": "someone/qpr",
    "OAUTH_CLIENT_ID": "dummy-client-id",
    "OAUTH_CLIENT_SECRET": "dummy-client-secret",
    "OAUTH_SCOPES": "openid profile",
    "OPENID_PROVIDER_URL": "https://huggingface.co",
}


def test_python_app_py_answers_on_a_space_with_hugging_face_sign_in(app_cache, tmp_path):
    env = SPACE_VARIABLES | {"QPR_CACHE_DIR": str(app_cache), "QPR_DB_URL": f"sqlite:///{tmp_path / 'annotations.db'}"}
    process, url, _ = start_app(env, tmp_path / "app.log", limit_s=300)
    try:
        with urllib.request.urlopen(url, timeout=60) as answer:
            assert answer.status == 200
        # Sign-in is attached as on a Space (not Gradio's local mock, not absent): its callback, called
        # with no sign-in under way, sends the browser back to the Hugging Face login route.
        address = urlsplit(url)
        connection = http.client.HTTPConnection(address.hostname, address.port, timeout=60)
        connection.request("GET", "/login/callback")
        callback = connection.getresponse()
        assert callback.status in (302, 303, 307) and "/login/huggingface" in callback.getheader("location", ""), (
            f"/login/callback answered {callback.status} {callback.getheader('location')}: "
            "OAuth is not attached as on a Space")
        connection.close()
    finally:
        stop_app(process)
