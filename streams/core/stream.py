"""The event subscription of the stream surface, as pure logic: where it starts, what the
client has acknowledged, and the bounded buffer of what it has not.

A workspace's events live in its tenant's events topic, whose partitions are ordered each on
their own (a seq is a partition and an offset). So a position in the log is a *cursor*: for
each partition, the offset of the next event to deliver. A subscription starts from a cursor
(or from the log's start or end, resolved to one), delivers each partition's events of the
workspace in offset order, and the client acknowledges them by seq. An ack of
`(partition, offset)` acknowledges every delivered event of that partition up to that offset;
the cursor to resume from after a disconnect is `acknowledged()`: each partition's last
acknowledged offset plus one. Resuming from it repeats nothing acknowledged and skips nothing.

`AckWindow` bounds what one connection holds: at most `capacity` events delivered (or queued
for delivery) and not yet acknowledged. A subscription waits for acks when the window is full
and gives up on a client that frees nothing for a while (see the runtime's Subscription), so
a slow reader costs a bounded buffer, never growing memory.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from streams.core.errors import ValidationFailed
from streams.core.events import Seq

__all__ = [
    "AckFrame",
    "AckWindow",
    "Cursor",
    "StartFrom",
    "SubscribeFrame",
    "parse_cursor",
    "parse_stream_frame",
    "resolve_start",
    "stream_frame_types",
]

Cursor = dict[int, int]
"""Per partition, the offset of the next event to deliver."""

StartFrom = Literal["start", "end"] | Cursor


class _Frame(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SubscribeFrame(_Frame):
    """`{"type": "subscribe", "from": "end" | "start" | {"<partition>": <offset>, ...}}`:
    tail the connection's workspace from a cursor (partitions it leaves out start at their
    beginning), from the log's start, or from its end (only what comes next; the default)."""

    type: Literal["subscribe"]
    from_: Literal["start", "end"] | dict[str, int] = Field(default="end", alias="from")


class AckFrame(_Frame):
    """`{"type": "ack", "seq": {"partition": p, "offset": o}}`: every delivered event of
    partition p up to offset o is processed; resume after them."""

    type: Literal["ack"]
    seq: Seq


def stream_frame_types() -> frozenset[str]:
    """The frame types `parse_stream_frame` reads (the rest are command frames)."""
    return frozenset({"subscribe", "ack"})


def _fields(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in err['loc']) or '(frame)'}: {err['msg']}"
                     for err in exc.errors())


def parse_cursor(raw: Mapping[str, Any]) -> Cursor:
    """A cursor from its JSON form (`{"3": 120}`): partition numbers as keys, offsets as
    values, both at least 0; ValidationFailed naming the bad entry otherwise."""
    cursor: Cursor = {}
    for key, value in raw.items():
        if not (isinstance(key, str) and key.isdigit()):
            raise ValidationFailed(f"from.{key}: a cursor's keys are partition numbers "
                                   "(\"0\", \"1\", ...)")
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValidationFailed(f"from.{key}: an offset is an integer of at least 0, "
                                   f"not {value!r}")
        cursor[int(key)] = value
    return cursor


def parse_stream_frame(frame: Mapping[str, Any]) -> SubscribeFrame | AckFrame:
    """A subscribe or ack frame; ValidationFailed naming each bad field otherwise."""
    kind = frame.get("type")
    model: type[SubscribeFrame | AckFrame] = SubscribeFrame if kind == "subscribe" else AckFrame
    try:
        parsed = model.model_validate(frame)
    except ValidationError as exc:
        raise ValidationFailed(f"malformed {kind} frame: {_fields(exc)}") from exc
    if isinstance(parsed, SubscribeFrame) and isinstance(parsed.from_, dict):
        parse_cursor(parsed.from_)
    return parsed


def resolve_start(start: StartFrom, partitions: Mapping[int, tuple[int, int]]) -> Cursor:
    """The concrete cursor a subscription starts from, given each partition's (low, high)
    watermarks: "start" is every low, "end" every high; a cursor keeps its offsets, clamped
    into [low, high] (an offset past the end waits there; one below the retained start
    begins at it), and partitions it leaves out start at their low watermark.

    ValidationFailed if the cursor names a partition the topic does not have.
    """
    if start == "start":
        return {p: low for p, (low, _high) in partitions.items()}
    if start == "end":
        return {p: high for p, (_low, high) in partitions.items()}
    unknown = sorted(set(start) - set(partitions))
    if unknown:
        raise ValidationFailed(f"from: the log has partitions 0-{len(partitions) - 1}, not "
                               f"{unknown}; resume from a cursor this service gave you")
    return {p: min(max(start.get(p, low), low), high)
            for p, (low, high) in partitions.items()}


class AckWindow:
    """What one subscription delivered and the client has not acknowledged, at most
    `capacity` events, and the cursor of what it has.

    Not thread-safe: one event loop owns it.
    """

    def __init__(self, capacity: int, start: Cursor) -> None:
        if capacity < 1:
            raise ValidationFailed(f"an ack window holds at least 1 event, not {capacity}")
        self.capacity = capacity
        self._acked: Cursor = dict(start)
        self._pending: dict[int, deque[int]] = {}
        self._delivered: Cursor = {}
        self._count = 0

    @property
    def pending(self) -> int:
        """Events delivered and not yet acknowledged."""
        return self._count

    @property
    def full(self) -> bool:
        """Whether another event would exceed the capacity."""
        return self._count >= self.capacity

    def admit(self, seq: Seq) -> bool:
        """Take an event about to be delivered; False (taking nothing) when the window is
        full. Events of a partition must come in offset order."""
        if self.full:
            return False
        queue = self._pending.setdefault(seq.partition, deque())
        if queue and seq.offset <= queue[-1]:
            raise ValueError(f"seq {seq.partition}/{seq.offset} admitted out of order")
        queue.append(seq.offset)
        self._delivered[seq.partition] = seq.offset
        self._count += 1
        return True

    def ack(self, seq: Seq) -> int:
        """Acknowledge every delivered event of `seq.partition` up to `seq.offset`; return how
        many were freed. ValidationFailed for a seq this subscription has not delivered (an
        ack of something already acknowledged frees nothing and is fine)."""
        queue = self._pending.get(seq.partition)
        done = self._acked.get(seq.partition)
        if done is not None and seq.offset < done:
            return 0  # acknowledged before: acks may be repeated or arrive late
        if queue is None or seq.offset > self._delivered.get(seq.partition, -1):
            raise ValidationFailed(
                f"seq: {seq.partition}/{seq.offset} was not delivered on this subscription; "
                "ack the seq of an event frame you received")
        freed = 0
        while queue and queue[0] <= seq.offset:
            queue.popleft()
            freed += 1
        self._acked[seq.partition] = seq.offset + 1
        self._count -= freed
        return freed

    def acknowledged(self) -> Cursor:
        """The cursor to resume from: after each partition's last acknowledged event (where
        nothing was acknowledged, where the subscription started)."""
        return dict(self._acked)
