"""Projects as workspaces in headless Chromium (issue 38): two annotators work on two projects
at the same time, each page on its own (judging, applying corrections, one of them training and
using a model), and neither sees any change from the other; with the regressions of bugs 3
(Search examples per project), 4 (counts per project), 5 (the header after a name is typed),
7 (refusals name the action and stay until closed) and 9 (table headers and fonts, Use/Discard
off with nothing to decide)."""

from __future__ import annotations

import pytest

from conftest import EXPECT_MS, TABLES_JS, make_corpus, shot
from test_app_browser_projects import rows
from qpr.data.upload import read_upload
from qpr.serving.projects import Projects
from workflows.demos import EXAMPLE_QUERIES
from workflows.served_projects import example_queries

pytestmark = pytest.mark.browser
TRAIN_LIMIT_MS = 240_000  # generous: only a guard against a training that never ends
NAME = "Your name (needed to annotate)"


def beta_corpus():
    """A second project's questions, none of them Alpha's, in clusters named apart."""
    corpus = make_corpus(n_topics=20, seed=1)
    return corpus.assign(question="please tell me " + corpus["question"], cluster="b-" + corpus["cluster"].str[2:])


@pytest.fixture
def two_projects(serve_app, app_cache, tmp_path):
    """The app serving two projects made before it started: (url, {slug: served bundle})."""
    projects, bundles = Projects(app_cache / "projects"), {}
    for name, corpus in (("Alpha", make_corpus()), ("Beta", beta_corpus())):
        path = tmp_path / f"{name}.csv"
        corpus[["question", "cluster"]].to_csv(path, index=False)
        slug = projects.create(name, read_upload(path, "clusters"), "setup")
        bundles[slug] = projects.served_bundle(slug)
    return serve_app(), bundles


def open_as(page, url: str, slug: str, name: str | None) -> None:
    """Open the app on project ``slug`` and, with ``name``, type it at once (bug 5)."""
    from playwright.sync_api import expect

    page.goto(f"{url}?project={slug}")
    if name:
        page.get_by_label(NAME).fill(name)
        expect(page.locator("#page-who")).to_contain_text(f"Annotating as {name}")
    expect(page.locator("#page-project input")).to_have_value(slug.capitalize())


def judge(page, cluster: str, keys: str, judged_before: int = 0) -> None:
    from playwright.sync_api import expect

    page.get_by_role("tab", name="Annotate").click()
    page.get_by_label("…or a cluster id").fill(cluster)
    page.get_by_role("button", name="Check cluster").click()
    expect(page.locator("#annotate-candidate textarea")).not_to_have_value("")
    for n, key in enumerate(keys, start=judged_before + 1):
        page.locator("h1").click()  # keys go to the page, not to a text field
        page.keyboard.press(key)
        expect(page.locator("#annotate-progress")).to_contain_text(f"Judged today: {n} ")


def search_cluster(page, question: str) -> str:
    """The cluster the Search tab shows for ``question`` searched for itself (top result)."""
    from playwright.sync_api import expect

    page.get_by_role("tab", name="Search").click()
    page.get_by_label("Question", exact=True).fill(question)
    page.get_by_role("button", name="Search", exact=True).click()
    first = page.locator("#search-results").get_by_role("row").nth(1)
    expect(first).to_contain_text(question)
    return first.get_by_role("gridcell").nth(2).inner_text().strip()


def test_two_annotators_on_two_projects_never_see_each_other(two_projects, browser_context):
    from playwright.sync_api import expect

    url, bundles = two_projects
    alpha, beta = (browser_context.new_page() for _ in range(2))
    bob_context = browser_context.browser.new_context(viewport={"width": 1400, "height": 1000})
    bob = bob_context.new_page()
    open_as(alpha, url, "alpha", "ann")
    open_as(bob, url, "beta", "bob")

    # Bug 9 on a fresh page: every table has its real headers (no "1 2 3") and the page's font.
    for tab in ("Search", "Annotate", "Clusters", "My work", "Review"):
        alpha.get_by_role("tab", name=tab).click()
        alpha.wait_for_timeout(500)  # the tab's tables drawn
        for table in alpha.evaluate(TABLES_JS):
            assert table["headers"][:3] != ["1", "2", "3"], f"{tab}: placeholder headers {table['headers']}"
            assert not any("mono" in font.lower() for font in table["fonts"]), f"{tab}: {table['fonts']}"
            assert set(table["breaks"]) <= {"normal/normal"}, f"{tab}: headers may break mid-word: {table['breaks']}"
    # Bug 3: each page's Search examples are its project's questions, not the demo's.
    alpha.get_by_role("tab", name="Search").click()
    for page, slug in ((alpha, "alpha"), (bob, "beta")):
        examples = page.locator("#search-examples")
        expect(examples).to_contain_text(example_queries(bundles[slug])[0])
        expect(examples).not_to_contain_text(EXAMPLE_QUERIES[0])
    alpha.locator("#search-examples").get_by_text(example_queries(bundles["alpha"])[0]).click()
    expect(alpha.locator("#search-results")).to_contain_text("c-")
    expect(alpha.locator("#search-results")).to_contain_text("BM25 alone")

    # Both judge at the same time, each in their own project; counts are per project (bug 4).
    judge(alpha, "c-chess", "33")
    judge(bob, "b-guitar", "3")
    ann_on_beta = browser_context.new_page()  # ann's second tab, on the other project
    open_as(ann_on_beta, url, "beta", "ann")
    judge(ann_on_beta, "b-chess", "")
    expect(ann_on_beta.locator("#annotate-progress")).to_contain_text("Judged today: 0 ")
    expect(ann_on_beta.locator("#annotate-progress")).to_contain_text("labelled in total: 0")
    ann_again = browser_context.new_page()  # a third tab of ann's, on Alpha: the same counts as the first
    open_as(ann_again, url, "alpha", "ann")
    judge(ann_again, "c-chess", "")
    expect(ann_again.locator("#annotate-progress")).to_contain_text("Judged today: 2 ")
    expect(ann_again.locator("#annotate-progress")).to_contain_text("labelled in total: 2")

    # Ann applies a correction in Alpha: one member of c-chess voted out.
    alpha.get_by_role("tab", name="Clusters").click()
    alpha.locator("#clusters-id textarea, #clusters-id input").first.fill("c-chess")
    alpha.locator("#clusters-show").click()
    expect(alpha.locator("#clusters-summary")).to_contain_text("Representative")
    rep = alpha.locator("#clusters-summary").inner_text().split("judged against): ")[1].split()[0]
    member = next(r for r in rows(alpha.locator("#clusters-members")) if r[0] != rep)
    voted_out = member[1]
    alpha.locator("#clusters-members").get_by_role("gridcell").filter(has_text=voted_out).first.click()
    expect(alpha.locator("#clusters-selected textarea, #clusters-selected input").first).to_have_value(member[0])
    alpha.locator("h1").click()
    alpha.keyboard.press("x")
    expect(alpha.locator("#clusters-mark-status")).to_contain_text("does not belong to")
    alpha.locator("#clusters-apply").click()
    expect(alpha.locator("#clusters-labels-status")).to_contain_text("labels version 1")
    assert search_cluster(alpha, voted_out) == ""  # in no cluster now, on Alpha

    # Bob trains Beta's model and uses it; Use/Discard are off until there is something to decide (bug 9).
    bob.get_by_role("tab", name="Projects").click()
    expect(bob.locator("#project-active")).to_contain_text("This page's project: Beta")
    expect(bob.locator("#train-confirm")).to_be_disabled()
    expect(bob.locator("#train-discard")).to_be_disabled()
    bob.get_by_role("button", name="Train in the background").click()
    expect(bob.locator("#train-status")).to_contain_text("is ready", timeout=TRAIN_LIMIT_MS)
    expect(bob.locator("#train-confirm")).to_be_enabled()
    bob.get_by_role("button", name="Use the trained model").click()
    expect(bob.locator("#project-active")).not_to_contain_text("BM25 only", timeout=EXPECT_MS)
    expect(bob.locator("#train-confirm")).to_be_disabled()
    assert search_cluster(bob, "please tell me how do i learn chess ?") == "b-chess"
    expect(bob.locator("#search-results")).not_to_contain_text("BM25 alone")
    shot(bob, "workspaces-bob")

    # Ann sees none of it: Alpha is still served by BM25, with no training; her correction stands.
    alpha.get_by_role("tab", name="Projects").click()
    expect(alpha.locator("#project-active")).to_contain_text("This page's project: Alpha")
    expect(alpha.locator("#project-active")).to_contain_text("BM25 only")
    expect(alpha.locator("#train-status")).to_contain_text("No training yet")
    expect(alpha.locator("#train-confirm")).to_be_disabled()
    alpha.reload()  # the URL keeps the project
    expect(alpha.locator("#page-project input")).to_have_value("Alpha")
    assert search_cluster(alpha, voted_out) == ""
    expect(alpha.locator("#search-results")).to_contain_text("BM25 alone")
    # ... and Bob sees none of Ann's: Beta is at labels version 0, and its c-chess twin untouched.
    bob.get_by_role("tab", name="Clusters").click()
    bob.locator("#clusters-id textarea, #clusters-id input").first.fill("b-chess")
    bob.locator("#clusters-show").click()
    expect(bob.locator("#clusters-labels-status")).to_contain_text("labels version 0")
    expect(bob.locator("#clusters-members")).to_contain_text("please tell me")
    shot(alpha, "workspaces-ann")

    # Bug 7: with no name, a refusal names the action and the fix, and stays until closed.
    # Another browser: this one remembers the name ann typed (its storage) and would fill it in.
    stranger_context = browser_context.browser.new_context(viewport={"width": 1400, "height": 1000})
    stranger = stranger_context.new_page()
    open_as(stranger, url, "alpha", None)
    expect(stranger.locator("#page-who")).to_contain_text("type your name to annotate")
    stranger.get_by_role("tab", name="Projects").click()
    expect(stranger.locator("#project-active")).to_contain_text("This page's project: Alpha")
    stranger.get_by_role("button", name="Train in the background").click()
    toast = stranger.get_by_test_id("toast-body")
    expect(toast).to_contain_text("Could not start training")
    expect(toast).to_contain_text("To train this project's model, type your name")
    expect(toast).not_to_contain_text("To record judgments")
    stranger.wait_for_timeout(12_000)  # longer than the 10 s a toast used to last
    expect(toast).to_be_visible()
    stranger.get_by_test_id("toast-close").click()
    expect(toast).to_have_count(0)
    # Choosing another project in the header opens it on this page only, with a URL that says so.
    stranger.locator("#page-project input").click()
    stranger.get_by_role("option", name="Beta").click()
    expect(stranger).to_have_url(f"{url}?project=beta")
    stranger.get_by_role("tab", name="Projects").click()
    expect(stranger.locator("#project-active")).to_contain_text("This page's project: Beta")
    alpha.get_by_role("tab", name="Projects").click()
    expect(alpha.locator("#project-active")).to_contain_text("This page's project: Alpha")
    bob_context.close()
    stranger_context.close()
