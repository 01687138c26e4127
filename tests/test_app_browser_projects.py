"""Projects in headless Chromium: a malformed upload is refused with its row number, a good one
becomes the served project at once, its encoder trains in the background with progress that a
page reload keeps, and the trained model is served only after 'Use the trained model'."""

from __future__ import annotations

import pandas as pd
import pytest

from conftest import make_corpus, shot

pytestmark = pytest.mark.browser
TRAIN_LIMIT_MS = 240_000  # generous: only a guard against a training that never ends


def create(page, path, project: str) -> None:
    clear = page.locator("#project-file").get_by_role("button", name="Clear")
    if clear.count():
        clear.first.click()  # the file shown before
    page.locator("#project-file input[type=file]").set_input_files(str(path))
    page.get_by_label("New project's name").fill(project)
    page.get_by_role("button", name="Create project").click()


def test_upload_train_in_the_background_and_confirm(page, server, tmp_path):
    from playwright.sync_api import expect

    url, _ = server
    good = make_corpus()[["question", "cluster"]]
    good.to_csv(tmp_path / "faq.csv", index=False)
    bad = pd.concat([good.head(3).assign(question=["a question", "", "another one"]), good.tail(20)])
    bad.to_csv(tmp_path / "bad.csv", index=False)
    page.goto(url)
    page.get_by_label("Your name (needed to annotate)").fill("tester")
    page.get_by_role("tab", name="Projects").click()
    create(page, tmp_path / "bad.csv", "Broken")
    expect(page.get_by_text("row 3: the question is empty").first).to_be_visible()
    create(page, tmp_path / "faq.csv", "My FAQ")
    expect(page.locator("#project-note")).to_contain_text("Created")
    expect(page.locator("#project-active")).to_contain_text("BM25 only")
    page.get_by_role("button", name="Train in the background").click()
    expect(page.locator("#train-status")).to_contain_text("Training", timeout=30_000)
    shot(page, "projects-training")
    page.reload()  # the training's state is on disk, not in the page
    page.get_by_role("tab", name="Projects").click()
    expect(page.locator("#train-status")).to_contain_text("is ready", timeout=TRAIN_LIMIT_MS)
    shot(page, "projects-trained")
    page.get_by_label("Your name (needed to annotate)").fill("tester")
    page.get_by_role("button", name="Use the trained model").click()
    expect(page.locator("#project-active")).to_contain_text("model", timeout=30_000)
    expect(page.locator("#project-active")).not_to_contain_text("BM25 only")
