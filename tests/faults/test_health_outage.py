"""The broker stopped for 20 s under a running worker and a DuckDB sink with feedback flowing,
on this session's own stack: /readyz goes not-ready while /healthz stays 200 and the processes
run on; once the broker is back both are ready again by themselves, the consumer lags return
to 0 and every feedback event is scored and delivered, with no process restart. Prints the lag
recovery time (seconds from the broker back to lag 0)."""

from __future__ import annotations

import asyncio
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from streams.core.targets import RunTarget
from streams.core.tenancy import TenantTopics, tenant_topics
from streams.examples.ops import TriageQuality
from streams.runtime.batch import EXACTLY_ONCE
from streams.runtime.client.workspace import Workspace
from streams.settings import Settings
from tests.conftest import Stack, WorkerProcess, read_topic, wait_until
from tests.faults.conftest import (
    OwnStack,
    assert_alive,
    check_scores,
    tenant_with_a_run,
    watched_worker_and_sink,
)
from tests.scrape import health, mirror_caught_up, scrape, sink_caught_up

pytestmark = pytest.mark.timeout(900)

OUTAGE = 20.0
SCORED = {"triage_quality.correct", "triage_quality.severity", "triage_quality.note"}


@pytest.fixture(scope="module")
def stack(own_stack: OwnStack) -> Stack:
    """The settings, tenants, clients and workers of this module use the own stack."""
    return Stack(own_stack.bootstrap, own_stack.registry_url, "own")


@dataclass
class Probes:
    """/healthz and /readyz polled every 0.25 s: (time, liveness status, readiness status)."""

    port: int
    seen: list[tuple[float, int, int]] = field(default_factory=list)
    failing: list[tuple[float, set[str]]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self.stop.is_set():
            live = health(self.port, "/healthz")[0]
            ready, body = health(self.port, "/readyz")
            now = time.time()
            self.seen.append((now, live, ready))
            if ready == 503:
                self.failing.append((now, {name for name, said in body["checks"].items()
                                           if said != "ok"}))
            self.stop.wait(0.25)

    def between(self, start: float, end: float) -> list[tuple[float, int, int]]:
        return [p for p in self.seen if start <= p[0] <= end]


async def test_broker_outage_not_ready_alive_and_recovers(
    own_stack: OwnStack, settings: Settings, tenant_factory: Callable[..., str],
    client_factory: Callable[..., Any], worker_factory: Callable[..., WorkerProcess],
    tmp_path: Path,
) -> None:
    tenant, ws = await tenant_with_a_run(tenant_factory, client_factory)
    topics = tenant_topics(tenant, settings.topic_prefix)
    with watched_worker_and_sink(settings, worker_factory, tmp_path) as (worker, sink, port,
                                                                          sink_port):
        await _outage(own_stack, settings, ws, topics, worker, sink, port, sink_port,
                      tmp_path / "sink.log")


async def _outage(own_stack: OwnStack, settings: Settings, ws: Workspace, topics: TenantTopics,
                  worker: WorkerProcess, sink: subprocess.Popen[bytes], port: int,
                  sink_port: int, sink_log: Path) -> None:
    for p in (port, sink_port):
        await asyncio.to_thread(wait_until, lambda p=p: health(p, "/readyz")[0] == 200, 120,
                                f"/readyz on {p} (worker {port}, sink {sink_port})")
    pid = worker.proc.pid if worker.proc else None
    probes, sink_probes = Probes(port), Probes(sink_port)
    for prober in (probes, sink_probes):
        threading.Thread(target=prober.run, daemon=True).start()

    given: set[str] = set()
    flowing = asyncio.Event()

    async def flow() -> None:
        n = 0
        while not flowing.is_set():
            recorded = await ws.give_feedback(
                TriageQuality(correct=n % 2 == 0, severity="high", note=f"n{n}"),
                on=RunTarget(run_id="run_1"))
            given.add(recorded.id)
            n += 1
            await asyncio.sleep(0.05)

    task = asyncio.create_task(flow())
    try:
        await asyncio.sleep(3.0)
        await asyncio.to_thread(own_stack.must, "stop-kafka")
        down = time.time()
        try:
            await asyncio.sleep(OUTAGE)
        finally:
            await asyncio.to_thread(own_stack.must, "start-kafka")  # even if the test fails
        up = time.time()
        await asyncio.sleep(3.0)
    finally:
        flowing.set()
        await task
    stopped_giving = time.time()
    assert_alive(worker)

    # Lag back to 0 after the last feedback was acknowledged, and every one consumed.
    group = f"{settings.topic_prefix}-feedback-mirror"

    def caught_up() -> float | None:
        if mirror_caught_up(port, group, topics.events, settings.partitions, topics.tenant,
                            len(given)):
            return time.time()
        return None

    lag_zero_at = await asyncio.to_thread(wait_until, caught_up, 300, "the lag to return to 0",
                                          0.25)
    ready_again = {}
    for name, prober in (("worker", probes), ("sink", sink_probes)):
        try:
            ready_again[name] = await asyncio.to_thread(
                wait_until, lambda pr=prober: next((t for t, _l, r in pr.seen
                                                    if t > up and r == 200), None),
                120, f"the {name}'s /readyz to answer 200 again")
        except pytest.fail.Exception as exc:
            # Which check stays failing, and what it says, is what tells why.
            said = await asyncio.to_thread(health, prober.port, "/readyz")
            pytest.fail(f"{exc}; /readyz now answers {said}")
        prober.stop.set()

    for name, prober in (("worker", probes), ("sink", sink_probes)):
        during = prober.between(down + 3.0, up)  # a metadata cache may answer at first
        assert during, f"no probe of the {name} during the outage"
        assert all(live == 200 for _t, live, _r in prober.seen), \
            f"the {name} was not alive at some point (/healthz)"
        assert any(ready == 503 for _t, _l, ready in during), \
            f"the {name}'s /readyz never said not-ready"
        assert all(ready in (200, 503) for _t, _l, ready in prober.seen), \
            f"a probe of the {name} got no answer"
    assert_alive(worker)
    assert sink.poll() is None, "the sink exited"
    assert worker.proc is not None and worker.proc.pid == pid and worker.restarts == 0

    scores = read_topic(settings, topics.scores, at_least=len(given) * 3, timeout=300,
                        settle=3.0)
    repeats = check_scores(scores, dict.fromkeys(given, SCORED))
    if settings.processing_guarantee == EXACTLY_ONCE:  # the default
        assert repeats == 0, f"{repeats} scores written twice under exactly once"
    dead = read_topic(settings, topics.deadletter, timeout=30, settle=2.0)
    assert dead == [], [r["reason"] for _m, r in dead]

    def delivered() -> float | None:
        if sink_caught_up(sink_port, topics.scores, topics.tenant, len(given) * 3):
            return time.time()
        return None

    try:
        sink_lag_zero_at = await asyncio.to_thread(wait_until, delivered, 300,
                                                   "the sink's lag to return to 0", 0.25)
    except pytest.fail.Exception as exc:
        # What the sink said is what tells why (a rare stall seen after the outage).
        tail = (await asyncio.to_thread(sink_log.read_text, errors="replace")
                ).splitlines()[-40:]
        s = await asyncio.to_thread(scrape, sink_port)
        pytest.fail(f"{exc}; the sink's lag "
                    f"{s.select('streams_consumer_lag', topic=topics.scores) if s else None}, "
                    "its last lines:\n" + "\n".join(tail))
    not_ready = [t for t, _l, r in probes.seen if r == 503]
    last_failing = [names for t, names in probes.failing if t > up]
    print(f"broker outage {up - down:.1f} s (stop-kafka returned, {OUTAGE:.0f} s, start-kafka "
          f"returned); {len(given)} feedback events, all scored "
          f"({repeats} repeats), 0 dead-lettered, no restart; not ready from "
          f"{min(not_ready) - down:+.1f} s to {max(not_ready) - up:+.1f} s around the outage; "
          f"ready {ready_again['worker'] - up:.1f} s after the broker was back (sink: "
          f"{ready_again['sink'] - up:.1f} s); lag 0 "
          f"{lag_zero_at - up:.1f} s after it was back ({lag_zero_at - stopped_giving:.1f} s "
          "after the last feedback was acknowledged); failing checks after the broker was "
          f"back: {sorted(set().union(*last_failing)) if last_failing else 'none'}; "
          f"the sink's lag 0 {sink_lag_zero_at - up:.1f} s after the broker was back")
