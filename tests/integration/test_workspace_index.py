"""The workspace handle's index, concurrency and errors, on the real broker."""

import asyncio
import http.server
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Producer

from streams.adapters.avro.fast import RegistryUnavailable
from streams.adapters.kafka.config import producer_config
from streams.adapters.kafka.log import envelope_headers
from streams.core.actors import UserActor
from streams.core.errors import KafkaUnavailable, NotFound, ValidationFailed
from streams.core.events import AppEvent, Envelope, FeedbackGiven, RuleFired, RunStarted
from streams.core.targets import ChainTarget, RunTarget
from streams.core.tenancy import tenant_topics
from streams.examples.ops import Resolution, TriageQuality
from streams.runtime.client.workspace import StreamsClient, Workspace
from streams.settings import Settings


async def _incident(ws: Workspace, run_id: str = "run_1") -> dict[str, Any]:
    spike = await ws.append(AppEvent(name="ops:error_spike", data={"service": "api"}))
    fired = await ws.append(RuleFired(firing_id=f"fir_{run_id}", rule="ops:error-spike",
                                      matched=[spike.id]),
                            correlation_id=spike.id, causation_id=spike.id)
    run = await ws.append(RunStarted(run_id=run_id, rule="ops:error-spike", action="triage",
                                     firing_id=f"fir_{run_id}"),
                          correlation_id=spike.id, causation_id=fired.id)
    return {"spike": spike, "fired": fired, "run": run}


def _write_unindexed(settings: Settings, client: StreamsClient,
                     envelopes: list[Envelope]) -> None:
    """Write envelopes to their tenant's events topic through a producer of their own, as a
    worker writes its runs: without index entries."""
    producer = Producer(producer_config(settings))
    for envelope in envelopes:
        topic = tenant_topics(envelope.tenant, settings.topic_prefix).events
        producer.produce(topic, client.serde.encode_envelope(envelope, topic),
                         envelope.correlation_id.encode(), headers=envelope_headers(envelope))
    assert producer.flush(30) == 0


def _flush(client: StreamsClient) -> None:
    """Wait until everything the client produced (its index entries too) is on the broker."""
    assert client.log.producer.flush(30) == 0


async def test_target_appended_by_another_client_is_found_in_the_index(
    tenant_factory: Callable[..., str], client_factory: Callable[..., Any],
) -> None:
    tenant = tenant_factory()
    writer_client = client_factory()
    writer = writer_client.workspace(tenant, "prod")
    await _incident(writer)
    _flush(writer_client)

    reader_client = client_factory()
    ada = reader_client.workspace(tenant, "prod", actor=UserActor(id="ada"))
    recorded = await ada.give_feedback(TriageQuality(correct=True, severity="low"),
                                       on=RunTarget(run_id="run_1"))
    index = reader_client.tenant_index(tenant)
    assert recorded.seq.offset >= 0
    assert index.catch_ups == 0
    assert index.event_records_read == 0
    # Read-your-writes: a chain this process appended is found at once, from the index.
    own = await ada.append(AppEvent(name="ops:note"))
    await ada.give_feedback(Resolution(resolved=False), on=ChainTarget(correlation_id=own.id))
    assert index.catch_ups == 0
    assert index.event_records_read == 0


async def test_a_chain_never_seen_is_answered_without_reading_the_log(
    tenant_factory: Callable[..., str], client_factory: Callable[..., Any],
) -> None:
    tenant = tenant_factory(partitions=1)
    writer_client = client_factory()
    writer = writer_client.workspace(tenant, "prod")
    noise = [writer.append(AppEvent(name="ops:heartbeat", data={"n": str(i)}))
             for i in range(300)]
    await asyncio.gather(*noise)
    chain = await _incident(writer)
    _flush(writer_client)

    fresh = client_factory()
    ada = fresh.workspace(tenant, "prod", actor=UserActor(id="ada"))
    on_chain = await ada.give_feedback(Resolution(resolved=True),
                                       on=ChainTarget(correlation_id=chain["spike"].id))
    index = fresh.tenant_index(tenant)
    assert index.event_records_read == 0
    assert index.catch_ups == 0
    # One index partition of 32: far fewer records than the ~600 entries of the log.
    assert index.index_records_read < 303

    events = await ada.chain_events(chain["spike"].id)
    assert [e.event_id for e in events] == [chain["spike"].id, chain["fired"].id,
                                            chain["run"].id, on_chain.id]
    # The chain's partition from its head's offset: the 300 events before it are not read.
    assert index.event_records_read == 4

    record = await ada.run_record("run_1")
    assert record.started.event_id == chain["run"].id
    assert [e.event_id for e in record.matched] == [chain["spike"].id]
    assert record.emitted == []  # the chain feedback follows the chain's head, not the run
    with pytest.raises(NotFound, match="no run 'run_none'"):
        await ada.run_record("run_none")


async def test_events_written_without_the_handle_are_indexed_by_a_catch_up(
    settings: Settings, tenant_factory: Callable[..., str],
    client_factory: Callable[..., Any],
) -> None:
    tenant = tenant_factory()
    # A worker writes runs through its own producer, without index entries.
    raw = client_factory()
    spike = Envelope.new(AppEvent(name="ops:error_spike"), tenant=tenant, workspace="prod",
                         actor=UserActor(id="app"))
    started = spike.follow(RunStarted(run_id="run_w", rule="r", action="a", firing_id="f"))
    _write_unindexed(settings, raw, [spike, started])

    first = client_factory()
    ada = first.workspace(tenant, "prod", actor=UserActor(id="ada"))
    await ada.give_feedback(TriageQuality(correct=True, severity="low"),
                            on=RunTarget(run_id="run_w"))
    index = first.tenant_index(tenant)
    assert index.catch_ups == 1
    assert index.event_records_read == 2  # the unindexed tail, nothing else
    _flush(first)

    # The catch-up published the entries and the cursors: the next process reads no events.
    second = client_factory()
    bob = second.workspace(tenant, "prod", actor=UserActor(id="bob"))
    await bob.give_feedback(TriageQuality(correct=False, severity="high"),
                            on=RunTarget(run_id="run_w"))
    assert second.tenant_index(tenant).event_records_read == 0
    with pytest.raises(NotFound):
        await bob.give_feedback(TriageQuality(correct=True, severity="low"),
                                on=RunTarget(run_id="run_missing"))
    # The miss read only what was appended since the cursors: the two feedback events.
    assert second.tenant_index(tenant).event_records_read == 2

    # A chain's events include those no one has indexed yet (a worker's, written later).
    later = started.follow(AppEvent(name="ops:triaged"))
    _write_unindexed(settings, raw, [later])
    chain = await bob.chain_events(spike.event_id)
    assert chain[0].event_id == spike.event_id
    assert chain[1].event_id == started.event_id
    assert chain[-1].event_id == later.event_id
    assert len(chain) == 5  # with the two pieces of feedback


async def test_an_oversized_value_is_refused_before_anything_is_sent(
    tenant_factory: Callable[..., str], client_factory: Callable[..., Any],
) -> None:
    tenant = tenant_factory()
    client = client_factory()
    ws = client.workspace(tenant, "prod", actor=UserActor(id="ada"))
    await _incident(ws)
    before = len(await ws.read())
    with pytest.raises(ValidationFailed) as refused:
        await ws.give_feedback(TriageQuality(correct=True, severity="low", note="x" * 1_000_000),
                               on=RunTarget(run_id="run_1"))
    message = str(refused.value)
    assert "value.note" in message
    assert f"{client.settings.max_record_bytes} bytes" in message
    assert "STREAMS_MAX_RECORD_BYTES" in message
    assert len(await ws.read()) == before


async def test_events_by_id_finds_events_of_any_workspace_through_the_index(
    settings: Settings, tenant_factory: Callable[..., str],
    client_factory: Callable[..., Any],
) -> None:
    # What a worker's run reads of its firing's events that its reactor did not read: one
    # appended through a handle of another workspace, one written without the handle (found
    # by the catch-up), and an id nobody wrote (left out); the tenant's log is never kept.
    tenant = tenant_factory()
    writer = client_factory()
    prod = await writer.workspace(tenant, "prod", actor=UserActor(id="app")).append(
        AppEvent(name="ops:error_spike", data={"service": "api"}))
    staging = await writer.workspace(tenant, "staging", actor=UserActor(id="app")).append(
        AppEvent(name="ops:error_spike", data={"service": "db"}))
    _flush(writer)
    raw = Envelope.new(AppEvent(name="ops:error_spike"), tenant=tenant, workspace="prod",
                       actor=UserActor(id="app"))
    _write_unindexed(settings, writer, [raw])

    reader = client_factory()
    found = await reader.events_by_id(tenant, [prod.id, staging.id, raw.event_id, "evt_none"])
    assert set(found) == {prod.id, staging.id, raw.event_id}
    assert found[staging.id].workspace == "staging" and found[raw.event_id].seq is not None
    assert reader.tenant_index(tenant).catch_ups == 1  # the unindexed one: one catch-up
    assert reader.tenant_log_if_kept(tenant) is None
    assert await reader.events_by_id(tenant, []) == {}


async def test_indexed_events_answer_in_the_ids_order_once_each_within_a_workspace(
    tenant_factory: Callable[..., str], client_factory: Callable[..., Any],
) -> None:
    # The one index read the workspace's event reads and events_by_id share: the ids'
    # order, a repeated id once, an unknown id left out after one catch-up, and another
    # workspace's event known by its entry and not read.
    tenant = tenant_factory()
    writer = client_factory()
    prod = writer.workspace(tenant, "prod", actor=UserActor(id="app"))
    first = await prod.append(AppEvent(name="ops:error_spike", data={"n": 1}))
    second = await prod.append(AppEvent(name="ops:error_spike", data={"n": 2}))
    staging = await writer.workspace(tenant, "staging", actor=UserActor(id="app")).append(
        AppEvent(name="ops:error_spike", data={"n": 3}))
    _flush(writer)

    reader = client_factory()
    index = await reader.opened_index(tenant)
    found = await reader.indexed_events(
        index, [second.id, staging.id, first.id, second.id, "evt_none"], workspace="prod")
    assert [e.event_id for e in found] == [second.id, first.id]
    assert index.catch_ups == 1
    assert [e.workspace for e in await reader.indexed_events(index, [staging.id])] == [
        "staging"]
    read = index.event_records_read
    assert await reader.indexed_events(index, [staging.id], workspace="prod") == []
    assert index.event_records_read == read and index.catch_ups == 1


async def test_100_concurrent_feedback_calls_each_get_their_own_seq(
    tenant_factory: Callable[..., str], client_factory: Callable[..., Any],
) -> None:
    tenant = tenant_factory()
    client = client_factory()
    ws = client.workspace(tenant, "prod", actor=UserActor(id="ada"))
    await _incident(ws)
    recorded = await asyncio.gather(*[
        ws.give_feedback(TriageQuality(correct=i % 2 == 0, severity="low", note=str(i)),
                         on=RunTarget(run_id="run_1"))
        for i in range(100)])
    assert len({r.seq for r in recorded}) == 100
    assert len({r.id for r in recorded}) == 100
    reader = client_factory().workspace(tenant, "prod")
    delivered = {e.event_id: e.seq for e in await reader.read()
                 if isinstance(e.event, FeedbackGiven)}
    assert {r.id: r.seq for r in recorded} == delivered


def test_one_client_from_two_event_loops(
    tenant_factory: Callable[..., str], client_factory: Callable[..., Any],
) -> None:
    tenant = tenant_factory()
    client = client_factory()
    ws = client.workspace(tenant, "prod", actor=UserActor(id="ada"))
    asyncio.run(_incident(ws))

    async def give(note: str) -> Any:
        return await ws.give_feedback(TriageQuality(correct=True, severity="low", note=note),
                                      on=RunTarget(run_id="run_1"))

    first = asyncio.run(give("first loop"))
    results: dict[str, Any] = {}

    def in_thread(name: str) -> None:
        results[name] = asyncio.run(give(name))

    threads = [threading.Thread(target=in_thread, args=(f"loop {i}",)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert set(results) == {"loop 0", "loop 1"}
    seqs = {first.seq, results["loop 0"].seq, results["loop 1"].seq}
    assert len(seqs) == 3
    assert len(asyncio.run(ws.read())) == 6


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


class _Failing(http.server.BaseHTTPRequestHandler):
    def _fail(self) -> None:
        self.send_response(503)
        self.send_header("Content-Type", "application/json")
        body = b'{"error_code": 50301, "message": "down for maintenance"}'
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = _fail

    def log_message(self, *_args: Any) -> None:
        pass


@pytest.fixture
def failing_registry() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Failing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("registry", ["stopped", "503"])
async def test_the_registry_unavailable_is_one_typed_error_after_the_timeout(
    registry: str, failing_registry: str, tenant_factory: Callable[..., str],
    client_factory: Callable[..., Any],
) -> None:
    tenant = tenant_factory()
    writer = client_factory()
    await _incident(writer.workspace(tenant, "prod"))
    _flush(writer)
    url = f"http://127.0.0.1:{_closed_port()}" if registry == "stopped" else failing_registry
    client = client_factory(schema_registry_url=url, feedback_timeout=2.0)
    ws = client.workspace(tenant, "prod", actor=UserActor(id="ada"))
    with pytest.raises(RegistryUnavailable, match="SCHEMA_REGISTRY_URL") as raised:
        await ws.give_feedback(TriageQuality(correct=True, severity="low"),
                               on=RunTarget(run_id="run_1"))
    assert isinstance(raised.value, KafkaUnavailable)
    assert "STREAMS_FEEDBACK_TIMEOUT" in str(raised.value)


async def test_targets_looked_up_once_are_not_read_again_when_many_partitions_are_hot(
    tenant_factory: Callable[..., str], client_factory: Callable[..., Any],
) -> None:
    """Feedback on runs spread over more index partitions than a process keeps loaded: the
    second round of look-ups reads no index record (entries never change once written)."""
    tenant = tenant_factory()
    writer_client = client_factory()
    writer = writer_client.workspace(tenant, "prod")
    runs = [f"run_{i}" for i in range(40)]
    for run_id in runs:
        await _incident(writer, run_id)
    _flush(writer_client)

    fresh = client_factory()
    ada = fresh.workspace(tenant, "prod", actor=UserActor(id="ada"))
    index = fresh.tenant_index(tenant)

    async def round_of_feedback() -> None:
        await asyncio.gather(*(ada.give_feedback(TriageQuality(correct=True, severity="low"),
                                                 on=RunTarget(run_id=r)) for r in runs))

    await round_of_feedback()
    read = index.index_records_read
    assert read > 0 and index.catch_ups == 0
    await round_of_feedback()
    assert index.index_records_read == read
