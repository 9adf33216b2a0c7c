"""The batch data path's commit rule on a real broker: offsets are committed only after
their outputs are delivered, a failed delivery rewinds instead, and a rebalance commits the
revoked partitions' delivered work before they move; with exactly_once, outputs and offsets
commit in one transaction, so a read_committed reader counts each output once."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence

import pytest
from confluent_kafka import Consumer, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from streams.adapters.kafka.config import (
    admin_config,
    consumer_config,
    producer_config,
    reader_config,
)
from streams.adapters.kafka.log import reached_end, watermarks
from streams.adapters.kafka.outputs import Output
from streams.runtime.batch import BatchLoop
from streams.runtime.root import Runtime
from streams.settings import Settings
from tests.conftest import Stack, wait_until

pytestmark = pytest.mark.integration

RECORDS = 300


@pytest.fixture
def settings(stack: Stack) -> Settings:
    return Settings.from_env(bootstrap_servers=stack.bootstrap_servers,
                             schema_registry_url=stack.schema_registry_url)


@pytest.fixture
def topics(settings: Settings) -> Iterator[tuple[str, str]]:
    name = f"batch-{uuid.uuid4().hex[:10]}"
    source, sink = f"{name}.in", f"{name}.out"
    admin = AdminClient(admin_config(settings))
    for future in admin.create_topics([NewTopic(source, 3, 1), NewTopic(sink, 3, 1)]).values():
        future.result()
    producer = Producer(producer_config(settings))
    for i in range(RECORDS):
        producer.produce(source, f"v{i}".encode(), f"k{i % 17}".encode())
    assert producer.flush(30) == 0
    yield source, sink
    admin.delete_topics([source, sink])


def copy_to(topic: Callable[[], str]) -> Callable[[Sequence[Message]], list[Output]]:
    """A step that copies each record to `topic()` (read per batch, so a test can switch)."""
    def step(messages: Sequence[Message]) -> list[Output]:
        target = topic()
        return [Output(target, m.key(), m.value() or b"") for m in messages if not m.error()]
    return step


def committed(settings: Settings, group: str, topic: str) -> int:
    # read_uncommitted: a read_committed member's offset fetch waits while a transaction
    # holds offsets of the group pending (librdkafka's require_stable), and a loop whose
    # transactions keep failing always has one pending; this asks for what is committed.
    consumer = Consumer(consumer_config(settings, group,
                                        **{"isolation.level": "read_uncommitted"}))
    try:
        offsets = consumer.committed([TopicPartition(topic, p) for p in range(3)], timeout=10)
        return sum(max(tp.offset, 0) for tp in offsets)
    finally:
        consumer.close()


def records_in(settings: Settings, topic: str) -> int:
    """How many records a read_committed reader is handed, to the topic's end (counted, not
    read off the offsets: transaction markers take offsets too)."""
    consumer = Consumer(reader_config(settings, f"count-{uuid.uuid4().hex}"))
    try:
        ends = {p: high for p, (_low, high) in watermarks(consumer, topic).items()}
        consumer.assign([TopicPartition(topic, p, 0) for p in ends])
        n = 0
        while ends:
            batch = consumer.consume(1000, 0.2)
            n += sum(1 for m in batch if m.error() is None)
            if not batch:
                ends = {p: e for p, e in ends.items() if not reached_end(consumer, topic, p, e)}
        return n
    finally:
        consumer.close()


def count(settings: Settings, topic: str) -> int:
    consumer = Consumer(consumer_config(settings, f"count-{uuid.uuid4().hex}"))
    try:
        total = 0
        for p in range(3):
            _low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            total += high
        return total
    finally:
        consumer.close()


def start(loop: BatchLoop) -> tuple[threading.Thread, threading.Event]:
    stop = threading.Event()
    thread = threading.Thread(target=loop.run, args=(stop,), daemon=True)
    thread.start()
    return thread, stop


def test_an_undelivered_output_is_never_committed_past(
    settings: Settings, topics: tuple[str, str],
) -> None:
    source, sink = topics
    group = f"g-{uuid.uuid4().hex[:8]}"
    # The first outputs go to a topic that does not exist (the broker creates none): every
    # delivery fails after message.timeout.ms; then the step is pointed at the real topic.
    target = [f"{source}.missing"]
    loop = BatchLoop(
        Runtime(settings), group=group, producer_extra={"message.timeout.ms": 1500},
        guarantee="at_least_once",
        subscription=[source], step=copy_to(lambda: target[0]), batch_size=50,
        commit_every=1, commit_interval=0.2, flush_timeout=10, name="test-loop")
    thread, stop = start(loop)
    try:
        wait_until(lambda: loop.stats.delivery_failures > 0 and loop.stats.rewinds > 0,
                   timeout=60, what="a failed delivery and a rewind")
        assert committed(settings, group, source) == 0
        target[0] = sink
        wait_until(lambda: committed(settings, group, source) == RECORDS, timeout=90,
                   what="every offset committed once the outputs are delivered")
    finally:
        stop.set()
        thread.join(30)
    # Every record reached the sink at least once; repeats only from the rewound batches.
    assert count(settings, sink) >= RECORDS


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
def test_a_rebalance_commits_the_revoked_partitions_delivered_work(
    settings: Settings, topics: tuple[str, str], guarantee: str,
) -> None:
    source, sink = topics
    group = f"g-{uuid.uuid4().hex[:8]}"

    def make(name: str) -> BatchLoop:
        # No periodic commits, and none when caught up (exactly once would commit at
        # once): only the revoke (or the stop) commits.
        return BatchLoop(
            Runtime(settings), group=group, subscription=[source],
            step=copy_to(lambda: sink), batch_size=50, commit_every=10**9,
            commit_interval=10**9, commit_when_caught_up=False, flush_timeout=10,
            name=name, guarantee=guarantee)

    first = make("first")
    thread_a, stop_a = start(first)
    second: BatchLoop | None = None
    thread_b = stop_b = None
    try:
        wait_until(lambda: first.stats.records >= RECORDS, timeout=60,
                   what="the first loop to handle every record")
        assert committed(settings, group, source) == 0
        second = make("second")
        thread_b, stop_b = start(second)
        wait_until(lambda: bool(second is not None and second.assigned), timeout=60,
                   what="the second loop to be assigned partitions")
        # The first loop committed the revoked partitions' work before they moved, so the
        # second loop found nothing to redo.
        time.sleep(2.0)
        assert second.stats.records == 0
        assert committed(settings, group, source) > 0
    finally:
        for stop, thread in ((stop_a, thread_a), (stop_b, thread_b)):
            if stop is not None and thread is not None:
                stop.set()
                thread.join(30)
    assert committed(settings, group, source) == RECORDS
    assert records_in(settings, sink) == RECORDS  # nothing was done twice
    if guarantee == "exactly_once":
        assert first.stats.aborts == 0


def test_exactly_once_outputs_appear_once_and_a_failed_transaction_is_redone(
    settings: Settings, topics: tuple[str, str],
) -> None:
    source, sink = topics
    group = f"g-{uuid.uuid4().hex[:8]}"
    # As in the at-least-once test: the first outputs go to a topic that does not exist, so
    # their transactions cannot commit; each is aborted, and redone once the step is fixed.
    target = [f"{source}.missing"]
    loop = BatchLoop(
        Runtime(settings), group=group, producer_extra={"message.timeout.ms": 1500},
        subscription=[source], step=copy_to(lambda: target[0]), batch_size=50,
        commit_every=1, commit_interval=0.2, flush_timeout=10, name="eos-loop",
        guarantee="exactly_once")
    thread, stop = start(loop)
    try:
        wait_until(lambda: loop.stats.aborts > 0, timeout=60, what="an aborted transaction")
        assert committed(settings, group, source) == 0
        target[0] = sink
        wait_until(lambda: committed(settings, group, source) == RECORDS, timeout=90,
                   what="every offset committed with its outputs")
    finally:
        stop.set()
        thread.join(30)
    assert thread is not None and not thread.is_alive()
    # Exactly once by count: the aborted transactions' outputs are never handed on.
    assert records_in(settings, sink) == RECORDS
    assert loop.stats.aborts_by_reason
    print(f"exactly once: {RECORDS} outputs, {loop.stats.aborts} aborted transactions "
          f"({loop.stats.aborts_by_reason}), {loop.stats.commits} committed")


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
def test_a_consumer_that_hands_on_nothing_while_records_wait_is_replaced(
    settings: Settings, topics: tuple[str, str], guarantee: str,
) -> None:
    # A stuck fetcher (librdkafka #4916), made here by pausing the first consumer's
    # partitions after its first batch: records wait past its position and it hands on
    # nothing. The loop closes it and subscribes a new one, which finishes the work.
    source, sink = topics
    group = f"g-{uuid.uuid4().hex[:8]}"
    members: list[Consumer] = []
    copy = copy_to(lambda: sink)

    def remember(consumer: Consumer, _partitions: list[TopicPartition]) -> None:
        if consumer not in members:
            members.append(consumer)

    def step(messages: Sequence[Message]) -> list[Output]:
        first = members[0]
        if len(members) == 1:
            first.pause(first.assignment())
        return copy(messages)

    loop = BatchLoop(
        Runtime(settings), group=group, subscription=[source], step=step, batch_size=20,
        commit_every=1, commit_interval=0.2, flush_timeout=10, name="stalling-loop",
        guarantee=guarantee, on_assigned=remember, stall_timeout=3.0)
    thread, stop = start(loop)
    try:
        wait_until(lambda: committed(settings, group, source) == RECORDS, timeout=120,
                   what="every offset committed, by a new consumer")
    finally:
        stop.set()
        thread.join(30)
    assert loop.stats.consumers_replaced == 1
    assert len(members) == 2
    if guarantee == "exactly_once":
        assert records_in(settings, sink) == RECORDS  # nothing was done twice
    else:
        assert count(settings, sink) >= RECORDS


def test_partitions_whose_offsets_an_open_transaction_holds_start_at_them_after_a_rebalance(
    settings: Settings, topics: tuple[str, str],
) -> None:
    # A member killed mid-transaction leaves its offsets pending until the broker aborts the
    # transaction. A loop assigned those partitions meanwhile must wait and start at the
    # committed offsets, even when the group rebalances (a second member joining) before the
    # transaction ends: librdkafka's own lookup started them at the beginning then.
    source, sink = topics
    group = f"g-{uuid.uuid4().hex[:8]}"
    first = Consumer(consumer_config(settings, group))
    ends = {p: high for p, (_low, high) in watermarks(first, source).items()}
    first.commit(offsets=[TopicPartition(source, p, ends[p] // 2) for p in ends],
                 asynchronous=False)
    first.subscribe([source])

    def holds_all() -> bool:
        first.poll(0.2)
        return len(first.assignment()) == len(ends)

    wait_until(holds_all, 60, "the first member to hold every partition")
    holder = Runtime(settings).transactional_producer(f"holder-{uuid.uuid4().hex[:8]}")
    holder.init_transactions(30)
    holder.begin_transaction()
    holder.send_offsets_to_transaction(  # pending: the "killed" member's open transaction
        [TopicPartition(source, p, ends[p] - 1) for p in ends],
        first.consumer_group_metadata(), 30)
    first.close()
    loops = [BatchLoop(Runtime(settings), group=group, subscription=[source],
                       step=copy_to(lambda: sink), batch_size=20, commit_every=1,
                       commit_interval=0.2, flush_timeout=10, name=f"held-{n}",
                       guarantee="exactly_once") for n in range(2)]
    running = [start(loops[0])]
    time.sleep(3)  # the first loop is assigned every partition, their offsets held
    running.append(start(loops[1]))
    time.sleep(4)  # the second joins: the group rebalances while the offsets are still held
    holder.abort_transaction(30)
    try:
        wait_until(lambda: committed(settings, group, source) == RECORDS, timeout=120,
                   what="every offset committed")
    finally:
        for thread, stop in running:
            stop.set()
            thread.join(30)
    # Each record from the committed offsets on copied once; none before them.
    assert records_in(settings, sink) == sum(ends[p] - ends[p] // 2 for p in ends)


def test_the_loops_broker_probe_says_yes_when_the_broker_answers(stack: Stack) -> None:
    runtime = Runtime(Settings(bootstrap_servers=stack.bootstrap_servers,
                               schema_registry_url=stack.schema_registry_url))
    assert runtime.broker_answers() is True
