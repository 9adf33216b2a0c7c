"""The sink runner's fetch stage holding back: when the next stage takes no batch for a
while, the consumer is kept polled (rebalances and membership go on) with its partitions
paused, so nothing more is read, and reading resumes where it was once the batch is taken.
No broker: a fake consumer that honours pause and seek."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from streams.core.sinks.memory import InMemoryScoreSink
from streams.runtime.root import Runtime
from streams.runtime.sink import runner as sink_runner
from streams.runtime.sink.runner import SinkRunner, _Batch
from streams.settings import Settings

T = "fs.acme.scores"


class Msg:
    def __init__(self, partition: int, offset: int) -> None:
        self._partition, self._offset = partition, offset

    def error(self) -> None:
        return None

    def topic(self) -> str:
        return T

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset


class PausingConsumer:
    """Two partitions of 100 records each; consume() hands on what is not paused."""

    def __init__(self) -> None:
        self.positions = {0: 0, 1: 0}
        self.paused: set[int] = set()
        self.polls_while_paused = 0
        self.assigned = [TopicPartition(T, 0), TopicPartition(T, 1)]

    def assignment(self) -> list[TopicPartition]:
        return list(self.assigned)

    def assign(self, partitions: list[TopicPartition]) -> None:
        self.assigned = list(partitions)

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(T, tp.partition, self.positions[tp.partition])
                for tp in partitions]

    def get_watermark_offsets(self, tp: TopicPartition, cached: bool = False) -> tuple[int, int]:
        return 0, 100

    def committed(self, partitions: list[TopicPartition], timeout: float) -> list[Any]:
        return [TopicPartition(tp.topic, tp.partition, -1001) for tp in partitions]

    def pause(self, partitions: list[TopicPartition]) -> None:
        self.paused |= {tp.partition for tp in partitions}

    def resume(self, partitions: list[TopicPartition]) -> None:
        self.paused -= {tp.partition for tp in partitions}

    def seek(self, tp: TopicPartition) -> None:
        self.positions[tp.partition] = tp.offset

    def consume(self, n: int, timeout: float) -> list[Msg]:
        if self.paused:
            self.polls_while_paused += 1
        out = []
        for p in sorted(self.positions):
            if p in self.paused:
                continue
            while self.positions[p] < 100 and len(out) < min(n, 10):
                out.append(Msg(p, self.positions[p]))
                self.positions[p] += 1
        return out


def _runner(consumer: PausingConsumer) -> SinkRunner:
    runner = SinkRunner(Runtime(Settings(topic_prefix="fs")), InMemoryScoreSink(), cursor="lf",
                        batch_size=10)
    runner._consumer = consumer  # type: ignore[assignment]

    async def decoded(messages: list[Msg]) -> _Batch:
        ends: dict[tuple[str, int], int] = {}
        for m in messages:
            ends[(T, m.partition())] = m.offset() + 1
        return _Batch(records=len(messages), ends=ends)

    runner._decoded = decoded  # type: ignore[assignment,method-assign]
    return runner


async def _until(check: Any, what: str) -> None:
    for _ in range(500):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


async def test_a_held_back_fetch_stage_polls_with_its_partitions_paused_then_resumes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sink_runner, "_HOLD_BEFORE_PAUSING", 0.05)
    consumer = PausingConsumer()
    runner = _runner(consumer)
    ready: asyncio.Queue[_Batch] = asyncio.Queue(maxsize=1)
    fetching = asyncio.ensure_future(runner._fetch_loop(ready))
    # Nobody takes batches: one in the queue, one held; then the consumer is polled paused.
    await _until(lambda: consumer.polls_while_paused >= 3, "polls with partitions paused")
    read = dict(consumer.positions)
    assert consumer.paused == {0, 1} and runner.stats.paused == 1
    assert sum(read.values()) == 20  # the two batches, nothing more
    await asyncio.sleep(0.1)
    assert consumer.positions == read  # paused: nothing more was read
    # The next stage takes them: the held batch goes in, reading resumes where it was.
    got = [await ready.get(), await ready.get()]
    await _until(lambda: sum(consumer.positions.values()) > 20, "reading to resume")
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
    runner = _runner(consumer)
    runner._paused = True
    runner._on_assign(consumer, [TopicPartition(T, 1)])  # type: ignore[arg-type]
    assert runner._error is None
    assert consumer.assigned == [TopicPartition(T, 1, -1001)] and consumer.paused == {1}


def test_records_of_partitions_that_came_unpaused_are_held_and_handed_on_first() -> None:
    consumer = PausingConsumer()
    runner = _runner(consumer)
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
    runner = _runner(consumer)
    runner._paused = True
    consumer.paused = {0}
    consumer.positions[1] = 40
    runner._poll_paused()
    runner._on_assign(consumer, [TopicPartition(T, 1)])  # type: ignore[arg-type]
    assert runner._held == []


def test_a_consume_error_while_held_back_is_noted_not_raised_unless_fatal() -> None:
    consumer = PausingConsumer()
    runner = _runner(consumer)
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
