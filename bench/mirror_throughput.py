"""Feedback mirror throughput against the tuned floor, on the same data in one run.

Three implementations read the same N feedback_given events from one tenant's events topic:
- the tuned floor (bench/floor.py): the job done as fast as Python can here;
- the mirror's batch data path in this process (BatchLoop + MirrorStep: decode, validate,
  map, encode, produce, commit after delivery), the code the worker runs;
- `streams worker` as a separate process under the first of `--guarantees`, `--worker-rounds`
  runs each right after a floor run under the same guarantee (start-up and group join
  excluded, reported apart; timed from its first scores seen, counting the feedback scored
  after them: see `run_faust`);
- the in-process loop under both processing guarantees (STREAMS_PROCESSING_GUARANTEE), in
  `--rounds` alternating rounds (at_least_once, exactly_once, at_least_once, ...), each
  round a new consumer group over the same N events, each mirror run right after a floor
  run under the same guarantee (bench/floor.py, `transactional`), so the two meet the same
  machine: the line prints, per guarantee, the median rates and CPU microseconds per event
  of the mirror and its floor, the median of the rounds' mirror / floor ratios (and the
  CPU ratio floor / mirror), and the median of the exactly_once / at_least_once ratios;
- with `--metrics`, the in-process loop again with the worker's metrics on (the per-feedback
  delay histogram, the observable counts and the lag tracker, a Prometheus reader scraped
  every second), so the metrics' cost is the ratio of the two in-process runs.
Every output is checked: the floor's and the mirror's score records must be byte for byte the
same multiset, N x 3 of them.

    eval "$(deploy/stack.sh env)"
    .venv/bin/python -m bench.mirror_throughput --events 50000

Rates count feedback events per second, from the first batch to the last commit.
"""

from __future__ import annotations

import argparse
import gc
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic
from rich.console import Console

from bench.floor import run_floor
from bench.served import cpu_seconds
from bench.tracing import install_tracing, trace_context
from streams.adapters.avro.serde import AvroSerde
from streams.adapters.kafka.admin import TenantAdmin
from streams.adapters.kafka.config import consumer_config, producer_config, reader_config
from streams.adapters.kafka.log import envelope_headers, watermarks
from streams.adapters.kafka.outputs import Output
from streams.core.actors import UserActor
from streams.core.events import Envelope, FeedbackGiven
from streams.core.feedback import value_record
from streams.core.scores import score_configs
from streams.core.targets import RunTarget
from streams.core.tenancy import tenant_topics
from streams.examples.ops import TriageQuality
from streams.runtime.worker.mirror import MirrorStep
from streams.settings import Settings

console = Console(stderr=True)
SCORES_PER_EVENT = 3  # correct, severity, note


def produce_feedback(settings: Settings, serde: AvroSerde, topic: str, tenant: str,
                     n: int, *, traced: bool = False) -> None:
    producer = Producer(producer_config(settings, **{"linger.ms": 20,
                                                     "batch.num.messages": 10000}))
    actor = UserActor(id="bench")
    for i in range(n):
        value = TriageQuality(correct=i % 2 == 0, severity=("low", "high", "critical")[i % 3],
                              note=f"note {i}")
        envelope = Envelope.new(
            FeedbackGiven(feedback_type="triage_quality", target=RunTarget(run_id=f"run_{i}"),
                          value=value_record(value)),
            tenant=tenant, workspace="bench", actor=actor, correlation_id=f"chain_{i % 997}",
            trace=trace_context(i) if traced else None)
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


class RecordCount:
    """Counts a topic's records as a read_committed reader is handed them.

    `by_offsets`: read off the partitions' ends instead, one request per call, for a writer
    that writes no transactions (at least once: every offset is a record). Consuming the
    records to count them costs the machine a reader of every score while the worker runs
    on the same 2 cores, which the floor does not have beside it; an exactly-once writer's
    transaction markers take offsets too, so its records are counted as handed on."""

    def __init__(self, settings: Settings, topic: str, *, by_offsets: bool = False) -> None:
        self.consumer = Consumer(reader_config(settings, f"bench-watch-{uuid.uuid4().hex}"))
        partitions = watermarks(self.consumer, topic)
        self.ends = [TopicPartition(topic, p, OFFSET_END) for p in partitions] \
            if by_offsets else None
        if not by_offsets:
            self.consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING)
                                  for p in partitions])
        self.seen = 0

    def now(self) -> int:
        """Records handed on so far (reads what has arrived)."""
        if self.ends is not None:
            return sum(tp.offset for tp in self.consumer.offsets_for_times(self.ends, 10))
        while True:
            batch = self.consumer.consume(10000, 0.01)
            self.seen += sum(1 for m in batch if m.error() is None)
            if not batch:
                return self.seen

    def close(self) -> None:
        self.consumer.close()


def run_faust(settings: Settings, tenant: str, n: int, batch: int, *, workers: int = 1,
              already: int = 0, guarantee: str | None = None) -> dict[str, float]:
    """`workers` worker processes in one new consumer group mirror the tenant's N feedback
    (under `guarantee`, default the settings'); timed from the first new scores seen to the
    last (`already` scores were on the topic), counting the feedback whose scores appeared
    in between (`events`).

    Why not all N: exactly once, scores appear a transaction at a time, and the first
    transaction's (up to 10 batches) are all there when the clock starts; counting them
    over the time of the rest overstated the worker's rate and understated its CPU per
    event by up to a fifth of a 50,000-event run."""
    scores_topic = tenant_topics(tenant, settings.topic_prefix).scores
    env = settings.child_env()
    if guarantee is not None:
        env["STREAMS_PROCESSING_GUARANTEE"] = guarantee
    watch = RecordCount(settings, scores_topic, by_offsets=(
        guarantee or settings.processing_guarantee) == "at_least_once")
    cursor = f"bench-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    procs = [subprocess.Popen(
        [sys.executable, "-m", "streams", "worker", "--types", "streams.examples.ops",
         "--batch-size", str(batch), "--cursor", cursor],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(workers)]
    want = already + n * SCORES_PER_EVENT
    first = last = None
    cpu_first = cpu_last = 0.0
    done_first = already
    try:
        while True:
            done = watch.now()
            now = time.monotonic()
            if done > already and first is None:
                first = now
                done_first = done
                cpu_first = sum(cpu_seconds(p.pid) for p in procs)
            if done >= want:
                last = now
                cpu_last = sum(cpu_seconds(p.pid) for p in procs)
                break
            if now - started > 900:
                raise SystemExit(f"workers made {done - already}/{want - already} scores "
                                 "in 900 s")
            for proc in procs:
                if proc.poll() is not None:
                    raise SystemExit(f"a worker exited with {proc.returncode}")
            time.sleep(0.05)
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(30)
        watch.close()
    assert first is not None and last is not None
    # CPU between the first scores and the last, every worker process together (start-up
    # excluded, as from the rate), for the feedback whose scores came in between.
    events = (want - done_first) / SCORES_PER_EVENT
    if events < n / 2:
        raise SystemExit(f"only {events:.0f} of {n} feedback were scored after the first "
                         "scores appeared: too few to time; give more --events")
    return {"startup_s": first - started, "seconds": last - first, "events": events,
            "rate": events / max(last - first, 1e-9), "cpu_s": cpu_last - cpu_first}


def run_batch_mirror(settings: Settings, tenant: str, n: int, batch: int, *,
                     metrics: bool = False, guarantee: str = "at_least_once",
                     ) -> dict[str, float]:
    """The worker's data path in this process: BatchLoop over MirrorStep under `guarantee`
    (with the worker's metrics, scraped every second, when `metrics`)."""
    import threading

    from streams.adapters.avro.fast import FastCodec
    from streams.adapters.avro.serde import registry_client
    from streams.runtime.batch import BatchLoop
    from streams.runtime.root import Runtime

    step = MirrorStep(FastCodec(registry_client(settings), settings.topic_prefix),
                      prefix=settings.topic_prefix)
    events = tenant_topics(tenant, settings.topic_prefix).events
    stop = threading.Event()
    seen = [0]
    # The clocks as the floor reads them: wall and CPU at the first batch consumed, and CPU
    # after the last record's work (its outputs handed to the producer).
    first: list[float] = []
    cpu_at_last = [0.0]
    last_batch = threading.Event()

    def mirror_batch(messages: Sequence[Message]) -> list[Output]:
        # Stops the loop once its step has had N records, as the floor stops its loop: the
        # loop then commits at once, and the run ends at that commit (the consumer's close,
        # leaving the group, is not the job's work and the floor's time leaves it out too).
        if not first:
            first.extend((time.monotonic(), time.process_time()))
        outputs = step.handle_batch(messages)
        seen[0] += len(messages)
        if seen[0] >= n:
            last_batch.set()
        return outputs

    class TimedLoop(BatchLoop):
        """The loop, reading the CPU clock once the last batch's outputs are produced."""

        def _produce(self, producer: Any, outputs: Sequence[Output]) -> None:
            super()._produce(producer, outputs)
            if last_batch.is_set() and not stop.is_set():
                cpu_at_last[0] = time.process_time()
                stop.set()

    loop = TimedLoop(
        Runtime(settings), group=f"bench-mirror-{uuid.uuid4().hex}",
        producer_extra={"linger.ms": 20, "batch.num.messages": 10000},
        subscription=[events], step=mirror_batch, batch_size=batch, guarantee=guarantee,
        commit_interval=settings.commit_interval)
    scrape: Callable[[], object] = lambda: None  # noqa: E731
    if metrics:
        from prometheus_client import generate_latest

        from streams.runtime.observe.metrics import Metrics, provider_for

        installed = provider_for(settings.replace(metrics="prometheus"))
        assert installed.provider is not None and installed.registry is not None
        instruments = Metrics(installed.provider.get_meter("bench"), registry=installed.registry)
        instruments.watch_loop(loop, settings.topic_prefix)
        instruments.watch_mirror(step)
        step.on_delay = instruments.mirror_delay
        registry = installed.registry
        scrape = lambda: generate_latest(registry)  # noqa: E731
    thread = threading.Thread(target=loop.run, args=(stop,), daemon=True)
    started = time.monotonic()
    thread.start()
    scraped = started
    while not stop.is_set():
        if not thread.is_alive():
            raise SystemExit(f"the batch mirror's loop ended after {loop.stats.records}/{n} "
                             "records (its error is above)")
        if time.monotonic() - scraped >= 1.0:
            scrape()
            scraped = time.monotonic()
        if time.monotonic() - started > 600:
            raise SystemExit(f"batch mirror handled {loop.stats.records}/{n} in 600 s")
        time.sleep(0.01)
    thread.join()
    # The run ends at the loop's last commit, made as it stopped, as the floor's ends at its
    # own; the CPU of both is counted up to their last record's work.
    last = loop.stats.committed_at
    assert first and loop.stats.records >= n
    started_at, cpu_at_first = first
    cpu = cpu_at_last[0] - cpu_at_first
    if loop.stats.aborts:
        raise SystemExit(f"the {guarantee} loop aborted {loop.stats.aborts} transactions "
                         f"({loop.stats.aborts_by_reason}): not a clean run")
    return {"seconds": last - started_at, "rate": n / (last - started_at),
            "startup_s": started_at - started, "cpu_s": cpu, "commits": loop.stats.commits}


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def topic_values(settings: Settings, topic: str, want: int) -> list[bytes]:
    """Every value of a topic (waits until `want` are there)."""
    consumer = Consumer(consumer_config(settings, f"bench-read-{uuid.uuid4().hex}"))
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + 120
    while len(values) < want and time.monotonic() < deadline:
        for msg in consumer.consume(10000, 1.0):
            if not msg.error():
                values.append(msg.value() or b"")
    consumer.close()
    return values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=50_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--metrics", action="store_true",
                        help="also run the in-process loop with the worker's metrics on")
    parser.add_argument("--no-worker", action="store_true",
                        help="skip the `streams worker` subprocess run")
    parser.add_argument("--rounds", type=int, default=3,
                        help="alternating rounds of the in-process loop per guarantee")
    parser.add_argument("--worker-rounds", type=int, default=1,
                        help="`streams worker` runs, each right after a floor run, under the "
                             "first of --guarantees")
    parser.add_argument("--guarantees", choices=("both", "at_least_once", "exactly_once"),
                        default="both", help="which processing guarantees the in-process "
                        "loop and the floor run under")
    parser.add_argument("--traced", action="store_true",
                        help="every feedback carries its own trace context and the in-process "
                             "mirror runs with a tracer provider (bench/tracing.py)")
    args = parser.parse_args()
    if args.worker_rounds < 1:
        parser.error("--worker-rounds must be at least 1 (--no-worker skips the worker)")
    settings = Settings.from_env(topic_prefix=f"bench{uuid.uuid4().hex[:6]}")
    serde = AvroSerde(settings)
    tenant = "bench"
    TenantAdmin(settings).create_tenant(tenant)
    topics = tenant_topics(tenant, settings.topic_prefix)
    console.print(f"producing {args.events} feedback events to {topics.events}")
    produce_feedback(settings, serde, topics.events, tenant, args.events, traced=args.traced)
    floor_topic = f"{settings.topic_prefix}.floor.scores"
    admin = AdminClient({"bootstrap.servers": settings.bootstrap_servers})
    for future in admin.create_topics([NewTopic(floor_topic, settings.partitions, 1)]).values():
        future.result()
    want = args.events * SCORES_PER_EVENT
    # The worker freezes its start-up heap (Runtime.started), so Python's full collections
    # skip it; the floor and the in-process loop run in this process, whose heap is frozen
    # the same way here, so all three meet the same collector.
    gc.collect()
    gc.freeze()

    guarantees = ["at_least_once", "exactly_once"] if args.guarantees == "both" \
        else [args.guarantees]
    configs = {"triage_quality": score_configs(TriageQuality)}
    floors: dict[str, list[dict[str, float]]] = {g: [] for g in guarantees}

    def run_floor_round(guarantee: str) -> dict[str, float]:
        console.print(f"tuned floor (bench/floor.py), {guarantee}...")
        result = run_floor(settings.bootstrap_servers, settings.schema_registry_url,
                           topics.events, floor_topic, args.events, configs, args.batch,
                           transactional=guarantee == "exactly_once",
                           subject_topic=topics.scores)
        floors[guarantee].append(result)
        console.print(f"  {result['rate']:,.0f} feedback/s ({result['seconds']:.1f}s, "
                      f"{result['cpu_s'] / args.events * 1e6:.1f} µs CPU per event)")
        return result

    # Each worker run is divided by a floor run just before it, under the same guarantee
    # (the first guarantee of --guarantees).
    floor = run_floor_round(guarantees[0])
    line = f"events={args.events} batch={args.batch}"
    runs = 0
    if not args.no_worker:
        workers: list[dict[str, float]] = []
        worker_floors: list[dict[str, float]] = []
        for number in range(args.worker_rounds):
            if number:
                floor = run_floor_round(guarantees[0])
            # Each run in a new group; it ends when its N x 3 scores follow the earlier runs'.
            console.print(f"streams worker (subprocess), {guarantees[0]}, round "
                          f"{number + 1}/{args.worker_rounds}...")
            worker = run_faust(settings, tenant, args.events, args.batch,
                               already=number * want, guarantee=guarantees[0])
            console.print(f"  {worker['rate']:,.0f} feedback/s ({worker['seconds']:.1f}s, "
                          f"{worker['cpu_s'] / worker['events'] * 1e6:.1f} µs CPU per event, "
                          f"start-up {worker['startup_s']:.1f}s)")
            workers.append(worker)
            worker_floors.append(floor)
            runs += 1
        worker_cpu_us = _median([w["cpu_s"] / w["events"] * 1e6 for w in workers])
        floor_cpu_us = _median([f["cpu_s"] / args.events * 1e6 for f in worker_floors])
        ratios = [w["rate"] / f["rate"] for w, f in zip(workers, worker_floors, strict=True)]
        line += (f" worker_guarantee={guarantees[0]}"
                 f" worker_rate={_median([w['rate'] for w in workers]):.0f}/s"
                 f" worker_events_timed={_median([w['events'] for w in workers]):.0f}"
                 f" worker_ratio={_median(ratios):.3f}"
                 f" worker_ratios={','.join(f'{r:.3f}' for r in ratios)}"
                 f" worker_cpu_us={worker_cpu_us:.1f} worker_floor_cpu_us={floor_cpu_us:.1f}"
                 f" worker_cpu_ratio={floor_cpu_us / worker_cpu_us:.3f}")
    if args.traced:
        provider, exporter = install_tracing()
    rounds: dict[str, list[dict[str, float]]] = {g: [] for g in guarantees}
    for number in range(args.rounds):
        for guarantee in guarantees:
            # Rounds alternate floor and mirror, so both meet the same machine.
            if not (number == 0 and guarantee == guarantees[0] and args.no_worker):
                run_floor_round(guarantee)  # else the first floor run is this round's
            console.print(f"batch mirror (BatchLoop + MirrorStep, in process), {guarantee}, "
                          f"round {number + 1}/{args.rounds}...")
            result = run_batch_mirror(settings, tenant, args.events, args.batch,
                                      guarantee=guarantee)
            rounds[guarantee].append(result)
            runs += 1
            console.print(f"  {result['rate']:,.0f} feedback/s ({result['seconds']:.1f}s, "
                          f"{result['cpu_s'] / args.events * 1e6:.1f} µs CPU per event, "
                          f"{result['commits']:.0f} commits)")
    first_guarantee = rounds[guarantees[0]]
    mirror = {"rate": _median([r["rate"] for r in first_guarantee])}
    line += (f" traced={args.traced} rounds={args.rounds}"
             f" commit_interval={settings.commit_interval:g}s")
    for guarantee in guarantees:
        cpu_us = _median([r["cpu_s"] / args.events * 1e6 for r in rounds[guarantee]])
        # The floor runs of the mirror's rounds (the first guarantee's first floor run is
        # the worker's when a worker ran).
        paired = floors[guarantee][-len(rounds[guarantee]):]
        floor_cpu_us = _median([r["cpu_s"] / args.events * 1e6 for r in paired])
        ratios = [m["rate"] / f["rate"] for m, f in zip(rounds[guarantee], paired, strict=True)]
        line += (f" {guarantee}_rate={_median([r['rate'] for r in rounds[guarantee]]):.0f}/s"
                 f" {guarantee}_cpu_us={cpu_us:.1f}"
                 f" {guarantee}_floor_rate={_median([r['rate'] for r in paired]):.0f}/s"
                 f" {guarantee}_floor_cpu_us={floor_cpu_us:.1f}"
                 f" {guarantee}_floor_ratio={_median(ratios):.3f}"
                 f" {guarantee}_floor_ratios={','.join(f'{r:.3f}' for r in ratios)}"
                 f" {guarantee}_cpu_ratio={floor_cpu_us / cpu_us:.3f}")
    if len(guarantees) == 2:
        ratios = [e["rate"] / a["rate"] for a, e in zip(rounds["at_least_once"],
                                                        rounds["exactly_once"], strict=True)]
        line += (f" eos_alos_ratio={_median(ratios):.3f}"
                 f" eos_alos_ratios={','.join(f'{r:.3f}' for r in ratios)}")
    if args.traced:
        provider.force_flush()
        line += f" spans={exporter.spans} links={exporter.links}"
    if args.metrics:
        console.print("batch mirror with the worker's metrics on (in process)...")
        measured = run_batch_mirror(settings, tenant, args.events, args.batch, metrics=True)
        console.print(f"  {measured['rate']:,.0f} feedback/s ({measured['seconds']:.1f}s)")
        line += (f" metrics_mirror_rate={measured['rate']:.0f}/s "
                 f"metrics_mirror_ratio={measured['rate'] / floor['rate']:.2f} "
                 f"metrics_cost={1 - measured['rate'] / mirror['rate']:+.1%}")
        runs += 1

    floor_runs = sum(len(runs_of) for runs_of in floors.values())
    floor_values = topic_values(settings, floor_topic, want * floor_runs)
    mirror_values = topic_values(settings, topics.scores, want * runs)
    same = sorted(floor_values * runs) == sorted(mirror_values * floor_runs)
    console.print(f"  outputs: floor {len(floor_values)}, mirror and worker "
                  f"{len(mirror_values)}, byte-identical to the floor's: {same}")
    if len(floor_values) != want * floor_runs or len(mirror_values) != want * runs or not same:
        raise SystemExit("the floor and the mirror did not write the same scores")
    print(line + f" scores_per_event={SCORES_PER_EVENT}")


if __name__ == "__main__":
    main()
