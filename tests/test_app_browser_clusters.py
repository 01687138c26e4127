"""The cluster view in headless Chromium: a named annotator opens a cluster, clicks a member that
does not belong and presses X, applies the corrections, and the Search tab shows that question
outside its old cluster at once, without retraining; the database holds the judgment (representative
vs member, "different") and labels version 1. Screenshots go to ``test-artifacts/``."""

from __future__ import annotations

import re

import pytest

from annotations.db import open_store
from conftest import shot
from qpr.data.corpus import read_cluster_file
from ui.demo import DEMO_CORPUS, SPLIT_PARAPHRASES

pytestmark = pytest.mark.browser

TWIN_A = SPLIT_PARAPHRASES[0][0]


def test_a_false_positive_marked_in_the_cluster_view_leaves_its_cluster_in_search_at_once(page, server):
    from playwright.sync_api import expect

    url, db_url = server
    corpus = read_cluster_file(DEMO_CORPUS)
    members = corpus[corpus["cluster"] == TWIN_A]
    page.goto(url)
    page.get_by_label("Your name (needed to annotate)").fill("alice")
    page.get_by_role("tab", name="Clusters").click()
    page.locator("#clusters-id textarea, #clusters-id input").first.fill(TWIN_A)
    page.locator("#clusters-show").click()
    summary = page.locator("#clusters-summary")
    expect(summary).to_contain_text("Representative")
    rep = int(re.search(r"judged against\): (\d+)", summary.inner_text()).group(1))
    member = members[members["qid"] != rep].iloc[0]
    page.locator("#clusters-members").get_by_role("gridcell").filter(has_text=member["question"]).first.click()
    expect(page.locator("#clusters-selected textarea, #clusters-selected input").first).to_have_value(str(member["qid"]))
    page.locator("h1").click()  # out of any field, so the key is a shortcut
    page.keyboard.press("x")
    expect(page.locator("#clusters-mark-status")).to_contain_text("does not belong to")
    expect(page.locator("#clusters-splits")).to_contain_text(f"{member['qid']}")
    page.locator("#clusters-apply").click()
    expect(page.locator("#clusters-labels-status")).to_contain_text("labels version 1")
    expect(page.locator("#clusters-history")).to_contain_text(f"split qid:{member['qid']} out of {TWIN_A}")
    shot(page, "clusters-1-split-applied")

    page.get_by_role("tab", name="Search").click()
    page.get_by_label("Question").fill(member["question"])
    page.get_by_role("button", name="Search", exact=True).click()
    results = page.locator("#search-results")
    expect(results).to_contain_text(member["question"])
    row = results.get_by_role("row").filter(has_text=member["question"]).first
    expect(row).not_to_contain_text(TWIN_A)
    expect(page.locator("#search-results")).to_contain_text(TWIN_A)  # its old cluster-mates still are
    shot(page, "clusters-2-search-after-split")

    with open_store(db_url) as store:
        judged = store.judgments()
        versions = store.label_versions(store.bundle_versions()["version"].iloc[0])
    assert judged[["annotator", "query_qid", "candidate_qid", "label"]].values.tolist() == [
        ["alice", rep, member["qid"], "different"]]
    assert versions["number"].tolist() == [1] and versions["annotator"].tolist() == ["alice"]
