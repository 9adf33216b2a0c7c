"""The sink runner's fetch stage holding back: when the next stage takes no batch for a
while, the consumer is kept polled (rebalances and membership go on) with its partitions
paused, so nothing more is read, and reading resumes where it was once the batch is taken.
No broker: a fake consumer that honours pause and seek."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from streams.runtime.sink import runner as sink_runner
from streams.runtime.sink.runner import _Batch
from tests.runtime.sink.fakes import Msg, PausingConsumer, T, fake_runner, until


async def test_a_held_back_fetch_stage_polls_with_its_partitions_paused_then_resumes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sink_runner, "_HOLD_BEFORE_PAUSING", 0.05)
    consumer = PausingConsumer()
    runner = fake_runner(consumer)
    ready: asyncio.Queue[_Batch] = asyncio.Queue(maxsize=1)
    fetching = asyncio.ensure_future(runner._fetch_loop(ready))
    # Nobody takes batches: one in the queue, one held; then the consumer is polled paused.
    await until(lambda: consumer.polls_while_paused >= 3, "polls with partitions paused")
    read = dict(consumer.positions)
    assert consumer.paused == {0, 1} and runner.stats.paused == 1
    assert sum(read.values()) == 20  # the two batches, nothing more
    await asyncio.sleep(0.1)
    assert consumer.positions == read  # paused: nothing more was read
    # The next stage takes them: the held batch goes in, reading resumes where it was.
    got = [await ready.get(), await ready.get()]
    await until(lambda: sum(consumer.positions.values()) > 20, "reading to resume")
    assert consumer.paused == set()
    assert [b.ends for b in got] == [{(T, 0): 10}, {(T, 0): 20}]
    runner._stopping.set()
    while not fetching.done():
        with contextlib.suppress(asyncio.QueueEmpty):
            ready.get_nowait()
        await asyncio.sleep(0.01)
    await fetching


def test_partitions_assigned_while_held_back_are_paused_too() -> None:
    consumer = PausingConsumer()
    runner = fake_runner(consumer)
    runner._paused = True
    runner._on_assign(consumer, [TopicPartition(T, 1)])  # type: ignore[arg-type]
    assert runner._error is None
    assert consumer.assigned == [TopicPartition(T, 1, -1001)] and consumer.paused == {1}


def test_records_of_partitions_that_came_unpaused_are_held_and_handed_on_first() -> None:
    consumer = PausingConsumer()
    runner = fake_runner(consumer)
    runner._paused = True
    consumer.paused = {0}  # partition 1 came with a rebalance, not paused
    consumer.positions[1] = 40
    runner._poll_paused()
    assert consumer.paused == {0, 1}
    runner._poll_paused()  # paused now: nothing more
    # Resumed: the held records come first, in order, then reading goes on after them.
    held = runner._consume()
    assert [(m.partition(), m.offset()) for m in held] == [(1, o) for o in range(40, 50)]
    after: list[Msg] = []
    while not any(m.partition() == 1 for m in after):
        after += runner._consume()
    assert next(m.offset() for m in after if m.partition() == 1) == 50


def test_held_records_of_a_partition_assigned_again_are_dropped() -> None:
    # Assigned again, it is read from its committed offset: the held copies would repeat.
    consumer = PausingConsumer()
    runner = fake_runner(consumer)
    runner._paused = True
    consumer.paused = {0}
    consumer.positions[1] = 40
    runner._poll_paused()
    runner._on_assign(consumer, [TopicPartition(T, 1)])  # type: ignore[arg-type]
    assert runner._held == []


def test_a_consume_error_while_held_back_is_noted_not_raised_unless_fatal() -> None:
    consumer = PausingConsumer()
    runner = fake_runner(consumer)
    transient = KafkaException(KafkaError(KafkaError._TRANSPORT))
    fatal = KafkaException(KafkaError(KafkaError._FENCED, fatal=True))
    for error in (transient, fatal):
        def failing(n: int, timeout: float, error: KafkaException = error) -> list[Msg]:
            raise error
        consumer.consume = failing  # type: ignore[method-assign]
        if error is transient:
            runner._poll_paused()  # noted and waited, the runner goes on
            assert consumer.paused == {0, 1}
        else:
            with pytest.raises(KafkaException):
                runner._poll_paused()


def test_lost_partitions_start_the_stall_clock_and_drop_their_held_records() -> None:
    # Lost (a session that ran out), not revoked: their new owner may read them already.
    consumer = PausingConsumer()
    runner = fake_runner(consumer)
    runner._paused = True
    consumer.paused = {0}
    consumer.positions[1] = 40
    runner._poll_paused()
    assert runner._held and runner._stall.lost_at is None
    runner._on_lost(consumer, [TopicPartition(T, 1)])  # type: ignore[arg-type]
    assert runner._held == []
    assert runner._stall.lost_at is not None
    # Assigned again (rejoined): the clock stops.
    runner._on_assign(consumer, [TopicPartition(T, 1)])  # type: ignore[arg-type]
    assert runner._stall.lost_at is None
