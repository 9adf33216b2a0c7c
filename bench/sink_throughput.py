"""Langfuse sink throughput: scores per second from a scores topic into the Langfuse stand-in.

Produces N scores once, then for each batch size runs a SinkRunner with a fresh cursor from the
beginning of the topic until every score is stored, and prints the rate of each.

    eval "$(deploy/stack.sh env)"
    .venv/bin/python -m bench.sink_throughput --scores 30000 --batches 15,50,100

The stand-in is a Python HTTP server on loopback that validates and stores every score; a real
Langfuse adds network latency and its own ingestion limits, so this measures the sink and the
runner, not Langfuse.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime

from confluent_kafka import Producer
from langfuse import Langfuse
from rich.console import Console

from streams.adapters.avro.codec import score_to_record
from streams.adapters.avro.serde import AvroSerde
from streams.adapters.kafka.admin import TenantAdmin
from streams.adapters.kafka.config import producer_config
from streams.adapters.langfuse import LangfuseScoreSink
from streams.core.scores import score_configs, scores_from_value
from streams.core.tenancy import tenant_topics
from streams.examples.ops import TriageQuality
from streams.runtime.sink_runner import SinkRunner, SinkStats
from streams.settings import Settings
from streams.testing.langfuse_standin import LangfuseStandIn

console = Console(stderr=True)


def produce(settings: Settings, tenant: str, feedback: int) -> int:
    topic = tenant_topics(tenant, settings.topic_prefix).scores
    serde = AvroSerde(settings)
    producer = Producer(producer_config(settings, **{"linger.ms": 20}))
    configs = score_configs(TriageQuality)
    now = datetime.now(UTC)
    count = 0
    for i in range(feedback):
        for score in scores_from_value(
                configs, {"correct": i % 2 == 0, "severity": "high", "note": f"note {i}"},
                feedback_event_id=f"evt_{i}", timestamp=now, tenant=tenant, workspace="bench",
                target_kind="run", target_id=f"run_{i}", participant="user:bench",
                trace_id=None, session_id=f"chain_{i}", seq=f"0:{i}"):
            while True:
                try:
                    producer.produce(topic, serde.encode_score(score_to_record(score), topic),
                                     key=score.source.feedback_event_id.encode())
                    break
                except BufferError:
                    producer.poll(0.1)
            count += 1
    producer.flush(60)
    return count


STANDIN = """
import sys, time
from streams.testing.langfuse_standin import LangfuseStandIn
server = LangfuseStandIn(public_key=sys.argv[1]).start()
print(server.url, flush=True)
while True:
    time.sleep(3600)
"""


async def measure(settings: Settings, scores: int, batch: int, separate: bool) -> float:
    """Scores per second into a stand-in, in this process or (like a real Langfuse) in
    another one."""
    key = f"pk-bench-{uuid.uuid4().hex[:8]}"
    proc = None
    standin = None
    if separate:
        # Started before the clock runs; blocking here costs the measurement nothing.
        proc = subprocess.Popen(  # noqa: ASYNC220
            [sys.executable, "-c", STANDIN, key], stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        secret = "sk-lf-standin"
    else:
        standin = LangfuseStandIn(public_key=key).start()
        url, secret = standin.url, standin.secret_key
    try:
        client = Langfuse(public_key=key, secret_key=secret, host=url, tracing_enabled=False)
        runner = SinkRunner(settings, LangfuseScoreSink(client, batch_size=batch),
                            cursor=f"bench-{uuid.uuid4().hex[:8]}", batch_size=batch * 5)
        start = time.monotonic()
        first: list[float] = []

        def done(stats: SinkStats) -> bool:
            if stats.scores and not first:
                first.append(time.monotonic())
            return stats.scores >= scores

        stats = await runner.run(until=done)
        elapsed = time.monotonic() - (first[0] if first else start)
        assert stats.rejected == 0 and stats.scores == scores, stats
        if standin is not None:
            assert len(standin.scores()) == scores, (len(standin.scores()), scores)
        return scores / elapsed
    finally:
        if standin is not None:
            standin.stop()
        if proc is not None:
            proc.terminate()
            proc.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scores", type=int, default=30_000)
    parser.add_argument("--batches", default="15,50,100")
    args = parser.parse_args()
    settings = Settings.from_env(topic_prefix=f"bench{uuid.uuid4().hex[:6]}")
    TenantAdmin(settings).create_tenant("bench")
    total = produce(settings, "bench", args.scores // 3)
    console.print(f"produced {total} scores")
    for separate in (True, False):
        where = "stand-in in its own process" if separate else "stand-in in this process"
        results = {}
        for batch in (int(b) for b in args.batches.split(",")):
            rate = asyncio.run(measure(settings, total, batch, separate))
            results[batch] = rate
            console.print(f"  {where}, batch {batch:>4}: {rate:,.0f} scores/s")
        best = max(results, key=lambda b: results[b])
        print(f"[{where}] " + " ".join(f"batch{b}={r:.0f}/s" for b, r in results.items())
              + f" best_batch={best} best_rate={results[best]:.0f}/s scores={total}")


if __name__ == "__main__":
    main()
