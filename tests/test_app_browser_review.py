"""Two annotators and a reviewer in headless Chromium, with overlap 2 (``QPR_OVERLAP=2``): alice
judges a twin-cluster question "same", bob gets the same item in his queue and judges it
"different", the Review tab lists the tie, and carol adjudicates it "same"; the database holds
the adjudication. Screenshots go to ``test-artifacts/``."""

from __future__ import annotations

import pytest

from annotations.db import open_store
from qpr.data.corpus import read_cluster_file
from conftest import app_db_url, shot
from workflows.demos import DEMO_CORPUS, SPLIT_PARAPHRASES

pytestmark = pytest.mark.browser

TWIN_A, TWIN_B = SPLIT_PARAPHRASES[0]


@pytest.fixture
def server(serve_app, tmp_path):
    """The app with overlap 2: each item goes to two annotators."""
    return serve_app({"QPR_OVERLAP": "2"}), app_db_url(tmp_path)


def annotate(page, url, name, cluster_of, label, target=None) -> tuple[str, str]:
    """As ``name``: check TWIN_A, answer "unsure" until the twin question (or ``target``, a
    (query, candidate) pair) comes up, answer ``label`` there; returns that (query, candidate)."""
    from playwright.sync_api import expect

    page.goto(url)
    page.get_by_role("tab", name="Annotate").click()
    page.get_by_label("Your name (needed to annotate)").fill(name)
    page.get_by_label("…or a cluster id").fill(TWIN_A)
    page.get_by_role("button", name="Check cluster").click()
    candidate_box, query_box = page.locator("#annotate-candidate textarea"), page.locator("#annotate-query textarea")
    expect(candidate_box).not_to_have_value("")
    for judged in range(1, 41):
        shown = (query_box.input_value(), candidate_box.input_value())
        hit = shown == target if target else cluster_of.get(shown[1]) == TWIN_B
        page.locator("h1").click()
        page.keyboard.press({"same": "1", "different": "2"}[label] if hit else "3")
        expect(page.locator("#annotate-progress")).to_contain_text(f"Judged today: {judged} ")
        if hit:
            return shown
    pytest.fail(f"{name} was never shown the item to judge")


def test_two_annotators_tie_and_a_reviewer_adjudicates(page, server, tmp_path):
    from playwright.sync_api import expect

    url, db_url = server
    corpus = read_cluster_file(DEMO_CORPUS)
    cluster_of = dict(zip(corpus["question"], corpus["cluster"].fillna("")))

    item = annotate(page, url, "alice", cluster_of, "same")
    bob = page.context.browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
    assert annotate(bob, url, "bob", cluster_of, "different", target=item) == item  # overlap 2: bob sees it too
    shot(bob, "review-1-bob")

    with open_store(db_url, project="demo") as store:
        votes = store.judgments.frame().query("label != 'unsure'")
    assert sorted(votes["annotator"]) == ["alice", "bob"] and votes["item_key"].nunique() == 1
    key, bobs = votes["item_key"].iloc[0], str(votes.loc[votes["annotator"] == "bob", "id"].iloc[0])

    page.goto(url)
    page.get_by_label("Your name (needed to annotate)").fill("carol")
    page.get_by_role("tab", name="Review").click()
    expect(page.get_by_text("names are not verified", exact=True)).to_be_visible()
    expect(page.locator("#review-agreement")).to_contain_text("alice")
    items = page.locator("#review-items")
    expect(items).to_contain_text(key)
    items.get_by_role("gridcell").filter(has_text=key).first.click()
    expect(page.locator("#review-item textarea, #review-item input").first).to_have_value(key)
    expect(page.locator("#review-evidence")).to_contain_text("bob")
    page.locator("#review-decision").get_by_label("same", exact=True).check()
    page.locator("#review-decide").click()
    expect(page.locator("#review-status")).to_contain_text("Recorded same")
    expect(page.locator("#review-decided")).to_contain_text("carol")
    shot(page, "review-2-adjudicated")

    with open_store(db_url, project="demo") as store:
        decided = store.review.adjudications()
    assert decided[["reviewer", "kind", "item_key", "decision"]].values.tolist() == [["carol", "item", key, "same"]]

    # The adjudicated conflict is a "same" now: one of its questions moves to the other's cluster
    # (annotations.constraints: one link moves a question, not two whole clusters); the Clusters tab
    # proposes the move, and the exported file holds the two questions in one cluster, as the screen said.
    page.get_by_role("tab", name="Clusters").click()
    moves = page.locator("#clusters-splits")
    expect(moves).to_contain_text(TWIN_A)
    expect(moves).to_contain_text(TWIN_B)
    page.get_by_role("tab", name="Retrain & export").click()
    page.get_by_role("button", name="Export corrected clusters").click()
    expect(page.get_by_text("0 merge(s) and 1 split(s)")).to_be_visible()
    link = page.locator("#export-files tr").filter(has_text=".csv").filter(has_not_text="pairs").filter(has_not_text="manifest").locator("a")
    with page.expect_download() as download:
        link.click()
    exported = read_cluster_file(download.value.path().rename(tmp_path / "export.csv"))
    now = exported.set_index("qid")["cluster"]
    judged = votes.iloc[0]
    assert now[int(judged["query_qid"])] == now[int(judged["candidate_qid"])] in (TWIN_A, TWIN_B)

    # The reviewer writes guidelines; bob finds his judgment under My work and comments on it.
    page.get_by_role("tab", name="Guidelines").click()
    # Opening the tab fills the edit boxes with the stored guidelines: type only after that, or
    # a slow answer overwrites what was typed (the preview shows when it has come).
    expect(page.locator("#guidelines-preview")).to_contain_text("No annotation guidelines yet")
    page.get_by_label("Guidelines", exact=True).fill("Same: one answer serves both questions.")
    page.get_by_label("Examples of “same” (one pair per line)").fill(" | ".join(item))
    page.get_by_role("button", name="Save guidelines").click()
    expect(page.locator("#guidelines-preview")).to_contain_text("Edited by carol")
    expect(page.locator("#guidelines-preview")).to_contain_text(item[1])
    bob.get_by_role("tab", name="My work").click()
    bob.get_by_label("Search my judgments (query or candidate text)").fill(item[1][:12])
    bob.get_by_role("button", name="Show", exact=True).click()
    mine = bob.locator("#my-work-table")
    expect(mine).to_contain_text("different")
    mine.get_by_role("gridcell").filter(has_text="different").first.click()
    # The click loads the judgment, its comment box included: type the comment only after that.
    expect(bob.get_by_label("Judgment id")).to_have_value(bobs)
    bob.get_by_label("Comment on this judgment").fill("unsure about the tense")
    bob.get_by_role("button", name="Save comment").click()
    expect(bob.locator("#my-work-status")).to_contain_text("Comment saved")
    expect(mine).to_contain_text("unsure about the tense")
    shot(bob, "review-3-my-work")
