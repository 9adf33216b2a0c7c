"""Feedback mirror throughput: one Faust worker against a raw confluent-kafka floor.

Both read the same N feedback_given events from one tenant's events topic and write the same
scores with the same mirror step; the floor has no Faust (confluent-kafka consumer, fastavro
decode through the registry serde, score mapping, confluent-kafka producer).

    eval "$(deploy/stack.sh env)"
    .venv/bin/python -m bench.mirror_throughput --events 50000

Rates count feedback events per second, from the first score out to the last (start-up and
group join excluded, and reported apart).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import uuid

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from rich.console import Console

from streams.adapters.avro.serde import AvroSerde
from streams.adapters.kafka.admin import TenantAdmin
from streams.adapters.kafka.config import consumer_config, producer_config, reader_config
from streams.adapters.kafka.delivery import Delivery
from streams.adapters.kafka.log import envelope_headers, header_value, watermarks
from streams.adapters.kafka.outputs import Output
from streams.core.actors import UserActor
from streams.core.events import Envelope, FeedbackGiven
from streams.core.targets import RunTarget
from streams.core.tenancy import tenant_topics
from streams.examples.ops import TriageQuality
from streams.runtime.mirror import MirrorStep
from streams.runtime.workspace import value_record
from streams.settings import Settings

console = Console(stderr=True)
SCORES_PER_EVENT = 3  # correct, severity, note


def produce_feedback(settings: Settings, serde: AvroSerde, topic: str, tenant: str,
                     n: int) -> None:
    producer = Producer(producer_config(settings, **{"linger.ms": 20,
                                                     "batch.num.messages": 10000}))
    actor = UserActor(id="bench")
    for i in range(n):
        value = TriageQuality(correct=i % 2 == 0, severity=("low", "high", "critical")[i % 3],
                              note=f"note {i}")
        envelope = Envelope.new(
            FeedbackGiven(feedback_type="triage_quality", target=RunTarget(run_id=f"run_{i}"),
                          value=value_record(value)),
            tenant=tenant, workspace="bench", actor=actor, correlation_id=f"chain_{i % 997}")
        while True:
            try:
                producer.produce(topic, serde.encode_envelope(envelope, topic),
                                 key=envelope.correlation_id.encode(),
                                 headers=envelope_headers(envelope))
                break
            except BufferError:
                producer.poll(0.1)
        if i % 5000 == 0:
            producer.poll(0)
            console.print(f"  produced {i}/{n}", end="\r")
    producer.flush(60)
    console.print(f"  produced {n}/{n}")


def total_end(consumer: Consumer, topic: str) -> int:
    return sum(high for _low, high in watermarks(consumer, topic).values())


def run_faust(settings: Settings, tenant: str, n: int, batch: int) -> dict[str, float]:
    scores_topic = tenant_topics(tenant, settings.topic_prefix).scores
    watch = Consumer(reader_config(settings, f"bench-watch-{uuid.uuid4().hex}"))
    env = settings.child_env()
    started = time.monotonic()
    worker = subprocess.Popen(
        [sys.executable, "-m", "streams", "worker", "--types", "streams.examples.ops",
         "--batch-size", str(batch), "--cursor", f"bench-{uuid.uuid4().hex[:8]}"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    want = n * SCORES_PER_EVENT
    first = last = None
    try:
        while True:
            done = total_end(watch, scores_topic)
            now = time.monotonic()
            if done and first is None:
                first = now
            if done >= want:
                last = now
                break
            if now - started > 900:
                raise SystemExit(f"faust worker made {done}/{want} scores in 900 s")
            if worker.poll() is not None:
                raise SystemExit(f"faust worker exited with {worker.returncode}")
            time.sleep(0.05)
    finally:
        worker.terminate()
        worker.wait(30)
        watch.close()
    assert first is not None and last is not None
    return {"startup_s": first - started, "seconds": last - first,
            "rate": n / max(last - first, 1e-9)}


def run_floor(settings: Settings, serde: AvroSerde, tenant: str, n: int,
              batch: int) -> dict[str, float]:
    events = tenant_topics(tenant, settings.topic_prefix).events
    out_topic = f"{settings.topic_prefix}.floor.scores"
    admin = AdminClient({"bootstrap.servers": settings.bootstrap_servers})
    for future in admin.create_topics([NewTopic(out_topic, settings.partitions, 1)]).values():
        future.result()
    step = MirrorStep(serde, prefix=settings.topic_prefix)
    delivery = Delivery(settings)
    consumer = Consumer(consumer_config(settings, f"bench-floor-{uuid.uuid4().hex}"))
    consumer.subscribe([events])
    seen = 0
    first = None
    while seen < n:
        messages = consumer.consume(batch, timeout=1.0)
        if not messages:
            continue
        if first is None:
            first = time.monotonic()
        outputs: list[Output] = []
        for msg in messages:
            if msg.error():
                continue
            seen += 1
            event_type = header_value(msg.headers(), "event_type")
            for out in step.handle(msg.topic() or "", msg.partition() or 0, msg.offset() or 0,
                                   msg.key(), msg.value(), event_type):
                outputs.append(Output(out_topic, out.key, out.value, out.headers))
        delivery.send_sync(outputs)
        consumer.commit(asynchronous=False)
    last = time.monotonic()
    consumer.close()
    assert first is not None
    return {"seconds": last - first, "rate": n / (last - first)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=50_000)
    parser.add_argument("--batch", type=int, default=1000)
    args = parser.parse_args()
    settings = Settings.from_env(topic_prefix=f"bench{uuid.uuid4().hex[:6]}")
    serde = AvroSerde(settings)
    tenant = "bench"
    TenantAdmin(settings).create_tenant(tenant)
    console.print(f"producing {args.events} feedback events to "
                  f"{tenant_topics(tenant, settings.topic_prefix).events}")
    produce_feedback(settings, serde, tenant_topics(tenant, settings.topic_prefix).events,
                     tenant, args.events)
    console.print("raw floor (confluent-kafka + fastavro + mirror step, no Faust)...")
    floor = run_floor(settings, serde, tenant, args.events, args.batch)
    console.print(f"  {floor['rate']:,.0f} feedback/s ({floor['seconds']:.1f}s)")
    console.print("faust worker (feedback mirror agent)...")
    faust = run_faust(settings, tenant, args.events, args.batch)
    console.print(f"  {faust['rate']:,.0f} feedback/s ({faust['seconds']:.1f}s, "
                  f"start-up {faust['startup_s']:.1f}s)")
    print(f"events={args.events} batch={args.batch} faust_rate={faust['rate']:.0f}/s "
          f"floor_rate={floor['rate']:.0f}/s ratio={faust['rate'] / floor['rate']:.2f} "
          f"scores_per_event={SCORES_PER_EVENT}")


if __name__ == "__main__":
    main()
