"""Consumer lag from what a consumer already knows: its positions and the high watermarks of
its fetch responses.

`LagTracker.update(consumer)` is called by the thread that owns the consumer (a batch loop, a
sink runner's fetch stage), at most every `interval` seconds: it reads the assignment and the
positions (local calls) and the high watermarks librdkafka caches from each fetch response
(`get_watermark_offsets(cached=True)`, no request). A partition the consumer has not returned a
record from since it was assigned has no position yet; for those it asks the broker for the
committed offsets once per assignment (one request for all of them), so an idle, caught-up
partition shows lag 0 instead of nothing. `snapshot()` can be read from any thread (a metrics
exporter's).

So the figure is as fresh as the last update (`interval`, 1 s by default, while the owning
loop turns) and the last fetch response; while the broker is away the watermarks are not
refreshed and the lag shown is the last one seen.
"""

from __future__ import annotations

import time
from typing import Protocol

from confluent_kafka import KafkaException, TopicPartition

__all__ = ["LagTracker", "PartitionLag"]

PartitionLag = tuple[str, int]
"""(topic, partition)"""


class _Consumer(Protocol):
    def assignment(self) -> list[TopicPartition]: ...

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]: ...

    def get_watermark_offsets(self, partition: TopicPartition, timeout: float = ...,
                              cached: bool = ...) -> tuple[int, int] | None: ...

    def committed(self, partitions: list[TopicPartition],
                  timeout: float = ...) -> list[TopicPartition]: ...


class LagTracker:
    """The lag of one consumer-group member, per partition it is assigned."""

    def __init__(self, group: str, *, interval: float = 1.0, timeout: float = 2.0) -> None:
        self.group = group
        self.interval = interval
        self.timeout = timeout
        self._lag: dict[PartitionLag, int] = {}
        self._start: dict[PartitionLag, int] = {}
        self._last = -interval
        self.updated_at: float | None = None

    def snapshot(self) -> dict[PartitionLag, int]:
        """The lag per (topic, partition) at the last update (a copy; any thread)."""
        return dict(self._lag)

    def total(self) -> int:
        """The sum of the partitions' lag at the last update."""
        return sum(self._lag.values())

    def update(self, consumer: _Consumer, *, force: bool = False) -> None:
        """Recompute the lag, if `interval` has passed since the last time (or `force`).
        Call it from the consumer's own thread."""
        now = time.monotonic()
        if not force and now - self._last < self.interval:
            return
        self._last = now
        try:
            assigned = consumer.assignment()
            positions = consumer.position(assigned) if assigned else []
        except (KafkaException, RuntimeError):  # closed, or not a member now
            return
        keys = {(tp.topic, tp.partition) for tp in positions}
        for key in [k for k in self._start if k not in keys]:
            del self._start[key]
        unknown = [TopicPartition(tp.topic, tp.partition) for tp in positions
                   if tp.offset < 0 and (tp.topic, tp.partition) not in self._start]
        if unknown:
            self._starts(consumer, unknown)
        lag: dict[PartitionLag, int] = {}
        for tp in positions:
            key = (tp.topic, tp.partition)
            try:
                marks = consumer.get_watermark_offsets(tp, cached=True)
            except (KafkaException, RuntimeError):
                marks = None
            if marks is None:
                continue
            low, high = marks
            if high < 0:
                continue  # no fetch response yet
            at = tp.offset if tp.offset >= 0 else self._start.get(key, -1)
            if at < 0:
                at = max(low, 0)  # no commit: the group starts from the earliest record
            lag[key] = max(0, high - at)
        self._lag = lag
        self.updated_at = time.time()

    def _starts(self, consumer: _Consumer, partitions: list[TopicPartition]) -> None:
        """Where the group stands on partitions it has not consumed from yet: their committed
        offsets (one request); left unknown, and asked again, when the broker does not
        answer."""
        try:
            committed = consumer.committed(partitions, timeout=self.timeout)
        except (KafkaException, RuntimeError):
            return
        for tp in committed:
            self._start[(tp.topic, tp.partition)] = tp.offset
