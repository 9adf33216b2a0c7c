"""LagTracker: lag from positions and cached high watermarks, without a broker."""

from __future__ import annotations

from confluent_kafka import KafkaException, TopicPartition

from streams.adapters.kafka.lag import LagTracker


class FakeConsumer:
    """What a consumer knows locally: its assignment, positions and cached watermarks; and
    the committed offsets a broker would answer."""

    def __init__(self, positions: dict[tuple[str, int], int],
                 high: dict[tuple[str, int], int], committed: dict[tuple[str, int], int],
                 broker_up: bool = True) -> None:
        self.positions = positions
        self.high = high
        self.commits = committed
        self.broker_up = broker_up
        self.committed_calls = 0

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition(t, p) for t, p in self.positions]

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, self.positions[(tp.topic, tp.partition)])
                for tp in partitions]

    def get_watermark_offsets(self, partition: TopicPartition, timeout: float = 1.0,
                              cached: bool = False) -> tuple[int, int] | None:
        assert cached, "the tracker must never ask the broker for watermarks"
        return (-1001, self.high.get((partition.topic, partition.partition), -1001))

    def committed(self, partitions: list[TopicPartition],
                  timeout: float = 1.0) -> list[TopicPartition]:
        self.committed_calls += 1
        if not self.broker_up:
            raise KafkaException("broker down")
        return [TopicPartition(tp.topic, tp.partition,
                               self.commits.get((tp.topic, tp.partition), -1001))
                for tp in partitions]


def test_lag_is_high_watermark_minus_position() -> None:
    consumer = FakeConsumer({("a", 0): 10, ("a", 1): 7}, {("a", 0): 15, ("a", 1): 7}, {})
    tracker = LagTracker("g")
    tracker.update(consumer)
    assert tracker.snapshot() == {("a", 0): 5, ("a", 1): 0}
    assert tracker.total() == 5
    assert consumer.committed_calls == 0


def test_partition_without_position_uses_its_commit_asked_once() -> None:
    consumer = FakeConsumer({("a", 0): -1001, ("a", 1): -1001}, {("a", 0): 12, ("a", 1): 4},
                            {("a", 0): 12})
    tracker = LagTracker("g", interval=0.0)
    tracker.update(consumer)
    # a caught-up idle partition shows 0; one never committed counts from the earliest
    assert tracker.snapshot() == {("a", 0): 0, ("a", 1): 4}
    tracker.update(consumer)
    assert consumer.committed_calls == 1


def test_unknown_watermark_is_left_out_and_broker_outage_keeps_going() -> None:
    consumer = FakeConsumer({("a", 0): -1001, ("a", 1): 3}, {("a", 1): 9}, {},
                            broker_up=False)
    tracker = LagTracker("g", interval=0.0)
    tracker.update(consumer)
    assert tracker.snapshot() == {("a", 1): 6}
    consumer.broker_up = True
    tracker.update(consumer)
    assert consumer.committed_calls == 2  # asked again once the broker answers


def test_updates_are_throttled() -> None:
    consumer = FakeConsumer({("a", 0): 1}, {("a", 0): 2}, {})
    tracker = LagTracker("g", interval=3600.0)
    tracker.update(consumer)
    consumer.positions[("a", 0)] = 2
    tracker.update(consumer)
    assert tracker.snapshot() == {("a", 0): 1}
    tracker.update(consumer, force=True)
    assert tracker.snapshot() == {("a", 0): 0}
