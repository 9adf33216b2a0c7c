"""Stateful rules at scale: decide N rule records with 1 or 2 decider processes (CPU per
record), then restore the state in a fresh decider, with its local store (a restart) and
without one (another machine), and print how long the restore took.

The rules topic is filled directly, as the reactor would (records keyed `<rule>|host=<h>`,
headed by the rule, valued with pre-encoded app events), by a batched producer; its time is
printed too. Every decider is a child process (`--decide`) running the worker's
`RuleDecider` on a `BatchLoop`, until the group has committed every record.

    eval "$(deploy/stack.sh env)"
    .venv/bin/python -m bench.rules_restore --records 1000000 --workers 1,2

`--kind chains` decides a completion rule instead (`completes(quiet=60 s)`): every record a
distinct event, one second of event time after the one before, in chains of `--chain`
events each; a chain ends (is judged) once the partition's clock is 60 s past its last.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, Producer
from confluent_kafka.admin import AdminClient

from streams.adapters.kafka.config import admin_config, producer_config
from streams.core.actors import UserActor
from streams.core.app_events import app_event_type
from streams.core.events import AppEvent, Envelope
from streams.core.matching import Matcher, ReactorStats
from streams.core.rules import F, Rule, RuleSet, on, run
from streams.core.rules.snapshots import entity_key
from streams.core.tenancy import decider_group, tenant_topics
from streams.runtime.root import Runtime
from streams.runtime.worker.records import RuleRecords
from streams.settings import Settings

__all__ = ["main"]

REPO = Path(__file__).resolve().parent.parent
app_event_type("bench:hit")
CHAINS = [Rule(name="bench:chain", when=on("bench:hit").completes(quiet=timedelta(seconds=60)),
               then=run("noop"))]
RULES = [
    Rule(name="bench:limited", when=on("bench:hit").at_most(3, per=timedelta(days=3650))
         .scope(F.data.host), then=run("noop")),
    Rule(name="bench:count", when=on("bench:hit").count(4, within=timedelta(days=1))
         .scope(F.data.host), then=run("noop")),
]


def _chain_records(runtime: Runtime, tenant: str, records: int,
                   chain: int) -> list[tuple[bytes, bytes, list[tuple[str, str | bytes | None]]]]:
    """`records` distinct events, a second apart, in chains of `chain` (encoded first)."""
    events = tenant_topics(tenant, runtime.settings.topic_prefix).events
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    out: list[tuple[bytes, bytes, list[tuple[str, str | bytes | None]]]] = []
    rule = CHAINS[0]
    for i in range(records):
        envelope = Envelope.new(AppEvent(name="bench:hit", data={"i": i}), tenant=tenant,
                                workspace="bench", actor=UserActor(id="b"),
                                correlation_id=f"c{i // chain}", time=t0 + timedelta(seconds=i))
        out.append((entity_key(rule.name, rule.scope_key(envelope)).encode(),
                    runtime.serde.encode_envelope(envelope, events),
                    [("rule", rule.name.encode()), ("event_type", b"bench:hit")]))
    return out


def fill(settings: Settings, tenant: str, records: int, hosts: int, kind: str = "stateful",
         chain: int = 10) -> float:
    """Produce `records` rule records (two rules by `hosts` hosts, or chains of `chain`
    events); seconds taken (encoding the chains' distinct events not counted)."""
    runtime = Runtime(settings)
    topic = tenant_topics(tenant, settings.topic_prefix).rules
    events = tenant_topics(tenant, settings.topic_prefix).events
    pool: list[tuple[bytes, bytes, list[tuple[str, str | bytes | None]]]] = []
    if kind == "chains":
        pool = _chain_records(runtime, tenant, records, chain)
    for i in range(0 if pool else 2000):  # distinct events, reused: a count ignores an id
        host = f"h{i % hosts}"
        envelope = Envelope.new(AppEvent(name="bench:hit", data={"host": host, "i": i}),
                                tenant=tenant, workspace="bench", actor=UserActor(id="b"))
        value = runtime.serde.encode_envelope(envelope, events)
        for rule in RULES:
            pool.append((entity_key(rule.name, f"host={host}").encode(), value,
                         [("rule", rule.name.encode()), ("event_type", b"bench:hit")]))
    producer = Producer(producer_config(settings, **{
        "linger.ms": 50, "batch.size": 1_000_000, "compression.type": "lz4",
        "queue.buffering.max.messages": 1_000_000}))
    started = time.perf_counter()
    produce = producer.produce
    for n in range(records):
        key, value, headers = pool[n % len(pool)]
        while True:
            try:
                produce(topic, value, key, headers=headers)
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(600)
    runtime.close()
    return time.perf_counter() - started


def committed(settings: Settings, tenant: str) -> int:
    """Records the decider group has committed on the tenant's rules topic."""
    admin = AdminClient(admin_config(settings))
    group = decider_group(settings.topic_prefix)
    rules = tenant_topics(tenant, settings.topic_prefix).rules
    try:
        result = admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group)])[group].result()
    except Exception:
        return 0
    return sum(tp.offset for tp in result.topic_partitions if tp.topic == rules and tp.offset > 0)


def decide(settings: Settings, tenant: str, records: int, restore_only: bool,
           kind: str = "stateful") -> None:
    """A child: run a decider until the group committed `records` (or, `restore_only`, until
    its first assignment is restored); print a JSON line of what it measured."""
    runtime = Runtime(settings)
    from streams.runtime.worker.decider import RuleDecider

    stats = ReactorStats()
    matcher = Matcher(RuleSet(CHAINS if kind == "chains" else RULES), stats)
    records_of = RuleRecords(runtime.serde, settings.topic_prefix, stats, codec=runtime.codec)
    decider = RuleDecider(runtime, matcher, records_of)
    loop = decider.batch_loop()
    stop = threading.Event()
    thread = threading.Thread(target=loop.run, args=(stop,), daemon=True)
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    thread.start()
    if restore_only:
        loop.wait_assigned(300)
    else:
        while committed(settings, tenant) < records and thread.is_alive():
            time.sleep(0.5)
    took = time.perf_counter() - started
    stop.set()
    thread.join(60)
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({
        "seconds": took, "cpu": (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime),
        "records": loop.stats.records, "fired": stats.fired, "throttled": stats.throttled,
        "restore_seconds": decider.stats.restore_seconds,
        "restored_keys": decider.stats.restored_keys,
        "changelog_records_read": decider.stats.changelog_records_read}), flush=True)
    runtime.close()


def _child(settings: Settings, tenant: str, records: int, state: Path, *,
           restore_only: bool = False, kind: str = "stateful") -> subprocess.Popen[str]:
    env = settings.child_env(STREAMS_STATE_DIR=str(state))
    return subprocess.Popen(
        [sys.executable, "-m", "bench.rules_restore", "--decide", tenant, "--records",
         str(records), "--kind", kind, *(["--restore-only"] if restore_only else [])],
        env=env, stdout=subprocess.PIPE, text=True, cwd=str(REPO))


def _result(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, _ = proc.communicate(timeout=7200)
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if not lines:
        raise SystemExit(f"a decider printed nothing (exit {proc.returncode})")
    found: dict[str, Any] = json.loads(lines[-1])
    return found


def run_one(base: Settings, records: int, hosts: int, workers: int,
            partitions: int, kind: str = "stateful", chain: int = 10) -> None:
    """Fill a fresh tenant, decide it with `workers` processes, then time two restores."""
    settings = base.replace(topic_prefix=f"rb{uuid.uuid4().hex[:6]}")
    tenant = "bench"
    from streams.adapters.kafka.admin import TenantAdmin

    TenantAdmin(settings).create_tenant(tenant, partitions)
    filled = fill(settings, tenant, records, hosts, kind, chain)
    print(f"{records:,} rule records produced in {filled:.1f} s "
          f"({records / filled:,.0f}/s, batched producer)")
    root = Path(tempfile.mkdtemp(prefix="rules-restore-"))
    children = [_child(settings, tenant, records, root / f"w{i}", kind=kind)
                for i in range(workers)]
    results = [_result(c) for c in children]
    cpu = sum(r["cpu"] for r in results)
    wall = max(r["seconds"] for r in results)
    print(f"{workers} decider process(es): {records:,} records in {wall:.1f} s "
          f"({records / wall:,.0f}/s), CPU {cpu:.1f} s = {cpu / records * 1e6:.1f} us/record; "
          f"fired {sum(r['fired'] for r in results)}, "
          f"throttled {sum(r['throttled'] for r in results)}")
    for label, state in (("restart (its own store)", root / "w0"),
                         ("another machine (no store)", root / "fresh")):
        result = _result(_child(settings, tenant, records, state, restore_only=True,
                                kind=kind))
        print(f"restore, {label}: {result['restore_seconds']:.2f} s for "
              f"{result['restored_keys']} keys, {result['changelog_records_read']} changelog "
              f"records read, over {records:,} rule records of history")


def main() -> None:
    """Run the benchmark (or, with --decide, be one of its deciders)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--workers", default="1,2", help="comma-separated process counts")
    parser.add_argument("--decide", metavar="TENANT", help=argparse.SUPPRESS)
    parser.add_argument("--restore-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--kind", choices=["stateful", "chains"], default="stateful",
                        help="rate limit and count by host, or a completion rule's chains")
    parser.add_argument("--chain", type=int, default=10, help="events per chain (--kind chains)")
    args = parser.parse_args()
    settings = Settings.from_env()
    if args.decide:
        decide(settings, args.decide, args.records, args.restore_only, args.kind)
        return
    for workers in (int(w) for w in args.workers.split(",")):
        run_one(settings, args.records, args.hosts, workers, args.partitions, args.kind,
                args.chain)


if __name__ == "__main__":
    main()
