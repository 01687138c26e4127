"""Benchmark (issue 6): what a judgment costs in the app's Annotate tab, driven in headless Chromium.

Starts ``python app.py`` on the demo corpus with a fresh SQLite database, types an annotator name,
opens a queue (``--queue task``: the corpus-wide task, one click for the whole session; ``cluster``:
"Next cluster (the app picks)", again whenever a queue is finished) and answers every candidate by
keyboard until ``--judgments`` judgments are recorded. It counts the clicks and key presses, and
times each judgment from the key press until the page shows the incremented count and the judging
keys work again (the browser round trip plus the store's write: the machine's share of a
judgment). A person's reading and deciding time is not measured here; docs/FEEDBACK_LOOP.md turns
budgets into hours for stated decision times.

    python -m bench.annotation_speed [--judgments 200] [--queue task|cluster]

Writes bench/results/annotation_speed.json and the table in docs/FEEDBACK_LOOP.md.
"""

from __future__ import annotations

import argparse
import re
import tempfile
import time
from pathlib import Path


import numpy as np

from bench.common import ROOT, machine, markdown_table, replace_marked_section, write_json
from harness.app_process import start_app, stop_app
from workflows.demos import cache_dir

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]
BUDGETS = (500, 2000, 5000)
DECISION_SECONDS = (3, 5, 10)  # stated reading-and-deciding times, not measurements
PROGRESS = "#annotate-progress"


def counts(page) -> tuple[int, int]:
    """(judged today, left in this queue) as the Annotate tab shows them."""
    text = page.locator(PROGRESS).inner_text()
    match = re.search(r"Judged today: (\d+) · left in this queue: (\d+)", text)
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


def wait_for_judged(page, n: int) -> None:
    """Until the page shows ``n`` judged today and the judging keys work again (they are off while
    an item loads, and stay off once the queue is finished). Polled on every animation frame: Playwright's expect() polls at 100 ms and up,
    which would round every measurement up."""
    page.wait_for_function(
        "([sel, n]) => { const text = document.querySelector(sel)?.innerText || '';"
        " return text.includes('Judged today: ' + n + ' ')"
        " && (!document.getElementById('judge-different')?.disabled || text.includes('left in this queue: 0 ')); }",
        arg=[PROGRESS, n], polling="raf", timeout=60_000)


def run(judgments: int, queue: str = "task") -> dict:
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as playwright:
        env = {"QPR_DB_URL": f"sqlite:///{Path(tmp) / 'annotations.db'}", "QPR_CACHE_DIR": str(cache_dir()),
               "QPR_DEMO": "tutorial"}  # the hand-written corpus its queues and planted paraphrases are about
        process, url, _ = start_app(env, Path(tmp) / "app.log")
        try:
            browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(url)
            page.get_by_role("tab", name="Annotate").click()
            page.get_by_label("Your name (needed to annotate)").fill("speed-test")
            page.locator("h1").first.click()  # once: typing the name left the focus in a text field
            clicks = queues = 0
            times = []
            start = time.perf_counter()
            while len(times) < judgments:
                judged, left = counts(page)
                if left == 0:
                    page.get_by_role("button", name="Corpus-wide task" if queue == "task" else "Next cluster (the app picks)").click()
                    clicks += 1
                    queues += 1
                    page.wait_for_function(
                        "(sel) => /left in this queue: [1-9]/.test(document.querySelector(sel)?.innerText || '')"
                        " && !document.getElementById('judge-different')?.disabled",
                        arg=PROGRESS, polling="raf", timeout=60_000)
                    continue
                began = time.perf_counter()
                page.keyboard.press("2")
                clicks += 1
                wait_for_judged(page, judged + 1)
                times.append(time.perf_counter() - began)
            total = time.perf_counter() - start
            browser.close()
        finally:
            stop_app(process)
    return {"judgments": len(times), "clicks": clicks, "queues": queues, "clicks_per_judgment": clicks / len(times),
            "ms_per_judgment_p50": float(np.percentile(times, 50) * 1000),
            "ms_per_judgment_p99": float(np.percentile(times, 99) * 1000),
            "seconds_total": total, "queue": queue, "machine": machine()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--judgments", type=int, default=200)
    parser.add_argument("--queue", choices=["task", "cluster"], default="task",
                        help="the corpus-wide task (default) or one cluster's queue after another")
    args = parser.parse_args()
    result = run(args.judgments, args.queue)
    print(result, flush=True)
    machine_seconds = result["seconds_total"] / result["judgments"]
    rows = [{"decision": f"{t} s", "per_hour": 3600 / (t + machine_seconds),
             **{f"hours_{b}": b * (t + machine_seconds) / 3600 for b in BUDGETS}} for t in DECISION_SECONDS]
    write_json(result | {"hours": rows}, ROOT / "bench" / "results" / "annotation_speed.json")
    table = markdown_table(rows, [("decision", "person's time per pair (assumed)"), ("per_hour", "judgments per hour")]
                           + [(f"hours_{b}", f"hours for {b:,}") for b in BUDGETS])
    which = "the corpus-wide task" if result["queue"] == "task" else "cluster queues the app picked"
    note = (f"Measured in headless Chromium on the demo corpus, working through {which}: {result['judgments']} judgments "
            f"over {result['queues']} queue(s) took {result['clicks']} clicks and key presses ({result['clicks_per_judgment']:.2f} per judgment: one key per "
            f"judgment plus one click per queue). The machine's share of a judgment, from key press to the "
            f"updated count on screen: p50 {result['ms_per_judgment_p50']:.0f} ms, p99 {result['ms_per_judgment_p99']:.0f} ms "
            f"({machine_seconds:.2f} s per judgment over the whole session, queue starts included). "
            f"Machine: {result['machine']}. The hours below add a person's reading-and-deciding time, which was not "
            "measured: the three values are assumptions to read the budgets by.")
    replace_marked_section(ROOT / "docs" / "FEEDBACK_LOOP.md", "annotation-speed", f"{note}\n\n{table}")


if __name__ == "__main__":
    main()
