"""Measures over a large log: read from the topic (decode + fold), and the fold alone.

Writes N envelopes to one tenant's events topic as incidents of six events each (an error
spike, the firing, the run's start and success, a person's and a judge's triage verdict),
then times `streams report`'s reader (batched consume, fastavro, envelopes) followed by the
measures (rule outcomes, time to resolution, judge agreement, quality), and the same measures
over the already-decoded envelopes. Prints envelopes/s for both.

    eval "$(deploy/stack.sh env)"
    .venv/bin/python -m bench.measures --envelopes 1000000
"""

from __future__ import annotations

import argparse
import time
import uuid

from confluent_kafka import Producer
from rich.console import Console

from streams.adapters.avro.serde import AvroSerde
from streams.adapters.kafka.admin import TenantAdmin
from streams.adapters.kafka.config import producer_config
from streams.adapters.kafka.log import envelope_headers
from streams.core.actors import EvaluatorActor, SystemActor, UserActor
from streams.core.events import (
    AppEvent,
    Envelope,
    FeedbackGiven,
    RuleFired,
    RunStarted,
    RunSucceeded,
)
from streams.core.measures import (
    fold_judge_agreement,
    fold_quality,
    fold_rule_outcomes,
    fold_time_to_resolution,
)
from streams.core.runs import rule_actor
from streams.core.targets import RunTarget
from streams.core.tenancy import tenant_topics
from streams.examples.ops import TriageQuality  # noqa: F401  (registers triage_quality)
from streams.runtime.jobs.log_read import read_workspace_log
from streams.runtime.root import Runtime
from streams.settings import Settings

console = Console(stderr=True)
PER_INCIDENT = 6


def incident(i: int) -> list[Envelope]:
    system, rule = SystemActor(), rule_actor("ops:error-spike")
    spike = Envelope.new(AppEvent(name="ops:error_spike", data={"service": f"s{i % 7}"}),
                         tenant="bench", workspace="prod", actor=system)
    fired = spike.follow(RuleFired(firing_id=f"fir_{i}", rule="ops:error-spike",
                                   matched=[spike.event_id]), actor=rule)
    run = f"run_{i}"
    started = fired.follow(RunStarted(run_id=run, rule="ops:error-spike", action="triage",
                                      firing_id=f"fir_{i}"))
    done = started.follow(RunSucceeded(run_id=run, rule="ops:error-spike", action="triage"))
    verdicts = [
        started.follow(FeedbackGiven(feedback_type="triage_quality", target=RunTarget(run_id=run),
                                     value={"correct": i % 3 != 0, "severity": "high",
                                            "note": None}), actor=actor)
        for actor in (UserActor(id="ada"), EvaluatorActor(name="judge", version="1"))]
    return [spike, fired, started, done, *verdicts]


def produce(settings: Settings, serde: AvroSerde, topic: str, n: int) -> None:
    producer = Producer(producer_config(settings, **{"linger.ms": 20,
                                                     "batch.num.messages": 10000}))
    made = 0
    i = 0
    while made < n:
        for envelope in incident(i):
            while True:
                try:
                    producer.produce(topic, serde.encode_envelope(envelope, topic),
                                     envelope.correlation_id.encode(),
                                     headers=envelope_headers(envelope))
                    break
                except BufferError:
                    producer.poll(0.1)
            made += 1
        i += 1
        if i % 2000 == 0:
            producer.poll(0)
            console.print(f"  produced {made}/{n}", end="\r")
    producer.flush(120)
    console.print(f"  produced {made}/{n}")


def fold_all(envelopes: list[Envelope]) -> None:
    fold_rule_outcomes(envelopes)
    fold_time_to_resolution(envelopes, lambda e: e.event_type == "run_succeeded")
    fold_judge_agreement(envelopes)
    fold_quality(envelopes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envelopes", type=int, default=1_000_000)
    args = parser.parse_args()
    settings = Settings.from_env(topic_prefix=f"bench{uuid.uuid4().hex[:6]}")
    runtime = Runtime(settings)
    TenantAdmin(settings).create_tenant("bench")
    topic = tenant_topics("bench", settings.topic_prefix).events
    n = args.envelopes - args.envelopes % PER_INCIDENT
    console.print(f"producing {n} envelopes to {topic}")
    produce(settings, runtime.serde, topic, n)

    started = time.perf_counter()
    read = read_workspace_log(runtime, "bench", "prod")
    fold_all(read.envelopes)
    from_topic = time.perf_counter() - started
    started = time.perf_counter()
    fold_all(read.envelopes)
    folded = time.perf_counter() - started
    runtime.close()
    print(f"envelopes={len(read.envelopes)} from_topic={len(read.envelopes) / from_topic:.0f}/s "
          f"({from_topic:.1f}s) fold_only={len(read.envelopes) / folded:.0f}/s ({folded:.2f}s)")


if __name__ == "__main__":
    main()
