"""A person working through an annotation queue on the page, by keyboard, in Chromium.

    export KAFKA_BOOTSTRAP_SERVERS=... SCHEMA_REGISTRY_URL=...
    .venv/bin/python -m bench.queue_page --runs 10000 --items 200

1. Seeds a fresh tenant with `--runs` runs of one rule, starts `python -m streams serve` and
   installs a queue of that rule's runs (one reviewer per run), as bench.queue_review does.
2. The system's Chromium (Playwright, headless) signs in at `/ui/`, chooses the queue and
   judges `--items` items by keyboard only (`y`, `2`, `Ctrl+Enter`), the way
   tests/integration/test_ui_browser.py does for three. The page records, per item, the time
   from the submit to the next item shown (its `state.turns`): the submit under the lease,
   the next lease, the run's record, the rendering.
3. The floor, in the same run on the same server, alternating with the page in rounds: the
   same three requests one after the other from Python (`POST .../submit`,
   `POST .../next`, `GET .../runs/{id}`) for a second reviewer, with no browser: what the
   server and the transport cost a turn.

Prints p50/p99 ms of each, and their ratio. The browser, the server, the broker and this
script share the machine's cores.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import time
import uuid
from typing import Any

import httpx

from bench.queue_review import TENANT, _verdict, serve_seeded
from bench.served import until_ready
from bench.surfaces import _pct


async def _page_round(page: Any, items: int) -> list[int]:
    """Judge `items` items on the page; the page's turns (ms) of this round."""
    before = len(await page.evaluate("window.feedbackStreams.state.turns"))
    for _ in range(items):
        shown = await page.locator("#item h2").get_attribute("data-item")
        await page.keyboard.press("y")
        await page.keyboard.press("2")
        await page.keyboard.press("Control+Enter")
        await page.wait_for_function(
            "(shown) => { const h = document.querySelector('#item h2');"
            " return (h && h.dataset.item !== shown) || document.querySelector('#queue-empty'); }",
            arg=shown, timeout=60_000)
    turns: list[int] = await page.evaluate("window.feedbackStreams.state.turns")
    return turns[before:]


async def _floor_round(http: httpx.AsyncClient, base: str, items: int,
                       lease: dict[str, Any], steps: dict[str, list[float]]) -> dict[str, Any]:
    """`items` turns of submit, next and the run's record from Python; each step's time and
    the turn's (s) go to `steps`; returns the lease held at the end."""
    for _ in range(items):
        started = time.perf_counter()
        done = await http.post(f"{base}/queues/spikes/submit", json={
            "request_id": lease["request_id"], "command": _verdict(lease["target"])})
        if done.status_code != 200:
            raise SystemExit(f"submit failed: {done.status_code} {done.text}")
        submitted = time.perf_counter()
        lease = (await http.post(f"{base}/queues/spikes/next")).json()["lease"]
        if lease is None:
            raise SystemExit("the queue ran out: seed more runs (--runs)")
        leased = time.perf_counter()
        run = await http.get(f"{base}/runs/{lease['target']['run_id']}")
        if run.status_code != 200:
            raise SystemExit(f"the run's record failed: {run.status_code} {run.text}")
        ended = time.perf_counter()
        steps["submit"].append(submitted - started)
        steps["next"].append(leased - submitted)
        steps["run record"].append(ended - leased)
        steps["turn"].append(ended - started)
    return lease


async def main_async(args: argparse.Namespace) -> None:
    from playwright.async_api import async_playwright

    chromium = shutil.which("chromium")
    if chromium is None:
        raise SystemExit("no chromium on PATH: apt-get install chromium (deploy/test.sh does)")
    served = await serve_seeded(args.runs, f"bp{uuid.uuid4().hex[:8]}", people=("ada", "bo"))
    page_turns: list[float] = []  # seconds, as _pct takes them
    steps: dict[str, list[float]] = {"submit": [], "next": [], "run record": [], "turn": []}
    floor_turns = steps["turn"]
    try:
        await until_ready(f"http://127.0.0.1:{served.port}")
        # The floor's reviewer is bo: a reviewer holds one item at a time, so the page's
        # person (ada) and the floor each keep their own lease (k = 1: never the same run).
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {served.tokens['bo']}"},
                                     timeout=60) as http, async_playwright() as playwright:
            installed = await http.post(f"{served.base}/queues", json={
                "name": "spikes", "enters": {"runs_of": "ops:error-spike"},
                "feedback_types": ["triage_quality"]})
            if installed.status_code != 201:
                raise SystemExit(f"the queue was not installed: {installed.text}")
            lease = (await http.post(f"{served.base}/queues/spikes/next")).json()["lease"]
            browser = await playwright.chromium.launch(executable_path=chromium,
                                                       args=["--no-sandbox"])
            try:
                page = await browser.new_page(viewport={"width": 1200, "height": 900})
                await page.goto(f"http://127.0.0.1:{served.port}/ui/")
                await page.get_by_label("API key").fill(served.token)
                await page.get_by_label("Workspace", exact=True).fill(f"{TENANT}.prod")
                await page.get_by_role("button", name="Sign in").click()
                await page.locator("#queue-choice").select_option("spikes", timeout=120_000)
                await page.locator("#item h2[data-item]").wait_for(timeout=60_000)
                per_round = max(1, args.items // args.rounds)
                for n in range(args.rounds):
                    page_turns += [t / 1000 for t in await _page_round(page, per_round)]
                    lease = await _floor_round(http, served.base, per_round, lease, steps)
                    print(f"round {n + 1}/{args.rounds}: page p50 "
                          f"{_pct(page_turns, 0.5):.0f} ms, floor p50 "
                          f"{_pct(floor_turns, 0.5):.0f} ms", flush=True)
            finally:
                await browser.close()
    finally:
        served.server.terminate()  # the server this run started, by its handle
        await served.server.wait()
    page_ms = page_turns
    print(f"a person on the page, {len(page_ms)} items of a queue of {args.runs} runs, by "
          "keyboard; the floor: the same requests from Python, no browser")
    print(f"{'turn':<34}{'p50 ms':>10}{'p99 ms':>10}")
    print(f"{'page: submit to next item shown':<34}{_pct(page_ms, 0.5):>10.1f}"
          f"{_pct(page_ms, 0.99):>10.1f}")
    print(f"{'floor: submit, next, run record':<34}{_pct(floor_turns, 0.5):>10.1f}"
          f"{_pct(floor_turns, 0.99):>10.1f}")
    for step in ("submit", "next", "run record"):
        print(f"{'  floor, ' + step:<34}{_pct(steps[step], 0.5):>10.1f}"
              f"{_pct(steps[step], 0.99):>10.1f}")
    print(f"page p50 / floor p50: {_pct(page_ms, 0.5) / _pct(floor_turns, 0.5):.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=4,
                        help="page and floor alternate this many times")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
