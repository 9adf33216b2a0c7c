"""The rules reactor's step against its floor: the 50 rules of `bench/rules50.py` matched over
the same records, in the same process, in alternating rounds.

Produces N events to one tenant (mostly `bench:event` app events, and a few `bench:other`,
`feedback_given` and `run_succeeded` so that every rule of the 50 is reached), consumes them
once in batches of STREAMS_REACTOR_BATCH_SIZE, then times, round after round in alternating
order over those same confluent-kafka messages:

- the reactor: `Reactor.handle_batch` per batch, as the worker's batch loop calls it (decode,
  match, firings and forwards as encoded records, the index entries of every event produced:
  STREAMS_WORKER_INDEX, on by default), and `Reactor.before_commit` every 10 batches as the
  loop calls it before a commit (the entries flushed and the index cursors read; written
  only in the warm-up round, since every round reads the same offsets again: a few records
  per commit);
- the reactor matching alone: the same with the index writes off (STREAMS_WORKER_INDEX=false),
  which is the job the floor does;
- the indexing floor (`IndexingFloor`): the floor also writing every event's index entries
  the fastest way, the job of the reactor as the worker runs it (`indexing_ratio`);
- the floor: the same 50 rules' matching done the fastest way by hand: the `event_type`
  header looked up in a dict of handlers, fastavro against writer schemas fetched once (no
  logical types), `data_json` parsed, and for these 50 rules plain dict checks written by
  hand (a dict from `service`, `region`, `feedback_type` and `rule` to the rule watching that
  value, the comparisons inline, sampling by the same sha256 point).

Both count their firings, and the run stops if they disagree. The floor writes nothing for a
firing, the reactor two encoded records per firing (few events match: see `fired`). Printed:
median events/s and CPU µs per event (thread time) for each, and each reactor's ratio to the
floor; and the reactor's whole-process CPU per event too (`reactor_process_cpu_us`: the
client's own threads compress and send the index entries, which the thread time leaves
out; the floor has no such threads). The figures before stop 48 (0.52-0.61) were the
matching alone: the index writes came into the reactor's step when the two branches merged,
and this bench did not say so.

    eval "$(deploy/stack.sh env)"
    .venv/bin/python -m bench.reactor_floor --events 20000 --rounds 6
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import statistics
import time
import uuid
import zlib
from collections.abc import Callable, Sequence
from typing import Any

import fastavro
from confluent_kafka import Message, TopicPartition
from confluent_kafka.admin import NewTopic
from rich.console import Console

from bench.rules50 import ACTIONS, RULES
from bench.writes import produce_envelope
from streams.adapters.avro.fast import without_logical_types
from streams.core.actors import UserActor
from streams.core.events import AppEvent, Envelope, FeedbackGiven, RunSucceeded
from streams.core.feedback import Feedback
from streams.core.rules import RuleSet
from streams.core.targets import RunTarget
from streams.core.tenancy import tenant_topics
from streams.core.view import index_partition, record_entries_encoded
from streams.runtime.client.workspace import StreamsClient
from streams.runtime.root import Runtime
from streams.runtime.worker.reactor import Reactor
from streams.settings import Settings

console = Console(stderr=True)

FEEDBACK_TYPES = 20  # type_0 .. type_19: the rules watch type_0 .. type_9
RUN_RULES = 20  # rule-0 .. rule-19: the rules watch rule-0 .. rule-4

for _i in range(FEEDBACK_TYPES):  # the feedback types the events carry
    type(Feedback)(f"BenchType{_i}", (Feedback,),
                   {"__annotations__": {"correct": bool}, "__module__": __name__},
                   name=f"type_{_i}", targets={"run"})


def _event(i: int, tenant: str) -> Envelope:
    actor = UserActor(id="bench")
    kind, j = i % 100, i // 100
    if kind == 0:
        event: Any = AppEvent(name="bench:other", data={"n": i})
    elif kind in (1, 2):
        event = FeedbackGiven(feedback_type=f"type_{j % FEEDBACK_TYPES}",
                              target=RunTarget(run_id=f"run_{i}"),
                              value={"correct": j % 4 != 0})
    elif kind in (3, 4):
        event = RunSucceeded(run_id=f"run_{i}", rule=f"rule-{j % RUN_RULES}", action="noop",
                             output={"ok": True})
    else:
        event = AppEvent(name="bench:event", data={
            "service": f"svc-{i % 40}", "errors": i % 1000, "region": f"r{i % 13}",
            "canary": i % 7 == 0})
    return Envelope.new(event, tenant=tenant, workspace="bench", actor=actor)


def produce(runtime: Runtime, tenant: str, n: int) -> None:
    topic = tenant_topics(tenant, runtime.settings.topic_prefix).events
    producer = runtime.producer_of_own(**{"linger.ms": 20})
    serde = runtime.serde
    for i in range(n):
        envelope = _event(i, tenant)
        produce_envelope(producer, serde, topic, envelope)
    producer.flush(60)


def consume(runtime: Runtime, tenant: str, n: int, batch: int) -> list[list[Message]]:
    """All n records, in the batches a batch loop would take them in."""
    topic = tenant_topics(tenant, runtime.settings.topic_prefix).events
    reader = runtime.reader(f"{runtime.settings.topic_prefix}-bench-read")
    metadata = reader.list_topics(topic, timeout=10).topics[topic]
    reader.assign([TopicPartition(topic, p, 0) for p in metadata.partitions])
    batches: list[list[Message]] = []
    got = 0
    deadline = time.monotonic() + 120
    while got < n and time.monotonic() < deadline:
        messages = [m for m in reader.consume(batch, 1.0) if m.error() is None]
        if messages:
            batches.append(messages)
            got += len(messages)
    reader.close()
    if got < n:
        raise SystemExit(f"read {got} of {n} records back")
    return batches


class Floor:
    """The 50 rules of bench/rules50.py matched by hand over fastavro records."""

    def __init__(self, runtime: Runtime) -> None:
        self.registry = runtime.registry
        self.schemas: dict[int, Any] = {}
        self.errors = {f"svc-{i}": 990 + i for i in range(20)}
        self.regions = {**{f"r{i}": i for i in range(10)}, **{f"q{i}": i for i in range(10)}}
        self.feedback = {f"type_{i}" for i in range(10)}
        self.runs = {f"rule-{i}" for i in range(5)}
        self.sampled = [f"bench:sampled-{i}".encode() + b"\n" for i in range(5)]
        self.handlers: dict[bytes, Callable[[dict[str, Any]], int]] = {
            b"bench:event": self.bench_event, b"bench:other": self.bench_other,
            b"feedback_given": self.feedback_given, b"run_succeeded": self.run_succeeded}

    def schema(self, schema_id: int) -> Any:
        parsed = self.schemas.get(schema_id)
        if parsed is None:
            raw = json.loads(self.registry.get_schema(schema_id).schema_str or "")
            parsed = self.schemas[schema_id] = fastavro.parse_schema(without_logical_types(raw))
        return parsed

    def record(self, raw: bytes) -> dict[str, Any]:
        """A framed record decoded (what the steps do inline)."""
        stream = io.BytesIO(raw)
        stream.seek(5)
        decoded: dict[str, Any] = fastavro.schemaless_reader(
            stream, self.schema(int.from_bytes(raw[1:5], "big")), None)
        return decoded

    def bench_event(self, record: dict[str, Any]) -> int:
        data = json.loads(record["data_json"])
        errors = data.get("errors")
        if type(errors) is not int:
            return 0
        fired = 0
        threshold = self.errors.get(data.get("service"))  # type: ignore[arg-type]
        if threshold is not None and errors > threshold:
            fired += 1
        if errors >= 999 and data.get("region") in self.regions \
                and data.get("canary") is not True:
            fired += 1
        return fired

    def bench_other(self, record: dict[str, Any]) -> int:
        event_id = record["envelope"]["event_id"].encode()
        return sum(int.from_bytes(hashlib.sha256(salt + event_id).digest()[:8], "big")
                   < 0.1 * 2**64 for salt in self.sampled)

    def feedback_given(self, record: dict[str, Any]) -> int:
        return int(record["feedback_type"] in self.feedback
                   and record["value"].get("correct") is False)

    def run_succeeded(self, record: dict[str, Any]) -> int:
        return int(record["rule"] in self.runs)

    def step(self, messages: Sequence[Message]) -> int:
        handlers, schema = self.handlers, self.schema
        fired = 0
        for msg in messages:
            event_type = None
            for key, value in msg.headers() or ():
                if key == "event_type":
                    event_type = value
                    break
            handler = handlers.get(event_type)  # type: ignore[arg-type]
            if handler is None:
                continue
            raw = msg.value() or b""
            stream = io.BytesIO(raw)
            stream.seek(5)
            record = fastavro.schemaless_reader(stream, schema(int.from_bytes(raw[1:5], "big")),
                                                None)
            fired += handler(record)  # type: ignore[arg-type]
        return fired


class IndexingFloor(Floor):
    """The floor, also writing every event's index entries the fastest way: each record
    decoded (an entry needs its envelope), the entries' JSON formatted by hand, produced with
    positional arguments to a producer that reports failures only (a chain's `last:` once
    per flush, for its newest event), flushed every 10 batches (the cursors, a few records
    per commit, left out). The job the reactor does as the worker runs it."""

    def __init__(self, runtime: Runtime, index_topic: str, partitions: int) -> None:
        super().__init__(runtime)
        self.topic = index_topic
        self.partitions = partitions
        self.failed = 0
        self.last: dict[str, bytes] = {}
        self.producer = runtime.producer_of_own(**{"delivery.report.only.error": True,
                                                   "on_delivery": self._failed})
        self.produce: Callable[..., None] = self.producer.produce

    def _failed(self, err: Any, _msg: Any) -> None:
        if err is not None:
            self.failed += 1

    def check(self, batches: list[list[Message]]) -> None:
        """Refuse to time a floor whose entries differ from the worker's: every entry it
        writes for `batches` must be the one `record_entries_encoded` makes, key for key."""
        written: list[tuple[bytes, bytes, int]] = []
        self.produce = lambda _t, value, key, partition: written.append(
            (key, value, partition))
        try:
            for batch in batches:
                self.step_indexed(batch)
            self.write_last()
        finally:
            self.produce = self.producer.produce
        want = []
        newest: dict[str, bytes] = {}  # a chain's `last:`: its newest event's, once
        for batch in batches:
            for msg in batch:
                record = self.record(msg.value() or b"")
                for k, v in record_entries_encoded(record, msg.partition() or 0,
                                                   msg.offset() or 0):
                    if k.startswith("last:"):
                        newest[k] = v
                    else:
                        want.append((k.encode(), v, index_partition(k, self.partitions)))
        want += [(k.encode(), v, index_partition(k, self.partitions)) for k, v in newest.items()]
        if sorted(written) != sorted(want):
            raise SystemExit("the indexing floor's entries are not the worker's")

    def run(self, batches: list[list[Message]]) -> int:
        fired = 0
        for number, batch in enumerate(batches, 1):
            fired += self.step_indexed(batch)
            if number % 10 == 0 or number == len(batches):
                self.write_last()
                self.producer.flush(30)
        if self.failed:
            raise SystemExit(f"the indexing floor's entries failed {self.failed} times")
        return fired

    def write_last(self) -> None:
        """The chains' `last:` entries kept since the last flush, one per chain (as the
        worker's index writer writes them at its checkpoint)."""
        crc32, spread = zlib.crc32, self.partitions - 1
        for key_text, value in self.last.items():
            key = key_text.encode()
            self.produce(self.topic, value, key, 1 + crc32(key) % spread)
        self.last.clear()

    def step_indexed(self, messages: Sequence[Message]) -> int:
        # The header scan and the decode are `step`'s, inline as there: a call per record
        # would be overhead of the floor's own.
        handlers, schema, produce = self.handlers, self.schema, self.produce
        quoted, crc32, topic, spread = _QUOTED, zlib.crc32, self.topic, self.partitions - 1
        last = self.last
        fired = 0
        for msg in messages:
            event_type = None
            for key, value in msg.headers() or ():
                if key == "event_type":
                    event_type = value
                    break
            raw = msg.value() or b""
            stream = io.BytesIO(raw)
            stream.seek(5)
            record = fastavro.schemaless_reader(stream, schema(int.from_bytes(raw[1:5], "big")),
                                                None)
            head = record["envelope"]
            event_id, chain = head["event_id"], head["correlation_id"]
            trace = head.get("trace")
            trace_id = quoted(trace["traceparent"][3:35]) if trace else "null"
            front = (f'{{"w":{quoted(head["workspace"])},"c":{quoted(chain)},'
                     f'"e":{quoted(event_id)},"t":{trace_id},')
            tail = f'"p":{msg.partition()},"o":{msg.offset()}}}'
            here = (front + '"r":null,"a":null,' + tail).encode()
            key = f"event:{event_id}".encode()
            produce(topic, here, key, 1 + crc32(key) % spread)
            if event_id == chain:
                key = f"chain:{event_id}".encode()
                produce(topic, here, key, 1 + crc32(key) % spread)
            else:
                last[f"last:{chain}"] = here
            if event_type == b"run_started":
                key = f"run:{record['run_id']}".encode()
                produce(topic, (front + f'"r":{quoted(record["rule"])},'
                                f'"a":{quoted(record["action"])},' + tail).encode(),
                        key, 1 + crc32(key) % spread)
            elif event_type == b"rule_fired":
                key = f"firing:{record['firing_id']}".encode()
                produce(topic, (front + f'"r":{quoted(record["rule"])},"a":null,'
                                + tail).encode(), key, 1 + crc32(key) % spread)
            handler = handlers.get(event_type)  # type: ignore[arg-type]
            if handler is not None:
                fired += handler(record)
        return fired


_QUOTED = json.encoder.encode_basestring_ascii


def timed(run: Callable[[], int]) -> tuple[float, float, float, int]:
    """Wall seconds, thread CPU seconds, process CPU seconds and the count `run` returns."""
    cpu, process, wall = time.thread_time(), time.process_time(), time.perf_counter()
    count = run()
    return (time.perf_counter() - wall, time.thread_time() - cpu,
            time.process_time() - process, count)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--logical", action="store_true",
                        help="the reactor reads records with logical types (datetimes)")
    args = parser.parse_args()
    settings = Settings.from_env(topic_prefix=f"bench{uuid.uuid4().hex[:6]}")
    runtime = Runtime(settings)
    tenant = "bench"
    runtime.admin.create_tenant(tenant)
    console.print(f"producing {args.events} events; {len(RULES)} rules")
    produce(runtime, tenant, args.events)
    batches = consume(runtime, tenant, args.events, settings.reactor_batch_size)
    def reactor_of(index: bool) -> Reactor:
        made = Reactor(Runtime(settings.replace(worker_index=index)), RuleSet(RULES), ACTIONS,
                       client=StreamsClient(runtime))
        if args.logical:
            made.records.logical = True
        return made

    indexing, matching = reactor_of(True), reactor_of(False)
    partitions = {(m.topic() or "", m.partition() or 0) for b in batches for m in b}
    floor = Floor(runtime)
    floor_index = f"{settings.topic_prefix}.floor.index"
    runtime.admin.client.create_topics(
        [NewTopic(floor_index, settings.index_partitions, 1)])[floor_index].result()
    indexing_floor = IndexingFloor(runtime, floor_index, settings.index_partitions)
    indexing_floor.check(batches)

    assigned = [TopicPartition(t, p) for t, p in sorted(partitions)]

    def run_reactor(reactor: Reactor) -> int:
        # Each round reads the same offsets again: as a fresh assignment, so its checkpoints
        # flush the round's entries and advance the cursors as the loop's would.
        reactor.assigned(None, assigned)
        outputs = 0
        for number, batch in enumerate(batches, 1):
            outputs += len(reactor.handle_batch(batch))
            if number % 10 == 0 or number == len(batches):  # the loop's commit_every
                reactor.before_commit(partitions)
        return outputs // 2  # two per firing

    def run_floor() -> int:
        return sum(floor.step(b) for b in batches)

    runs: dict[str, Callable[[], int]] = {
        "reactor": lambda: run_reactor(indexing), "matching": lambda: run_reactor(matching),
        "floor": run_floor, "indexing_floor": lambda: indexing_floor.run(batches)}
    for run in runs.values():  # warm: schemas fetched, caches filled
        run()
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
    process_cpu: list[float] = []
    fired: dict[str, int] = {}
    for r in range(args.rounds):
        order = list(runs.items())
        for name, run in order if r % 2 == 0 else order[::-1]:
            wall, cpu, process, count = timed(run)
            results[name].append((wall, cpu))
            if name == "reactor":
                process_cpu.append(process)
            fired[name] = count
        console.print("  round " + str(r + 1) + ": " + ", ".join(
            f"{name} {args.events / results[name][-1][0]:,.0f}/s" for name in runs))
    if len(set(fired.values())) != 1:
        raise SystemExit(f"firings {fired}: they do not do the same job")
    n = args.events
    rate = {k: n / statistics.median(w for w, _ in v) for k, v in results.items()}
    cpu = {k: 1e6 * statistics.median(c for _, c in v) / n for k, v in results.items()}
    print(f"events={n} rules={len(RULES)} rounds={args.rounds} fired={fired['floor']} "
          f"reactor={rate['reactor']:.0f}/s ({cpu['reactor']:.1f} us cpu/event) "
          f"reactor_process_cpu_us={1e6 * statistics.median(process_cpu) / n:.1f} "
          f"matching={rate['matching']:.0f}/s ({cpu['matching']:.1f} us cpu/event) "
          f"floor={rate['floor']:.0f}/s ({cpu['floor']:.1f} us cpu/event) "
          f"ratio={rate['reactor'] / rate['floor']:.3f} "
          f"cpu_ratio={cpu['floor'] / cpu['reactor']:.3f} "
          f"matching_ratio={rate['matching'] / rate['floor']:.3f} "
          f"matching_cpu_ratio={cpu['floor'] / cpu['matching']:.3f} "
          f"indexing_floor={rate['indexing_floor']:.0f}/s "
          f"({cpu['indexing_floor']:.1f} us cpu/event) "
          f"indexing_ratio={rate['reactor'] / rate['indexing_floor']:.3f} "
          f"indexing_cpu_ratio={cpu['indexing_floor'] / cpu['reactor']:.3f}")
    for reactor in (indexing, matching):
        reactor.close()
        reactor.runtime.close()
    runtime.close()


if __name__ == "__main__":
    main()
