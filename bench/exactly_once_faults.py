"""Exactly once at the issue's scale: 100,000 feedback through 2 workers under 10 SIGKILLs and
3 SIGSTOP/SIGCONT cycles, with a DuckDB sink alongside, counted at the end.

One tenant (4 partitions); a producer thread writes N feedback_given events at `--rate` per
second while two `streams worker` processes (STREAMS_PROCESSING_GUARANTEE=exactly_once, the
default, with a 6 s session and 5 s transaction timeout so a fault costs seconds) mirror them
and a `streams sink duckdb` process writes the scores into a DuckDB file. As the feedback
flows, the workers take turns at the faults, spread evenly over the stream: a SIGKILL (the
worker restarted at once) or a SIGSTOP held `--pause` seconds (past the session and
transaction timeouts, so the other worker takes its partitions over and the broker aborts its
open transaction), then SIGCONT. With `--broker-restart` the run is on a stack of its own
(deploy/stack.sh on free ports, stopped at the end) and the broker is also stopped and started
again mid-stream.

After each fault the script waits for recovery: both workers holding partitions of the events
topic again and the mirror group's committed offset past where it stood at the fault (for a
pause: at SIGCONT; for the broker: when it is back) on every partition. It prints that time per
fault (for a pause also the takeover: SIGSTOP until the other worker commits on every
partition).

At the end a read_committed reader counts the scores topic: records = 3 x N and distinct ids =
records, each feedback event with its 3 names; the DuckDB file (read once the sink has handed
on every score and is stopped): rows = distinct ids = 3 x N, the same ids. Exits 1 when a
count is off.

    eval "$(deploy/stack.sh env)"
    .venv/bin/python -m bench.exactly_once_faults --feedback 100000
    .venv/bin/python -m bench.exactly_once_faults --feedback 100000 --broker-restart
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    ConsumerGroupTopicPartitions,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from rich.console import Console

from bench.mirror_throughput import RecordCount
from streams.adapters.avro.serde import AvroSerde
from streams.adapters.kafka.admin import TenantAdmin
from streams.adapters.kafka.config import admin_config, producer_config, reader_config
from streams.adapters.kafka.log import envelope_headers, watermarks
from streams.core.actors import UserActor
from streams.core.events import Envelope, FeedbackGiven
from streams.core.feedback import value_record
from streams.core.targets import RunTarget
from streams.core.tenancy import tenant_topics, worker_group
from streams.examples.ops import TriageQuality
from streams.runtime.worker.app import MIRROR_CURSOR
from streams.settings import Settings

__all__ = ["main"]

console = Console(stderr=True)
NAMES = {"triage_quality.correct", "triage_quality.severity", "triage_quality.note"}
EOS = {"STREAMS_PROCESSING_GUARANTEE": "exactly_once", "STREAMS_SESSION_TIMEOUT": "6",
       "STREAMS_HEARTBEAT_INTERVAL": "1", "STREAMS_TRANSACTION_TIMEOUT": "5"}
PARTITIONS = 4
REPO = Path(__file__).resolve().parent.parent


@dataclass
class Proc:
    """A child `python -m streams ...` process, restartable, its output in a log file."""

    args: list[str]
    env: dict[str, str]
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Proc:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "streams", *self.args],
                                         env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                         cwd=REPO)
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def stop(self) -> int | None:
        """SIGTERM (after a SIGCONT, in case it is paused), then SIGKILL if it lingers."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        return self.proc.returncode

    def last_stats(self, key: str) -> dict[str, Any]:
        """The latest JSON stats line starting with `key` ({} before the first)."""
        if not self.log.exists():
            return {}
        for line in reversed(self.log.read_text(errors="replace").splitlines()):
            if f'{{"{key}"' in line:
                return dict(json.loads(line[line.index("{"):]))
        return {}


@dataclass
class Feed:
    """A thread writing N feedback_given events at a steady rate; their event ids."""

    settings: Settings
    topic: str
    tenant: str
    n: int
    rate: float
    ids: list[str] = field(default_factory=list)
    error: BaseException | None = None
    stopped: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # reported by the main thread
            self.error = exc

    def _run(self) -> None:
        serde = AvroSerde(self.settings)
        producer = Producer(producer_config(self.settings, **{"linger.ms": 20}))
        actor = UserActor(id="bench")
        started = time.monotonic()
        for i in range(self.n):
            if self.stopped.is_set():
                break
            value = TriageQuality(correct=i % 2 == 0, severity=("low", "high", "critical")[i % 3],
                                  note=f"note {i}")
            envelope = Envelope.new(
                FeedbackGiven(feedback_type="triage_quality",
                              target=RunTarget(run_id=f"run_{i}"), value=value_record(value)),
                tenant=self.tenant, workspace="bench", actor=actor,
                correlation_id=f"chain_{i % 997}")
            payload = serde.encode_envelope(envelope, self.topic)
            while True:
                try:
                    producer.produce(self.topic, payload, key=envelope.correlation_id.encode(),
                                     headers=envelope_headers(envelope))
                    break
                except BufferError:
                    producer.poll(0.1)
            self.ids.append(envelope.event_id)
            producer.poll(0)
            ahead = (i + 1) / self.rate - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)
        # Waits out a broker restart: librdkafka retries until message.timeout.ms (300 s).
        left = producer.flush(600)
        if left:
            raise RuntimeError(f"{left} feedback events were never acknowledged")


class Watch:
    """The mirror group's members and committed offsets, and the scores' record count."""

    def __init__(self, settings: Settings, events: str, scores: str) -> None:
        self.admin = AdminClient(admin_config(settings))
        self.group = worker_group(MIRROR_CURSOR, settings.topic_prefix)
        self.events = events
        self.count = RecordCount(settings, scores)
        self.ends = Consumer(reader_config(settings, f"bench-ends-{uuid.uuid4().hex}"))

    def end_offsets(self) -> dict[int, int]:
        """The events topic's end offsets (its producer is not transactional: the last
        record's offset + 1)."""
        return {p: self.ends.get_watermark_offsets(TopicPartition(self.events, p),
                                                   timeout=10, cached=False)[1]
                for p in range(PARTITIONS)}

    def holders(self) -> frozenset[str] | None:
        """The member ids of the mirror group holding partitions of the events topic (None
        when the broker does not answer)."""
        try:
            described = self.admin.describe_consumer_groups(
                [self.group], request_timeout=5)[self.group].result()
        except Exception:
            return None
        return frozenset(m.member_id for m in described.members
                         if any(tp.topic == self.events for tp in m.assignment.topic_partitions))

    def committed(self) -> dict[int, int]:
        """The group's committed offset on each events partition ({} when unknown)."""
        try:
            request = ConsumerGroupTopicPartitions(
                self.group, [TopicPartition(self.events, p) for p in range(PARTITIONS)])
            answer = self.admin.list_consumer_group_offsets(
                [request], request_timeout=5)[self.group].result()
        except Exception:
            return {}
        return {tp.partition: tp.offset for tp in answer.topic_partitions}


def wait_for(check: Callable[[], Any], timeout: float, what: str, every: float = 0.25) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


def advanced(watch: Watch, since: dict[int, int]) -> bool:
    """Every partition's committed offset past `since` (or one that was never committed now
    committed), or at the partition's end."""
    now = watch.committed()
    if len(now) < PARTITIONS:
        return False
    behind = [p for p in range(PARTITIONS) if now[p] <= since.get(p, -1)]
    if not behind:
        return True
    # Near the end of the stream a partition may have nothing left to do: at its end counts.
    try:
        ends = watch.end_offsets()
    except Exception:
        return False
    return all(now[p] >= ends[p] for p in behind)


def recovery(watch: Watch, before: frozenset[str] | None, timeout: float, what: str) -> float:
    """Wait until two members hold the events topic's partitions, a membership other than
    `before` (a restarted or rejoined member; any two when `before` is None), and then every
    partition's committed offset moved past where it stood then: seconds from the call."""
    at = time.monotonic()

    def regrouped() -> frozenset[str] | None:
        members = watch.holders()
        return members if members is not None and len(members) == 2 and (
            before is None or members != before) else None

    wait_for(regrouped, timeout, f"two members after {what}")
    since = wait_for(watch.committed, timeout, f"the committed offsets after {what}")
    wait_for(lambda: advanced(watch, since), timeout, f"progress on every partition after {what}")
    return time.monotonic() - at


def count_scores(settings: Settings, topic: str, want: int) -> tuple[int, Counter[str],
                                                                     dict[str, set[str]]]:
    """Read the whole scores topic read_committed: records, their ids, names per feedback."""
    serde = AvroSerde(settings)
    consumer = Consumer(reader_config(settings, f"bench-count-{uuid.uuid4().hex}"))
    partitions = watermarks(consumer, topic)
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    ids: Counter[str] = Counter()
    names: dict[str, set[str]] = defaultdict(set)
    records = 0
    last_new = time.monotonic()
    try:
        # Until every score arrived and 10 s pass with nothing new (repeats would follow).
        while records < want or time.monotonic() - last_new < 10.0:
            batch = consumer.consume(5000, 0.5)
            for msg in batch:
                if msg.error() is not None:
                    continue
                record = serde.decode(msg.value(), msg.topic())
                ids[record["id"]] += 1
                names[record["source"]["feedback_event_id"]].add(record["name"])
                records += 1
                last_new = time.monotonic()
            if time.monotonic() - last_new > 300:
                break
    finally:
        consumer.close()
    return records, ids, names


@contextlib.contextmanager
def stack_for(broker_restart: bool) -> Iterator[tuple[Settings, Callable[[], None] | None]]:
    """The environment's stack, or with `broker_restart` one of this run's own, and how to
    restart its broker."""
    prefix = f"eosf{uuid.uuid4().hex[:6]}"
    if not broker_restart:
        yield Settings.from_env(topic_prefix=prefix, partitions=PARTITIONS), None
        return
    from tests.stacks import own_stack_in

    with tempfile.TemporaryDirectory(prefix="eosf-stack-") as tmp, \
            own_stack_in(Path(tmp) / "data", start=True) as stack:
        settings = Settings.from_env(topic_prefix=prefix, partitions=PARTITIONS,
                                     bootstrap_servers=stack.bootstrap,
                                     schema_registry_url=stack.registry_url)

        def restart() -> None:
            stack.must("stop-kafka")
            time.sleep(10.0)
            stack.must("start-kafka")

        yield settings, restart


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--feedback", type=int, default=100_000)
    parser.add_argument("--rate", type=float, default=400.0, help="feedback per second")
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--pauses", type=int, default=3)
    parser.add_argument("--pause", type=float, default=15.0, help="seconds a pause lasts")
    parser.add_argument("--batch", type=int, default=200, help="the workers' --batch-size")
    parser.add_argument("--broker-restart", action="store_true",
                        help="on a stack of its own, also restart the broker mid-stream")
    args = parser.parse_args()
    with stack_for(args.broker_restart) as (settings, restart):
        ok = run(settings, args, restart)
    raise SystemExit(0 if ok else 1)


def schedule(kills: int, pauses: int, broker: bool) -> list[str]:
    """The faults in order: pauses spread among the kills, the broker restart mid-way."""
    total = kills + pauses
    at = {round((j + 1) * total / (pauses + 1)) - 1 for j in range(pauses)}
    faults = ["pause" if i in at else "kill" for i in range(total)]
    if broker:
        faults.insert(len(faults) // 2, "broker")
    return faults


def run(settings: Settings, args: argparse.Namespace,
        restart: Callable[[], None] | None) -> bool:
    tenant = "bench"
    TenantAdmin(settings).create_tenant(tenant, PARTITIONS)
    topics = tenant_topics(tenant, settings.topic_prefix)
    tmp = Path(tempfile.mkdtemp(prefix="eosf-"))
    warehouse = tmp / "warehouse.duckdb"
    console.print(f"prefix {settings.topic_prefix}, logs and the DuckDB file in {tmp}")
    worker_args = ["worker", "--types", "streams.examples.ops", "--batch-size",
                   str(args.batch), "--stats-interval", "0.5"]
    # No health ports: three processes here, and other jobs on the machine, would share one.
    quiet = {"STREAMS_HEALTH_PORT": "0"}
    workers = [Proc(worker_args, settings.child_env(None, **EOS, **quiet),
                    tmp / f"worker{i}.log").start() for i in range(2)]
    sink = Proc(["sink", "duckdb", "--path", str(warehouse), "--cursor", "warehouse",
                 "--stats-interval", "1"], settings.child_env(None, **quiet),
                tmp / "sink.log").start()
    watch = Watch(settings, topics.events, topics.scores)
    feed = Feed(settings, topics.events, tenant, args.feedback, args.rate)
    faults = schedule(args.kills, args.pauses, restart is not None)
    lines: list[str] = []
    try:
        wait_for(lambda: len(watch.holders() or ()) == 2, 180, "both workers to join")
        started = time.monotonic()
        thread = threading.Thread(target=feed.run, daemon=True)
        thread.start()
        for k, fault in enumerate(faults):
            due = (k + 1) * args.feedback // (len(faults) + 1)
            wait_for(lambda: len(feed.ids) >= due or not thread.is_alive(),  # noqa: B023
                     1800, "the feed")
            if feed.error is not None:
                raise feed.error
            doomed = workers[k % 2]
            line = inject(fault, doomed, workers, watch, args.pause, restart)
            lines.append(f"fault {k + 1:2d} {line}")
            console.print(f"  [{time.monotonic() - started:6.1f} s] {lines[-1]} "
                          f"(given {len(feed.ids)}, scores {watch.count.now()})")
        thread.join()
        if feed.error is not None:
            raise feed.error
        given_s = time.monotonic() - started
        want = args.feedback * len(NAMES)
        wait_for(lambda: watch.count.now() >= want, 900, f"{want} committed scores")
        scored_s = time.monotonic() - started
        alive = [w.alive() for w in workers]
        records, ids, names = count_scores(settings, topics.scores, want)
        wait_for(lambda: sink.last_stats("sink_stats").get("sink_stats", {}).get(
            "scores", 0) >= want
                 or not sink.alive(), 600, "the DuckDB sink to hand on every score")
        time.sleep(3.0)  # anything past the goal (a repeat) would arrive by now
        sink_exit = sink.stop()
        with duckdb.connect(str(warehouse), read_only=True) as con:
            rows, distinct = con.execute(
                "select count(*), count(distinct id) from scores").fetchone() or (0, 0)
            file_ids = {i for (i,) in con.execute("select id from scores").fetchall()}
    finally:
        feed.stopped.set()  # a failed run stops the feed
        for proc in (*workers, sink):
            proc.stop()
        watch.count.close()
        watch.ends.close()
    given = set(feed.ids)
    complete = sum(1 for fid in given if names.get(fid) == NAMES)
    checks = {
        "score records = 3 x feedback": records == want,
        "distinct ids = records": len(ids) == records,
        "every feedback has its 3 scores, nothing else scored": complete == len(given) == len(
            names),
        "DuckDB rows = distinct ids = 3 x feedback": rows == distinct == want,
        "DuckDB ids = the topic's ids": file_ids == set(ids),
        "workers never exited": all(alive),
        "sink exited 0": sink_exit == 0,
    }
    repeats = sum(c - 1 for c in ids.values())
    print(f"feedback={args.feedback} workers=2 partitions={PARTITIONS} "
          f"faults={len(faults)} ({faults.count('kill')} SIGKILL, {faults.count('pause')} "
          f"SIGSTOP {args.pause:.0f} s/SIGCONT{', 1 broker restart' if restart else ''}) "
          f"rate={args.rate:.0f}/s")
    for line in lines:
        print(f"  {line}")
    print(f"scores topic (read_committed): records={records} distinct_ids={len(ids)} "
          f"repeats={repeats} lost={want - len(ids)} feedback_complete={complete}/{len(given)}")
    print(f"duckdb: rows={rows} distinct_ids={distinct} same_ids={file_ids == set(ids)}")
    print(f"duration: feed {given_s:.0f} s, last score committed {scored_s:.0f} s; workers "
          f"alive at the end {alive}; sink exit {sink_exit}")
    for name, passed in checks.items():
        print(f"  {'ok  ' if passed else 'FAIL'} {name}")
    return all(checks.values())


def inject(fault: str, doomed: Proc, workers: list[Proc], watch: Watch, pause: float,
           restart: Callable[[], None] | None) -> str:
    """One fault and the wait for recovery; a line of what it cost."""
    # The doomed worker is working: it has written scores since its (re)start.
    wait_for(lambda: doomed.last_stats("stats").get("loop", {}).get("outputs", 0) > 0,
             120, "the worker to be scoring")
    which = workers.index(doomed)
    if fault == "kill":
        before = watch.holders()
        at = time.monotonic()
        doomed.signal(signal.SIGKILL)
        assert doomed.proc is not None
        doomed.proc.wait(30)
        doomed.start()
        took = recovery(watch, before, 300, "a SIGKILL")
        return (f"SIGKILL worker {which}, restarted: recovered in "
                f"{time.monotonic() - at:.1f} s ({took:.1f} s after the restart)")
    if fault == "pause":
        since = watch.committed()
        at = time.monotonic()
        doomed.signal(signal.SIGSTOP)
        try:
            # The other worker takes the paused one's partitions and commits on every one.
            wait_for(lambda: len(watch.holders() or ()) == 1 and advanced(watch, since),
                     max(pause, 60), "the other worker to take over")
            takeover = time.monotonic() - at
            time.sleep(max(0.0, pause - takeover))
        finally:
            doomed.signal(signal.SIGCONT)
        resumed = time.monotonic()
        took = recovery(watch, watch.holders(), 300, "SIGCONT")
        return (f"SIGSTOP worker {which} {resumed - at:.0f} s, SIGCONT: takeover "
                f"{takeover:.1f} s, both working again {took:.1f} s after SIGCONT")
    assert fault == "broker" and restart is not None
    at = time.monotonic()
    restart()
    back = time.monotonic()
    took = recovery(watch, None, 300, "the broker restart")
    return (f"broker stopped and started ({back - at:.0f} s): both working again "
            f"{took:.1f} s after it was back")

if __name__ == "__main__":
    main()
