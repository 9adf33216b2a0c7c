"""The sink runner with a sink that stores its own offsets (the DuckDB sink's model, Kafka
Connect's JDBC sinks'): where partitions start on assignment, one write per batch with the
offsets after it, and no record applied twice after a rebalance. No broker: the runner's
assignment callback and send stage are driven directly."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, OFFSET_INVALID, TopicPartition

from streams.adapters.duckdb import DuckDBScoreSink
from streams.core.errors import ValidationFailed
from streams.core.scores import Score
from streams.core.sinks import Partition
from streams.core.sinks.contracts import sample_scores
from streams.core.sinks.memory import InMemoryScoreSink
from streams.runtime.root import Runtime
from streams.runtime.sink.runner import SinkRunner, _Batch, already_applied, seek_positions
from streams.settings import Settings

SETTINGS = Settings(topic_prefix="fs")
T = "fs.acme.scores"


class CountingStore:
    """An offset-storing sink that remembers every score it was handed, repeats included."""

    identity = "counting"

    def __init__(self, stored: Mapping[Partition, int] | None = None) -> None:
        self.stored: dict[Partition, int] = dict(stored or {})
        self.handed: list[str] = []
        self.writes = 0

    async def record(self, scores: Sequence[Score], /) -> None:
        raise AssertionError("a sink that stores its offsets is written, not recorded")

    def offsets(self, group: str, /) -> dict[Partition, int]:
        return dict(self.stored)

    async def write(self, scores: Sequence[Score], offsets: Mapping[Partition, int], /, *,
                    group: str) -> None:
        self.writes += 1
        self.handed += [s.id for s in scores]
        for tp, offset in offsets.items():
            self.stored[tp] = max(self.stored.get(tp, -1), offset)


class FakeConsumer:
    """What `_on_assign` asks of a consumer: the committed offsets, then the assignment."""

    def __init__(self, committed: Mapping[Partition, int], metadata: str) -> None:
        self._committed = committed
        self._metadata = metadata
        self.assigned: dict[Partition, int] = {}

    def committed(self, partitions: list[TopicPartition], timeout: float) -> list[Any]:
        return [TopicPartition(tp.topic, tp.partition,
                               self._committed.get((tp.topic, tp.partition), OFFSET_INVALID),
                               metadata=self._metadata) for tp in partitions]

    def assign(self, partitions: list[TopicPartition]) -> None:
        self.assigned = {(tp.topic, tp.partition): tp.offset for tp in partitions}

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition(t, p) for t, p in self.assigned]


def batch_of(runner: SinkRunner, scores: list[Score], first: int, tp: Partition = (T, 0)
             ) -> _Batch:
    """A consumed batch: one record per score at offsets first, first + 1, ..."""
    batch = _Batch(records=len(scores), scores=list(scores),
                   positions=[(tp, first + i) for i in range(len(scores))],
                   ends={tp: first + len(scores)})
    batch.seq = runner.ledger.open(batch.ends)
    return batch


def test_a_partition_starts_at_the_stored_offset_else_the_cursor_and_a_replay_at_the_start(
) -> None:
    parts = [(T, 0), (T, 1)]
    assert seek_positions(parts, {(T, 0): 42}, replay=False,
                          start=lambda t, p: OFFSET_BEGINNING) == {(T, 0): 42}
    assert seek_positions(parts, {(T, 0): 42}, replay=True,
                          start=lambda t, p: OFFSET_BEGINNING) == dict.fromkeys(
                              parts, OFFSET_BEGINNING)
    assert already_applied([((T, 0), 4), ((T, 0), 5), ((T, 1), 0)], {(T, 0): 5}) == [0]


def test_assignment_seeks_to_the_stored_offsets_and_falls_back_to_the_cursor() -> None:
    store = CountingStore({(T, 0): 42})
    runner = SinkRunner(Runtime(SETTINGS), store, cursor="warehouse")
    # The Kafka cursor lags the store (a kill between the transaction and the commit).
    consumer = FakeConsumer({(T, 0): 30, (T, 1): 7}, metadata="counting")
    runner._consumer = consumer  # type: ignore[assignment]
    runner._on_assign(consumer, [TopicPartition(T, 0), TopicPartition(T, 1)])  # type: ignore
    assert runner._error is None
    # Partition 0 at what the store holds, not the cursor's 30; partition 1, of which the
    # store holds nothing, at the committed cursor, as read (not left to librdkafka's lookup).
    assert consumer.assigned == {(T, 0): 42, (T, 1): 7}
    # The lagging cursor of partition 0 is committed up to the store's 42 even if nothing
    # more is ever written to it (else its lag shows held records for ever), after the
    # batches consumed before, as an accepted batch of no records.
    earlier = runner.ledger.open({(T, 1): 9})
    runner._cursor_catch_up()
    assert runner.ledger.ready() == {}  # the earlier batch is not handed on yet
    runner.ledger.accept(earlier)
    assert runner.ledger.ready() == {(T, 1): 9, (T, 0): 42}
    runner._cursor_catch_up()
    assert runner.ledger.pending == 0  # taken once
    # A cursor at or past the stored offset, or none stored, owes nothing.
    runner._on_assign(FakeConsumer({(T, 0): 42}, metadata="counting"),  # type: ignore
                      [TopicPartition(T, 0), TopicPartition(T, 1)])
    runner._cursor_catch_up()
    assert runner.ledger.pending == 0
    # What the store applied after the assignment was read is committed instead (a batch
    # written in between), and a partition no longer assigned, or lost, is left alone.
    runner._on_assign(consumer, [TopicPartition(T, 0), TopicPartition(T, 1)])  # type: ignore
    runner._applied[(T, 0)] = 50
    consumer.assigned = {(T, 0): 42}
    runner._cursor_catch_up()
    assert runner.ledger.ready() == {(T, 0): 50}
    runner._on_assign(consumer, [TopicPartition(T, 0)])  # type: ignore
    runner._on_lost(consumer, [TopicPartition(T, 0)])  # type: ignore
    runner._cursor_catch_up()
    assert runner.ledger.pending == 0
    runner.replay = True
    runner._on_assign(consumer, [TopicPartition(T, 0)])  # type: ignore
    assert consumer.assigned == {(T, 0): OFFSET_BEGINNING}
    runner._cursor_catch_up()  # a replay leaves the cursor where it is
    assert runner.ledger.pending == 0


def test_a_sink_refused_a_cursor_never_commits_to_it() -> None:
    # The cursor's commits name another sink: this one is refused (run() raises the
    # error), and its lagging partitions are not committed meanwhile under its own name.
    runner = SinkRunner(Runtime(SETTINGS), CountingStore({(T, 0): 42}), cursor="warehouse")
    consumer = FakeConsumer({(T, 0): 30}, metadata="duckdb:/elsewhere.duckdb")
    runner._consumer = consumer  # type: ignore[assignment]
    runner._on_assign(consumer, [TopicPartition(T, 0)])  # type: ignore
    assert isinstance(runner._error, ValidationFailed)
    assert "give each sink its own cursor name" in str(runner._error)
    runner._cursor_catch_up()
    assert runner.ledger.pending == 0


def test_a_store_is_written_one_batch_at_a_time_and_reads_read_committed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = Runtime(SETTINGS)
    made: list[dict[str, Any]] = []
    monkeypatch.setattr(runtime, "consumer", lambda group, **extra: made.append(extra))
    runner = SinkRunner(runtime, CountingStore(), cursor="warehouse", in_flight=4)
    assert runner.store is not None and runner.in_flight == 1
    _ = runner.consumer
    assert made[0]["isolation.level"] == "read_committed"
    # A sink that does not store offsets keeps its pipeline, and without a cursor there is
    # nothing to store offsets under.
    assert SinkRunner(runtime, InMemoryScoreSink(), cursor="w", in_flight=4).in_flight == 4
    assert SinkRunner(runtime, CountingStore(), cursor=None).store is None


async def test_records_consumed_again_after_a_rebalance_are_never_applied_twice() -> None:
    store = CountingStore()
    runner = SinkRunner(Runtime(SETTINGS), store, cursor="warehouse")
    scores = sample_scores()  # one record each here
    end = len(scores)
    assert await runner._send_stored(batch_of(runner, scores[:5], 0), store)
    assert store.stored == {(T, 0): 5} and runner._applied == {(T, 0): 5}
    # A rebalance gave the partition back before the store's answer was read: the consumer
    # reads from offset 3 again. Offsets 3 and 4 are dropped, 5.. are applied.
    assert await runner._send_stored(batch_of(runner, scores[3:], 3), store)
    assert store.handed == [s.id for s in scores]  # each exactly once
    assert store.stored == {(T, 0): end} and runner.stats.already_applied == 2
    assert runner.stats.scores == len(scores)
    # A batch of nothing but repeats still moves nothing backwards and hands on nothing.
    assert await runner._send_stored(batch_of(runner, scores[:2], 0), store)
    assert store.handed == [s.id for s in scores] and store.stored == {(T, 0): end}
    assert runner.ledger.ready() == {(T, 0): end}  # the Kafka commit, a progress marker


async def test_a_replay_writes_the_rows_again_and_leaves_the_stored_offsets() -> None:
    sink = DuckDBScoreSink(":memory:")
    runner = SinkRunner(Runtime(SETTINGS), sink, cursor="warehouse")
    scores = sample_scores()
    assert await runner._send_stored(batch_of(runner, scores, 0), sink)
    runner.replay = True
    assert await runner._send_stored(batch_of(runner, scores[:4], 0), sink)
    assert runner.stats.already_applied == 0  # a replay is asked for: rows written again
    assert sink.offsets(runner.group) == {(T, 0): len(scores)}
    assert sink.query("select count(*) from scores") == [(len(scores),)]
    sink.close()


def test_commits_behind_hold_back_only_a_sink_that_does_not_store_its_offsets() -> None:
    # A broker outage that cost the consumer its session: its commits wait for the group to
    # rejoin, which needs the consumer polled by the fetch stage. A runner waiting for those
    # commits before taking another batch stops polling: the DuckDB sink stalled so once
    # (tests/faults/test_health_outage.py). A sink that stores its offsets repeats nothing
    # whatever the Kafka cursor says, so it does not wait for them.
    stored = SinkRunner(Runtime(SETTINGS), CountingStore(), cursor="warehouse")
    plain = SinkRunner(Runtime(SETTINGS), InMemoryScoreSink(), cursor="lf", in_flight=2)
    for runner in (stored, plain):
        for end in range(1, 20):  # accepted, never committed
            runner.ledger.accept(runner.ledger.open({(T, 0): end}))
    assert not stored.hands_full(sending=0)
    assert plain.hands_full(sending=0)
    # The sink's own hands bound both.
    assert stored.hands_full(sending=1) and plain.hands_full(sending=2)
    fresh = SinkRunner(Runtime(SETTINGS), InMemoryScoreSink(), cursor="lf", in_flight=2)
    for end in range(1, 7):  # in_flight + 4 may wait for their commit
        fresh.ledger.accept(fresh.ledger.open({(T, 0): end}))
    assert not fresh.hands_full(sending=1)
    fresh.ledger.accept(fresh.ledger.open({(T, 0): 8}))
    assert fresh.hands_full(sending=1)
