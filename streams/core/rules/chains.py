"""Completion-aware triggers: a rule that judges a chain once, when it ends.

    judge_chain = Rule(
        name="judge:whole-chain",
        when=on("llm_call").completes(terminal="app:chain_done", quiet=timedelta(minutes=5)),
        then=run("judge"),
    )

A chain is the events of one correlation id. A completion rule gathers the events of a chain
that its `on` and filters match, and fires once the chain ends:

- on its **terminal event** (an event of the declared type in the same chain; it need not
  pass the rule's filters), or
- after a **quiet period** in event time: once the chain's rules partition has seen events up
  to the newest gathered event's time plus `quiet` (the decider's clock, advanced by every
  record of the partition and by the reactor's ticks), whichever comes first.

The firing's matched events are the whole gathered chain, oldest first, so a judge sees the
chain once. Its cause is the terminal event, or, for a quiet end, the chain's newest gathered
event; so its firing id is derived as every firing's is and a replay gives the same one.

Events gathered after the chain ended are **late**, handled by `late`:
- `"ignore"` (the default): they are dropped; the chain was judged as it stood.
- `"rejudge"`: the chain, with the late events, is judged again: at once when the rule has
  no quiet period, else once the late events have been quiet for it (a burst is judged once).
  The new firing's cause is the newest late event.

An ended chain is remembered for STREAMS_RULE_STATE_GRACE of event time after its last
event, then forgotten: an event later than that starts a new chain. A chain whose terminal
event never comes, on a rule without a quiet period, is forgotten the same way (unjudged).
Sampling keeps or drops whole chains (the point is the correlation id's), never some of a
chain's events. A completion rule has no count, rate limit or scope: its key is its chain.

Pure: the state of one chain is a value (`ChainWindow`); the decider keeps one per key.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Final, Literal, cast

from streams.core.events import Envelope, TraceContext
from streams.core.rules.checks import InvalidRule, check_positive, from_micros, micros, utc

__all__ = ["FUTURE_SKEW", "LATE_RULES", "MAX_CHAIN_EVENTS", "ChainCause", "ChainWindow",
           "Completion", "LateRule", "clock_time"]

LateRule = Literal["ignore", "rejudge"]
LATE_RULES: Final[tuple[LateRule, ...]] = ("ignore", "rejudge")

MAX_CHAIN_EVENTS: Final = 1_000
"""The most events a chain gathers: the event that fills it ends it (judged at once), and
events after it are ignored whatever `late` says, so a chain that never goes quiet has a
bounded state record and `rule_fired` (a changelog record and an event stay far below the
broker's message size)."""

FUTURE_SKEW: Final = timedelta(minutes=5)
"""How far past the wall clock an event's time may move a clock: an event stamped further in
the future moves it only that far, so one bad timestamp cannot end every quiet chain."""


def clock_time(time: datetime, now: datetime) -> datetime:
    """The time an event moves a completion clock to: its own, at most FUTURE_SKEW past
    `now` (the wall clock)."""
    return min(utc(time), utc(now) + FUTURE_SKEW)


@dataclass(frozen=True)
class Completion:
    """When a chain ends (a terminal event type, a quiet period in event time, or both:
    whichever first) and what a late event does (`late`)."""

    terminal: str | None = None
    quiet: timedelta | None = None
    late: LateRule = "ignore"

    def __post_init__(self) -> None:
        if self.terminal is None and self.quiet is None:
            raise InvalidRule("completes() needs terminal= (an event type ending a chain), "
                              "quiet= (a timedelta of event time without the chain's events), "
                              "or both")
        if self.quiet is not None:
            check_positive("completes(quiet=)", self.quiet)
        if self.late not in LATE_RULES:
            raise InvalidRule(f"completes(late=) takes one of {list(LATE_RULES)}, "
                              f"got {self.late!r}")


@dataclass(frozen=True)
class ChainCause:
    """What a firing's envelopes take from their cause when no envelope is at hand (a chain
    ended by its quiet period): the chain's newest gathered event."""

    tenant: str
    workspace: str
    event_id: str
    trace: TraceContext | None


@dataclass(frozen=True)
class ChainWindow:
    """The state of one chain of one completion rule: its gathered events, oldest first,
    and whether (and when) it ended. `pending`: late events wait for their quiet period
    (late="rejudge" with a quiet period), measured from `late_at`, the newest late event's
    time; `late_id` is that event, the cause of the judgement they make."""

    chain: str
    events: tuple[tuple[datetime, str], ...] = ()
    last: datetime | None = None
    last_id: str = ""
    workspace: str = ""
    trace: TraceContext | None = None
    ended: datetime | None = None
    ended_by: str | None = None
    pending: bool = False
    late_at: datetime | None = None
    late_id: str = ""

    @property
    def event_ids(self) -> tuple[str, ...]:
        """The gathered events' ids, oldest first."""
        return tuple(eid for _, eid in self.events)

    def holds(self, event_id: str) -> bool:
        """Whether the event was gathered already (Kafka may deliver it twice)."""
        return any(eid == event_id for _, eid in self.events)

    def gather(self, envelope: Envelope) -> ChainWindow:
        """The window with the envelope among its events (in time order)."""
        time = utc(envelope.time)
        events = tuple(sorted((*self.events, (time, envelope.event_id)),
                              key=lambda e: (e[0], e[1])))
        newer = self.last is None or time >= self.last
        return replace(self, events=events,
                       last=time if newer else self.last,
                       last_id=envelope.event_id if newer else self.last_id,
                       workspace=envelope.workspace if newer else self.workspace,
                       trace=envelope.trace if newer else self.trace)

    @property
    def full(self) -> bool:
        """Whether the chain holds MAX_CHAIN_EVENTS events: it gathers no more."""
        return len(self.events) >= MAX_CHAIN_EVENTS

    def end(self, at: datetime, by: str | None) -> ChainWindow:
        """The window ended at event time `at` (by a terminal event's id, or None)."""
        return replace(self, ended=utc(at), ended_by=by if by is not None else self.ended_by,
                       pending=False, late_at=None, late_id="")

    def late(self, envelope: Envelope) -> ChainWindow:
        """A late event gathered (its window has ended), waiting for its quiet period."""
        time = utc(envelope.time)
        newer = self.late_at is None or time >= self.late_at
        return replace(self, pending=True, late_at=time if newer else self.late_at,
                       late_id=envelope.event_id if newer else self.late_id)

    @property
    def newest(self) -> datetime | None:
        """The newest time the window holds (an event's or its end's)."""
        return max((t for t in (self.last, self.ended, self.late_at) if t is not None),
                   default=None)

    def forget_at(self, grace: timedelta) -> datetime | None:
        """When the window is forgotten: `grace` after its newest time."""
        newest = self.newest
        return None if newest is None else newest + grace

    def deadline(self, completion: Completion, grace: timedelta) -> datetime | None:
        """When (on the partition's clock) the window is due: an open chain's or a pending
        late event's quiet end, or when it is forgotten (grace after its last event)."""
        if completion.quiet is not None:
            if self.pending and self.late_at is not None:
                return self.late_at + completion.quiet
            if self.ended is None and self.events and self.last is not None:
                return self.last + completion.quiet
        return self.forget_at(grace)

    def cause(self, tenant: str, event_id: str) -> ChainCause:
        """The cause of a quiet end's firing (`event_id`: its causation id), in the
        workspace and trace of the chain's newest gathered event."""
        return ChainCause(tenant, self.workspace, event_id, self.trace)

    def as_record(self) -> dict[str, object]:
        """The window as plain data (a changelog record's `chain`), times in microseconds."""
        return {"chain": self.chain, "events": [[micros(t), eid] for t, eid in self.events],
                "last": None if self.last is None else micros(self.last), "last_id": self.last_id,
                "ws": self.workspace,
                "trace": None if self.trace is None else [self.trace.traceparent,
                                                          self.trace.tracestate],
                "ended": None if self.ended is None else micros(self.ended),
                "by": self.ended_by, "pending": self.pending,
                "late_at": None if self.late_at is None else micros(self.late_at),
                "late_id": self.late_id}

    @staticmethod
    def from_record(data: dict[str, object]) -> ChainWindow:
        """The window `as_record` gave; ValueError, KeyError or TypeError otherwise."""
        events = cast(list[list[object]], data["events"])
        trace = cast(list[str | None] | None, data["trace"])
        last, ended, late_at = data["last"], data["ended"], data.get("late_at")
        return ChainWindow(
            chain=str(data["chain"]),
            events=tuple((from_micros(cast(int, t)), str(eid)) for t, eid in events),
            last=None if last is None else from_micros(cast(int, last)),
            last_id=str(data["last_id"]), workspace=str(data["ws"]),
            trace=None if trace is None else TraceContext(traceparent=str(trace[0]),
                                                          tracestate=trace[1]),
            ended=None if ended is None else from_micros(cast(int, ended)),
            ended_by=None if data["by"] is None else str(data["by"]),
            pending=bool(data["pending"]),
            late_at=None if late_at is None else from_micros(cast(int, late_at)),
            late_id=str(data.get("late_id") or ""))
