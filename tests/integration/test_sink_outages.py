"""Outages are waits, not failures: a `streams sink langfuse` process on a stack of this
module's own (free loopback ports, its own data dir), whose broker and registry the tests stop
and start again with deploy/stack.sh. The process must not exit, and every score must arrive
in the Langfuse stand-in exactly once by (id, name, date).

The stack is stopped by the script at the end (and whatever is still alive of it is killed by
the pid in its pid file); the stand-in and the sink process are stopped even when a test fails.
"""

from __future__ import annotations

import copy
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient

from standins.langfuse_standin import LangfuseStandIn
from streams.adapters.avro.codec import score_to_record
from streams.adapters.avro.fast import FastCodec
from streams.adapters.avro.schemas import score_schema
from streams.adapters.kafka.admin import TenantAdmin
from streams.core.scores import Score
from streams.core.tenancy import tenant_topics
from streams.settings import Settings
from tests.conftest import unique, wait_until
from tests.integration.conftest import SinkProcess
from tests.integration.test_sinks import committed, keys, make_scores
from tests.stacks import OwnStack, own_stack_in

pytestmark = [pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def own_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OwnStack]:
    with own_stack_in(tmp_path_factory.mktemp("sink-stack") / "data", start=True) as stack:
        yield stack


@pytest.fixture
def own_settings(own_stack: OwnStack) -> Settings:
    return Settings(bootstrap_servers=own_stack.bootstrap,
                    schema_registry_url=own_stack.registry_url, topic_prefix=unique("o"),
                    partitions=3, discovery_interval=0.5, sink_max_backoff=1.0)


@pytest.fixture
def standin() -> Iterator[LangfuseStandIn]:
    server = LangfuseStandIn().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def sink_process(own_settings: Settings, standin: LangfuseStandIn,
                 tmp_path: Path) -> Iterator[SinkProcess]:
    proc = SinkProcess(own_settings, standin, tmp_path / "sink.log", "--cursor", "lf",
                       "--no-sync-configs", "--batch-size", "30")
    try:
        yield proc
    finally:
        proc.stop()


def _produce(settings: Settings, tenant: str, values: list[tuple[Score, bytes]]) -> None:
    topic = tenant_topics(tenant, settings.topic_prefix).scores
    producer = Producer({"bootstrap.servers": settings.bootstrap_servers, "linger.ms": 10})
    for score, value in values:
        producer.produce(topic, value, key=score.source.feedback_event_id.encode())
    assert producer.flush(60) == 0


def _encoded(codec: FastCodec, schema: dict[str, Any], scores: list[Score],
             **extra: Any) -> list[tuple[Score, bytes]]:
    # One subject for every test here (which tenant's it is does not matter to the sink).
    writer = codec.registered(schema, "fs.sink-outages.scores")
    out = []
    for score in scores:
        record = score_to_record(score)
        record["timestamp"] = int(record["timestamp"].timestamp() * 1000)
        out.append((score, codec.encode(writer, {**record, **extra})))
    return out


def _records_on(settings: Settings, topic: str) -> int:
    """How many records a topic holds (end offsets; no decoding, so no registry needed)."""
    consumer = Consumer({"bootstrap.servers": settings.bootstrap_servers,
                         "group.id": unique("count-")})
    try:
        total = 0
        for partition in range(settings.partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                                       timeout=30)
            total += high - low
        return total
    finally:
        consumer.close()


def _final_stats(log: Path) -> dict[str, Any]:
    for line in reversed(log.read_text(errors="replace").splitlines()):
        if line.startswith('{"sink_stats"'):
            return dict(json.loads(line)["sink_stats"])
    raise AssertionError(f"the sink printed no stats:\n{log.read_text(errors='replace')[-3000:]}")


def test_a_broker_stopped_and_started_again_is_waited_out(
    own_stack: OwnStack, own_settings: Settings, standin: LangfuseStandIn,
    sink_process: SinkProcess,
) -> None:
    settings = own_settings
    tenant = unique("tenant-")
    TenantAdmin(settings).create_tenant(tenant)
    scores = make_scores(tenant, 400)
    codec = FastCodec(SchemaRegistryClient({"url": settings.schema_registry_url}))
    _produce(settings, tenant, _encoded(codec, score_schema(), scores))
    standin.set_delay(0.6)  # slow answers: the sink is mid-stream when the broker goes
    sink_process.start()
    wait_until(lambda: len(standin.scores()) >= len(scores) // 5, 180, "a fifth of the scores")
    own_stack.must("stop-kafka")
    time.sleep(10)  # the broker is away ~10 s (plus its shutdown)
    assert sink_process.proc is not None and sink_process.proc.poll() is None, \
        "the sink exited while the broker was away"
    own_stack.must("start-kafka")
    standin.set_delay(0)
    wait_until(lambda: len(standin.scores()) >= len(scores), 300, "every score")
    wait_until(lambda: sum(committed(settings, "lf").values()) >= len(scores), 180,
               "the cursor to reach the end")
    assert sink_process.proc.poll() is None, "the sink exited after the outage"
    stored = keys(standin)
    assert len(stored) == len(scores) == len(set(stored))  # 0 lost, 0 duplicates
    assert {s.id for s in scores} == {key[0] for key in stored}
    sink_process.stop()
    assert sink_process.proc.returncode == 0
    stats = _final_stats(sink_process.log)
    # The sink met the outage: its consumer saw the brokers go, and a commit failed while
    # they were away or blocked through the outage (librdkafka holds a synchronous commit
    # until the coordinator is back, and then it succeeds: no wait is counted then).
    assert stats["broker_errors"] > 0, "the sink never saw the broker go: nothing was tested"
    assert stats["rejected"] == stats["undecodable"] == 0
    print(f"{standin.received_total} scores sent for {len(scores)}; {stats}")


def test_a_registry_stopped_and_started_again_is_waited_out(
    own_stack: OwnStack, own_settings: Settings, standin: LangfuseStandIn,
    sink_process: SinkProcess,
) -> None:
    settings = own_settings
    tenant = unique("tenant-")
    TenantAdmin(settings).create_tenant(tenant)
    first, later = make_scores(tenant, 100), make_scores(tenant + "b", 100)
    codec = FastCodec(SchemaRegistryClient({"url": settings.schema_registry_url}))
    _produce(settings, tenant, _encoded(codec, score_schema(), first))
    sink_process.start()
    wait_until(lambda: len(standin.scores()) >= len(first), 180, "the first scores")
    wait_until(lambda: sum(committed(settings, "lf").values()) >= len(first), 120,
               "the first scores' commit")
    # The later scores are written with a newer version of the Score schema (one more
    # optional field): a schema id the running sink has not seen, so it must ask the
    # registry for it, while the registry is away.
    # A copy: score_schema() is cached, and every later test must see the real one.
    evolved = copy.deepcopy(score_schema())
    evolved["fields"] = [*evolved["fields"],
                         {"name": f"extra_{uuid.uuid4().hex[:6]}",
                          "type": ["null", "string"], "default": None}]
    # A codec of its own: FastCodec remembers one registration per record name.
    fresh = FastCodec(SchemaRegistryClient({"url": settings.schema_registry_url}))
    later_values = _encoded(fresh, evolved, later)
    assert later_values[0][1][1:5] != _encoded(codec, score_schema(), first[:1])[0][1][1:5], \
        "the evolved schema got the same registry id: nothing would be looked up"
    own_stack.must("stop-registry")
    try:
        _produce(settings, tenant, later_values)
        log = sink_process.log
        wait_until(lambda: "schema registry unavailable" in log.read_text(errors="replace"),
                   120, "the sink to meet the registry outage")
        time.sleep(5)  # and wait it out a while
        assert sink_process.proc is not None and sink_process.proc.poll() is None, \
            "the sink exited while the registry was away"
        assert len(standin.scores()) == len(first)
        assert sum(committed(settings, "lf").values()) == len(first)
    finally:
        own_stack.must("start-registry")
    wait_until(lambda: len(standin.scores()) >= len(first) + len(later), 300, "every score")
    wait_until(lambda: sum(committed(settings, "lf").values()) >= len(first) + len(later),
               180, "the cursor to reach the end")
    stored = keys(standin)
    assert len(stored) == len(set(stored)) == len(first) + len(later)
    # No good score was dead-lettered for the outage.
    assert _records_on(settings, tenant_topics(tenant, settings.topic_prefix).deadletter) == 0
    assert sink_process.proc.poll() is None
    sink_process.stop()
    assert sink_process.proc.returncode == 0
    stats = _final_stats(sink_process.log)
    assert stats["undecodable"] == 0 and stats["outage_waits"] > 0


def test_an_outage_longer_than_the_limit_ends_the_sink_with_75_and_commits_nothing(
    own_stack: OwnStack, own_settings: Settings, standin: LangfuseStandIn, tmp_path: Path,
) -> None:
    settings = own_settings.replace(outage_limit=3.0)
    tenant = unique("tenant-")
    TenantAdmin(settings).create_tenant(tenant)
    scores = make_scores(tenant, 20)
    # A copy: score_schema() is cached, and every later test must see the real one.
    evolved = copy.deepcopy(score_schema())
    evolved["fields"] = [*evolved["fields"],
                         {"name": f"extra_{uuid.uuid4().hex[:6]}",
                          "type": ["null", "string"], "default": None}]
    values = _encoded(FastCodec(SchemaRegistryClient({"url": settings.schema_registry_url})),
                      evolved, scores)
    sink = SinkProcess(settings, standin, tmp_path / "sink.log", "--cursor", "lf",
                       "--no-sync-configs")
    own_stack.must("stop-registry")
    try:
        _produce(settings, tenant, values)
        sink.start()
        assert sink.proc is not None
        code = sink.proc.wait(300)
    finally:
        sink.stop()
        own_stack.must("start-registry")
    log = sink.log.read_text(errors="replace")
    assert code == 75, log[-3000:]
    assert "STREAMS_OUTAGE_LIMIT" in log and "schema registry unavailable" in log
    assert committed(settings, "lf") == {}
    assert standin.scores() == [] and standin.requests == 0
    assert _final_stats(sink.log)["scores"] == 0
