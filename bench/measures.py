"""The report over a large log, against the decode floor, rounds alternating.

Writes N envelopes to one tenant's events topic as incidents of six events each (an error
spike, the firing, the run's start and success, a person's and a judge's triage verdict),
then per round, in this order:
1. floor: the whole topic consumed in batches and every record decoded with fastavro against
   its cached writer schema, nothing kept, nothing folded: what any report must at least do
   (it reads every record), done as fast as Python can here;
2. report: what `streams report` runs (`make_report`: the read, every measure, the queues,
   both files written), with the garbage collector paused as the command pauses it;
3. report, collector on: the same with Python's collector running, as before it was paused;
4. read and four measures: `streams report`'s reader, then rule outcomes, time to resolution,
   judge agreement and quality, collector paused.
Prints envelopes/s and CPU µs per envelope of each per round, then the medians and each
path's ratio to the floor (rate, and floor CPU / path CPU). The four measures alone are timed
after path 4 in each round, over the envelopes it read (their median is printed last).

    eval "$(deploy/stack.sh env)"
    .venv/bin/python -m bench.measures --envelopes 1000000 --rounds 2
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from contextlib import nullcontext
from functools import partial
from pathlib import Path

from confluent_kafka import Producer
from rich.console import Console

from bench.reads import decode_topic
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
from streams.runtime.jobs.heap import collector_paused
from streams.runtime.jobs.log_read import read_workspace_log
from streams.runtime.root import Runtime
from streams.settings import Settings
from streams.surfaces.report.run import make_report

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


Timed = tuple[float, float]  # envelopes/s, CPU µs per envelope


def _timed(run: Callable[[], int]) -> Timed:
    """Run `run` (it returns how many envelopes it went through): (its rate, CPU µs each)."""
    wall, cpu = time.perf_counter(), time.process_time()
    n = run()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return n / wall, cpu / max(n, 1) * 1e6


def report(runtime: Runtime, paused: bool) -> int:
    """`make_report` as `streams report` runs it (paused: the collector off, as the command
    does); the envelopes reported."""
    with tempfile.TemporaryDirectory() as out, collector_paused() if paused else nullcontext():
        made = make_report(runtime, "bench", "prod", out=Path(out))
    return int(made.report["events"])


def read_and_fold(runtime: Runtime, hold: list[list[Envelope]]) -> int:
    """The report's reader and the four measures, collector paused; the envelopes read
    (handed over in `hold`, for the fold-only figure timed after this one)."""
    with collector_paused():
        read = read_workspace_log(runtime, "bench", "prod")
        fold_all(read.envelopes)
    hold.append(read.envelopes)
    return len(read.envelopes)


def fold_only(envelopes: list[Envelope]) -> int:
    """The four measures over envelopes already decoded, collector paused."""
    with collector_paused():
        fold_all(envelopes)
    return len(envelopes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envelopes", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    settings = Settings.from_env(topic_prefix=f"bench{uuid.uuid4().hex[:6]}")
    runtime = Runtime(settings)
    TenantAdmin(settings).create_tenant("bench")
    topic = tenant_topics("bench", settings.topic_prefix).events
    n = args.envelopes - args.envelopes % PER_INCIDENT
    console.print(f"producing {n} envelopes to {topic}")
    produce(settings, runtime.serde, topic, n)

    hold: list[list[Envelope]] = []
    folded: list[Timed] = []
    paths: dict[str, Callable[[], int]] = {
        "floor (consume, decode)": lambda: decode_topic(runtime, topic),
        "report": lambda: report(runtime, True),
        "report, collector on": lambda: report(runtime, False),
        "read and four measures": lambda: read_and_fold(runtime, hold),
    }
    rounds: dict[str, list[Timed]] = {name: [] for name in paths}
    for r in range(args.rounds):
        for name, run in paths.items():
            rounds[name].append(_timed(run))
        # The fold alone over what path 4 read, then they go: nothing a round made is kept
        # into the next (a million envelopes left standing halved the next floor round).
        folded.append(_timed(partial(fold_only, hold.pop())))
        print(f"round {r + 1}: " + ", ".join(f"{name} {v[-1][0]:,.0f}/s {v[-1][1]:.1f} µs"
                                             for name, v in rounds.items()), flush=True)
    runtime.close()
    base = statistics.median(rate for rate, _ in rounds["floor (consume, decode)"])
    base_cpu = statistics.median(cpu for _, cpu in rounds["floor (consume, decode)"])
    print(f"\n{n} envelopes, {args.rounds} rounds; medians:")
    print(f"{'path':<26}{'envelopes/s':>13}{'CPU µs/env':>12}{'vs floor':>10}"
          f"{'CPU ratio':>11}")
    for name, values in rounds.items():
        rate = statistics.median(v[0] for v in values)
        cpu = statistics.median(v[1] for v in values)
        print(f"{name:<26}{rate:>13,.0f}{cpu:>12.1f}{rate / base:>10.3f}"
              f"{base_cpu / cpu:>11.3f}")
    label = "four measures, decoded"
    rate = statistics.median(v[0] for v in folded)
    cpu = statistics.median(v[1] for v in folded)
    print(f"{label:<26}{rate:>13,.0f}{cpu:>12.1f}  (collector paused, envelopes already "
          "decoded)")


if __name__ == "__main__":
    main()
