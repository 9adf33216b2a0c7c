"""SIGKILL a worker in the middle of a stream; after a restart every feedback event has its
scores, and any repeat carries the same id."""

import asyncio
import signal
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

from streams.core.actors import UserActor
from streams.core.events import AppEvent, RunStarted
from streams.core.targets import RunTarget
from streams.core.tenancy import tenant_topics
from streams.examples.ops import TriageQuality
from streams.settings import Settings
from tests.conftest import WorkerProcess, read_topic, wait_until

FEEDBACK = 3000


async def test_sigkill_mid_stream_loses_nothing(
    settings: Settings, tenant_factory: Callable[..., str],
    client_factory: Callable[..., Any], worker_factory: Callable[..., WorkerProcess],
) -> None:
    tenant = tenant_factory()
    topics = tenant_topics(tenant, settings.topic_prefix)
    client = client_factory()
    ws = client.workspace(tenant, "prod", actor=UserActor(id="ada"))
    spike = await ws.append(AppEvent(name="ops:error_spike"))
    await ws.append(RunStarted(run_id="run_1", rule="r", action="triage", firing_id="f"),
                    correlation_id=spike.id)
    worker = worker_factory("--batch-size", "50")

    async def give(i: int) -> str:
        recorded = await ws.give_feedback(
            TriageQuality(correct=i % 2 == 0, severity="high", note=f"n{i}"),
            on=RunTarget(run_id="run_1"))
        return recorded.id

    given: list[str] = []
    for start in range(0, FEEDBACK, 100):
        given += await asyncio.gather(*(give(i) for i in range(start, min(start + 100,
                                                                           FEEDBACK))))
        if start == FEEDBACK // 3:
            # Wait until the worker is visibly mid-stream, then kill it without warning.
            wait_until(lambda: len(read_topic(settings, topics.scores, settle=0.1,
                                              timeout=30)) > 0, 60, "first scores")
            worker.kill(signal.SIGKILL)
            assert worker.proc is not None and worker.proc.returncode == -signal.SIGKILL
            worker.start()

    records = read_topic(settings, topics.scores, at_least=FEEDBACK * 3, timeout=180,
                         settle=3.0)
    ids_by_feedback: dict[str, set[str]] = defaultdict(set)
    names_by_id: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for _msg, record in records:
        fid = record["source"]["feedback_event_id"]
        ids_by_feedback[fid].add(record["id"])
        names_by_id[record["id"]].add((fid, record["name"]))
    missing = [fid for fid in given if len(ids_by_feedback[fid]) != 3]
    assert missing == [], f"{len(missing)} feedback events lack scores"
    # A repeat is the same score again: one (feedback, name) per id, whatever the count.
    assert all(len(v) == 1 for v in names_by_id.values())
    assert len(names_by_id) == FEEDBACK * 3
    repeats = sum(c - 1 for c in Counter(r["id"] for _m, r in records).values())
    print(f"{len(records)} score records for {FEEDBACK * 3} scores: {repeats} repeats")
