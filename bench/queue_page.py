"""A person working through an annotation queue on the page, by keyboard, in Chromium.

    export KAFKA_BOOTSTRAP_SERVERS=... SCHEMA_REGISTRY_URL=...
    .venv/bin/python -m bench.queue_page --runs 10000 --items 200

1. Seeds a fresh tenant with `--runs` runs of one rule, starts `python -m streams serve` and
   installs a queue of that rule's runs (one reviewer per run), as bench.queue_review does.
2. The system's Chromium (Playwright, headless) signs in at `/ui/`, chooses the queue and
   judges `--items` items by keyboard only (`y`, `2`, `Ctrl+Enter`), each `--think` seconds
   after it is shown (0.3: a quick person), the way
   tests/integration/test_ui_browser.py does for three. The page records, per item, the time
   from the submit to the next item shown (its `state.turns`): the submit under the lease
   and the rendering of the item the page leased ahead while the person judged (`next`
   with `besides=<the item shown>`, then its run's record).
3. The floor, in the same run on the same server, alternating with the page in rounds: the
   same requests from Python for a second reviewer, no browser: per turn the submit (timed),
   then, off the turn's clock as on the page, the lease ahead and its run's record (timed
   apart): what the server and the transport cost a turn.

Prints the first page's times (sign-in to the newest runs listed, the queue chosen to its
first item shown), then p50/p99 ms of each turn, and their ratio. The browser, the server,
the broker and this script share the machine's cores.
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


async def _page_round(page: Any, items: int, think: float) -> list[int]:
    """Judge `items` items on the page, `think` seconds after each is shown (a person reads
    before judging; meanwhile the page leases the next one ahead); the page's turns (ms) of
    this round."""
    before = len(await page.evaluate("window.feedbackStreams.state.turns"))
    for _ in range(items):
        shown = await page.locator("#item h2").get_attribute("data-item")
        await asyncio.sleep(think)
        await page.keyboard.press("y")
        await page.keyboard.press("2")
        await page.keyboard.press("Control+Enter")
        await page.wait_for_function(
            "(shown) => { const h = document.querySelector('#item h2');"
            " return (h && h.dataset.item !== shown) || document.querySelector('#queue-empty'); }",
            arg=shown, timeout=60_000)
    turns: list[int] = await page.evaluate("window.feedbackStreams.state.turns")
    return turns[before:]


async def _ahead(http: httpx.AsyncClient, base: str, shown: dict[str, Any],
                 steps: dict[str, list[float]]) -> dict[str, Any]:
    """What the page does while a person judges `shown`: lease the next item besides it
    and read its run; each step's time goes to `steps`. Returns the lease taken ahead."""
    began = time.perf_counter()
    lease = (await http.post(f"{base}/queues/spikes/next",
                             params={"besides": shown["item"]})).json()["lease"]
    if lease is None:
        raise SystemExit("the queue ran out: seed more runs (--runs)")
    leased = time.perf_counter()
    run = await http.get(f"{base}/runs/{lease['target']['run_id']}")
    if run.status_code != 200:
        raise SystemExit(f"the run's record failed: {run.status_code} {run.text}")
    steps["next, ahead"].append(leased - began)
    steps["run record, ahead"].append(time.perf_counter() - leased)
    return lease  # type: ignore[no-any-return]


async def _floor_round(http: httpx.AsyncClient, base: str, items: int,
                       held: tuple[dict[str, Any], dict[str, Any]],
                       steps: dict[str, list[float]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """`items` turns from Python the way the page takes them: a turn is the submit of the
    item shown (timed: `turn`), after which the item leased ahead is shown at once; then,
    off the turn's clock, the next lease besides it and its run. Returns (shown, ahead)."""
    shown, ahead = held
    for _ in range(items):
        started = time.perf_counter()
        done = await http.post(f"{base}/queues/spikes/submit", json={
            "request_id": shown["request_id"], "command": _verdict(shown["target"])})
        if done.status_code != 200:
            raise SystemExit(f"submit failed: {done.status_code} {done.text}")
        steps["turn"].append(time.perf_counter() - started)
        shown = ahead
        ahead = await _ahead(http, base, shown, steps)
    return shown, ahead


async def main_async(args: argparse.Namespace) -> None:
    from playwright.async_api import async_playwright

    chromium = shutil.which("chromium")
    if chromium is None:
        raise SystemExit("no chromium on PATH: apt-get install chromium (deploy/test.sh does)")
    served = await serve_seeded(args.runs, f"bp{uuid.uuid4().hex[:8]}", people=("ada", "bo"))
    page_turns: list[float] = []  # seconds, as _pct takes them
    signed_in = first_item = 0.0
    steps: dict[str, list[float]] = {"turn": [], "next, ahead": [], "run record, ahead": []}
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
            shown = (await http.post(f"{served.base}/queues/spikes/next")).json()["lease"]
            held = (shown, await _ahead(http, served.base, shown, {
                "next, ahead": [], "run record, ahead": []}))
            browser = await playwright.chromium.launch(executable_path=chromium,
                                                       args=["--no-sandbox"])
            try:
                page = await browser.new_page(viewport={"width": 1200, "height": 900})
                await page.goto(f"http://127.0.0.1:{served.port}/ui/")
                await page.get_by_label("API key").fill(served.token)
                await page.get_by_label("Workspace", exact=True).fill(f"{TENANT}.prod")
                # The first page: from the sign-in to the newest runs listed, then from
                # choosing the queue to its first item shown.
                began = time.perf_counter()
                await page.get_by_role("button", name="Sign in").click()
                await page.locator("#queue li").first.wait_for(timeout=120_000)
                signed_in = time.perf_counter() - began
                began = time.perf_counter()
                await page.locator("#queue-choice").select_option("spikes", timeout=120_000)
                await page.locator("#item h2[data-item]").wait_for(timeout=60_000)
                first_item = time.perf_counter() - began
                per_round = max(1, args.items // args.rounds)
                for n in range(args.rounds):
                    page_turns += [t / 1000 for t in await _page_round(page, per_round,
                                                                       args.think)]
                    held = await _floor_round(http, served.base, per_round, held, steps)
                    print(f"round {n + 1}/{args.rounds}: page p50 "
                          f"{_pct(page_turns, 0.5):.0f} ms, floor p50 "
                          f"{_pct(floor_turns, 0.5):.0f} ms", flush=True)
            finally:
                await browser.close()
    finally:
        served.server.terminate()  # the server this run started, by its handle
        await served.server.wait()
    page_ms = page_turns
    print(f"first page, once: signed in to the runs listed {1000 * signed_in:.0f} ms; the "
          f"queue chosen to its first item shown {1000 * first_item:.0f} ms")
    print(f"a person on the page, {len(page_ms)} items of a queue of {args.runs} runs, by "
          f"keyboard, {args.think:g} s on each; the floor: the same requests from Python, "
          "no browser")
    print(f"{'turn':<34}{'p50 ms':>10}{'p99 ms':>10}")
    print(f"{'page: submit to next item shown':<34}{_pct(page_ms, 0.5):>10.1f}"
          f"{_pct(page_ms, 0.99):>10.1f}")
    print(f"{'floor: the submit from Python':<34}{_pct(floor_turns, 0.5):>10.1f}"
          f"{_pct(floor_turns, 0.99):>10.1f}")
    for step in ("next, ahead", "run record, ahead"):
        print(f"{'  off the turn: ' + step:<34}{_pct(steps[step], 0.5):>10.1f}"
              f"{_pct(steps[step], 0.99):>10.1f}")
    print(f"page p50 / floor p50: {_pct(page_ms, 0.5) / _pct(floor_turns, 0.5):.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=4,
                        help="page and floor alternate this many times")
    parser.add_argument("--think", type=float, default=0.3,
                        help="seconds the person looks at an item before judging it (0: "
                        "judge the moment it is shown, before the page has leased ahead)")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
