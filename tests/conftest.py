"""Shared fixtures: a small synthetic corpus that a model can learn in seconds, data paths, empty
databases for store tests, and the app in headless Chromium."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pandas as pd
import pytest

# Strict mode's hooks and the real data's fixture, shared with bench/tests/.
from harness.corpora import TEMPLATES, TOPICS, make_corpus  # noqa: F401  (tests import them from here)
from harness.pytest_hooks import (CUDA_SKIP, data_dir, pytest_configure, pytest_make_collect_report,  # noqa: F401
                                  pytest_runtest_makereport)
from qpr.settings import settings

# The app's tests start it on the hand-written tutorial corpus (trained in seconds, no data set
# needed); the tests of the BANKING77 demo (tests/test_real_demo.py) set QPR_DEMO themselves.
os.environ.setdefault("QPR_DEMO", "tutorial")


@pytest.fixture(autouse=True)
def fresh_settings(monkeypatch):
    """Each test reads the settings afresh (``qpr.settings`` reads them once per process), and a
    ``monkeypatch.setenv`` or ``delenv`` in a test takes effect at once, as the app would see it
    on a restart with that environment."""

    def then_reread(change):
        def changed(*args, **kwargs):
            change(*args, **kwargs)
            settings.cache_clear()
        return changed

    monkeypatch.setenv, monkeypatch.delenv = then_reread(monkeypatch.setenv), then_reread(monkeypatch.delenv)
    settings.cache_clear()
    yield
    settings.cache_clear()


def _small_encoder():
    from qpr.model.encoder import EncoderConfig

    return EncoderConfig(embedding_dim=32, channels=32, output_dim=16)


@pytest.fixture
def tiny_corpus() -> pd.DataFrame:
    return make_corpus()


@pytest.fixture(scope="session")
def tiny_bundle():
    """A small encoder trained for a few seconds on ``make_corpus()``, indexed exactly (a Bundle)."""
    from qpr.bundles.bundle import Bundle
    from qpr.retrieval.index import IndexConfig
    from qpr.training.train import TrainConfig, train

    corpus = make_corpus()
    result = train(
        corpus, TrainConfig(batch_size=16, max_epochs=4, patience=4, val_pairs=200), encoder_config=_small_encoder(), progress=False
    )
    return Bundle.create(result.encoder, result.vocab, corpus, IndexConfig("Flat"), train_info=result.summary())


def make_sentence_model(folder: Path, texts) -> Path:
    """A tiny BERT (2 layers, hidden 32) with a WordPiece vocabulary of ``texts``' words, saved as a
    Hugging Face model folder that sentence-transformers loads with mean pooling: a stand-in for
    all-MiniLM-L6-v2 that needs no download and fine-tunes in seconds (the transformer backend's tests)."""
    import re

    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    words = sorted({word for text in texts for word in re.findall(r"\w+|[^\w\s]", text.lower())})
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]
    tokenizer = BertTokenizerFast(vocab={token: i for i, token in enumerate(tokens)})
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64)
    BertModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def sentence_model(tmp_path_factory) -> Path:
    """``make_sentence_model`` over ``make_corpus()``'s words (skips without sentence-transformers)."""
    pytest.importorskip("sentence_transformers")
    return make_sentence_model(tmp_path_factory.mktemp("tiny-bert"), make_corpus()["question"])


@pytest.fixture(scope="session")
def transformer_bundles(sentence_model, tmp_path_factory):
    """A transformer bundle fine-tuned from ``sentence_model`` on ``make_corpus()`` for a few
    seconds, and the same saved and loaded back: (trained, loaded)."""
    from qpr.bundles.bundle import Bundle
    from qpr.bundles.training import train_transformer_bundle
    from qpr.retrieval.index import IndexConfig

    trained = train_transformer_bundle(make_corpus(), tiny_transformer_settings(str(sentence_model)), IndexConfig("Flat"),
                                       progress=False)
    return trained, Bundle.load(trained.save(tmp_path_factory.mktemp("transformer") / "bundle"))


def tiny_transformer_settings(base: str):
    """Fine-tuning settings for ``make_sentence_model``: small batches, a high rate, three epochs."""
    from qpr.systems.transformer import TransformerSettings

    return TransformerSettings(base=base, batch_size=8, lr=1e-3, epochs=3, patience=3)


@pytest.fixture(scope="session")
def demo_cache(tmp_path_factory):
    """One demo-bundle cache for the whole test session, so the app tests train the demo model once."""
    return tmp_path_factory.getbasetemp() / "demo-cache"


@pytest.fixture
def app_cache(bundle, demo_cache, tmp_path) -> Path:
    """A cache folder of the app's own for one test, holding the already trained demo bundle:
    what one app run writes there (retrained bundles, exports, the confirmed bundle) stays in it."""
    cache = tmp_path / "app-cache"
    shutil.copytree(demo_cache / "demo-bundle", cache / "demo-bundle")
    return cache


@pytest.fixture(scope="session")
def bundle(demo_cache):
    """The bundle ``python app.py`` serves by default (``workflows.demos.demo_bundle``), built once per session."""
    from workflows.demos import demo_bundle

    return demo_bundle(cache=demo_cache, progress=False, log=lambda _: None)


# -- empty databases for store tests --------------------------------------------------------------

POSTGRES_URL = os.environ.get("QPR_TEST_POSTGRES_URL")


@contextmanager
def fresh_schema(url: str, prefix: str = "test") -> Iterator[str]:
    """A URL to a new, empty schema named ``<prefix>_<random>`` in the PostgreSQL database at
    ``url``, dropped with all it holds on exit, so parallel and repeated runs never meet. Commits
    there do not wait for the disk: these throwaway schemas test locking and consistency, not
    durability."""
    from sqlalchemy import create_engine, make_url, text

    schema = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin = create_engine(url)
    with admin.begin() as connection:
        connection.execute(text(f'CREATE SCHEMA "{schema}"'))
    options = f"-csearch_path={schema} -csynchronous_commit=off"
    try:
        yield make_url(url).update_query_dict({"options": options}).render_as_string(hide_password=False)
    finally:
        with admin.begin() as connection:
            connection.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


@pytest.fixture
def postgres_url(request) -> Iterator[str]:
    """A fresh schema (``fresh_schema``, named after the test module) in QPR_TEST_POSTGRES_URL's
    database; skips without that variable."""
    if not POSTGRES_URL:
        pytest.skip("QPR_TEST_POSTGRES_URL is not set (bash .ci/run starts PostgreSQL and sets it)")
    with fresh_schema(POSTGRES_URL, request.module.__name__.rpartition(".")[2]) as url:
        yield url


@pytest.fixture
def scratch_dir(tmp_path) -> Iterator[Path]:
    """A folder for SQLite files, in memory (/dev/shm) where there is one: fsync costs nothing
    there, and store tests check locking and consistency, not durability across power loss."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield tmp_path
        return
    folder = Path(tempfile.mkdtemp(prefix="annotations-test-", dir=shm))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, scratch_dir) -> str:
    """A URL to an empty database, once per backend: a SQLite file in ``scratch_dir``, or a fresh
    PostgreSQL schema (``postgres_url``)."""
    if request.param == "sqlite":
        return f"sqlite:///{scratch_dir / 'annotations.db'}"
    return request.getfixturevalue("postgres_url")


# -- the app in headless Chromium (browser tests) -----------------------------------------------

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = Path("/usr/bin/chromium")
EXPECT_MS = 60_000  # how long an expect(...) waits for its condition: generous, it costs nothing when quick
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]


@pytest.fixture
def browser_context():
    """A headless Chromium context (pages share nothing with other tests); skips without Chromium."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install -e '.[dev]')")
    if not CHROMIUM.is_file():
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    # Every wait is on a condition (expect); on a loaded 2-core machine the app can take longer
    # than Playwright's default 5 s to answer, which made a correct page fail a test.
    sync_api.expect.set_options(timeout=EXPECT_MS)
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser.new_context(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
        browser.close()


@pytest.fixture
def page(browser_context):
    return browser_context.new_page()


@pytest.fixture
def serve_app(browser_context, app_cache, tmp_path):
    """Starts ``python app.py`` with its own cache and database (``app_db_url``), ``env`` added, and
    returns its URL; skips before starting anything without Chromium. At the end the browser closes
    (all its contexts) before the app stops: a page still open holds Gradio's shutdown for 5 s."""
    from harness.app_process import start_app, stop_app

    started = []

    def serve(env: dict[str, str] | None = None) -> str:
        try:
            process, url, _ = start_app({"QPR_DB_URL": app_db_url(tmp_path), "QPR_CACHE_DIR": str(app_cache)} | (env or {}),
                                        tmp_path / "app.log")
        except RuntimeError as err:
            pytest.fail(str(err))
        started.append(process)
        return url

    yield serve
    browser_context.browser.close()  # every context of it, those a test opened beside this one too
    for process in started:
        stop_app(process)


def app_db_url(tmp_path: Path) -> str:
    """The database of the app ``serve_app`` starts in ``tmp_path``."""
    return f"sqlite:///{tmp_path / 'annotations.db'}"


@pytest.fixture
def server(serve_app, tmp_path):
    """``python app.py`` on the demo corpus with its own database and cache: (url, database url)."""
    return serve_app(), app_db_url(tmp_path)


# The visible tables' headers, how their headers may break, and their text's fonts (issue 38, bug 9).
# Every visible table, drawn as <table> or as a grid of div[role=gridcell] (issue 54, item 4).
TABLES_JS = """() => Array.from(document.querySelectorAll('table, [role=grid]')).filter(t => t.offsetParent).map(t => ({
    headers: Array.from(t.querySelectorAll('th, [role=columnheader]')).map(h => h.innerText.trim()),
    breaks: Array.from(t.querySelectorAll('th *, [role=columnheader] *')).map(e => getComputedStyle(e).wordBreak + '/' + getComputedStyle(e).overflowWrap),
    fonts: Array.from(t.querySelectorAll('td *, th *, td, th, [role=gridcell], [role=gridcell] *, [role=columnheader] *'))
        .filter(e => e.childNodes.length && Array.from(e.childNodes)
        .some(n => n.nodeType === 3 && n.textContent.trim())).map(e => getComputedStyle(e).fontFamily)}))"""


def shot(page, name: str) -> None:
    """A full-page screenshot in test-artifacts/ (for a person to look at)."""
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def download_export(page, folder: Path) -> pd.DataFrame:
    """On the Retrain & export tab: export the corrected clusters, download the cluster file the
    page links (not the pairs or the manifest) into ``folder``, and read it."""
    from playwright.sync_api import expect

    from qpr.data.corpus import read_cluster_file

    page.get_by_role("tab", name="Retrain & export").click()
    page.get_by_role("button", name="Export corrected clusters").click()
    cluster_file = page.locator("#export-files tr").filter(has_text=".csv").filter(has_not_text="pairs").filter(has_not_text="manifest")
    link = cluster_file.locator("a")
    expect(link).to_be_visible()
    with page.expect_download() as download:
        link.click()
    return read_cluster_file(download.value.path().rename(folder / "export.csv"))
