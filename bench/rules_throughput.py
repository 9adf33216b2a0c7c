"""Rule matching throughput: one worker with 50 rules per tenant, against a plain loop.

Produces N application events to one tenant, runs a worker whose reactor applies the 50 rules
of `bench/rules50.py`, and times it from its first event to its last (its stats lines count
events). Its "plain loop" evaluates the same rules with `Rule.matches` over decoded pydantic
envelopes: slower than the reactor now, so no floor; bench/reactor_floor.py has the floor.

    eval "$(deploy/stack.sh env)"
    .venv/bin/python -m bench.rules_throughput --events 20000
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Producer
from rich.console import Console

from bench.rules50 import RULES
from bench.writes import produce_envelope
from streams.adapters.avro.codec import envelope_from_record
from streams.adapters.avro.serde import AvroSerde
from streams.adapters.kafka.admin import TenantAdmin
from streams.adapters.kafka.config import producer_config
from streams.core.actors import UserActor
from streams.core.events import AppEvent, Envelope
from streams.core.tenancy import tenant_topics
from streams.settings import Settings

console = Console(stderr=True)
REPO = Path(__file__).resolve().parent.parent


def produce(settings: Settings, serde: AvroSerde, tenant: str, n: int) -> list[bytes]:
    topic = tenant_topics(tenant, settings.topic_prefix).events
    producer = Producer(producer_config(settings, **{"linger.ms": 20}))
    values = []
    for i in range(n):
        envelope = Envelope.new(
            AppEvent(name="bench:event", data={"service": f"svc-{i % 40}", "errors": i % 1000,
                                               "region": f"r{i % 13}", "canary": i % 7 == 0}),
            tenant=tenant, workspace="bench", actor=UserActor(id="bench"))
        values.append(produce_envelope(producer, serde, topic, envelope))
    producer.flush(60)
    return values


def floor(serde: AvroSerde, topic: str, values: list[bytes]) -> float:
    envelopes = [envelope_from_record(serde.decode(v, topic)) for v in values]
    start = time.perf_counter()
    matched = 0
    for envelope in envelopes:
        for rule in RULES:
            if rule.matches(envelope):
                matched += 1
    elapsed = time.perf_counter() - start
    console.print(f"  floor matched {matched} (event, rule) pairs")
    return len(envelopes) / elapsed


def worker_rate(settings: Settings, n: int) -> tuple[float, float]:
    log_path = Path(tempfile.mkstemp(prefix="bench-rules-", suffix=".log")[1])
    env = settings.child_env()
    started = time.monotonic()
    with log_path.open("wb") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "streams", "worker", "--rules", "bench.rules50",
             "--stats-interval", "0.2", "--cursor", f"bench-{uuid.uuid4().hex[:6]}"],
            env=env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    first = last = None
    try:
        while time.monotonic() - started < 900:
            lines = [x for x in log_path.read_text(errors="replace").splitlines()
                     if '"rules"' in x]
            if lines:
                stats = json.loads(lines[-1][lines[-1].index("{"):])["rules"]
                now = time.monotonic()
                if stats["events"] and first is None:
                    first = now
                if stats["events"] >= n:
                    last = now
                    break
            if worker.poll() is not None:
                raise SystemExit(f"worker exited {worker.returncode}; see {log_path}")
            time.sleep(0.1)
    finally:
        worker.terminate()
        worker.wait(30)
    if first is None or last is None:
        raise SystemExit(f"worker did not finish; see {log_path}")
    if last <= first:
        raise SystemExit(f"the worker took all {n} events within one stats interval: give "
                         "more --events")
    return n / (last - first), first - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000)
    args = parser.parse_args()
    settings = Settings.from_env(topic_prefix=f"bench{uuid.uuid4().hex[:6]}")
    serde = AvroSerde(settings)
    TenantAdmin(settings).create_tenant("bench")
    topic = tenant_topics("bench", settings.topic_prefix).events
    console.print(f"producing {args.events} events; {len(RULES)} rules")
    values = produce(settings, serde, "bench", args.events)
    floor_rate = floor(serde, topic, values)
    console.print(f"  plain loop over decoded envelopes: {floor_rate:,.0f} events/s")
    rate, startup = worker_rate(settings, args.events)
    console.print(f"  worker: {rate:,.0f} events/s (start-up {startup:.1f}s)")
    print(f"events={args.events} rules={len(RULES)} worker_rate={rate:.0f}/s "
          f"floor_rate={floor_rate:.0f}/s ratio={rate / floor_rate:.3f}")


if __name__ == "__main__":
    main()
