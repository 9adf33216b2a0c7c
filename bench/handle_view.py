"""The workspace handle's costs on a big tenant, and its give_feedback throughput.

    eval "$(deploy/stack.sh env)"
    .venv/bin/python -m bench.handle_view --envelopes 1000000 --calls 20000
    .venv/bin/python -m bench.handle_view --envelopes 0 --calls 0 --unindexed 100000

1. Seeds a tenant with `--envelopes` envelopes (chains of three: an app event, its rule
   firing and its run), writing each event's index entries after its delivery report, as the
   handle does, then the index cursors.
2. In a fresh process (`probe`): the first give_feedback on a run in the middle of the log,
   timed from the client's construction, and the process's peak resident memory; feedback
   on a chain the process has not seen, the chain's events and its run record, with the
   records each read; then how soon a run appended by another client is found.
3. With `--unindexed N`: a tenant of N envelopes written before the index existed; the first
   process's first give_feedback builds the index (one catch-up over the log), the next
   process's reads none of the log.
4. `--calls` give_feedback calls from one process, `--concurrency` at a time, against a raw
   confluent-kafka produce of the same encoded records (produce all, one flush).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import subprocess
import sys
import time
import uuid
from typing import Any

from confluent_kafka import Consumer, Producer

from streams.adapters.kafka.admin import TenantAdmin
from streams.adapters.kafka.config import producer_config, reader_config
from streams.adapters.kafka.log import envelope_headers, watermarks
from streams.core.actors import AgentActor, UserActor
from streams.core.events import AppEvent, Envelope, FeedbackGiven, RuleFired, RunStarted
from streams.core.feedback import value_record
from streams.core.targets import ChainTarget, RunTarget
from streams.core.tenancy import tenant_topics
from streams.examples.ops import Resolution, TriageQuality
from streams.runtime.client.workspace import StreamsClient
from streams.runtime.root import Runtime
from streams.settings import Settings

TENANT = "bench"


def _chain(i: int) -> list[Envelope]:
    spike = Envelope.new(AppEvent(name="ops:error_spike", data={"service": f"svc{i % 50}"}),
                         tenant=TENANT, workspace="prod", actor=UserActor(id="app"))
    actor = AgentActor(id="rule:ops:error-spike")
    fired = Envelope.new(RuleFired(firing_id=f"fir_{i}", rule="ops:error-spike",
                                   matched=[spike.event_id]),
                         tenant=TENANT, workspace="prod", actor=actor,
                         correlation_id=spike.event_id, causation_id=spike.event_id)
    run = Envelope.new(RunStarted(run_id=f"run_{i}", rule="ops:error-spike", action="triage",
                                  firing_id=f"fir_{i}"),
                       tenant=TENANT, workspace="prod", actor=actor,
                       correlation_id=spike.event_id, causation_id=fired.event_id)
    return [spike, fired, run]


def seed(settings: Settings, envelopes: int, *, indexed: bool = True) -> dict[str, Any]:
    """Write the tenant's log and (unless not `indexed`: a tenant from before the index) its
    index; returns the probe's targets."""
    TenantAdmin(settings).create_tenant(TENANT, 3)
    client = StreamsClient(Runtime(settings))
    index = client.tenant_index(TENANT)
    index.open()
    producer = client.log.producer
    topic = tenant_topics(TENANT, settings.topic_prefix).events
    chains = envelopes // 3
    marks = {chains // 2: "run", chains // 3: "chain", (2 * chains) // 3: "other"}
    targets: dict[str, Any] = {}
    started = time.monotonic()
    for i in range(chains):
        chain = _chain(i)
        if i in marks:
            targets[marks[i]] = {"run": f"run_{i}", "chain": chain[0].event_id}
        for envelope in chain:
            value = client.serde.encode_envelope(envelope, topic)

            def landed(err: Any, msg: Any, envelope: Envelope = envelope) -> None:
                if err is None and indexed:
                    index.publish(envelope, msg.partition(), msg.offset())
            while True:
                try:
                    producer.produce(topic, value, envelope.correlation_id.encode(),
                                     headers=envelope_headers(envelope), on_delivery=landed)
                    break
                except BufferError:
                    producer.poll(0.1)
        producer.poll(0)
        if i and i % 50_000 == 0:
            print(f"  seeded {3 * i} envelopes, {time.monotonic() - started:.0f} s",
                  file=sys.stderr)
    assert producer.flush(120) == 0
    assert producer.flush(120) == 0  # the index entries the last reports produced
    reader = Consumer(reader_config(settings, f"bench-{uuid.uuid4().hex}"))
    ends = {p: high for p, (_low, high) in watermarks(reader, topic).items()}
    reader.close()
    if indexed:
        index.advance_cursors(ends)
    assert producer.flush(60) == 0
    targets["seconds"] = time.monotonic() - started
    targets["envelopes"] = sum(ends.values())
    client.close()
    return targets


async def probe_async(settings: Settings, targets: dict[str, Any]) -> dict[str, Any]:
    """What a fresh process pays for its first calls (run in its own process)."""
    out: dict[str, Any] = {}
    started = time.monotonic()
    client = StreamsClient(Runtime(settings))
    ada = client.workspace(TENANT, "prod", actor=UserActor(id="ada"))
    await ada.give_feedback(TriageQuality(correct=True, severity="low"),
                            on=RunTarget(run_id=targets["run"]["run"]))
    out["first_feedback_s"] = round(time.monotonic() - started, 3)
    out["first_feedback_peak_rss_mb"] = round(
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    index = client.tenant_index(TENANT)
    out["first_feedback_index_records_read"] = index.index_records_read
    out["first_feedback_event_records_read"] = index.event_records_read

    before = (index.index_records_read, index.event_records_read)
    t = time.monotonic()
    await ada.give_feedback(Resolution(resolved=True),
                            on=ChainTarget(correlation_id=targets["chain"]["chain"]))
    out["unseen_chain_feedback_s"] = round(time.monotonic() - t, 3)
    out["unseen_chain_index_records_read"] = index.index_records_read - before[0]
    out["unseen_chain_event_records_read"] = index.event_records_read - before[1]
    t = time.monotonic()
    events = await ada.chain_events(targets["other"]["chain"])
    out["chain_events_s"] = round(time.monotonic() - t, 3)
    out["chain_events_count"] = len(events)
    t = time.monotonic()
    record = await ada.run_record(targets["other"]["run"])
    out["run_record_s"] = round(time.monotonic() - t, 3)
    out["run_record_matched"] = len(record.matched)
    out["event_records_read_total"] = index.event_records_read
    out["catch_ups"] = index.catch_ups

    # A run appended by another client: how long until this process finds it.
    writer = StreamsClient(Runtime(settings)).workspace(TENANT, "prod")
    seen: list[float] = []
    for i in range(5):
        spike = await writer.append(AppEvent(name="ops:error_spike"))
        await writer.append(RunStarted(run_id=f"run_new_{i}", rule="r", action="a",
                                       firing_id=f"f_new_{i}"), correlation_id=spike.id)
        appended = time.monotonic()
        await ada.locate(RunTarget(run_id=f"run_new_{i}"))
        seen.append(time.monotonic() - appended)
    out["other_process_target_found_s_max"] = round(max(seen), 3)
    out["catch_ups_after_visibility"] = index.catch_ups
    out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    writer.client.close()
    client.close()
    return out


async def first_use(settings: Settings, targets: dict[str, Any]) -> dict[str, Any]:
    """A tenant without an index: the first look-up builds it (one catch-up over the log),
    and the next process reads none of the log."""
    out: dict[str, Any] = {}
    for name in ("first_process", "next_process"):
        started = time.monotonic()
        client = StreamsClient(Runtime(settings.replace(feedback_timeout=3600.0)))
        ada = client.workspace(TENANT, "prod", actor=UserActor(id="ada"))
        await ada.give_feedback(TriageQuality(correct=True, severity="low"),
                                on=RunTarget(run_id=targets["run"]["run"]))
        index = client.tenant_index(TENANT)
        out[name] = {"first_feedback_s": round(time.monotonic() - started, 2),
                     "event_records_read": index.event_records_read,
                     "catch_ups": index.catch_ups}
        client.close()
    return out


async def throughput(settings: Settings, calls: int, concurrency: int) -> dict[str, Any]:
    """give_feedback/s from one process against a raw produce of the same records."""
    tenant = "tput"
    TenantAdmin(settings).create_tenant(tenant, 3)
    client = StreamsClient(Runtime(settings))
    ws = client.workspace(tenant, "prod", actor=UserActor(id="ada"))
    spike = await ws.append(AppEvent(name="ops:error_spike"))
    await ws.append(RunStarted(run_id="run_1", rule="r", action="a", firing_id="f"),
                    correlation_id=spike.id)
    gate = asyncio.Semaphore(concurrency)

    async def one(i: int) -> Any:
        async with gate:
            return await ws.give_feedback(
                TriageQuality(correct=i % 2 == 0, severity="low", note=f"call {i}"),
                on=RunTarget(run_id="run_1"))

    await asyncio.gather(*[one(i) for i in range(200)])  # warm-up: schema, metadata, index
    started = time.monotonic()
    recorded = await asyncio.gather(*[one(i) for i in range(calls)])
    elapsed = time.monotonic() - started
    assert len({r.seq for r in recorded}) == calls
    rate = calls / elapsed

    topic = tenant_topics(tenant, settings.topic_prefix).events
    payloads = []
    for i in range(calls):
        envelope = Envelope.new(
            FeedbackGiven(feedback_type="triage_quality", target=RunTarget(run_id="run_1"),
                          value=value_record(TriageQuality(correct=True, severity="low",
                                                           note=f"call {i}"))),
            tenant=tenant, workspace="prod", actor=UserActor(id="ada"),
            correlation_id=spike.id, causation_id=spike.id)
        payloads.append((client.serde.encode_envelope(envelope, topic),
                         envelope.correlation_id.encode(), envelope_headers(envelope)))
    raw = Producer(producer_config(settings))
    raw.produce(topic, *payloads[0][:2], headers=payloads[0][2])  # warm-up: connection, pid
    assert raw.flush(30) == 0
    started = time.monotonic()
    for value, key, headers in payloads:
        while True:
            try:
                raw.produce(topic, value, key, headers=headers)
                break
            except BufferError:
                raw.poll(0.05)
    assert raw.flush(60) == 0
    raw_rate = calls / (time.monotonic() - started)
    client.close()
    return {"calls": calls, "concurrency": concurrency,
            "give_feedback_per_s": round(rate), "raw_produce_per_s": round(raw_rate),
            "ratio": round(rate / raw_rate, 3)}


def main() -> None:
    """Seed, probe in a fresh process, measure throughput; print the figures as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--envelopes", type=int, default=1_000_000)
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--unindexed", type=int, default=0,
                        help="also time building the index of a tenant of this many "
                             "envelopes written before the index existed")
    parser.add_argument("--probe", help=argparse.SUPPRESS)  # internal: prefix and targets
    args = parser.parse_args()
    if args.probe:
        given = json.loads(args.probe)
        settings = Settings.from_env(topic_prefix=given["prefix"])
        print(json.dumps(asyncio.run(probe_async(settings, given["targets"]))))
        return
    settings = Settings.from_env(topic_prefix=f"hv{uuid.uuid4().hex[:6]}")
    figures: dict[str, Any] = {"prefix": settings.topic_prefix}
    if args.envelopes:
        targets = seed(settings, args.envelopes)
        figures["seed"] = {"envelopes": targets["envelopes"],
                           "seconds": round(targets["seconds"], 1)}
        probe = subprocess.run(
            [sys.executable, "-m", "bench.handle_view", "--probe",
             json.dumps({"prefix": settings.topic_prefix, "targets": targets})],
            capture_output=True, text=True, check=True)
        figures["fresh_process"] = json.loads(probe.stdout.strip().splitlines()[-1])
    if args.unindexed:
        old = settings.replace(topic_prefix=f"hvu{uuid.uuid4().hex[:6]}")
        targets = seed(old, args.unindexed, indexed=False)
        figures["first_use_of_an_unindexed_tenant"] = {
            "envelopes": targets["envelopes"], **asyncio.run(first_use(old, targets))}
    if args.calls:
        figures["throughput"] = asyncio.run(throughput(settings, args.calls,
                                                       args.concurrency))
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
