"""The sink and config-store protocols: small, async, any backend can implement them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from streams.core.scores import Score, ScoreConfig

__all__ = ["OffsetStoringSink", "Partition", "Rejected", "ScoreConfigStore", "ScoreSink",
           "flush_sink", "rejected_of", "stores_offsets"]


@dataclass(frozen=True, slots=True)
class Rejected:
    """A score the backend refused for good, with the backend's reason."""

    score: Score
    reason: str


@runtime_checkable
class ScoreSink(Protocol):
    """Records scores somewhere.

    `record` returns once the batch is durably handed on (the caller may then advance its
    cursor), returning the scores the backend refused for good (to be dead-lettered), if any;
    returning None means every score was accepted, so the smallest sink is one coroutine:

        class PrintingSink:
            async def record(self, scores: Sequence[Score], /) -> None:
                for score in scores:
                    print(score.name, score.value, score.trace_id or score.session_id)

    It raises SinkError when the batch may not have been handed on (transport error, outage,
    rate limit): the caller must not advance, and sends the batch again. Recording a score
    again with the same id must replace it, not add another.

    A sink that buffers also has `async def flush(self) -> None`, handing on anything
    buffered; callers await it before shutdown when the sink has one (`flush_sink`).
    """

    async def record(self, scores: Sequence[Score], /) -> Sequence[Rejected] | None:
        """Hand a batch of scores on; see the class docstring for the contract."""
        ...


Partition = tuple[str, int]
"""A topic partition: (topic, partition)."""


@runtime_checkable
class OffsetStoringSink(ScoreSink, Protocol):
    """A ScoreSink that keeps its consumer's offsets itself, in the same transaction as its
    rows (Kafka Connect's JDBC-sink model): exactly once into the sink across crashes.

    `offsets(group)` answers, per partition, the offset of the next record the sink has not
    applied for that consumer group (empty when it holds none); the runner seeks there when
    it is assigned the partition. It is called from the consumer's thread while the
    partitions are being assigned, so it is synchronous (a local database answers at once).

    `write(scores, offsets, group=...)` applies a batch and stores `offsets` (per partition,
    the offset after the batch's last record) in ONE transaction: either both are durable
    when it returns or neither is. A stored offset never moves backwards (a replay writes
    rows again but leaves the offsets where they were). It raises SinkError when nothing was
    applied, and the caller sends the batch again. It refuses no score: dead letters of
    refused scores would be delivered after the offsets that pass them were stored, and a
    crash in between would lose them (a sink that refuses scores implements `record` only).
    The runner calls `write` one batch at a time, in consumption order (a batch may hold no
    score: its offsets still move), and never hands it a record below the offsets the sink
    stores (except in a replay, which writes the rows again).
    """

    def offsets(self, group: str, /) -> Mapping[Partition, int]:
        """The next offset to apply per partition for `group` ({} when none is stored)."""
        ...

    async def write(self, scores: Sequence[Score], offsets: Mapping[Partition, int], /, *,
                    group: str) -> None:
        """Apply `scores` and store `offsets` for `group` in one transaction."""
        ...


def stores_offsets(sink: object) -> bool:
    """Whether `sink` keeps its consumer offsets itself (`OffsetStoringSink`)."""
    return isinstance(sink, OffsetStoringSink)


def rejected_of(result: Sequence[Rejected] | None) -> list[Rejected]:
    """What a sink's `record` refused: None means nothing."""
    return [] if result is None else list(result)


async def flush_sink(sink: Any) -> None:
    """Await the sink's `flush`, if it has one (a sink that buffers nothing needs none)."""
    flush = getattr(sink, "flush", None)
    if flush is not None:
        await flush()


@runtime_checkable
class ScoreConfigStore(Protocol):
    """Keeps score configs (names, types, ranges, categories) for a scores backend."""

    async def list(self) -> Sequence[ScoreConfig]:
        """Every config the store has."""
        ...

    async def create(self, config: ScoreConfig, /) -> None:
        """Create a config (the store need not refuse a duplicate name)."""
        ...
