"""The app starts the way a Hugging Face Space starts it: ``python app.py`` with the variables a
Space sets for Hugging Face sign-in. Gradio then attaches OAuth at launch, which needs its
``oauth`` extra (itsdangerous, authlib); without it the Space died at start with "No module named
'itsdangerous'", which no in-process test of the page noticed."""

from __future__ import annotations

import urllib.request

from bench.startup import start_app, stop_app

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
    finally:
        stop_app(process)
