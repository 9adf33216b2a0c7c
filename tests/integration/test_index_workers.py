"""Who writes the index, on the real broker: workers (every event their rules loop reads, and
the cursors), `streams index build` (resumable after SIGKILL, idempotent), and a look-up's
bound on catching up."""

import asyncio
import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from streams.adapters.kafka.config import producer_config, reader_config
from streams.adapters.kafka.log import decode_envelopes, envelope_headers, watermarks
from streams.core.actors import AgentActor, UserActor
from streams.core.errors import IndexBehind
from streams.core.events import (
    AppEvent,
    Envelope,
    FeedbackGiven,
    RuleFired,
    RunStarted,
    RunSucceeded,
)
from streams.core.targets import RunTarget
from streams.core.tenancy import index_topic, tenant_topics
from streams.core.view import IndexEntry, index_entries, merge_entry
from streams.examples.ops import TriageQuality
from streams.runtime.client.workspace import StreamsClient
from streams.settings import Settings
from tests.conftest import REPO, wait_until
from tests.integration.test_rules_reactor import RULES, TYPES, wait_log


def _indexed_to_the_end(client: StreamsClient, tenant: str) -> bool:
    cursors, ends = client.tenant_index(tenant).behind()
    return all(cursors.get(p, 0) >= end for p, end in ends.items())


async def test_runs_a_worker_wrote_are_found_without_a_catch_up(
    settings: Settings, tenant_factory: Callable[..., str],
    client_factory: Callable[..., Any], worker_factory: Callable[..., Any],
    tmp_path: Path,
) -> None:
    tenant = tenant_factory()
    worker_factory("--rules", RULES, types=TYPES)
    writer = client_factory().workspace(tenant, "prod", actor=UserActor(id="app"))
    await writer.append(AppEvent(name="t:flaky"))  # a stateless rule: the reactor fires
    for _ in range(3):  # a counting rule: the decider fires
        await writer.append(AppEvent(name="t:tick", data={"host": "a"}))

    def runs_done(envelopes: list[Envelope]) -> bool:
        done = {e.event.rule for e in envelopes if isinstance(e.event, RunSucceeded)}
        return {"t:flaky", "t:count"} <= done

    log = await wait_log(writer, runs_done, 90, "the flaky and count runs to succeed")
    runs = {e.event.rule: e.event.run_id for e in log if isinstance(e.event, RunStarted)}
    # The worker indexes what its loop reads and moves the cursors to the log's end.
    watcher = client_factory()
    wait_until(lambda: _indexed_to_the_end(watcher, tenant), 60,
               "the worker's cursors to reach the end of the events topic")

    fresh = client_factory(state_dir=str(tmp_path / "fresh"))
    ada = fresh.workspace(tenant, "prod", actor=UserActor(id="ada"))
    for rule in ("t:flaky", "t:count"):
        await ada.give_feedback(TriageQuality(correct=True, severity="low"),
                                on=RunTarget(run_id=runs[rule]))
    index = fresh.tenant_index(tenant)
    # Found in the entries the worker wrote: no catch-up, not one event read.
    assert index.catch_ups == 0
    assert index.event_records_read == 0
    record = await ada.run_record(runs["t:flaky"])
    assert "RunSucceeded" in [type(e.event).__name__ for e in record.emitted]
    assert index.catch_ups == 0
    # A chain's read spans its head to its newest indexed event (the `last:` entry the
    # worker writes at a checkpoint, not per event), then the unindexed tail: all of it.
    flaky = next(e.correlation_id for e in log
                 if isinstance(e.event, RunStarted) and e.event.rule == "t:flaky")
    chain = await ada.chain_events(flaky)
    indexed = [e.event_id for e in log if e.correlation_id == flaky]
    assert len(indexed) >= 4  # the app event, its firing, the run's start and success
    assert [e.event_id for e in chain][:len(indexed)] == indexed
    assert any(isinstance(e.event, FeedbackGiven) for e in chain[len(indexed):])
    assert index.catch_ups == 0


def _seed(settings: Settings, client: StreamsClient, tenant: str, chains: int) -> str:
    """Chains of an app event, a firing and a run, written without index entries."""
    producer = Producer(producer_config(settings))
    topic = tenant_topics(tenant, settings.topic_prefix).events
    actor = AgentActor(id="rule:r")
    middle = ""
    for i in range(chains):
        spike = Envelope.new(AppEvent(name="ops:error_spike", data={"i": i}), tenant=tenant,
                             workspace="prod", actor=UserActor(id="app"))
        fired = spike.follow(RuleFired(firing_id=f"fir_{i}", rule="r", matched=[spike.event_id]),
                             actor=actor)
        started = fired.follow(RunStarted(run_id=f"run_{i}", rule="r", action="a",
                                          firing_id=f"fir_{i}"), actor=actor)
        for envelope in (spike, fired, started):
            while True:
                try:
                    producer.produce(topic, client.serde.encode_envelope(envelope, topic),
                                     envelope.correlation_id.encode(),
                                     headers=envelope_headers(envelope))
                    break
                except BufferError:
                    producer.poll(0.05)
        if i == chains // 2:
            middle = f"run_{i}"
    assert producer.flush(60) == 0
    return middle


def _read_all(settings: Settings, topic: str) -> dict[str, bytes]:
    """Every key of a topic as a reader folds it (a run's first place kept)."""
    consumer = Consumer(reader_config(settings, f"{settings.topic_prefix}-check"))
    ends = {p: high for p, (_low, high) in watermarks(consumer, topic).items()}
    out: dict[str, bytes] = {}
    for p, end in ends.items():
        if not end:
            continue
        consumer.assign([TopicPartition(topic, p, 0)])
        at = 0
        while at < end:
            for msg in consumer.consume(1000, 1.0):
                at = (msg.offset() or 0) + 1
                key = (msg.key() or b"").decode()
                if key.startswith("run:") and key in out:
                    continue
                out[key] = msg.value() or b""
        consumer.unassign()
    consumer.close()
    return out


def _expected(settings: Settings, client: StreamsClient, tenant: str) -> dict[str, IndexEntry]:
    """The index the pydantic path makes of the events topic, read back with offsets."""
    topic = tenant_topics(tenant, settings.topic_prefix).events
    consumer = Consumer(reader_config(settings, f"{settings.topic_prefix}-expect"))
    ends = {p: high for p, (_low, high) in watermarks(consumer, topic).items()}
    out: dict[str, IndexEntry] = {}
    consumer.assign([TopicPartition(topic, p, 0) for p in ends])
    messages: list[Any] = []
    while len(messages) < sum(ends.values()):
        messages += consumer.consume(1000, 1.0)
    consumer.close()
    envelopes = list(decode_envelopes(client.serde, iter(messages), on_error=None))
    assert len(envelopes) == len(messages)
    for envelope, msg in zip(envelopes, messages, strict=True):
        for key, entry in index_entries(envelope, msg.partition() or 0, msg.offset() or 0):
            out[key] = merge_entry(key, out.get(key), entry)
    return out


def _build(settings: Settings, tenant: str, *extra: str) -> subprocess.Popen[str]:
    env = settings.child_env()
    return subprocess.Popen([sys.executable, "-m", "streams", "index", "build", "--tenant",
                             tenant, *extra], env=env, cwd=str(REPO), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_index_build_resumes_after_sigkill_and_changes_nothing_when_run_again(
    settings: Settings, tenant_factory: Callable[..., str],
    client_factory: Callable[..., Any],
) -> None:
    tenant = tenant_factory()
    client = client_factory()
    middle = _seed(settings, client, tenant, 20_000)
    index = client.tenant_index(tenant)
    index.open()
    topic = index_topic(tenant, settings.topic_prefix)
    probe = Consumer(reader_config(settings, f"{settings.topic_prefix}-probe"))

    def cursors_written() -> int:
        _low, high = probe.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        return int(high)

    first = _build(settings, tenant, "--step", "1000")
    wait_until(lambda: cursors_written() > 0 or first.poll() is not None, 120,
               "the build's first cursor step", every=0.02)
    first.send_signal(signal.SIGKILL)
    first.wait(30)
    assert first.returncode == -signal.SIGKILL, "the build finished before it was killed"
    cursors, ends = index.behind()
    assert 0 < sum(cursors.values()) < sum(ends.values())  # killed midway, a step kept

    second = _build(settings, tenant)
    out, err = second.communicate(timeout=300)
    assert second.returncode == 0, err
    resumed = json.loads(out.strip().splitlines()[-1])
    # It read only what the killed build had not stepped past.
    assert resumed["events"] == sum(ends.values()) - sum(cursors.values())
    cursors, ends = index.behind()
    assert cursors == ends

    written = _read_all(settings, topic)
    expected = _expected(settings, client, tenant)
    assert {k for k in written if not k.startswith("cursor:")} == set(expected)
    assert all(IndexEntry.decode(written[k]) == e for k, e in expected.items())

    highs = {p: probe.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
             for p in range(index.partitions)}
    third = _build(settings, tenant)
    out, err = third.communicate(timeout=120)
    assert third.returncode == 0, err
    assert json.loads(out.strip().splitlines()[-1])["events"] == 0
    time.sleep(0.5)
    assert {p: probe.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(index.partitions)} == highs  # nothing written
    probe.close()

    # And a look-up on it from a fresh process needs no catch-up.
    fresh = client_factory()
    ws = fresh.workspace(tenant, "prod", actor=UserActor(id="ada"))
    asyncio.run(ws.give_feedback(TriageQuality(correct=True, severity="low"),
                                 on=RunTarget(run_id=middle)))
    assert fresh.tenant_index(tenant).catch_ups == 0


def test_unknown_tenant_is_not_found(settings: Settings) -> None:
    done = _build(settings, "no-such-tenant")
    _out, err = done.communicate(timeout=60)
    assert done.returncode == 5
    assert "no tenant 'no-such-tenant'" in err and len(err.strip().splitlines()) == 1


async def test_a_look_up_too_far_behind_says_to_build_the_index(
    settings: Settings, tenant_factory: Callable[..., str],
    client_factory: Callable[..., Any],
) -> None:
    tenant = tenant_factory()
    seeder = client_factory()
    middle = _seed(settings, seeder, tenant, 100)
    client = client_factory(index_catch_up_limit=50)
    ws = client.workspace(tenant, "prod", actor=UserActor(id="ada"))
    with pytest.raises(IndexBehind, match=f"run `streams index build --tenant {tenant}`"):
        await ws.give_feedback(TriageQuality(correct=True, severity="low"),
                               on=RunTarget(run_id=middle))
    assert client.tenant_index(tenant).event_records_read == 0
