"""A budget across two workers and a SIGKILL, on the real broker: the claims granted never
pass the budget, no evaluation runs without a granted claim, and every run ends.

The rule (tests/integration/rules_fixture.py): `t:budgeted` judges each `t:budget-judge`
event with `budgeted-judge@1` under the budget `t-judges`, 1,000 tokens for the test's
whole window at 100 per evaluation: ten evaluations, whoever runs them.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

from streams.core.actors import UserActor
from streams.core.evaluation import VERDICT_RECORD
from streams.core.events import AppEvent, FeedbackGiven, RuleFired, RunSucceeded
from streams.runtime.client.workspace import Workspace
from tests.conftest import WorkerProcess
from tests.faults.conftest import assert_alive

RULES = "tests.integration.rules_fixture"
TYPES = "streams.examples.ops,streams.core.judges"
ASKED = 40


async def settled(ws: Workspace, within: float) -> list[Any]:
    """The log once every asked run has succeeded (judged or refused by the budget)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        log = await ws.read()
        runs = {e.event.run_id for e in log  # type: ignore[attr-defined]
                if isinstance(e.event, RunSucceeded) and e.event.rule == "t:budgeted"}
        if len(runs) >= ASKED:
            return log
        if loop.time() > deadline:
            raise AssertionError(f"{len(runs)} of {ASKED} budgeted runs ended in {within} s")
        await asyncio.sleep(0.5)


async def test_a_budget_is_exact_across_two_workers_and_a_sigkill(
    tenant_factory: Callable[..., str], tmp_path: Path,
    client_factory: Callable[..., Any], worker_factory: Callable[..., WorkerProcess],
) -> None:
    tenant = tenant_factory(partitions=4)
    first = worker_factory("--rules", RULES, types=TYPES,
                           STREAMS_STATE_DIR=str(tmp_path / "first"))
    second = worker_factory("--rules", RULES, types=TYPES,
                            STREAMS_STATE_DIR=str(tmp_path / "second"))
    ws = client_factory().workspace(tenant, "prod", actor=UserActor(id="load"))

    async def ask(start: int, count: int) -> None:
        for i in range(start, start + count):
            await ws.append(AppEvent(name="t:budget-judge", data={"minutes": i}))
            await asyncio.sleep(0.05)

    async def granted() -> int:
        return sum(1 for e in await ws.read() if isinstance(e.event, RuleFired)
                   and e.event.rule == "streams:budget.t-judges")

    async def kill_once_granted(worker: WorkerProcess, more_than: int) -> None:
        # Mid-stream: once a claim was granted, while runs and claims are in flight.
        for _ in range(600):
            if await granted() > more_than:
                break
            await asyncio.sleep(0.05)
        worker.kill(signal.SIGKILL)

    # Each worker is SIGKILLed once, so whichever decides the budget's key is killed once
    # while deciding it; the other then restores its window from the changelog.
    # The first batch fits the budget (8 of 10 evaluations), so the second still has
    # claims to grant while its worker is killed.
    sending = asyncio.create_task(ask(0, 8))
    await kill_once_granted(first, 0)
    await sending
    first.start()
    sending = asyncio.create_task(ask(8, ASKED - 8))
    await kill_once_granted(second, await granted())
    await sending
    second.start()
    log = await settled(ws, 240)
    grants = {e.event.firing_id for e in log  # type: ignore[attr-defined]
              if isinstance(e.event, RuleFired) and e.event.rule == "streams:budget.t-judges"}
    # Exact to the token: 100 per claim, 1,000 in the window, and more asked than fit.
    assert len(grants) == 10
    verdicts = {e.event.data["key"] for e in log  # type: ignore[attr-defined]
                if isinstance(e.event, AppEvent) and e.event.name == VERDICT_RECORD}
    given = [e for e in log if isinstance(e.event, FeedbackGiven)]
    # No evaluation without a grant: a grant whose attempt was killed is spent unused.
    assert len(verdicts) <= len(grants) and len({e.correlation_id for e in given}) <= 10
    outputs = [e.event.output for e in log  # type: ignore[attr-defined]
               if isinstance(e.event, RunSucceeded) and e.event.rule == "t:budgeted"]
    assert all("value" in o or o.get("over_budget") == "t-judges" for o in outputs)
    assert_alive(first, second)
