"""What the worker's metrics cost the mirror's step, per feedback, on the same records.

The mirror step (MirrorStep.handle_batch: decode, validate, map, encode) runs over the same
in-memory batches of feedback_given records, alternately without metrics and with the
worker's metrics as `STREAMS_METRICS=prometheus` sets them up (the per-feedback delay counted
in a DelayHistogram, the observable counts; a scrape after each round), and, for comparison,
with the delay recorded as an OpenTelemetry SDK histogram (what `otlp` does). Rounds alternate
so a busy machine slows all variants alike; the medians are printed, and the ratios to the
step without metrics. No broker is used; the registry is (for the schemas, once).

    eval "$(deploy/stack.sh env)"
    .venv/bin/python -m bench.metrics_cost --records 2000 --rounds 9
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from statistics import median
from typing import Any

from prometheus_client import generate_latest

from streams.adapters.avro.fast import FastCodec
from streams.adapters.avro.serde import AvroSerde, registry_client
from streams.adapters.kafka.log import envelope_headers
from streams.core.actors import UserActor
from streams.core.events import Envelope, FeedbackGiven
from streams.core.feedback import value_record
from streams.core.targets import RunTarget
from streams.examples.ops import TriageQuality
from streams.runtime.observe.metrics import Metrics, provider_for
from streams.runtime.worker.mirror import MirrorStep
from streams.settings import Settings

TOPIC = "fs.bench.events"


class _Message:
    """The parts of a confluent-kafka Message the step reads."""

    def __init__(self, value: bytes, headers: list[tuple[str, bytes]], offset: int) -> None:
        self._value, self._headers, self._offset = value, headers, offset

    def error(self) -> None:
        return None

    def headers(self) -> list[tuple[str, bytes]]:
        return self._headers

    def topic(self) -> str:
        return TOPIC

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes:
        return b"chain"

    def value(self) -> bytes:
        return self._value


def messages(settings: Settings, n: int) -> list[Any]:
    serde = AvroSerde(settings)
    out: list[Any] = []
    for i in range(n):
        value = value_record(TriageQuality(correct=i % 2 == 0, severity="high", note=f"n{i}"))
        envelope = Envelope.new(FeedbackGiven(feedback_type="triage_quality",
                                              target=RunTarget(run_id="run"), value=value),
                                tenant="bench", workspace="w", actor=UserActor(id="ada"))
        out.append(_Message(serde.encode_envelope(envelope, TOPIC),
                            list(envelope_headers(envelope)), i))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--batch", type=int, default=500)
    args = parser.parse_args()
    settings = Settings.from_env()
    batch = messages(settings, args.records)
    codec = FastCodec(registry_client(settings), settings.topic_prefix)

    prometheus = provider_for(settings.replace(metrics="prometheus"))
    otel = provider_for(settings.replace(metrics="prometheus"))
    assert prometheus.provider and prometheus.registry and otel.provider and otel.registry
    variants: dict[str, tuple[MirrorStep, Callable[[], object]]] = {}
    variants["none"] = (MirrorStep(codec, prefix="fs"), lambda: None)
    for name, installed, local in (("prometheus", prometheus, True), ("otel", otel, False)):
        metrics = Metrics(installed.provider.get_meter(name),
                          registry=installed.registry if local else None)
        step = MirrorStep(codec, prefix="fs", on_delay=metrics.mirror_delay)
        metrics.watch_mirror(step)
        registry = installed.registry
        variants[name] = (step, lambda r=registry: generate_latest(r))
    for step, _scrape in variants.values():
        step.handle_batch(batch[:10])  # schemas fetched and cached before timing

    per_feedback: dict[str, list[float]] = {name: [] for name in variants}
    for _round in range(args.rounds):
        for name, (step, scrape) in variants.items():
            started = time.perf_counter()
            for i in range(0, len(batch), args.batch):
                step.handle_batch(batch[i:i + args.batch])
            scrape()
            per_feedback[name].append((time.perf_counter() - started) / len(batch) * 1e6)
    base = median(per_feedback["none"])
    line = f"records={args.records} rounds={args.rounds} step_us={base:.1f}"
    for name in ("prometheus", "otel"):
        us = median(per_feedback[name])
        line += f" {name}_us={us:.1f} {name}_ratio={base / us:.3f}"
    print(line)


if __name__ == "__main__":
    main()
