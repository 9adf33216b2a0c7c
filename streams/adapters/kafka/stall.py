"""Whether a consumer has stopped handing on records that wait for it.

librdkafka can leave a consumer that fetches nothing after a broker restart, for good (its
open issue #4916; a restart of the process cured it). A `StallWatch` belongs to one loop that
owns a consumer (the batch loop, a sink runner's fetch stage) and is told what the consumer
does: records handed on (`fed`), partitions assigned (`assigned`), partitions lost (`lost`).
When the loop has been handed no record for `stall_timeout` seconds, `stalled` asks the
broker for the read_committed end of each partition the loop owns; if records wait past the
consumer's position there, and still wait unchanged a few seconds later, or if the consumer
lost its partitions and has not rejoined within that time (while a fresh client reaches the
brokers), the consumer is stalled and the loop replaces it. An outage (the broker answers
nobody) is never a stall: it is waited out elsewhere.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

__all__ = ["Offsets", "StallWatch"]

Waiting = dict[tuple[str, int], tuple[int, int]]
"""Per (topic, partition): the consumer's position and the end past it."""

Offsets = Callable[[Collection[tuple[str, int]]], Mapping[tuple[str, int], tuple[int, int]]]
"""Partitions' (low, last stable) offsets asked of the brokers at once; KafkaException or
TimeoutError when they do not answer."""


class StallWatch:
    """The stall clock of one consumer-owning loop (see the module)."""

    def __init__(self, stall_timeout: float, broker_answers: Callable[[], bool],
                 offsets: Offsets | None = None) -> None:
        self.stall_timeout = stall_timeout
        self.broker_answers = broker_answers
        # Every owned partition's (low, last stable) offsets in one round trip per leader
        # (`streams.adapters.kafka.log.stable_offsets`); without it, one request each.
        self.offsets = offsets
        self.received_at = time.monotonic()  # the last records handed on, or an assignment
        self.lost_at: float | None = None  # partitions lost and no assignment since
        self.suspect: tuple[float, Waiting] | None = None
        self.looked_at = 0.0  # when the broker was last asked for the ends
        # Where each assigned partition was started (see `assigned`).
        self.starts: dict[tuple[str, int], int] = {}

    def fed(self, now: float | None = None) -> None:
        """Records were handed on: nothing is stalled."""
        self.received_at = time.monotonic() if now is None else now
        self.suspect = None

    def assigned(self, starts: Mapping[tuple[str, int], int] | None = None) -> None:
        """Partitions were assigned: the clock starts again (reading the committed offsets
        may have waited out a hold). `starts`: the offsets they were assigned at, where the
        loop chose them (a sink's stored offsets, a replay's beginning): until a partition
        hands on a record its position is unknown, and its start, not its committed offset,
        is where records wait from."""
        self.lost_at = self.suspect = None
        self.received_at = time.monotonic()
        if starts is not None:
            self.starts.update(starts)

    def lost(self) -> None:
        """The consumer lost its partitions (not revoked)."""
        self.lost_at = time.monotonic()

    def reset(self) -> None:
        """A new consumer replaced the stalled one."""
        self.lost_at = self.suspect = None
        self.received_at = time.monotonic()

    def stalled(self, consumer: Consumer, owned: Collection[tuple[str, int]],
                now: float | None = None) -> bool:
        """Whether the consumer is stuck: no record for `stall_timeout`, and it lost its
        partitions that long ago without being assigned any since, or records have waited
        past its position on `owned` partitions, unchanged, across two looks a few seconds
        apart (so a fetch in flight is not taken for a stall). Asks the broker at most every
        few seconds."""
        now = time.monotonic() if now is None else now
        if now - self.received_at < self.stall_timeout:
            return False
        lost = self.lost_at is not None and not owned
        if lost and now - (self.lost_at or now) < self.stall_timeout:
            return False
        apart = min(10.0, max(0.05, self.stall_timeout / 6))
        if now - self.looked_at < apart:
            return False  # an idle loop asks the broker every few seconds, not every poll
        self.looked_at = now
        if lost:  # not while the broker is away: rejoining waits for it
            # Asked of a fresh client: a consumer that cannot rejoin may be unable to reach
            # the broker at all while it answers everyone else.
            return self.broker_answers()
        waiting = _waiting(consumer, owned, self.starts, self.offsets)
        if waiting == {}:
            # Nothing waits: the loop is idle, not stuck. Look again a whole stall timeout
            # later (one look a minute on an idle loop: a ListOffsets request per owned
            # partition, or two for them all with batched offsets).
            self.suspect = None
            self.looked_at = now + self.stall_timeout - apart
            return False
        if waiting is None:  # the broker did not answer: an outage, waited out elsewhere
            return False
        if self.suspect is None:
            self.suspect = (now, waiting)
            return False
        before = self.suspect[1]
        self.suspect = (now, waiting)
        return any(key in before and before[key][0] == at for key, (at, _end) in waiting.items())

    def describe(self, owned: Collection[tuple[str, int]]) -> str:
        """What the stalled consumer did wrong, for the log."""
        if self.lost_at is not None and not owned:
            return (f"lost its partitions {time.monotonic() - self.lost_at:.0f} s ago and has "
                    "not rejoined")
        waiting = self.suspect[1] if self.suspect else {}
        return ("has handed on nothing while records waited on "
                + ", ".join(f"{t}[{p}] ({at} < {end})"
                            for (t, p), (at, end) in sorted(waiting.items()))
                + f" for {self.stall_timeout:.0f} s (librdkafka #4916)")


def _waiting(consumer: Consumer, owned: Collection[tuple[str, int]],
             assigned_at: Mapping[tuple[str, int], int],
             offsets: Offsets | None = None) -> Waiting | None:
    """The owned partitions whose read_committed end, asked of the broker now, is past the
    consumer's position (or, before its first record, where it was assigned: `assigned_at`,
    else its committed offset, else the beginning): (position, end) each; None when the
    broker does not answer (an outage is waited out elsewhere, not taken for a stall)."""
    partitions = [TopicPartition(t, p) for t, p in sorted(owned)]
    if not partitions:
        return {}
    try:
        positions = consumer.position(partitions)
        for tp in positions:
            start = assigned_at.get((tp.topic, tp.partition), -1)
            if tp.offset < 0 and start >= 0:
                tp.offset = start
        unknown = [TopicPartition(tp.topic, tp.partition) for tp in positions if tp.offset < 0
                   and assigned_at.get((tp.topic, tp.partition)) != OFFSET_BEGINNING]
        starts = {(tp.topic, tp.partition): tp.offset
                  for tp in (consumer.committed(unknown, timeout=5.0) if unknown else [])}
        # Asked last, so the ends are at least as new as the positions. A read_committed
        # ListOffsets answers the last stable offset: an open transaction's records do not
        # count as waiting.
        marks = dict(offsets([(tp.topic, tp.partition) for tp in positions])) \
            if offsets is not None else {}
        waiting: Waiting = {}
        for tp in positions:
            key = (tp.topic, tp.partition)
            found = marks.get(key)
            low, end = found if found is not None else consumer.get_watermark_offsets(
                TopicPartition(*key), timeout=5.0, cached=False)
            at = tp.offset if tp.offset >= 0 else starts.get(key, -1)
            at = at if at >= 0 else low
            if end > at:
                waiting[key] = (at, end)
        return waiting
    except (KafkaException, TimeoutError):
        return None
