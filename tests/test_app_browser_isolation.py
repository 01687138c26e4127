"""One project's work stays in that project, in headless Chromium (issue 54, item 1): two
annotators on two projects imported from the *same* file, so their question ids coincide, judge
overlapping pairs with opposite labels; then every view each page shows is read for the other
project's judgments, and each trains its model (the background training's export) to see what it
learned from. The count of views read and of leaks found goes to
``test-artifacts/isolation.json``, which ``python -m bench.workspaces isolation`` records as
``views_checked`` and ``cross_project_leaks`` in bench/results/workspaces.json."""

from __future__ import annotations

import json
import re

import pytest

from conftest import ARTIFACTS, make_corpus, shot
from qpr.data.upload import read_upload
from qpr.serving.projects import Projects

pytestmark = pytest.mark.browser
NAME = "Your name (needed to annotate)"
CLUSTER = "c-chess"
# Each annotator and the keys they press on CLUSTER's queue: "1" same, "2" different.
WORK = {"alpha": ("zoe", "112"), "beta": ("yuri", "221")}
REPORT = ARTIFACTS / "isolation.json"
TRAIN_LIMIT_MS = 240_000  # generous: only a guard against a training that never ends


@pytest.fixture
def same_file_projects(serve_app, app_cache, tmp_path):
    """The app serving projects Alpha and Beta, both imported from one file before it started."""
    path = tmp_path / "faq.csv"
    make_corpus()[["question", "cluster"]].to_csv(path, index=False)
    projects = Projects(app_cache / "projects")
    for name in ("Alpha", "Beta"):
        projects.create(name, read_upload(path, "clusters"), "setup")
    return serve_app()


def open_as(context, url: str, slug: str, name: str):
    from playwright.sync_api import expect

    page = context.new_page()
    page.goto(f"{url}?project={slug}")
    page.get_by_label(NAME).fill(name)
    expect(page.locator("#page-who")).to_contain_text(f"Annotating as {name}")
    expect(page.locator("#page-project input")).to_have_value(slug.capitalize())
    return page


def check_cluster(page) -> str:
    """Open CLUSTER's queue on the Annotate tab; its progress line."""
    from playwright.sync_api import expect

    page.get_by_role("tab", name="Annotate").click()
    page.get_by_label("…or a cluster id").fill(CLUSTER)
    page.get_by_role("button", name="Check cluster").click()
    expect(page.locator("#annotate-candidate textarea")).not_to_have_value("")
    return page.locator("#annotate-progress").inner_text()


def left(progress: str) -> int:
    return int(re.search(r"left in this queue: (\d+)", progress).group(1))


def judge(page, keys: str) -> None:
    from playwright.sync_api import expect

    for n, key in enumerate(keys, start=1):
        page.locator("h1").click()  # keys go to the page, not to a text field
        page.keyboard.press(key)
        expect(page.locator("#annotate-progress")).to_contain_text(f"Judged today: {n} ")


def views(page) -> dict[str, str]:
    """The text of every view of the page's project that shows judgments or counts them."""
    from playwright.sync_api import expect

    shown = {"annotate counts": page.locator("#annotate-progress").inner_text()}
    page.get_by_role("tab", name="Clusters").click()
    page.locator("#clusters-id textarea, #clusters-id input").first.fill(CLUSTER)
    page.locator("#clusters-show").click()
    expect(page.locator("#clusters-summary")).to_contain_text("Representative")
    page.wait_for_timeout(500)  # the judgments' table drawn
    shown["clusters"] = page.locator("#clusters-touching").inner_text()
    page.get_by_role("tab", name="My work").click()
    page.wait_for_timeout(1000)  # the tab's table filled on opening
    shown["my work"] = page.locator("#my-work-table").inner_text()
    page.get_by_role("tab", name="Metrics").click()
    expect(page.locator("#metrics-outlook")).to_contain_text("Label errors")
    shown["metrics"] = page.locator("#metrics-outlook").inner_text()
    page.get_by_role("tab", name="Review").click()
    page.wait_for_timeout(1000)
    shown["review"] = page.locator("#review-agreement").inner_text() + page.locator("#review-items").inner_text()
    page.get_by_role("tab", name="Retrain & export").click()
    page.get_by_role("button", name="Export corrected clusters").click()
    expect(page.locator("#export-note")).to_contain_text("judgment(s) included")
    shown["export"] = page.locator("#export-note").inner_text()
    page.get_by_role("tab", name="Projects").click()
    page.get_by_role("button", name="Train in the background").click()
    expect(page.locator("#train-status")).to_contain_text("is ready", timeout=TRAIN_LIMIT_MS)
    shown["retrain"] = page.locator("#train-status").inner_text()
    return shown


def test_two_projects_from_one_file_never_show_each_others_judgments(same_file_projects, browser_context, tmp_path):
    url = same_file_projects
    pages = {slug: open_as(browser_context.browser.new_context(viewport={"width": 1400, "height": 1000}), url, slug, who)
             for slug, (who, _) in WORK.items()}
    before = {slug: left(check_cluster(page)) for slug, page in pages.items()}
    assert before["alpha"] == before["beta"], "one file, one queue"
    for slug, page in pages.items():
        judge(page, WORK[slug][1])
    # Each project's queue, opened by the annotator who judged only in the other: nothing taken from it.
    queues = {}
    for slug in WORK:
        other = next(name for s, (name, _) in WORK.items() if s != slug)
        page = open_as(browser_context, url, slug, other)
        queues[slug] = check_cluster(page)
        page.close()

    leaks, checked = [], set()

    def read(slug: str, view: str, text: str, expected: str) -> None:
        other = next(name for s, (name, _) in WORK.items() if s != slug)
        checked.add(view)
        if other in text or expected not in text:
            leaks.append(f"{slug} / {view}: {text[:300]!r}")

    for slug, page in pages.items():
        who, keys = WORK[slug]
        shown = views(page)
        read(slug, "annotate queue", queues[slug], f"left in this queue: {before[slug]}")
        read(slug, "annotate counts", shown["annotate counts"], f"Judged today: {len(keys)} ")
        read(slug, "clusters", shown["clusters"], who)
        read(slug, "metrics", shown["metrics"], f"of {len(keys)} judgments")
        read(slug, "review", shown["review"], "")
        read(slug, "export", shown["export"], f"{len(keys)} judgment(s) included")
        read(slug, "retrain", shown["retrain"], f"and {len(keys)} judgment(s)")
        checked.add("my work")
        if shown["my work"].count("current") != len(keys):
            leaks.append(f"{slug} / my work: {shown['my work'][:300]!r}")
        shot(page, f"isolation-{slug}")

    # Zoe judges once in Beta too: her Alpha page still counts and lists her Alpha work alone.
    zoe, alpha_keys = WORK["alpha"]
    on_beta = open_as(browser_context, url, "beta", zoe)
    check_cluster(on_beta)
    judge(on_beta, "1")
    alpha = pages["alpha"]
    if f"Judged today: {len(alpha_keys)} " not in check_cluster(alpha):
        leaks.append(f"alpha / annotate counts after zoe judged in beta: {check_cluster(alpha)!r}")
    alpha.get_by_role("tab", name="My work").click()
    alpha.get_by_role("button", name="Show").click()
    alpha.wait_for_timeout(1000)
    if alpha.locator("#my-work-table").inner_text().count("current") != len(alpha_keys):
        leaks.append(f"alpha / my work after zoe judged in beta: {alpha.locator('#my-work-table').inner_text()[:300]!r}")

    ARTIFACTS.mkdir(exist_ok=True)
    REPORT.write_text(json.dumps({"views_checked": len(checked), "cross_project_leaks": len(leaks),
                                  "views": sorted(checked), "leaks": leaks}, indent=1) + "\n")
    assert len(checked) >= 7 and not leaks, leaks
