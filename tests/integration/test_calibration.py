"""Online calibration on the real broker: a judge that drifts from people raises one alarm
event, its disagreements enter a queue, the alarm clears when people and the judge agree
again, and neither a second pass nor a restarted keeper repeats a change; `streams
calibration follow` prints the change and exports the gauges."""

from __future__ import annotations

import asyncio
import json
import select
import signal
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import httpx

from streams.core.actors import EvaluatorActor, UserActor
from streams.core.events import AppEvent, RuleFired, RunStarted
from streams.core.measures.calibration import ALARM_EVENT, CalibrationAlarm
from streams.core.targets import RunTarget
from streams.examples.ops import TriageQuality
from streams.runtime.client.workspace import StreamsClient, Workspace
from streams.runtime.jobs.calibration import CalibrationKeeper
from streams.runtime.jobs.queues import QueueBook
from streams.settings import Settings
from tests.conftest import REPO, _free_port, wait_until

POLICY = {"calibration_thresholds": '{"triage-judge": 0.5}', "calibration_window": 20,
          "calibration_min_pairs": 10}
QUEUE = "calibration.triage-judge-2.triage_quality"


async def _runs(ws: Workspace, n: int) -> list[str]:
    ids = []
    for i in range(n):
        app = await ws.append(AppEvent(name="ops:error_spike", data={"i": i}))
        fired = await ws.append(RuleFired(firing_id=f"fir_{i}", rule="ops:error-spike",
                                          matched=[app.id]),
                                correlation_id=app.id, causation_id=app.id)
        await ws.append(RunStarted(run_id=f"run_{i}", rule="ops:error-spike", action="triage",
                                   firing_id=f"fir_{i}"),
                        correlation_id=app.id, causation_id=fired.id)
        ids.append(f"run_{i}")
    return ids


async def _judged(ws: Workspace, runs: list[str], *, people_agree: bool) -> None:
    judge = ws.as_actor(EvaluatorActor(name="triage-judge", version="2"))
    ada = ws.as_actor(UserActor(id="ada"))
    for i, run in enumerate(runs):
        said = i % 2 == 0
        await judge.give_feedback(TriageQuality(correct=said, severity="high"),
                                  on=RunTarget(run_id=run))
        await ada.give_feedback(TriageQuality(correct=said if people_agree else not said,
                                              severity="high"), on=RunTarget(run_id=run))


async def _alarms(ws: Workspace) -> list[CalibrationAlarm]:
    return [CalibrationAlarm.of(e.event) for e in await ws.read()
            if isinstance(e.event, AppEvent) and e.event.name == ALARM_EVENT]


async def test_a_drifting_judge_alarms_once_enqueues_its_disagreements_and_clears(
    tenant_factory: Callable[..., str], client_factory: Callable[..., StreamsClient],
) -> None:
    tenant = tenant_factory()
    client = client_factory(**POLICY)
    ws = client.workspace(tenant, "prod")
    runs = await _runs(ws, 20)
    await _judged(ws, runs, people_agree=False)

    queues = QueueBook(client.runtime)
    keeper = CalibrationKeeper(client, queues, client.settings.calibration_policy(),
                               tenants=[tenant])
    [raised] = await keeper.step()
    assert raised.row.state == "alarm" and raised.row.key == (
        "evaluator:triage-judge@2", "triage_quality", "correct")
    assert raised.row.value is not None and raised.row.value < -0.99 and raised.row.n == 20
    assert raised.queue == QUEUE
    [alarm] = await _alarms(ws)
    assert (alarm.raised, alarm.evaluator, alarm.version, alarm.queue, alarm.n) == (
        True, "triage-judge", "2", QUEUE, 20)
    # The queue holds the version's disagreements with people, newest first.
    [entry] = queues.queues(tenant, "prod")
    assert entry.name == QUEUE
    assert entry.definition["enters"] == {"disagreements": {
        "evaluator": "triage-judge@2", "feedback_type": "triage_quality", "on": "run"}}
    items = client.tenant_view(tenant).store.judged(
        "prod", evaluator="triage-judge@2", feedback_type="triage_quality", on="run",
        differs_on=["correct", "severity"])
    assert sorted(i for i, _k in items) == sorted(runs)
    # The severity field, one label on both sides, is measured and undefined: no alarm.
    states = {row.agreement.field: row.state for row in keeper.rows[(tenant, "prod")]}
    assert states == {"correct": "alarm", "severity": "undefined"}

    # Neither a second pass nor a keeper started afresh (another process) repeats it.
    assert await keeper.step() == []
    again = CalibrationKeeper(client_factory(**POLICY), queues,
                              client.settings.calibration_policy(), tenants=[tenant])
    assert await again.step() == []
    assert len(await _alarms(ws)) == 1
    # The workspace's reads agree: the state stands as the alarm event says.
    [correct] = [r for r in await ws.calibration() if r.agreement.field == "correct"]
    assert correct.state == "alarm"

    # People change their minds: their latest verdicts agree with the judge; it clears.
    await _judged(ws, runs, people_agree=True)
    [cleared] = await again.step()
    assert cleared.row.state == "ok" and cleared.queue is None
    assert cleared.event_id != raised.event_id
    assert [(a.raised, a.episode) for a in await _alarms(ws)] == [(True, 1), (False, 1)]
    assert await keeper.step() == []
    # It drifts again: a second raise, its own episode and id (a rule watching alarms sees
    # a new event, not a repeat of the first raise).
    await _judged(ws, runs, people_agree=False)
    [again_raised] = await keeper.step()
    assert again_raised.row.state == "alarm"
    assert [(a.raised, a.episode) for a in await _alarms(ws)] == [
        (True, 1), (False, 1), (True, 2)]
    assert len({raised.event_id, cleared.event_id, again_raised.event_id}) == 3
    # The queue of its disagreements is live already (installed with the first raise).
    assert again_raised.queue == QUEUE
    queues.close()


def test_streams_calibration_follow_prints_changes_and_exports_gauges(
    settings: Settings, tenant_factory: Callable[..., str],
    client_factory: Callable[..., StreamsClient],
) -> None:
    tenant = tenant_factory()
    ws = client_factory().workspace(tenant, "prod")

    async def judged() -> None:
        await _judged(ws, await _runs(ws, 12), people_agree=False)

    asyncio.run(judged())
    port = _free_port()
    env = settings.replace(metrics="prometheus", health_port=port,
                           feedback_modules=("streams.examples.ops",),
                           **POLICY).child_env()
    proc = subprocess.Popen(
        [sys.executable, "-m", "streams", "calibration", "follow", "--tenant", tenant,
         "--interval", "0.5"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        cwd=str(REPO))
    try:
        assert proc.stdout is not None
        readable, _w, _x = select.select([proc.stdout], [], [], 120)
        assert readable, "streams calibration follow printed no change in 120 s"
        change: dict[str, Any] = json.loads(proc.stdout.readline())
        assert (change["tenant"], change["state"], change["field"], change["queue"]) == (
            tenant, "alarm", "correct", QUEUE)

        def scraped() -> str | None:
            text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
            return text if "streams_calibration_alarm{" in text else None

        text = wait_until(scraped, 60, "the calibration gauges")
        assert any(line.startswith("streams_calibration_alarm{") and line.endswith(" 1.0")
                   and f'tenant="{tenant}"' in line and 'field="correct"' in line
                   for line in text.splitlines())
    finally:
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode(errors="replace")[-2000:]
