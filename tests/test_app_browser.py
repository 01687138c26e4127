"""The app in headless Chromium: search, annotate a false negative (by keyboard), find the judgment
in the database, see the proposed move, download an export with the question moved, retrain.

Starts ``python app.py`` (``harness.app_process.start_app``) on the demo corpus on a free localhost port
with a temporary SQLite database and bundle cache, and saves a screenshot of each tab to ``test-artifacts/``.
"""

from __future__ import annotations

import pytest

from annotations.db import open_store
from conftest import download_export, shot
from qpr.data.corpus import read_cluster_file
from workflows.demos import DEMO_CORPUS, SPLIT_PARAPHRASES

pytestmark = pytest.mark.browser

TWIN_A, TWIN_B = SPLIT_PARAPHRASES[0]
RETRAIN_LIMIT_MS = 240_000  # generous: only a guard against a retraining that never ends


def test_search_annotate_merge_export_retrain(page, server, tmp_path):  # page first: skip before starting the app
    from playwright.sync_api import expect

    url, db_url = server
    corpus = read_cluster_file(DEMO_CORPUS)
    cluster_of = dict(zip(corpus["question"], corpus["cluster"].fillna("")))
    page.goto(url)

    # Search: the served hybrid's results and, compared, its two parts; markup inside questions is shown as text.
    page.get_by_label("Question").fill("Best way to get crispy roast potatoes?")
    page.get_by_label("Compare with SDML alone and BM25").check()
    page.get_by_role("button", name="Search", exact=True).click()
    results = page.locator("#search-results")
    expect(results).to_contain_text("<b>Best</b> way to get crispy roast potatoes?")
    expect(results).to_contain_text("How do I make **really** crispy roast potatoes?")
    expect(page.locator("#search-dense")).to_contain_text("crispy")
    expect(page.locator("#search-bm25")).to_contain_text("crispy")
    assert page.locator(":is(#search-results, #search-dense, #search-bm25) :is(b, strong)").count() == 0
    shot(page, "1-search")
    page.get_by_label("Compare with SDML alone and BM25").uncheck()
    expect(page.locator("#search-dense")).to_be_hidden()
    expect(page.locator("#search-bm25")).to_be_hidden()

    # Annotate: the keyboard answers "unsure" until a question of the twin cluster comes up, then "same".
    page.get_by_role("tab", name="Annotate").click()
    page.get_by_label("Your name (needed to annotate)").fill("tester")
    page.get_by_label("…or a cluster id").fill(TWIN_A)
    page.get_by_role("button", name="Check cluster").click()
    candidate_box = page.locator("#annotate-candidate textarea")
    expect(candidate_box).not_to_have_value("")
    progress = page.locator("#annotate-progress")
    for judged in range(1, 41):
        candidate = candidate_box.input_value()
        page.locator("h1").click()  # keys go to the page, not to a text field
        page.keyboard.press("1" if cluster_of.get(candidate) == TWIN_B else "3")
        expect(progress).to_contain_text(f"Judged today: {judged} ")
        if cluster_of.get(candidate) == TWIN_B:
            break
    else:
        pytest.fail(f"no question of {TWIN_B} was proposed for {TWIN_A}")
    shot(page, "2-annotate")

    with open_store(db_url, project="demo") as store:
        same = store.judgments.frame(annotator="tester").query("label == 'same'")
    assert len(same) == 1
    assert (same.iloc[0]["query_cluster"], same.iloc[0]["candidate_cluster"]) == (TWIN_A, TWIN_B)
    assert same.iloc[0]["candidate_question"] == candidate

    # Clusters: the judgment proposes moving that one question into the twin (issue 57: a "same"
    # constrains two questions, it does not join two whole clusters).
    page.get_by_role("tab", name="Clusters").click()
    moves = page.locator("#clusters-splits")
    expect(moves).to_contain_text(TWIN_A)
    expect(moves).to_contain_text(TWIN_B)
    page.get_by_label("Cluster id", exact=True).fill(TWIN_B)
    page.get_by_role("button", name="Show", exact=True).click()
    expect(page.get_by_text("coherence", exact=False).first).to_be_visible()
    shot(page, "3-clusters")

    # Export: the downloaded cluster file holds the judged question in the twin's cluster.
    exported = download_export(page, tmp_path)
    in_a = exported.loc[exported["qid"].isin(corpus.loc[corpus["cluster"] == TWIN_A, "qid"]), "cluster"]
    assert in_a.nunique() == 1 and exported.loc[exported["question"] == candidate, "cluster"].iloc[0] == in_a.iloc[0]

    # Retrain on the corrected clusters, compare, and switch.
    page.get_by_role("button", name="Retrain on corrected clusters").click()
    confirm = page.get_by_role("button", name="Use the retrained model")
    expect(confirm).to_be_enabled(timeout=RETRAIN_LIMIT_MS)
    expect(page.locator("#retrain-note")).to_contain_text("is ready")
    shot(page, "4-retrain-export")
    confirm.click()
    expect(page.locator("#retrain-note")).to_contain_text("Now serving")

    page.get_by_role("tab", name="Metrics").click()
    expect(page.get_by_text("Before and after the last confirmed retraining")).to_be_visible()
    page.wait_for_timeout(1500)  # let the plots finish drawing before the screenshot
    shot(page, "5-metrics")
