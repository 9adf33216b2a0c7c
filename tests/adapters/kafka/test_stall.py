"""The stall clock (streams.adapters.kafka.stall.StallWatch) on a consumer double: records
waiting past an unchanged position across two looks is a stall, records handed on or an
idle consumer is not, an unanswered look is an outage, lost partitions not rejoined are."""

from __future__ import annotations

from typing import Any, cast

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from streams.adapters.kafka.stall import StallWatch

OWNED = {("fs.acme.events", 0)}


class Positions:
    def __init__(self, at: int, end: int, answers: bool = True) -> None:
        self.at, self.end, self.answers = at, end, answers

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, self.at) for tp in partitions]

    def committed(self, partitions: list[TopicPartition], timeout: float) -> list[Any]:
        return []

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float,
                              cached: bool) -> tuple[int, int]:
        if not self.answers:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT))
        return 0, self.end


def _watch(answers: bool = True) -> StallWatch:
    watch = StallWatch(60.0, lambda: answers)
    watch.received_at = 0.0
    return watch


def test_records_waiting_at_an_unchanged_position_across_two_looks_is_a_stall() -> None:
    watch, consumer = _watch(), cast(Any, Positions(at=5, end=9))
    assert not watch.stalled(consumer, OWNED, now=30.0)  # not a stall timeout yet
    assert not watch.stalled(consumer, OWNED, now=61.0)  # the first look: a suspect
    assert not watch.stalled(consumer, OWNED, now=62.0)  # looks a few seconds apart
    assert watch.stalled(consumer, OWNED, now=72.0)
    assert "fs.acme.events[0] (5 < 9)" in watch.describe(OWNED)


def test_a_position_that_moves_handed_on_records_or_nothing_waiting_is_no_stall() -> None:
    watch, consumer = _watch(), Positions(at=5, end=9)
    assert not watch.stalled(cast(Any, consumer), OWNED, now=61.0)
    consumer.at = 7  # it fetched meanwhile
    assert not watch.stalled(cast(Any, consumer), OWNED, now=72.0)
    watch.fed(now=80.0)
    assert not watch.stalled(cast(Any, consumer), OWNED, now=100.0)
    idle = _watch()
    assert not idle.stalled(cast(Any, Positions(at=9, end=9)), OWNED, now=61.0)
    assert idle.looked_at > 61.0  # an idle consumer is looked at again a timeout later


def test_an_unanswered_look_is_an_outage_and_lost_partitions_not_rejoined_a_stall() -> None:
    watch = _watch()
    away = cast(Any, Positions(at=5, end=9, answers=False))
    assert not any(watch.stalled(away, OWNED, now=t) for t in (61.0, 72.0, 83.0))
    lost = _watch(answers=True)
    lost.lost()
    assert lost.lost_at is not None
    lost.lost_at -= 61.0
    assert lost.stalled(cast(Any, Positions(0, 0)), set())
    assert "lost its partitions" in lost.describe(set())
    unreachable = _watch(answers=False)
    unreachable.lost()
    assert unreachable.lost_at is not None
    unreachable.lost_at -= 61.0
    assert not unreachable.stalled(cast(Any, Positions(0, 0)), set())


class Unstarted(Positions):
    """A consumer assigned where its loop chose (a sink's stored offsets) that has handed on
    nothing yet: no position, a committed offset behind the start."""

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, -1001) for tp in partitions]

    def committed(self, partitions: list[TopicPartition], timeout: float) -> list[Any]:
        return [TopicPartition(tp.topic, tp.partition, 3) for tp in partitions]


def test_before_its_first_record_a_partition_waits_from_where_it_was_assigned() -> None:
    idle = _watch()
    idle.assigned({("fs.acme.events", 0): 9})
    idle.received_at = 0.0
    consumer = cast(Any, Unstarted(at=0, end=9))
    # The committed offset (3) is behind the start (9), the end: nothing waits.
    assert not any(idle.stalled(consumer, OWNED, now=t) for t in (61.0, 72.0, 140.0))
    behind = _watch()  # no start known: from the committed offset, as before
    assert not behind.stalled(consumer, OWNED, now=61.0)
    assert behind.stalled(consumer, OWNED, now=72.0)
    assert "(3 < 9)" in behind.describe(OWNED)


def test_with_batched_offsets_a_look_asks_once_for_every_owned_partition() -> None:
    owned = {("fs.acme.events", p) for p in range(8)}
    asked: list[list[tuple[str, int]]] = []

    def offsets(partitions: Any) -> dict[tuple[str, int], tuple[int, int]]:
        asked.append(sorted(partitions))
        return {key: (0, 9) for key in partitions}

    class NoWatermarks(Positions):
        def get_watermark_offsets(self, tp: TopicPartition, timeout: float,
                                  cached: bool) -> tuple[int, int]:
            raise AssertionError("asked one partition at a time")

    watch = StallWatch(60.0, lambda: True, offsets)
    watch.received_at = 0.0
    consumer = cast(Any, NoWatermarks(at=5, end=9))
    assert not watch.stalled(consumer, owned, now=61.0)
    assert watch.stalled(consumer, owned, now=72.0)
    assert asked == [sorted(owned)] * 2  # one request per look, all eight partitions in it

    def away(partitions: Any) -> dict[tuple[str, int], tuple[int, int]]:
        raise TimeoutError("no broker")

    outage = StallWatch(60.0, lambda: True, away)
    outage.received_at = 0.0
    assert not outage.stalled(consumer, owned, now=61.0)
    assert outage.suspect is None  # an unanswered look is an outage, not a suspect
