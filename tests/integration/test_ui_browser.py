"""The annotation page in a real browser (the system's Chromium, driven by Playwright) against
`streams serve` on the real broker, with a worker creating the runs: sign in, a run appears
live, feedback through the generated form reaches the scores topic, an out-of-range value is
refused next to its field, a resend after a dropped connection records once, and a key of
another tenant sees nothing; two people work through a blind queue by keyboard (lease,
submit, skip, the next item), each run judged by both, no one else's verdict shown.

STREAMS_UI_SCREENSHOTS=docs refreshes docs/ui-queue.png, docs/ui-form.png, docs/ui-lease.png,
docs/ui-agreement.png and docs/ui-pairwise.png.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any

import httpx
import pytest
from pydantic import Field

from streams.core.actors import EvaluatorActor, UserActor
from streams.core.events import AppEvent, FeedbackGiven, RunStarted, RunSucceeded
from streams.core.feedback import Feedback, registry
from streams.core.targets import RunTarget
from streams.core.tenancy import tenant_topics
from streams.examples.ops import TriageQuality
from streams.settings import Settings
from tests.conftest import WorkerProcess, read_topic, wait_until
from tests.integration.served import serve, start_run
from tests.surfaces.test_report_browser import chromium

pytestmark = pytest.mark.timeout(600)

TYPES = "streams.examples.ops,streams.core.judges"
WORKSPACE = "prod"


class Effort(Feedback, name="ui_test_effort", targets={"run"}):
    """How long the triage took a person (a test type: an unbounded number and a slider)."""

    minutes: Annotated[int, Field(ge=0)]
    confidence: Annotated[float, Field(ge=0, le=1)] = 0.5


@pytest.fixture
def effort_type() -> Iterator[None]:
    # In this process only (the service validates with it); gone after the test.
    registry.register(Effort)
    yield
    registry.unregister(Effort.feedback_name)


async def _spike(ws: Any, service: str) -> None:
    # Three spikes of a service fire the ops rule once: a triage run.
    for _ in range(3):
        await ws.append(AppEvent(name="ops:error_spike", data={"service": service, "errors": 7}))


async def _sign_in(page: Any, base: str, key: str, workspace_id: str, *,
                   live: bool = True, queue: str | None = None) -> None:
    """Sign in with `key`; unless `live` is False, wait until the page is live on the
    stream; then choose `queue`."""
    from playwright.async_api import expect

    await page.goto(f"{base}/ui/")
    await page.get_by_label("API key").fill(key)
    await page.get_by_label("Workspace", exact=True).fill(workspace_id)
    await page.get_by_role("button", name="Sign in").click()
    if live:
        await expect(page.locator("#connection")).to_have_text("live", timeout=30_000)
    if queue is not None:
        await page.locator("#queue-choice").select_option(queue)


async def _install(base: str, served: Any, tenant: str, queue: dict[str, Any]) -> None:
    """Install a queue over REST with a manager's key (201 expected)."""
    manager = served.key(tenant, "root", frozenset({"read", "manage_queues"}))
    async with httpx.AsyncClient(timeout=30) as http:
        answer = await http.post(f"{base}/v1/workspaces/{tenant}.{WORKSPACE}/queues",
                                 json=queue, headers={"Authorization": f"Bearer {manager}"})
        assert answer.status_code == 201, answer.text


async def _page(browser: Any, problems: list[str]) -> Any:
    """A page of its own (1200x900) whose errors go to `problems`."""
    page = await (await browser.new_context(viewport={"width": 1200, "height": 900})
                  ).new_page()
    page.on("pageerror", lambda error: problems.append(str(error)))
    page.on("console", lambda message: problems.append(message.text)
            if message.type == "error" else None)
    return page


def _feedback_of(log: list[Any], run_id: str, feedback_type: str) -> list[Any]:
    return [e for e in log if isinstance(e.event, FeedbackGiven)
            and e.event.feedback_type == feedback_type and e.event.target.id == run_id]


async def test_people_judge_runs_on_the_page(
    settings: Settings, tenant_factory: Callable[..., str],
    client_factory: Callable[..., Any], worker_factory: Callable[..., WorkerProcess],
    effort_type: None, tmp_path: Path,
) -> None:
    from playwright.async_api import async_playwright, expect

    tenant, other = tenant_factory(), tenant_factory()
    worker_factory("--rules", "streams.examples.ops_rules", types=TYPES)
    bot = client_factory().workspace(tenant, WORKSPACE, actor=UserActor(id="ops-bot"))
    shots = Path(os.environ.get("STREAMS_UI_SCREENSHOTS") or tmp_path)
    problems: list[str] = []
    async with serve(settings) as served, async_playwright() as playwright:
        base = f"http://127.0.0.1:{served.port}"
        key = served.key(tenant, "ada")
        browser = await playwright.chromium.launch(executable_path=chromium(),
                                                   args=["--no-sandbox"])
        try:
            page = await browser.new_page(viewport={"width": 1200, "height": 900})
            page.on("pageerror", lambda error: problems.append(str(error)))
            page.on("console", lambda message: problems.append(message.text)
                    if message.type == "error" else None)

            # Sign in; the page is live on the stream before any run exists.
            await _sign_in(page, base, key, f"{tenant}.{WORKSPACE}")
            await expect(page.locator("#who")).to_contain_text("user:ada")
            await expect(page.locator("#queue li")).to_have_count(0)

            # A run appears live once the worker creates it (no reload, no polling).
            await _spike(bot, "api")
            item = page.locator("#queue li", has_text="ops:error-spike")
            await expect(item).to_have_count(1, timeout=90_000)
            run_id = await item.get_attribute("data-run-id")
            assert run_id
            await item.click()
            await expect(page.locator("#item h2")).to_contain_text(run_id)
            await expect(page.locator("#item")).to_contain_text("What made it fire")

            # The form generated from triage_quality: yes/no, choices, an optional text.
            await page.get_by_label("Feedback type").select_option("triage_quality")
            form = page.locator("form.feedback-form")
            await expect(form.locator('[data-field="correct"]')).to_have_attribute(
                "data-kind", "bool")
            await expect(form.locator('[data-field="severity"]')).to_have_attribute(
                "data-kind", "choice")
            await expect(form.get_by_label("Note (optional)")).to_be_visible()
            if os.environ.get("STREAMS_UI_SCREENSHOTS"):
                await page.screenshot(path=str(shots / "ui-queue.png"))
            # Keyboard-first: y for yes, 3 for the third choice (critical), then submit.
            await page.locator("body").click(position={"x": 5, "y": 5})
            await page.keyboard.press("y")
            await page.keyboard.press("3")
            await expect(form.get_by_label("yes")).to_be_checked()
            await expect(form.get_by_label("critical")).to_be_checked()
            await form.get_by_label("Note (optional)").fill("checked on the page")
            if os.environ.get("STREAMS_UI_SCREENSHOTS"):
                await page.screenshot(path=str(shots / "ui-form.png"))
            # A double click sends one command (the page keeps it until it is answered).
            await form.get_by_role("button", name="Submit").dblclick()
            await expect(page.locator("#submit-status")).to_contain_text("recorded",
                                                                          timeout=30_000)

            # The scores arrive on the scores topic, as ada's, on the run (the worker's judge
            # scores the run too: only ada's are looked at).
            scores_topic = tenant_topics(tenant, settings.topic_prefix).scores

            def adas() -> dict[str, Any]:
                records = read_topic(settings, scores_topic, at_least=1, settle=0.5)
                found = {r["name"]: r for _m, r in records
                         if r["source"]["participant"] == "user:ada"}
                return found if len(found) >= 3 else {}

            by_name = await asyncio.to_thread(wait_until, adas, 60, "ada's three scores")
            assert by_name["triage_quality.correct"]["numeric_value"] == 1.0
            assert by_name["triage_quality.severity"]["string_value"] == "critical"
            assert by_name["triage_quality.note"]["string_value"] == "checked on the page"
            assert len([n for n in by_name if n.startswith("triage_quality.")]) == 3

            # An out-of-range value: the service refuses it and the page says so by the field.
            await page.get_by_label("Feedback type").select_option("ui_test_effort")
            await form.get_by_label("Minutes").fill("-5")
            await form.get_by_role("button", name="Submit").click()
            error = form.locator('[data-field="minutes"] .error')
            await expect(error).to_contain_text("greater than or equal to 0", timeout=30_000)
            await expect(form.get_by_label("Minutes")).to_have_attribute("aria-invalid", "true")

            # A dropped connection: the command reaches the server, the answer never reaches
            # the page; the page reconnects and sends it again with the same command id.
            dropped: list[str] = []

            async def route(ws: Any) -> None:
                server = ws.connect_to_server()

                def to_server(message: str | bytes) -> None:
                    server.send(message)
                    frame = json.loads(message)
                    if frame.get("type") == "command" and not dropped:
                        dropped.append(frame["command_id"])
                        asyncio.get_running_loop().create_task(ws.close(code=1011))

                ws.on_message(to_server)

            await page.route_web_socket("**/stream", route)
            await page.evaluate("window.feedbackStreams.state.socket.close()")
            await expect(page.locator("#connection")).to_have_text("live", timeout=30_000)
            await form.get_by_label("Minutes").fill("12")
            await form.get_by_role("button", name="Submit").click()
            await expect(page.locator("#submit-status")).to_contain_text("recorded",
                                                                          timeout=60_000)
            assert len(dropped) == 1
            log = await bot.read()
            efforts = _feedback_of(log, run_id, "ui_test_effort")
            assert [e.event.value["minutes"] for e in efforts] == [12]
            # The double click recorded once: ada's one triage_quality (the judge's is its own).
            assert [e.actor for e in _feedback_of(log, run_id, "triage_quality")
                    if e.actor.kind == "user"] == [UserActor(id="ada")]
            assert efforts[0].actor == UserActor(id="ada")

            # A key of another tenant sees nothing of this one.
            stranger = await browser.new_page()
            await _sign_in(stranger, base, served.key(other, "eve"), f"{tenant}.{WORKSPACE}",
                           live=False)
            await expect(stranger.locator("#sign-in-error")).to_contain_text(
                "forbidden", timeout=30_000)
            await expect(stranger.locator("#queue li")).to_have_count(0)
            assert not await stranger.locator("#workbench").is_visible()
        finally:
            await browser.close()
    assert problems == []


async def test_two_people_work_through_a_blind_queue_by_keyboard(
    settings: Settings, tenant_factory: Callable[..., str],
) -> None:
    from playwright.async_api import async_playwright, expect

    tenant = tenant_factory()
    problems: list[str] = []
    # The judge is watched: below kappa 0.5 over two pairs or more, its calibration alarms.
    calibrated = settings.replace(calibration_thresholds='{"judge": 0.5}',
                                  calibration_min_pairs=2)
    async with serve(calibrated) as served, async_playwright() as playwright:
        ws = served.client.workspace(tenant, WORKSPACE)
        for n in range(3):
            await start_run(ws, f"run_{n}")
        # A judge's verdict on the newest run: a blind queue must not show it.
        judge = ws.as_actor(EvaluatorActor(name="judge", version="1"))
        await judge.give_feedback(TriageQuality(correct=False, severity="low",
                                                note="the judge says no"),
                                  on=RunTarget(run_id="run_2"))
        base = f"http://127.0.0.1:{served.port}"
        manager = served.key(tenant, "root", frozenset({"read", "manage_queues"}))
        queue = {"name": "spikes", "enters": {"runs_of": "ops:error-spike"},
                 "feedback_types": ["triage_quality"], "reviewers": 2, "blind": True}
        async with httpx.AsyncClient(timeout=30) as http:
            answer = await http.post(f"{base}/v1/workspaces/{tenant}.{WORKSPACE}/queues",
                                     json=queue,
                                     headers={"Authorization": f"Bearer {manager}"})
            assert answer.status_code == 201, answer.text
        browser = await playwright.chromium.launch(executable_path=chromium(),
                                                   args=["--no-sandbox"])
        turns: list[int] = []
        try:
            async def person(name: str) -> Any:
                context = await browser.new_context(viewport={"width": 1200, "height": 900})
                page = await context.new_page()
                page.on("pageerror", lambda error: problems.append(str(error)))
                page.on("console", lambda message: problems.append(message.text)
                        if message.type == "error" else None)
                await _sign_in(page, base, served.key(tenant, name), f"{tenant}.{WORKSPACE}",
                               queue="spikes")
                return page

            async def judge_it(page: Any, item: str, keys: str) -> None:
                await expect(page.locator("#item h2")).to_have_attribute(
                    "data-item", item, timeout=30_000)
                for key in keys:
                    await page.keyboard.press(key)
                await page.keyboard.press("Control+Enter")

            ada = await person("ada")
            # The newest run first, blind: no one else's verdict, only the queue's type.
            await expect(ada.locator("#item h2")).to_have_attribute("data-item", "run:run_2",
                                                                    timeout=30_000)
            await expect(ada.locator("#blind-note")).to_be_visible()
            await expect(ada.locator("#item")).not_to_contain_text("the judge says no")
            assert await ada.locator("#feedback-type option").all_text_contents() == [
                "triage_quality"]
            await expect(ada.locator("#item")).to_contain_text("ops:error-spike")
            if os.environ.get("STREAMS_UI_SCREENSHOTS"):
                shots = Path(os.environ["STREAMS_UI_SCREENSHOTS"])
                await ada.screenshot(path=str(shots / "ui-lease.png"))
            await judge_it(ada, "run:run_2", "y3")          # yes, critical; on to run_1
            await expect(ada.locator("#item h2")).to_have_attribute("data-item", "run:run_1",
                                                                    timeout=30_000)
            await ada.keyboard.press("s")                     # skip run_1: run_0 comes
            await judge_it(ada, "run:run_0", "n1")
            await expect(ada.locator("#queue-empty")).to_be_visible(timeout=30_000)

            # A second person gets the same runs (two reviewers each), blind as well.
            bo = await person("bo")
            await judge_it(bo, "run:run_2", "n1")
            await judge_it(bo, "run:run_1", "y2")
            await judge_it(bo, "run:run_0", "y1")
            await expect(bo.locator("#queue-empty")).to_be_visible(timeout=30_000)
            # The team's progress: run_1 has one verdict of two (ada skipped it).
            await expect(bo.locator("#queue-team")).to_have_text(
                "The team: 2 done, 1 in review, 0 left of 3 (5 verdicts).", timeout=30_000)
            for page in (ada, bo):
                turns += await page.evaluate("window.feedbackStreams.state.turns")

            # The agreement view replaces the queue view (a grid view with `hidden` once
            # stayed on screen below it).
            await ada.get_by_role("button", name="Agreement").click()
            await expect(ada.locator("#agreement-view")).to_be_visible()
            await expect(ada.locator("#queue-view")).to_be_hidden()
            # The judge said no on run_2; ada said yes, bo no: two pairs, half agreeing,
            # kappa 0 (chance), below the judge's threshold of 0.5: an alarm.
            correct = ada.locator("#agreement tbody tr", has_text="triage_quality.correct")
            await expect(correct).to_contain_text("evaluator:judge@1")
            await expect(correct).to_have_attribute("data-state", "alarm")
            assert await correct.locator("td").all_text_contents() == [
                "evaluator:judge@1", "triage_quality.correct", "kappa",
                "0.00 [-1.00, 1.00]", "50%", "2", "0.50", "ALARM"]
            await expect(ada.locator("#agreement-policy")).to_contain_text("newest 200 pairs")
            # The queue being worked through, on its own items: between people (ada and bo
            # disagreed on both runs they shared: correct 0%, severity 1 of 2) and the judge.
            mine = ada.locator("#queue-agreement")
            await expect(mine.locator("h2")).to_have_text(
                "On queue spikes: 3 items, 3 with a verdict", timeout=30_000)
            people = mine.locator("#queue-people tbody tr")
            correct_row = await people.nth(0).locator("td").all_text_contents()
            # alpha = 1 - D_o / D_e = 1 - 1 / (8 / 12): -0.50, worse than chance.
            assert correct_row[:3] == ["triage_quality.correct", "2", "0%"]
            assert correct_row[3].startswith("-0.50"), correct_row
            assert (await people.nth(1).locator("td").all_text_contents())[:3] == [
                "triage_quality.severity", "2", "50%"]
            judges = mine.locator("#queue-judges tbody tr", has_text="triage_quality.correct")
            assert (await judges.locator("td").all_text_contents())[:4] == [
                "evaluator:judge@1", "triage_quality.correct", "2", "50%"]
            if os.environ.get("STREAMS_UI_SCREENSHOTS"):
                await ada.screenshot(path=str(shots / "ui-agreement.png"))
        finally:
            await browser.close()
    given = await ws.feedback(feedback_type="triage_quality")
    people = sorted((e.actor.participant, e.event.target.id, e.event.value["correct"],
                     e.event.value["severity"]) for e in given if e.actor.kind == "user")
    assert people == [("user:ada", "run_0", False, "low"),
                      ("user:ada", "run_2", True, "critical"),
                      ("user:bo", "run_0", True, "low"),
                      ("user:bo", "run_1", True, "high"),
                      ("user:bo", "run_2", False, "low")]
    print(f"queue on the page: submit to the next item shown {turns} ms")
    assert problems == []


async def test_a_firing_and_a_chain_are_shown_as_labelled_rows_in_a_queue(
    settings: Settings, tenant_factory: Callable[..., str],
) -> None:
    from playwright.async_api import async_playwright, expect

    from streams.core.events import RuleFired

    tenant = tenant_factory()
    problems: list[str] = []
    async with serve(settings) as served, async_playwright() as playwright:
        ws = served.client.workspace(tenant, WORKSPACE)
        spike = await ws.append(AppEvent(name="ops:error_spike", data={"service": "billing"}))
        await ws.append(RuleFired(firing_id="fir_1", rule="ops:error-spike",
                                  matched=[spike.id]),
                        correlation_id=spike.id, causation_id=spike.id)
        base = f"http://127.0.0.1:{served.port}"
        await _install(base, served, tenant, {
            "name": "firings", "enters": {"firings_of": "ops:error-spike"},
            "feedback_types": ["should_have_fired"]})
        await _install(base, served, tenant, {"name": "chains", "enters": {"chains": {}},
                                              "feedback_types": ["resolution"]})
        browser = await playwright.chromium.launch(executable_path=chromium(),
                                                   args=["--no-sandbox"])
        try:
            page = await _page(browser, problems)
            await _sign_in(page, base, served.key(tenant, "ada"), f"{tenant}.{WORKSPACE}",
                           queue="firings")
            item = page.locator("#item")
            await expect(page.locator("#item h2")).to_have_attribute(
                "data-item", "firing:fir_1", timeout=30_000)
            await expect(item.locator("section").first).to_contain_text("ops:error-spike")
            await expect(item).to_contain_text("runs started")
            await expect(item).to_contain_text("billing")  # what made it fire
            await page.locator("#queue-choice").select_option("chains")
            await expect(page.locator("#item h2")).to_have_attribute(
                "data-item", f"chain:{spike.id}", timeout=30_000)
            await expect(item).to_contain_text("ops:error_spike at")  # began
            await expect(item).to_contain_text("rule_fired at")       # last
        finally:
            await browser.close()
    assert problems == []


async def test_pairwise_review_of_two_judge_versions_by_keyboard(
    settings: Settings, tenant_factory: Callable[..., str],
) -> None:
    from playwright.async_api import async_playwright, expect

    from streams.core.pairwise import display_order

    tenant = tenant_factory()
    problems: list[str] = []
    async with serve(settings) as served, async_playwright() as playwright:
        ws = served.client.workspace(tenant, WORKSPACE)
        old = ws.as_actor(EvaluatorActor(name="judge", version="2"))
        new = ws.as_actor(EvaluatorActor(name="judge", version="3"))
        for n in range(2):
            spike = await ws.append(AppEvent(name="ops:error_spike", data={}))
            started = await ws.append(
                RunStarted(run_id=f"run_{n}", rule="ops:error-spike", action="triage",
                           firing_id="fir_1"), correlation_id=spike.id, causation_id=spike.id)
            # The run is an evaluator's: its output and its recorded verdict name the
            # version, which a blind queue must not show beside the pair.
            await ws.append(RunSucceeded(run_id=f"run_{n}", rule="ops:error-spike",
                                         action="triage", output={
                                             "evaluator": "judge", "version": "3",
                                             "value": {"correct": False}}),
                            correlation_id=spike.id, causation_id=started.id)
            await ws.append(AppEvent(name="streams:verdict", data={
                "evaluator": "judge", "version": "2", "shadow": True,
                "feedback_type": "triage_quality", "value": {"correct": True},
                "target": {"kind": "run", "id": f"run_{n}"}}),
                correlation_id=spike.id, causation_id=started.id)
            await old.give_feedback(TriageQuality(correct=True, severity="low",
                                                  note=f"old on {n}"),
                                    on=RunTarget(run_id=f"run_{n}"))
            await new.give_feedback(TriageQuality(correct=False, severity="critical",
                                                  note=f"new on {n}"),
                                    on=RunTarget(run_id=f"run_{n}"))
        await start_run(ws, "run_9")  # judged by one version only: not an item
        await old.give_feedback(TriageQuality(correct=True, severity="low"),
                                on=RunTarget(run_id="run_9"))
        base = f"http://127.0.0.1:{served.port}"
        manager = served.key(tenant, "root", frozenset({"read", "manage_queues"}))
        await _install(base, served, tenant, {
            "name": "versions", "enters": {"pairs": {
                "evaluator": "judge", "versions": ["2", "3"],
                "feedback_type": "triage_quality"}},
            "feedback_types": ["pairwise_preference"], "blind": True})
        async with httpx.AsyncClient(timeout=30) as http:
            # The pair route names the path of a wrong item.
            wrong = await http.get(
                f"{base}/v1/workspaces/{tenant}.{WORKSPACE}/queues/versions/pair/chain:x",
                headers={"Authorization": f"Bearer {manager}"})
            assert wrong.status_code == 422 and "path.item" in wrong.text, wrong.text
        browser = await playwright.chromium.launch(executable_path=chromium(),
                                                   args=["--no-sandbox"])
        try:
            page = await _page(browser, problems)
            await _sign_in(page, base, served.key(tenant, "ada"), f"{tenant}.{WORKSPACE}",
                           queue="versions")
            chosen: dict[str, str] = {}
            for item, key in (("run:run_1", "1"), ("run:run_0", "3")):
                await expect(page.locator("#item h2")).to_have_attribute(
                    "data-item", item, timeout=30_000)
                pair = page.locator("#pair")
                first, second = display_order(item, "versions")
                said = {"a": "old on", "b": "new on"}
                # Both verdicts side by side, in the item's order; blind: no version named.
                await expect(pair.locator('[data-side="1"]')).to_contain_text(said[first])
                await expect(pair.locator('[data-side="2"]')).to_contain_text(said[second])
                await expect(pair).not_to_contain_text("judge@")
                await expect(page.locator("#item")).not_to_contain_text("judge")
                await expect(page.locator("#item")).to_contain_text(
                    "an evaluator's verdict (hidden: blind review)")
                if os.environ.get("STREAMS_UI_SCREENSHOTS") and key == "1":
                    shots = Path(os.environ["STREAMS_UI_SCREENSHOTS"])
                    await page.screenshot(path=str(shots / "ui-pairwise.png"))
                await page.keyboard.press(key)
                await page.keyboard.press("Control+Enter")
                chosen[item] = first if key == "1" else "tie"
            await expect(page.locator("#queue-empty")).to_be_visible(timeout=30_000)
        finally:
            await browser.close()
    given = await ws.feedback(feedback_type="pairwise_preference")
    assert sorted((e.event.target.id, e.actor.participant, e.event.value["a"],
                   e.event.value["b"], e.event.value["preferred"]) for e in given) == [
        ("run_0", "user:ada", "evaluator:judge@2", "evaluator:judge@3", chosen["run:run_0"]),
        ("run_1", "user:ada", "evaluator:judge@2", "evaluator:judge@3", chosen["run:run_1"])]
    assert problems == []


async def test_a_lease_that_runs_out_returns_the_item_to_someone_else(
    settings: Settings, tenant_factory: Callable[..., str],
) -> None:
    from playwright.async_api import async_playwright, expect

    tenant = tenant_factory()
    problems: list[str] = []
    async with serve(settings) as served, async_playwright() as playwright:
        ws = served.client.workspace(tenant, WORKSPACE)
        await start_run(ws, "run_0")
        base = f"http://127.0.0.1:{served.port}"
        await _install(base, served, tenant, {
            "name": "quick", "enters": {"runs_of": "ops:error-spike"},
            "feedback_types": ["triage_quality"], "lease_seconds": 2})
        browser = await playwright.chromium.launch(executable_path=chromium(),
                                                   args=["--no-sandbox"])
        try:
            async def person(name: str) -> Any:
                page = await _page(browser, problems)
                await _sign_in(page, base, served.key(tenant, name), f"{tenant}.{WORKSPACE}",
                               queue="quick")
                await expect(page.locator("#item h2")).to_have_attribute(
                    "data-item", "run:run_0", timeout=30_000)
                return page

            ada = await person("ada")
            await asyncio.sleep(3)  # past the 2 s lease, before she submits
            for key in ("y", "1", "Control+Enter"):
                await ada.keyboard.press(key)
            await expect(ada.locator("#queue-progress")).to_contain_text(
                "your lease on run:run_0 ran out before you submitted", timeout=30_000)
            await expect(ada.locator("#queue-empty")).to_be_visible()  # never hers again
            bo = await person("bo")  # the item went back to the queue: bo gets it
            for key in ("n", "2", "Control+Enter"):
                await bo.keyboard.press(key)
            await expect(bo.locator("#queue-empty")).to_be_visible(timeout=30_000)
        finally:
            await browser.close()
    given = await ws.feedback(feedback_type="triage_quality")
    assert [(e.actor.participant, e.event.value["correct"]) for e in given] == [
        ("user:bo", False)]
    # The refused submit is the browser's one logged failure: its 409 answer.
    assert problems == ["Failed to load resource: the server responded with a status of "
                        "409 (Conflict)"]


async def test_signing_in_reads_one_page_of_runs_and_older_ones_on_demand(
    settings: Settings, tenant_factory: Callable[..., str],
) -> None:
    from playwright.async_api import async_playwright, expect

    tenant = tenant_factory()
    problems: list[str] = []
    async with serve(settings) as served, async_playwright() as playwright:
        ws = served.client.workspace(tenant, WORKSPACE)
        await asyncio.gather(*(start_run(ws, f"run_{n:03}") for n in range(55)))
        # Another person's verdict on one run: not read at sign-in, read with the run.
        await ws.as_actor(UserActor(id="bo")).give_feedback(
            TriageQuality(correct=False, severity="low", note="bo was here"),
            on=RunTarget(run_id="run_007"))
        base = f"http://127.0.0.1:{served.port}"
        browser = await playwright.chromium.launch(executable_path=chromium(),
                                                   args=["--no-sandbox"])
        requests: list[str] = []
        try:
            page = await _page(browser, problems)
            page.on("request", lambda request: requests.append(request.url))
            await _sign_in(page, base, served.key(tenant, "ada"), f"{tenant}.{WORKSPACE}")
            await expect(page.locator("#queue li")).to_have_count(50, timeout=30_000)
            await expect(page.locator("#older-runs")).to_be_visible()
            runs_read = [u for u in requests if "/runs?" in u]
            feedback_read = [u for u in requests if "/feedback?" in u]
            assert len(runs_read) == 1, runs_read  # one page, not every page
            assert all("participant=user%3Aada" in u for u in feedback_read), feedback_read
            await page.get_by_role("button", name="Older runs").click()
            await expect(page.locator("#queue li")).to_have_count(55, timeout=30_000)
            await expect(page.locator("#older-runs")).to_be_hidden()
            await page.locator('#queue li[data-run-id="run_007"]').click()
            await expect(page.locator("#given")).to_contain_text("bo was here",
                                                                 timeout=30_000)
        finally:
            await browser.close()
    assert problems == []


async def test_a_manager_creates_a_queue_on_the_page(
    settings: Settings, tenant_factory: Callable[..., str],
) -> None:
    from playwright.async_api import async_playwright, expect

    tenant = tenant_factory()
    problems: list[str] = []
    async with serve(settings) as served, async_playwright() as playwright:
        ws = served.client.workspace(tenant, WORKSPACE)
        await start_run(ws, "run_0")
        base = f"http://127.0.0.1:{served.port}"
        browser = await playwright.chromium.launch(executable_path=chromium(),
                                                   args=["--no-sandbox"])
        try:
            # A reviewer without manage_queues is not offered it.
            reviewer = await _page(browser, problems)
            await _sign_in(reviewer, base, served.key(tenant, "bo"), f"{tenant}.{WORKSPACE}")
            await expect(reviewer.locator("#new-queue")).to_be_hidden()

            page = await _page(browser, problems)
            key = served.key(tenant, "ada", frozenset({"read", "give_feedback",
                                                       "manage_queues"}))
            await _sign_in(page, base, key, f"{tenant}.{WORKSPACE}")
            await page.get_by_text("New queue").click()
            box = page.get_by_label("Its JSON form")
            await expect(box).to_have_value(re.compile('"runs_of"'))  # a template to edit
            # A definition the server refuses: its message names the JSON path.
            await box.fill(json.dumps({"name": "spikes",
                                       "enters": {"runs_of": "ops:error-spike"},
                                       "feedback_types": ["nope"]}))
            await page.get_by_role("button", name="Install").click()
            await expect(page.locator("#new-queue-status")).to_contain_text(
                "at $.feedback_types[0]", timeout=30_000)
            await box.fill(json.dumps({"name": "spikes",
                                       "enters": {"runs_of": "ops:error-spike"},
                                       "feedback_types": ["triage_quality"]}))
            await page.get_by_role("button", name="Install").click()
            await expect(page.locator("#new-queue-status")).to_have_text(
                "installed spikes", timeout=30_000)
            await page.locator("#queue-choice").select_option("spikes")
            await expect(page.locator("#item h2")).to_have_attribute(
                "data-item", "run:run_0", timeout=30_000)
        finally:
            await browser.close()
    # The refused install is the one logged failure (its 422 answer).
    assert problems == ["Failed to load resource: the server responded with a status of "
                        "422 (Unprocessable Entity)"]
