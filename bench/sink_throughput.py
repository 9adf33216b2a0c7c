"""Langfuse sink throughput against the stand-in's own ceiling, from one run on the same data.

Produces N scores to a scores topic once, then for each server behaviour of the stand-in
(score batches on /api/public/scores, or one score there and batches on /api/public/ingestion):

- sink: LangfuseScoreSink.record() on the scores (decoded from the topic), batch*5 scores a
  call as the runner hands them, until every score is stored;
- ceiling: the same request bodies, built before the clock starts, posted through the sink's
  own pooled httpx client with the same concurrency and batch size, one call's requests at a
  time: what the stand-in takes when the client does no work at all;
- runner: a SinkRunner with a fresh cursor feeds the sink from the beginning of the topic
  (Kafka consume, fastavro decode to Scores, the sink, commits; the decode of the next batch
  and the commits overlap the sink's requests, up to STREAMS_SINK_IN_FLIGHT batches at the
  sink), timed from the first batch handed on to the last.

Each measurement gets a fresh stand-in in its own process (like a real server, it does not
share this process's GIL). The three are taken in turn `--repeat` times (3) and each figure
is the median, so that a burst of other work on a shared machine moves it less. It prints
each rate and the ratios sink/ceiling and runner/ceiling.

    eval "$(deploy/stack.sh env)"
    .venv/bin/python -m bench.sink_throughput --scores 30000

The stand-in is a Python HTTP server on loopback that validates and stores every score; a real
Langfuse adds network latency and its own ingestion limits, so this measures the sink and the
runner against a known ceiling, not Langfuse.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from confluent_kafka import Producer
from rich.console import Console

from bench.tracing import install_tracing, trace_context
from streams.adapters.avro.codec import score_to_record
from streams.adapters.avro.serde import AvroSerde
from streams.adapters.kafka.admin import TenantAdmin
from streams.adapters.kafka.config import producer_config
from streams.adapters.langfuse import (
    INGESTION_ROUTE,
    SCORES_ROUTE,
    LangfuseConnection,
    LangfuseScoreSink,
    Route,
    _array,
)
from streams.core.scores import Score, score_configs, scores_from_value
from streams.core.tenancy import tenant_topics
from streams.examples.ops import TriageQuality
from streams.runtime.root import Runtime
from streams.runtime.sink.runner import SinkRunner, SinkStats
from streams.settings import Settings

console = Console(stderr=True)
SECRET = "sk-lf-standin"


def make_scores(tenant: str, feedback: int) -> list[Score]:
    configs = score_configs(TriageQuality)
    now = datetime.now(UTC)
    return [score for i in range(feedback) for score in scores_from_value(
        configs, {"correct": i % 2 == 0, "severity": "high", "note": f"note {i}"},
        feedback_event_id=f"evt_{i}", timestamp=now, tenant=tenant, workspace="bench",
        target_kind="run", target_id=f"run_{i}", participant="user:bench",
        trace_id=None, session_id=f"chain_{i}", seq=f"0:{i}")]


def produce(settings: Settings, tenant: str, scores: list[Score], *,
            traced: bool = False) -> None:
    topic = tenant_topics(tenant, settings.topic_prefix).scores
    serde = AvroSerde(settings)
    producer = Producer(producer_config(settings, **{"linger.ms": 20}))
    for i, score in enumerate(scores):
        # Traced: each feedback's scores carry its trace context, as the mirror writes them.
        headers = [("traceparent", trace_context(i // 3).traceparent.encode())] if traced \
            else None
        while True:
            try:
                producer.produce(topic, serde.encode_score(score_to_record(score), topic),
                                 key=score.source.feedback_event_id.encode(), headers=headers)
                break
            except BufferError:
                producer.poll(0.1)
    producer.flush(60)


STANDIN = """
import sys, time
from standins.langfuse_standin import LangfuseStandIn
from streams.runtime.root import Runtime
server = LangfuseStandIn(public_key=sys.argv[1], scores_route=sys.argv[2]).start()
print(server.url, flush=True)
while True:
    time.sleep(3600)
"""


@dataclass
class StandIn:
    """A stand-in in its own process."""

    proc: subprocess.Popen[str]
    url: str
    key: str

    @classmethod
    def start(cls, route: str) -> StandIn:
        key = f"pk-bench-{uuid.uuid4().hex[:8]}"
        proc = subprocess.Popen([sys.executable, "-c", STANDIN, key, route],
                                stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        return cls(proc, proc.stdout.readline().strip(), key)

    def sink(self, batch: int, concurrency: int) -> LangfuseScoreSink:
        return LangfuseScoreSink(
            connection=LangfuseConnection(self.url, self.key, SECRET),
            batch_size=batch, concurrency=concurrency)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


async def measure_runner(settings: Settings, standin: StandIn, total: int, batch: int,
                         concurrency: int) -> float:
    """Scores per second through a SinkRunner (Kafka to the stand-in)."""
    sink = standin.sink(batch, concurrency)
    runner = SinkRunner(Runtime(settings), sink, cursor=f"bench-{uuid.uuid4().hex[:8]}",
                        batch_size=batch * 5)
    first: list[float] = []

    def done(stats: SinkStats) -> bool:
        if stats.scores and not first:
            first.append(time.monotonic())
        return stats.scores >= total

    stats = await runner.run(until=done)
    elapsed = time.monotonic() - first[0]
    assert stats.rejected == 0 and stats.scores == total, stats
    return total / elapsed


async def measure_sink(standin: StandIn, scores: list[Score], batch: int,
                       concurrency: int) -> float:
    """Scores per second through the sink's record() alone, batch*5 scores a call."""
    sink = standin.sink(batch, concurrency)
    assert await sink.record(scores[:1]) == []  # detect the route before the clock starts
    start = time.monotonic()
    step = batch * 5
    for i in range(0, len(scores), step):
        assert await sink.record(scores[i:i + step]) == []
    elapsed = time.monotonic() - start
    await sink.flush()
    return len(scores) / elapsed


async def measure_ceiling(standin: StandIn, scores: list[Score], batch: int,
                          concurrency: int, route: Route) -> float:
    """Scores per second when prebuilt bodies go through the sink's pooled client."""
    sink = standin.sink(batch, concurrency)
    assert await sink.record(scores[:1]) == []  # opens the pool, detects the route
    assert sink.route == route, (sink.route, route)
    pool = sink._pool()
    path = SCORES_ROUTE if route == "scores" else INGESTION_ROUTE
    step = batch * 5
    calls: list[list[bytes]] = []
    for i in range(0, len(scores), step):
        items = [sink._item(s) for s in scores[i:i + step]]
        chunks, rejected = sink._chunks(items, route)
        assert not rejected
        calls.append([_array(c) if route == "scores" else sink._events(c) for c in chunks])

    async def post(body: bytes) -> None:
        async with pool.limit:
            response = await pool.http.post(path, content=body)
        assert response.status_code in (200, 202, 207), response.text
        assert response.status_code != 207 or '"errors":[]' in response.text.replace(" ", "")

    start = time.monotonic()
    for bodies in calls:  # as the runner does: one call's requests at a time
        await asyncio.gather(*(post(b) for b in bodies))
    elapsed = time.monotonic() - start
    await sink.flush()
    return len(scores) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scores", type=int, default=30_000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3,
                        help="measure each this many times, in turn; report the median")
    parser.add_argument("--routes", default="batch,single",
                        help="stand-in behaviours: batch, single, or both")
    parser.add_argument("--traced", action="store_true",
                        help="scores carry their feedback's trace context and this process "
                             "has a tracer provider (bench/tracing.py)")
    args = parser.parse_args()
    settings = Settings.from_env(topic_prefix=f"bench{uuid.uuid4().hex[:6]}")
    TenantAdmin(settings).create_tenant("bench")
    scores = make_scores("bench", args.scores // 3)
    produce(settings, "bench", scores, traced=args.traced)
    if args.traced:
        install_tracing()
    total = len(scores)
    console.print(f"produced {total} scores; batch {args.batch}, "
                  f"concurrency {args.concurrency}")
    for behaviour in args.routes.split(","):
        route: Route = "scores" if behaviour == "batch" else "ingestion"
        samples: dict[str, list[float]] = {"sink": [], "ceiling": [], "runner": []}
        for what in [w for _ in range(args.repeat) for w in samples]:
            standin = StandIn.start(behaviour)
            try:
                if what == "runner":
                    rate = asyncio.run(measure_runner(settings, standin, total, args.batch,
                                                      args.concurrency))
                elif what == "sink":
                    rate = asyncio.run(measure_sink(standin, scores, args.batch,
                                                    args.concurrency))
                else:
                    rate = asyncio.run(measure_ceiling(standin, scores, args.batch,
                                                       args.concurrency, route))
            finally:
                standin.stop()
            samples[what].append(rate)
            console.print(f"  stand-in {behaviour}, {what}: {rate:,.0f} scores/s")
        rates = {what: statistics.median(values) for what, values in samples.items()}
        print(f"[{behaviour}: POST {SCORES_ROUTE if route == 'scores' else INGESTION_ROUTE}] "
              f"sink={rates['sink']:.0f}/s ceiling={rates['ceiling']:.0f}/s "
              f"sink/ceiling={rates['sink'] / rates['ceiling']:.2f} "
              f"runner={rates['runner']:.0f}/s "
              f"runner/ceiling={rates['runner'] / rates['ceiling']:.2f} "
              f"scores={total} batch={args.batch} concurrency={args.concurrency} "
              f"median_of={args.repeat} traced={args.traced}")


if __name__ == "__main__":
    main()
