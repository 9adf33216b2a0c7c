"""Fakes for the sink runner's unit tests: a consumer that honours pause and seek, and a
runner on it whose batches carry offsets only."""

from __future__ import annotations

import asyncio
from typing import Any

from confluent_kafka import TopicPartition

from streams.core.sinks.memory import InMemoryScoreSink
from streams.runtime.root import Runtime
from streams.runtime.sink.runner import SinkRunner, _Batch
from streams.settings import Settings

__all__ = ["Msg", "PausingConsumer", "T", "fake_runner", "until"]

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


def fake_runner(consumer: PausingConsumer, settings: Settings | None = None) -> SinkRunner:
    """A runner on `consumer` (cursor "lf", batches of 10) whose batches carry no scores."""
    runner = SinkRunner(Runtime(settings or Settings(topic_prefix="fs")), InMemoryScoreSink(),
                        cursor="lf", batch_size=10)
    runner._consumer = consumer  # type: ignore[assignment]

    async def decoded(messages: list[Msg]) -> _Batch:
        ends: dict[tuple[str, int], int] = {}
        for m in messages:
            ends[(T, m.partition())] = m.offset() + 1
        return _Batch(records=len(messages), ends=ends)

    runner._decoded = decoded  # type: ignore[assignment,method-assign]
    return runner


async def until(check: Any, what: str) -> None:
    """Wait up to 5 s for `check()` to hold."""
    for _ in range(500):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")
