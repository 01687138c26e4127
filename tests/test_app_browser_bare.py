"""From bare questions to a trained model, in headless Chromium (issue 38's dead end): a file of
questions without clusters is uploaded; "Check query" with one of its questions never offers it
back; "Next cluster" proposes groups of near questions judged with the keyboard (a key pressed
while the next item loads is refused with a notice, never dropped silently); the page counts the
clusters formed until training is offered; the encoder trains in the background and serves the
project; after a reload the name is still there and Z says why nothing is undone."""

from __future__ import annotations

import re

import pytest

from conftest import shot
from qpr.data.upload import MIN_TRAIN_CLUSTERS
from test_app_browser_projects import TRAIN_LIMIT_MS, create, search_row
from test_grouping import TOPICS, topics_corpus

pytestmark = pytest.mark.browser


def topic(text: str) -> str:
    return next(t for t in TOPICS if t in text.split())


def judged_today(page) -> int:
    return int(re.search(r"Judged today: (\d+)", page.locator("#annotate-progress").inner_text()).group(1))


def test_bare_questions_become_clusters_and_a_served_model(page, server, tmp_path):
    from playwright.sync_api import expect

    url, _ = server
    topics_corpus()[["question"]].to_csv(tmp_path / "inbox.csv", index=False)
    page.goto(url)
    page.get_by_label("Your name (needed to annotate)").fill("tester")
    page.get_by_role("tab", name="Projects").click()
    create(page, tmp_path / "inbox.csv", "Inbox", "Bare questions")
    expect(page.locator("#project-active")).to_contain_text("Inbox")

    page.get_by_role("tab", name="Annotate").click()
    query, candidate = page.locator("#annotate-query textarea"), page.locator("#annotate-candidate textarea")
    page.get_by_label("…or a query").fill("password passwords")  # exactly a question of the corpus
    page.get_by_role("button", name="Check query").click()
    expect(candidate).not_to_have_value("")
    asked = []
    while candidate.input_value():  # skip through the whole queue: bug 1 offered the question itself first
        asked.append(candidate.input_value())
        page.locator("h1").click()
        page.keyboard.press("k")
        expect(candidate).not_to_have_value(asked[-1])
    assert asked and "password passwords" not in asked

    page.get_by_role("button", name="Next cluster (the app picks)").click()
    expect(page.locator("#annotate-status")).to_contain_text("Building clusters")
    expect(page.locator("#annotate-progress")).to_contain_text(f"training needs {MIN_TRAIN_CLUSTERS}")
    first = True
    while "enough to train" not in page.locator("#annotate-progress").inner_text():
        for _ in range(2):  # BM25 proposes a seed's two topic-mates first: they share its two rare words
            expect(candidate).not_to_have_value("")
            assert topic(query.input_value()) == topic(candidate.input_value()), "the nearest share the topic"
            before, shown = judged_today(page), candidate.input_value()
            page.locator("h1").click()
            page.keyboard.press("1")
            if first:  # bug 6: a second press while the next item loads
                page.keyboard.press("1")
                expect(page.locator("#key-notice")).to_contain_text("was not recorded")
                first = False
            expect(page.locator("#annotate-progress")).to_contain_text(f"Judged today: {before + 1} ")
            expect(candidate).not_to_have_value(shown)
        if candidate.input_value():  # the rest of the group (other topics) stays unjudged
            page.get_by_role("button", name="Done with this queue").click()
            expect(page.locator("#annotate-status")).to_contain_text("Done:")
        page.get_by_role("button", name="Next cluster (the app picks)").click()
        expect(page.locator("#annotate-status")).to_contain_text("Building clusters")
    assert judged_today(page) == 2 * MIN_TRAIN_CLUSTERS, "each group of two confirmed questions formed one cluster"
    shot(page, "bare-enough-to-train")

    page.get_by_role("tab", name="Projects").click()
    page.get_by_role("button", name="Train in the background").click()
    expect(page.locator("#train-status")).to_contain_text("is ready", timeout=TRAIN_LIMIT_MS)
    page.get_by_role("button", name="Use the trained model").click()
    expect(page.locator("#project-active")).not_to_contain_text("BM25 only", timeout=30_000)
    row = search_row(page, "password passwords", lambda r: r[2].startswith("new-"))
    expect(page.locator("#search-results")).not_to_contain_text("BM25 alone")
    shot(page, "bare-trained")

    page.reload()  # the name stays; Z answers although this new page judged nothing
    expect(page.get_by_label("Your name (needed to annotate)")).to_have_value("tester")
    page.get_by_role("tab", name="Annotate").click()
    page.locator("h1").click()
    page.keyboard.press("z")
    expect(page.locator("#annotate-status")).to_contain_text("Nothing to undo on this page")
    assert row[2]
