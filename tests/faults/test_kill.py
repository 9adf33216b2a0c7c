"""Two workers in one consumer group; one is SIGKILLed mid-stream, the other takes over its
partitions, the killed one is restarted: every feedback event has its scores, repeats carry
the same ids (none under exactly once, the default), and the surviving worker never
exited."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Callable
from typing import Any

from confluent_kafka.admin import AdminClient

from streams.adapters.kafka.config import admin_config
from streams.core.actors import UserActor
from streams.core.events import AppEvent, RunStarted
from streams.core.targets import RunTarget
from streams.core.tenancy import tenant_topics
from streams.examples.ops import TriageQuality
from streams.runtime.batch import EXACTLY_ONCE
from streams.settings import Settings
from tests.conftest import WorkerProcess, read_topic, wait_until
from tests.faults.conftest import assert_alive, check_scores

FEEDBACK = 600
NAMES = {"triage_quality.correct", "triage_quality.severity", "triage_quality.note"}


def _members_with(settings: Settings, group: str, topic: str) -> int:
    """How many members of `group` hold partitions of `topic` now."""
    admin = AdminClient(admin_config(settings))
    described = admin.describe_consumer_groups([group])[group].result()
    return sum(any(tp.topic == topic for tp in member.assignment.topic_partitions)
               for member in described.members)


def _outputs(worker: WorkerProcess) -> int:
    lines = [line for line in worker.log().splitlines() if '{"stats"' in line]
    return int(json.loads(lines[-1][lines[-1].index("{"):])["loop"]["outputs"]) if lines else 0


async def test_sigkill_one_of_two_workers_mid_stream(
    settings: Settings, tenant_factory: Callable[..., str],
    client_factory: Callable[..., Any], worker_factory: Callable[..., WorkerProcess],
) -> None:
    tenant = tenant_factory(partitions=4)
    topics = tenant_topics(tenant, settings.topic_prefix)
    ws = client_factory().workspace(tenant, "prod", actor=UserActor(id="ada"))
    # Feedback lands in its target's chain, keyed by the chain: runs in chains on every
    # partition, so both workers of the group have work.
    runs: dict[int, str] = {}
    for n in range(200):
        spike = await ws.append(AppEvent(name="ops:error_spike"))
        if spike.seq.partition not in runs:
            runs[spike.seq.partition] = f"run_{n}"
            await ws.append(RunStarted(run_id=f"run_{n}", rule="r", action="triage",
                                       firing_id=f"f{n}"), correlation_id=spike.id)
        if len(runs) == 4:
            break
    run_ids = list(runs.values())
    doomed = worker_factory("--batch-size", "20", "--stats-interval", "0.3")
    survivor = worker_factory("--batch-size", "20", "--stats-interval", "0.3")
    # give_feedback is fast enough to finish a burst before a second member has joined: wait
    # until the group has split the tenant's partitions, so both workers get work.
    wait_until(lambda: _members_with(settings, f"{settings.topic_prefix}-feedback-mirror",
                                     topics.events) == 2, 90, "both workers to share the topic")

    async def give(i: int) -> str:
        recorded = await ws.give_feedback(
            TriageQuality(correct=i % 2 == 0, severity="low", note=f"n{i}"),
            on=RunTarget(run_id=run_ids[i % len(run_ids)]))
        return recorded.id

    given: list[str] = []
    killed_after = 0
    for start in range(0, FEEDBACK, 50):
        given += await asyncio.gather(*(give(i) for i in range(start, start + 50)))
        if start == FEEDBACK // 3:
            # Both must be working (the group split the partitions) before one is killed.
            wait_until(lambda: _outputs(doomed) > 0 and _outputs(survivor) > 0, 90,
                       "both workers to score feedback")
            killed_after = _outputs(doomed)
            doomed.kill(signal.SIGKILL)
            assert doomed.proc is not None and doomed.proc.returncode == -signal.SIGKILL
        if start == 2 * FEEDBACK // 3:
            doomed.start()

    scores = read_topic(settings, topics.scores, at_least=FEEDBACK * len(NAMES), timeout=180,
                        settle=3.0)
    repeats = check_scores(scores, dict.fromkeys(given, NAMES))
    if settings.processing_guarantee == EXACTLY_ONCE:  # the default
        assert repeats == 0, f"{repeats} scores written twice under exactly once"
    assert_alive(survivor, doomed)
    print(f"{FEEDBACK} feedback events, 2 workers, one SIGKILLed after {killed_after} outputs "
          f"and restarted: {len(scores)} score records for {FEEDBACK * len(NAMES)} scores, "
          f"{repeats} repeats (same ids), 0 lost")
