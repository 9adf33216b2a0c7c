"""The registry and the broker stopped and restarted under a running worker, with feedback
flowing: the worker waits, exits not, dead-letters nothing for the outage, and scores every
feedback event once (by score id) afterwards.

These tests stop servers, so they run on this session's own stack (`own_stack`), never on the
shared one. The figures (outage length, records delayed, records lost) are printed.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from streams.adapters.avro.codec import envelope_to_record
from streams.adapters.avro.schemas import feedback_given_schema
from streams.core.events import Envelope, FeedbackGiven
from streams.core.targets import RunTarget
from streams.core.tenancy import tenant_topics
from streams.examples.ops import TriageQuality
from streams.runtime.client.workspace import Workspace
from streams.settings import Settings
from tests.conftest import Stack, WorkerProcess, read_topic, wait_until
from tests.faults.conftest import OwnStack, assert_alive, check_scores, tenant_with_a_run
from tests.faults.fault_types import WORKER_TYPES, Edges

pytestmark = pytest.mark.timeout(900)

TRIAGE = {"triage_quality.correct", "triage_quality.severity", "triage_quality.note"}
EDGES = {f"fault_edges.{f}" for f in ("flag", "level", "big", "small", "ratio", "anything")}


@pytest.fixture(scope="module")
def stack(own_stack: OwnStack) -> Stack:
    """The settings, tenants, clients and workers of this module use the own stack."""
    return Stack(own_stack.bootstrap, own_stack.registry_url, "own")


def _loop_stats(worker: WorkerProcess) -> dict[str, Any] | None:
    lines = [line for line in worker.log().splitlines() if '{"stats"' in line]
    return json.loads(lines[-1][lines[-1].index("{"):])["loop"] if lines else None


@dataclass
class Flow:
    """Feedback given one at a time by a background task until stopped: each event's id,
    the score names it must get, and when it was acknowledged (epoch seconds)."""

    ws: Workspace
    expected: dict[str, set[str]] = field(default_factory=dict)
    acked_at: dict[str, float] = field(default_factory=dict)
    called_at: dict[str, float] = field(default_factory=dict)
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    with_edges: bool = True  # alternate TriageQuality and Edges, or TriageQuality only

    async def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            called = time.time()
            if n % 2 or not self.with_edges:
                recorded = await self.ws.give_feedback(
                    TriageQuality(correct=n % 4 == 1, severity="high", note=f"n{n}"),
                    on=RunTarget(run_id="run_1"))
                names = TRIAGE
            else:
                recorded = await self.ws.give_feedback(
                    Edges(flag=True, level="low", big=n, small=n % 3, ratio=0.5,
                          anything=-n), on=RunTarget(run_id="run_1"))
                names = EDGES
            self.expected[recorded.id] = names
            self.acked_at[recorded.id] = time.time()
            self.called_at[recorded.id] = called
            n += 1
            await asyncio.sleep(0.05)




async def _until(check: Callable[[], Any], seconds: float, what: str) -> None:
    """wait_until that lets the feedback flow (an asyncio task) go on meanwhile."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {seconds:.0f}s waiting for {what}")
        await asyncio.sleep(0.2)


def _delayed(scores: list[tuple[Any, dict[str, Any]]], flow: Flow, until: float) -> int:
    """Feedback given (the call made) before `until` whose first score was written after it:
    what the outage held back, on the producer's side or the worker's."""
    first: dict[str, float] = {}
    for msg, record in scores:
        fid = record["source"]["feedback_event_id"]
        at = msg.timestamp()[1] / 1000
        first[fid] = min(first.get(fid, at), at)
    return sum(1 for fid, called in flow.called_at.items()
               if called < until and first[fid] > until)


async def test_registry_restart_mid_stream(
    own_stack: OwnStack, settings: Settings, tenant_factory: Callable[..., str],
    client_factory: Callable[..., Any], worker_factory: Callable[..., WorkerProcess],
) -> None:
    tenant, ws = await tenant_with_a_run(tenant_factory, client_factory)
    topics = tenant_topics(tenant, settings.topic_prefix)
    # Only TriageQuality has been written when the worker starts, so the Edges schema id is
    # one the worker must fetch from the registry: it first sees it during the outage.
    first = await ws.give_feedback(TriageQuality(correct=True, severity="low"),
                                   on=RunTarget(run_id="run_1"))
    worker = worker_factory("--stats-interval", "0.5", "--batch-size", "20", types=WORKER_TYPES)
    wait_until(lambda: (s := _loop_stats(worker)) and s["outputs"] >= 2, 120,
               "the worker to score the first feedback")
    # The producer registers the Edges schema now (its serializer keeps the id), writing
    # nothing: it can then write Edges feedback while the registry is down.
    probe = Envelope.new(FeedbackGiven(feedback_type="fault_edges",
                                       target=RunTarget(run_id="run_1"), value={}),
                         tenant=tenant, workspace="prod")
    record = envelope_to_record(probe)
    record["value"] = Edges(flag=True, level="low", big=0, small=0, ratio=1.0,
                            anything=0).model_dump()
    ws.client.serde.encode(feedback_given_schema(Edges), record, topics.events)

    flow = Flow(ws, with_edges=False)
    flow.expected[first.id] = {"triage_quality.correct", "triage_quality.severity"}
    flow.called_at[first.id] = flow.acked_at[first.id] = time.time()
    task = asyncio.create_task(flow.run())
    await asyncio.sleep(1.0)
    await asyncio.to_thread(own_stack.must, "stop-registry")
    down = time.time()
    flow.with_edges = True
    await asyncio.sleep(8.0)  # feedback keeps flowing; the worker meets the new id
    await asyncio.to_thread(own_stack.must, "start-registry")
    up = time.time()
    await asyncio.sleep(3.0)
    flow.stop.set()
    await task
    assert_alive(worker)

    scores = read_topic(settings, topics.scores, at_least=sum(map(len, flow.expected.values())),
                        timeout=240, settle=2.0)
    repeats = check_scores(scores, flow.expected)
    dead = read_topic(settings, topics.deadletter, timeout=30, settle=2.0)
    assert dead == [], [r["reason"] for _m, r in dead]
    loop = _loop_stats(worker)
    assert loop is not None and loop["outage_waits"] >= 1, \
        "the worker never met the outage: the test did not test it"
    assert "recovered after" in worker.log()
    # Old records stay readable by a reader that has never seen their schemas: every event
    # written before and during the outage decodes with a fresh registry client.
    events = read_topic(settings, topics.events, at_least=len(flow.expected) + 2, timeout=120)
    assert {r["envelope"]["event_id"] for _m, r in events} >= set(flow.expected)
    assert_alive(worker)
    delayed = _delayed(scores, flow, up)
    during = sum(1 for t in flow.acked_at.values() if down <= t < up)
    print(f"registry outage {up - down:.1f} s; {len(flow.expected)} feedback events, "
          f"{during} given during the outage, {delayed} delayed until it ended, 0 lost, "
          f"0 dead-lettered, {repeats} repeats, {loop['outage_waits']} outage waits")


@pytest.mark.parametrize("outage", [15.0, 75.0], ids=["15s", "75s"])
async def test_broker_stop_mid_stream(
    outage: float, own_stack: OwnStack, settings: Settings, tenant_factory: Callable[..., str],
    client_factory: Callable[..., Any], worker_factory: Callable[..., WorkerProcess],
) -> None:
    tenant, ws = await tenant_with_a_run(tenant_factory, client_factory)
    topics = tenant_topics(tenant, settings.topic_prefix)
    worker = worker_factory("--stats-interval", "0.5", "--batch-size", "20", types=WORKER_TYPES)
    flow = Flow(ws)
    task = asyncio.create_task(flow.run())
    await _until(lambda: (s := _loop_stats(worker)) and s["outputs"] >= 10, 120,
                 "the worker to score feedback")
    await asyncio.to_thread(own_stack.must, "stop-kafka")
    down = time.time()
    try:
        # 75 s outlasts the worker's flush timeout (STREAMS_FLUSH_TIMEOUT, 30 s) and the
        # rewind's 30 s read of committed offsets after it: when outputs were in flight at
        # the stop, the rewind meets the broker still down.
        await asyncio.sleep(outage)
    finally:
        await asyncio.to_thread(own_stack.must, "start-kafka")  # even if the test fails
    up = time.time()
    await asyncio.sleep(5.0)
    flow.stop.set()
    await task
    assert_alive(worker)

    scores = read_topic(settings, topics.scores, at_least=sum(map(len, flow.expected.values())),
                        timeout=300, settle=3.0)
    repeats = check_scores(scores, flow.expected)
    dead = read_topic(settings, topics.deadletter, timeout=30, settle=2.0)
    assert dead == [], [r["reason"] for _m, r in dead]
    assert_alive(worker)
    delayed = _delayed(scores, flow, up)
    held = max(flow.acked_at[f] - flow.called_at[f] for f in flow.expected)
    print(f"broker outage {up - down:.1f} s (stop-kafka returned to start-kafka returned); "
          f"{len(flow.expected)} feedback events, {delayed} delayed until it ended, 0 lost, "
          f"0 dead-lettered, {repeats} repeats; longest give_feedback call {held:.1f} s")
