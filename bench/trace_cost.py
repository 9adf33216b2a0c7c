"""What tracing costs the mirror, per record: its step alone (the floor here: the same work
untraced) against the step inside the batch span, with a tracer provider and every record
carrying its own trace context, on the same records in one run.

N feedback events, each with a distinct `traceparent`, are produced to a tenant's events
topic and consumed once into memory; the timed part does no I/O. Measured, in 1000-record
batches, best of `--repeat` passes taken in turn:

- step: `MirrorStep.handle_batch` (decode, validate, map, encode; scores carry the
  feedback's trace headers), making no span;
- span, no provider: `batch_span` alone, as the batch loop calls it when tracing is off
  (measured first, before the provider is installed);
- step + span, provider: the step inside `batch_span` with an SDK tracer provider whose
  spans go through a BatchSpanProcessor to an exporter that drops them (bench/tracing.py):
  one span per batch with up to 128 links;
- span, provider: `batch_span` alone, with the provider.

    eval "$(deploy/stack.sh env)"
    .venv/bin/python -m bench.trace_cost --events 10000

It prints microseconds per record and the ratio (step + span) / step.
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Callable

from confluent_kafka import Consumer, Message
from rich.console import Console

from bench.mirror_throughput import produce_feedback
from bench.tracing import install_tracing
from streams.adapters.avro.fast import FastCodec
from streams.adapters.avro.serde import AvroSerde, registry_client
from streams.adapters.kafka.admin import TenantAdmin
from streams.adapters.kafka.config import consumer_config
from streams.adapters.tracing import batch_span
from streams.core.tenancy import tenant_topics
from streams.runtime.worker.mirror import MirrorStep
from streams.settings import Settings

console = Console(stderr=True)
BATCH = 1000


def consumed(settings: Settings, topic: str, n: int) -> list[Message]:
    consumer = Consumer(consumer_config(settings, f"bench-trace-{uuid.uuid4().hex}"))
    consumer.subscribe([topic])
    messages: list[Message] = []
    deadline = time.monotonic() + 120
    while len(messages) < n and time.monotonic() < deadline:
        messages += [m for m in consumer.consume(5000, 1.0) if m.error() is None]
    consumer.close()
    if len(messages) < n:
        raise SystemExit(f"consumed {len(messages)}/{n} records")
    return messages


def per_record(messages: list[Message], batch: Callable[[list[Message]], None]) -> float:
    """Microseconds per record of one pass over every batch."""
    started = time.perf_counter()
    for i in range(0, len(messages), BATCH):
        batch(messages[i:i + BATCH])
    return (time.perf_counter() - started) / len(messages) * 1e6


def best(passes: int, messages: list[Message],
         *batches: Callable[[list[Message]], None]) -> list[float]:
    """The fastest pass of each, the passes taken in turn (so a burst of other work on a
    shared machine falls on all of them alike)."""
    times: list[list[float]] = [[] for _ in batches]
    for _ in range(passes):
        for i, batch in enumerate(batches):
            times[i].append(per_record(messages, batch))
    return [min(t) for t in times]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    settings = Settings.from_env(topic_prefix=f"bench{uuid.uuid4().hex[:6]}")
    TenantAdmin(settings).create_tenant("bench")
    topic = tenant_topics("bench", settings.topic_prefix).events
    produce_feedback(settings, AvroSerde(settings), topic, "bench", args.events, traced=True)
    messages = consumed(settings, topic, args.events)
    step = MirrorStep(FastCodec(registry_client(settings), settings.topic_prefix),
                      prefix=settings.topic_prefix)
    step.handle_batch(messages[:BATCH])  # schemas fetched and cached before the clock

    def spanned(chunk: list[Message]) -> None:
        with batch_span(chunk, group="bench"):
            step.handle_batch(chunk)

    def span_only(chunk: list[Message]) -> None:
        with batch_span(chunk, group="bench"):
            pass

    [off] = best(args.repeat, messages, span_only)
    # The step itself makes no span: with the provider installed it is still the untraced
    # work, so it can be timed in turn with the traced one.
    provider, exporter = install_tracing()
    plain, traced, span = best(args.repeat, messages, step.handle_batch, spanned, span_only)
    provider.force_flush()
    console.print(f"exported {exporter.spans} spans with {exporter.links} links")
    print(f"events={args.events} batch={BATCH} step={plain:.2f}us/record "
          f"span_no_provider={off:.3f}us/record step_and_span_provider={traced:.2f}us/record "
          f"span_provider={span:.2f}us/record ratio={traced / plain:.2f} best_of={args.repeat}")


if __name__ == "__main__":
    main()
