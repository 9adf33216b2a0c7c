"""A three-broker KRaft cluster (deploy/stack.sh with STACK_BROKERS=3: replication factor 3,
min.insync.replicas 2) under a worker and a DuckDB sink, with feedback flowing:

- the broker leading partitions of both the events and the scores topic is SIGKILLed
  mid-stream, and started again 5 s after its partitions have new leaders;
- every broker is stopped and started in turn, each back in every replica set before the next
  goes (a rolling restart).

In both: every feedback event is scored exactly once, nothing is dead-lettered, no process
exits or restarts, and the worker's and the sink's lags return to 0. Prints how long each step
took and how long after the broker's return the lags were 0.
"""

from __future__ import annotations

import asyncio
import functools
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from streams.core.targets import RunTarget
from streams.core.tenancy import TenantTopics, tenant_topics
from streams.examples.ops import TriageQuality
from streams.runtime.client.workspace import Workspace
from streams.settings import Settings
from tests.conftest import Stack, WorkerProcess, read_topic, wait_until
from tests.deploy.matrix import claims
from tests.faults.conftest import (
    assert_alive,
    check_scores,
    tenant_with_a_run,
    watched_worker_and_sink,
)
from tests.scrape import health, mirror_caught_up, sink_caught_up
from tests.stacks import OwnStack, own_stack_in

pytestmark = pytest.mark.timeout(1200)

BROKERS = 3
SCORED = {"triage_quality.correct", "triage_quality.severity", "triage_quality.note"}
INTERNAL = ("__consumer_offsets", "__transaction_state")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OwnStack]:
    with own_stack_in(tmp_path_factory.mktemp("cluster") / "data", start=True,
                      brokers=BROKERS) as stack:
        yield stack


@pytest.fixture(scope="module")
def stack(cluster: OwnStack) -> Stack:
    """The settings, tenants, clients and workers of this module use the cluster."""
    return Stack(cluster.bootstrap, cluster.registry_url, "cluster")


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """Tenant topics replicated to every broker, a write acknowledged by two."""
    return settings.replace(replication_factor=3, min_insync_replicas=2)


@functools.cache
def _admin(bootstrap: str) -> AdminClient:
    # One client per cluster, polled every 0.25 s: a new one per poll would log its failed
    # connections to the stopped broker each time.
    return AdminClient({"bootstrap.servers": bootstrap})


def partitions(settings: Settings, *topics: str) -> dict[tuple[str, int], tuple[int, set[int]]]:
    """(topic, partition) -> (leader node, in-sync replicas), from the cluster's metadata."""
    found = _admin(settings.bootstrap_servers).list_topics(timeout=10)
    return {(t, p): (meta.leader, set(meta.isrs))
            for t in topics if t in found.topics
            for p, meta in found.topics[t].partitions.items()}


def replicated(settings: Settings, *topics: str) -> bool:
    """Every partition of `topics` (and the internal topics) has every broker in sync."""
    try:
        found = partitions(settings, *topics, *INTERNAL)
    except Exception:  # a broker that answers nothing yet: not yet
        return False
    return bool(found) and all(len(isr) == BROKERS and leader >= 0
                               for leader, isr in found.values())


@dataclass
class Pipeline:
    """A tenant's feedback flowing through a worker and a DuckDB sink on the cluster."""

    settings: Settings
    topics: TenantTopics
    ws: Workspace
    worker: WorkerProcess
    sink: subprocess.Popen[bytes]
    port: int
    sink_port: int
    sink_log: Path
    given: set[str] = field(default_factory=set)
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def flow(self) -> None:
        n = 0
        while not self.stop.is_set():
            recorded = await self.ws.give_feedback(
                TriageQuality(correct=n % 2 == 0, severity="high", note=f"n{n}"),
                on=RunTarget(run_id="run_1"))
            self.given.add(recorded.id)
            n += 1
            await asyncio.sleep(0.05)

    async def through(self, fault: Callable[[], Awaitable[float]]) -> str:
        """Feedback flows before, during and 5 s after `fault` (which returns when the last
        broker it stopped was back); then every check. Returns the figures."""
        for p in (self.port, self.sink_port):
            await asyncio.to_thread(wait_until, lambda p=p: health(p, "/readyz")[0] == 200,
                                    120, f"/readyz on {p}")
        pid = self.worker.proc.pid if self.worker.proc else None
        task = asyncio.create_task(self.flow())
        try:
            await asyncio.sleep(3.0)
            up = await fault()
            await asyncio.sleep(5.0)
        finally:
            self.stop.set()
            await task
        stopped_giving = time.time()
        group = f"{self.settings.topic_prefix}-feedback-mirror"
        tenant = self.topics.tenant
        lag_zero = await asyncio.to_thread(
            wait_until, lambda: mirror_caught_up(self.port, group, self.topics.events,
                                                 self.settings.partitions, tenant,
                                                 len(self.given)) and time.time(),
            300, "the worker's lag to return to 0", 0.25)
        sink_lag_zero = await asyncio.to_thread(
            wait_until, lambda: sink_caught_up(self.sink_port, self.topics.scores, tenant,
                                               len(self.given) * 3) and time.time(),
            300, "the sink's lag to return to 0", 0.25)
        assert_alive(self.worker)
        assert self.sink.poll() is None, self.sink_log.read_text()[-4000:]
        assert self.worker.proc is not None and self.worker.proc.pid == pid
        assert self.worker.restarts == 0
        scores = read_topic(self.settings, self.topics.scores, at_least=len(self.given) * 3,
                            timeout=300, settle=3.0)
        repeats = check_scores(scores, dict.fromkeys(self.given, SCORED))
        assert repeats == 0, f"{repeats} scores written twice under exactly once"
        dead = read_topic(self.settings, self.topics.deadletter, timeout=30, settle=2.0)
        assert dead == [], [r["reason"] for _m, r in dead]
        return (f"{len(self.given)} feedback events, all scored once, 0 dead-lettered, no "
                f"exit or restart; lag 0 {lag_zero - up:.1f} s after the broker was back "
                f"({lag_zero - stopped_giving:.1f} s after the last feedback), the sink's "
                f"{sink_lag_zero - up:.1f} s")


@pytest.fixture
async def pipeline(settings: Settings, tenant_factory: Callable[..., str],
                   client_factory: Callable[..., Any],
                   worker_factory: Callable[..., WorkerProcess], tmp_path: Path
                   ) -> AsyncIterator[Pipeline]:
    tenant, ws = await tenant_with_a_run(tenant_factory, client_factory)
    topics = tenant_topics(tenant, settings.topic_prefix)
    with watched_worker_and_sink(settings, worker_factory, tmp_path) as (worker, sink, port,
                                                                          sink_port):
        yield Pipeline(settings, topics, ws, worker, sink, port, sink_port,
                       tmp_path / "sink.log")


@claims("a three-broker cluster (`STACK_BROKERS=3 deploy/stack.sh start`)", "run",
        "replication factor 3, `min.insync.replicas` 2: the leader of the events and scores "
        "partitions SIGKILLed mid-stream and restarted; 0 feedback lost, worker and sink never "
        "exit, lag back to 0")
async def test_the_leader_of_events_and_scores_killed_and_restarted(
    cluster: OwnStack, pipeline: Pipeline,
) -> None:
    topics = pipeline.topics
    leaders = partitions(pipeline.settings, topics.events, topics.scores)
    assert all(len(isr) == BROKERS for _l, isr in leaders.values()), leaders
    # The node leading the most of the two topics' partitions, one of each at least.
    both = [n for n in range(1, BROKERS + 1)
            if any(t == topics.events and lead == n for (t, _p), (lead, _i) in leaders.items())
            and any(t == topics.scores and lead == n for (t, _p), (lead, _i) in leaders.items())]
    assert both, f"no broker leads partitions of both topics: {leaders}"
    node = max(both, key=lambda n: sum(lead == n for lead, _i in leaders.values()))
    led = sorted(f"{t.rsplit('.', 1)[-1]}-{p}" for (t, p), (lead, _i) in leaders.items()
                 if lead == node)
    timings: dict[str, float] = {}

    async def kill_and_restart() -> float:
        await asyncio.to_thread(cluster.must, "kill-kafka", str(node))
        down = time.time()
        try:
            # Its partitions get new leaders among the two left, once the controller has
            # fenced it (its heartbeats stop: broker.session.timeout.ms, 9 s by default).
            def moved() -> bool:
                try:
                    now = partitions(pipeline.settings, topics.events, topics.scores)
                except Exception:  # a metadata request that timed out: ask again
                    return False
                return len(now) == len(leaders) and all(lead not in (node, -1)
                                                        for lead, _i in now.values())

            await asyncio.to_thread(wait_until, moved, 60, f"new leaders for node {node}'s "
                                    "partitions", 0.25)
            timings["failover"] = time.time() - down
            await asyncio.sleep(5.0)  # the writes go on to the new leaders
        finally:
            await asyncio.to_thread(cluster.must, "start-kafka", str(node))
        up = time.time()
        timings["down"] = up - down
        await asyncio.to_thread(wait_until, lambda: replicated(
            pipeline.settings, topics.events, topics.scores), 120,
            f"node {node} back in every replica set")
        timings["in_sync"] = time.time() - up
        return up

    said = await pipeline.through(kill_and_restart)
    print(f"node {node} (leading {', '.join(led)}) SIGKILLed: new leaders "
          f"{timings['failover']:.1f} s later; started again after {timings['down']:.1f} s, "
          f"in every replica set {timings['in_sync']:.1f} s after start-kafka returned; "
          f"{said}")


@claims("a three-broker cluster (`STACK_BROKERS=3 deploy/stack.sh start`)", "run",
        "every broker stopped and started in turn mid-stream; 0 feedback lost, lag back to 0")
async def test_a_rolling_restart_of_every_broker(
    cluster: OwnStack, pipeline: Pipeline,
) -> None:
    topics = pipeline.topics
    steps: list[str] = []

    async def roll() -> float:
        up = time.time()
        for node in range(1, BROKERS + 1):
            began = time.time()
            await asyncio.to_thread(cluster.must, "stop-kafka", str(node))
            stopped = time.time()
            await asyncio.to_thread(cluster.must, "start-kafka", str(node))
            up = time.time()
            await asyncio.to_thread(wait_until, lambda: replicated(
                pipeline.settings, topics.events, topics.scores), 120,
                f"node {node} back in every replica set")
            steps.append(f"node {node}: stop {stopped - began:.1f} s, start "
                         f"{up - stopped:.1f} s, in sync {time.time() - up:.1f} s")
        return up

    said = await pipeline.through(roll)
    print(f"rolling restart ({'; '.join(steps)}); {said}")
