"""End-to-end latency: from a give_feedback call to its first score on the scores topic, at a
steady offered rate.

Starts one `streams worker`, waits until it scores a warm-up feedback, then calls
give_feedback at `--rate` calls per second for `--seconds` (each call started on its tick,
concurrently, from one process), and reads the scores topic in a thread, noting when each
feedback's first score arrives. Prints the achieved rate and latency percentiles. The
reader is read_committed, so under STREAMS_PROCESSING_GUARANTEE=exactly_once a score counts
when its transaction commits (up to STREAMS_COMMIT_INTERVAL after it was produced): set both
in the environment to compare.

    eval "$(deploy/stack.sh env)"
    .venv/bin/python -m bench.e2e_latency --rate 2000 --seconds 10
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import threading
import time
import uuid

from confluent_kafka import Consumer
from rich.console import Console

from streams.adapters.kafka.admin import TenantAdmin
from streams.adapters.kafka.config import consumer_config
from streams.core.actors import UserActor
from streams.core.events import AppEvent, RunStarted
from streams.core.targets import RunTarget
from streams.core.tenancy import tenant_topics
from streams.examples.ops import TriageQuality
from streams.runtime.client.workspace import StreamsClient
from streams.runtime.root import Runtime
from streams.settings import Settings

console = Console(stderr=True)


class Arrivals:
    """First arrival time (monotonic) of each feedback's scores, by feedback event id."""

    def __init__(self, settings: Settings, topic: str) -> None:
        self.seen: dict[str, float] = {}
        # When the worker produced each feedback's first score (its CreateTime, wall clock
        # seconds) and when it arrived here (wall clock): the two halves of the latency.
        self.produced: dict[str, float] = {}
        self.arrived: dict[str, float] = {}
        self.stop = threading.Event()
        self.consumer = Consumer(consumer_config(settings, f"bench-e2e-{uuid.uuid4().hex}",
                                                 **{"fetch.wait.max.ms": 5}))
        self.consumer.subscribe([topic])
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            # What is queued now, else the first record within 50 ms: consume(n, timeout)
            # alone waits for n records or the whole timeout, which would add up to 50 ms to
            # every latency measured.
            messages = self.consumer.consume(1000, 0)
            if not messages:
                first = self.consumer.poll(0.05)
                messages = [first] if first is not None else []
            for msg in messages:
                if msg.error() is None and msg.key():
                    key = (msg.key() or b"").decode()
                    if key not in self.seen:
                        self.seen[key] = time.monotonic()
                        self.arrived[key] = time.time()
                        self.produced[key] = msg.timestamp()[1] / 1000
        self.consumer.close()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def offer(ws: object, run_id: str, rate: float, seconds: float,
                started: dict[str, float], calls: list[float],
                begun_at: dict[str, float]) -> float:
    """Call give_feedback on each tick; returns the achieved rate of completed calls."""
    tasks: list[asyncio.Task[None]] = []
    total = int(rate * seconds)
    t0 = time.monotonic()

    async def one(i: int) -> None:
        begun, wall = time.monotonic(), time.time()
        recorded = await ws.give_feedback(  # type: ignore[attr-defined]
            TriageQuality(correct=i % 2 == 0, severity="high", note=f"n{i}"),
            on=RunTarget(run_id=run_id))
        started[recorded.id] = begun
        begun_at[recorded.id] = wall
        calls.append(time.monotonic() - begun)

    for i in range(total):
        delay = t0 + i / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(i)))
    await asyncio.gather(*tasks)
    return total / (time.monotonic() - t0)


async def scenario(settings: Settings, tenant: str, rate: float, seconds: float,
                   arrivals: Arrivals,
                   begun_at: dict[str, float]) -> tuple[float, dict[str, float]]:
    client = StreamsClient(Runtime(settings))
    system = client.workspace(tenant, "bench")
    spike = await system.append(AppEvent(name="ops:error_spike", data={"service": "api"}))
    await system.append(RunStarted(run_id="run_bench", rule="ops:error-spike", action="triage",
                                   firing_id="fir_bench"), correlation_id=spike.id)
    ws = client.workspace(tenant, "bench", actor=UserActor(id="bench"))
    warm = await ws.give_feedback(TriageQuality(correct=True, severity="low"),
                                  on=RunTarget(run_id="run_bench"))
    deadline = time.monotonic() + 120
    while warm.id not in arrivals.seen:
        if time.monotonic() > deadline:
            raise SystemExit("the worker did not score the warm-up feedback in 120 s")
        await asyncio.sleep(0.05)
    started: dict[str, float] = {}
    calls: list[float] = []
    achieved = await offer(ws, "run_bench", rate, seconds, started, calls, begun_at)
    client.close()
    console.print(f"  give_feedback itself: p50 {statistics.median(calls) * 1000:.1f} ms, "
                  f"p99 {percentile(calls, 0.99) * 1000:.1f} ms")
    return achieved, started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=2000.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    settings = Settings.from_env(topic_prefix=f"bench{uuid.uuid4().hex[:6]}")
    tenant = "bench"
    TenantAdmin(settings).create_tenant(tenant)
    arrivals = Arrivals(settings, tenant_topics(tenant, settings.topic_prefix).scores)
    arrivals.thread.start()
    worker = subprocess.Popen(
        [sys.executable, "-m", "streams", "worker", "--types", "streams.examples.ops"],
        env=settings.child_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    begun_at: dict[str, float] = {}
    try:
        achieved, started = asyncio.run(
            scenario(settings, tenant, args.rate, args.seconds, arrivals, begun_at))
        deadline = time.monotonic() + 60
        while any(i not in arrivals.seen for i in started) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        worker.terminate()
        worker.wait(30)
        arrivals.stop.set()
        arrivals.thread.join(10)
    latencies = [(arrivals.seen[i] - t) * 1000 for i, t in started.items() if i in arrivals.seen]
    missing = len(started) - len(latencies)
    scored = [i for i in started if i in arrivals.seen]
    # The score's CreateTime has millisecond resolution and both ends are this machine's
    # wall clock, so the split is good to about a millisecond.
    to_worker = [(arrivals.produced[i] - begun_at[i]) * 1000 for i in scored]
    to_reader = [(arrivals.arrived[i] - arrivals.produced[i]) * 1000 for i in scored]
    for what, values in (("call to the score's production", to_worker),
                         ("production to a read_committed reader", to_reader)):
        console.print(f"  {what}: p50 {statistics.median(values):.1f} ms, "
                      f"p99 {percentile(values, 0.99):.1f} ms")
    console.print(f"  offered {args.rate:.0f}/s, achieved {achieved:,.0f}/s; "
                  f"{len(latencies)} scored, {missing} not within 60 s")
    print(f"offered={args.rate:.0f}/s achieved={achieved:.0f}/s n={len(latencies)} "
          f"missing={missing} p50_ms={statistics.median(latencies):.1f} "
          f"p99_ms={percentile(latencies, 0.99):.1f} max_ms={max(latencies):.1f} "
          f"guarantee={settings.processing_guarantee} "
          f"commit_interval={settings.commit_interval:g}s")


if __name__ == "__main__":
    main()
