"""Rule state as records: the state of one (rule, scope key) as a plain dict and back, and
a rules partition's state with the offset each key reflects.

The decider partitions stateful rules by their key, `<rule>|<scope key>` (rule names never
hold `|`, an unscoped rule's scope key is empty). One key's state is one record of the
partition's changelog: its count window, its rate windows and `upto`, the offset (in the
rules partition) after the last match it reflects. Because every record says which offset it
reflects, a restore may start reading the rules partition anywhere at or before the first
match a record does not reflect: a match below its key's `upto` is skipped, so nothing is
counted twice. `POSITION_KEY` is the partition's own record: the offset every key's state
reflects, where the decider resumes.

Pure: no storage, no Kafka; the store (`streams.adapters.state`) and the decider
(`streams.runtime.worker.decider`) use it.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

from streams.core.rules.chains import ChainWindow
from streams.core.rules.checks import from_micros, micros
from streams.core.rules.engine import RuleState
from streams.core.rules.predicates import Path
from streams.core.rules.triggers import (
    Count,
    CountState,
    CountWindow,
    RateLimit,
    RateState,
    RateWindow,
)

__all__ = [
    "CLOCK_KEY",
    "POSITION_KEY",
    "PartitionState",
    "decode_position",
    "encode_position",
    "entity_key",
    "from_record",
    "parse_entity_key",
    "record_of",
    "record_upto",
    "to_record",
]

POSITION_KEY: Final = "__position__"
"""The key of a partition's position record (no rule name starts with `_`)."""

CLOCK_KEY: Final = "__clock__"
"""The key of a partition's clock record: the newest event time its records carried (a
completion rule's quiet periods are measured on it), in microseconds since the epoch."""

_US: Final = timedelta(microseconds=1)


def entity_key(rule: str, scope_key: str | None) -> str:
    """The key of one rule's state for one scope key: `<rule>|<scope key>` (empty when the
    rule has no scope): the rules topic's record key and the changelog's."""
    return f"{rule}|{scope_key or ''}"


def parse_entity_key(key: str) -> tuple[str, str | None]:
    """(rule, scope key or None) of an entity key."""
    rule, _, scope = key.partition("|")
    return rule, scope or None


def to_record(state: RuleState, rule: str, scope_key: str | None,
              upto: int) -> dict[str, Any] | None:
    """The plain record of one key's state (held in `state` under `rule`), or None when it
    holds nothing (no counted event, no rate window)."""
    record: dict[str, Any] = {"upto": upto}
    count = state.counts.get(rule)
    if count is not None:
        window = count.windows.get(scope_key)
        if window is not None and window.entries:
            record["count"] = {
                "n": count.count.n, "within_us": count.count.within // _US,
                "entries": [[micros(t), eid] for t, eid in window.entries]}
    rate = state.rates.get(rule)
    if rate is not None:
        windows = {str(number): w.admitted for (key, number), w in rate.windows.items()
                   if key == scope_key}
        if windows:
            record["rate"] = {"n": rate.limit.n, "per_us": rate.limit.per // _US,
                              "windows": windows}
            weight = rate.limit.weight
            if weight is not None:  # a budget's: the limit is restored as it was
                record["rate"]["weight"] = ["envelope" if weight.on_envelope else "event",
                                            *weight.names]
    for (name, _chain), chain in state.chains.items():
        if name == rule:  # a completion rule's key holds its one chain
            record["chain"] = chain.as_record()
    return record if len(record) > 1 else None


def from_record(record: dict[str, Any], rule: str, scope_key: str | None,
                state: RuleState | None = None) -> tuple[RuleState, int]:
    """The state a record holds, put into `state` (a new one by default), and its `upto`.
    ValueError (or KeyError, TypeError) when it is not such a record."""
    state = state if state is not None else RuleState()
    count = record.get("count")
    if count is not None:
        config = Count(int(count["n"]), timedelta(microseconds=int(count["within_us"])))
        held = state.counts.get(rule)
        if held is None or held.count != config:
            held = state.counts[rule] = CountState(config)
        held.windows[scope_key] = CountWindow(tuple(
            (from_micros(int(t)), str(eid)) for t, eid in count["entries"]))
    rate = record.get("rate")
    if rate is not None:
        weight = rate.get("weight")
        limit = RateLimit(int(rate["n"]), timedelta(microseconds=int(rate["per_us"])),
                          None if weight is None else Path(str(weight[0]), tuple(weight[1:])))
        limiter = state.rates.get(rule)
        if limiter is None or limiter.limit != limit:
            limiter = state.rates[rule] = RateState(limit)
        for number, admitted in rate["windows"].items():
            limiter.windows[(scope_key, int(number))] = RateWindow(int(number), int(admitted))
    chain = record.get("chain")
    if chain is not None:
        window = ChainWindow.from_record(chain)
        state.chains[(rule, window.chain)] = window
    return state, int(record["upto"])


def record_of(value: bytes) -> dict[str, Any]:
    """A record's value (JSON) as a dict; ValueError when it is not one."""
    found = json.loads(value)
    if not isinstance(found, dict) or "upto" not in found:
        raise ValueError(f"not a rule state record: {value[:80]!r}")
    return found


_UPTO_PREFIX = b'{"upto":'


def record_upto(value: bytes) -> int:
    """A state record's `upto`, read from its first field without parsing the rest (the
    records `snapshot` writes begin `{"upto":<n>`); any other JSON form is parsed whole.
    ValueError when it is not a state record."""
    if value.startswith(_UPTO_PREFIX):
        end = len(_UPTO_PREFIX)
        while end < len(value) and value[end] in b"0123456789":
            end += 1
        if end > len(_UPTO_PREFIX) and end < len(value) and value[end] in b",}":
            return int(value[len(_UPTO_PREFIX):end])
    return int(record_of(value)["upto"])


def encode_position(offset: int) -> bytes:
    """A position record's value."""
    return str(offset).encode()


def decode_position(value: bytes) -> int:
    """A position record's offset; ValueError when it is not one."""
    return int(value.decode())


@dataclass
class PartitionState:
    """The state of one rules partition: per key its RuleState (only that rule and scope
    key in it) and its `upto`; the partition's `position`; the keys changed since the last
    snapshot (`dirty`), and the keys left empty, kept as `{"upto": n}` until a position at
    or past them is durable, then dropped (a tombstone)."""

    states: dict[str, RuleState] = field(default_factory=dict)
    upto: dict[str, int] = field(default_factory=dict)
    position: int = 0
    dirty: set[str] = field(default_factory=set)
    empty: dict[str, int] = field(default_factory=dict)
    clock: datetime | None = None
    """The newest event time the partition's records carried (matches and the reactor's
    ticks): completion rules' quiet periods are measured on it."""
    clock_dirty: bool = False
    deadlines: list[tuple[datetime, str]] = field(default_factory=list)
    """A heap of (when, key): keys whose chains may be due then (an entry may be stale: the
    chain is asked again when it comes up)."""

    def advance(self, time: datetime) -> bool:
        """Move the clock to event time `time` if that is later; whether it moved."""
        if self.clock is not None and time <= self.clock:
            return False
        self.clock = time
        self.clock_dirty = True
        return True

    def schedule(self, key: str, when: datetime | None) -> None:
        """Ask about the key's chains again once the clock reaches `when` (None: never)."""
        if when is not None:
            heapq.heappush(self.deadlines, (when, key))

    def has_due(self) -> bool:
        """Whether a scheduled time is at or before the clock."""
        return bool(self.deadlines) and self.clock is not None and \
            self.deadlines[0][0] <= self.clock

    def due(self) -> list[str]:
        """The keys whose scheduled time the clock has reached, each once, taken off."""
        found: list[str] = []
        while self.has_due():
            key = heapq.heappop(self.deadlines)[1]
            if key not in found:
                found.append(key)
        return found

    def state_of(self, key: str) -> RuleState:
        """The key's state (a new, empty one when it has none)."""
        found = self.states.get(key)
        if found is None:
            found = self.states[key] = RuleState()
        return found

    def wants(self, key: str, offset: int) -> bool:
        """Whether the match at `offset` is not yet reflected in the key's state."""
        return offset >= self.upto.get(key, 0)

    def applied(self, key: str, offset: int) -> None:
        """The match at `offset` was decided against the key's state."""
        self.upto[key] = offset + 1
        self.dirty.add(key)
        self.position = max(self.position, offset + 1)

    def swept(self, key: str, offset: int) -> None:
        """The key's chains were ended or forgotten by the clock as the record at `offset`
        moved it, before that record is decided: the key's state reflects the records
        before `offset` (a restore decides the record at `offset` again, once)."""
        self.upto[key] = max(self.upto.get(key, 0), offset)
        self.dirty.add(key)

    def expire(self, key: str, before: datetime) -> None:
        """Forget the key's count entries and rate windows no match at or after `before`
        (event time) can be decided with: a key's state stays its current windows, not the
        history of every window it saw. A match older than `before` that arrives later is
        decided against windows without them (the decider passes its newest match's time
        minus STREAMS_RULE_STATE_GRACE)."""
        found = self.states.get(key)
        if found is not None:
            found.expire(before)
            self.dirty.add(key)

    def passed(self, offset: int) -> None:
        """The partition's record at `offset` was read (decided or not)."""
        self.position = max(self.position, offset + 1)

    def load(self, key: str, value: bytes | None) -> None:
        """Take one stored or changelog record: a position, a key's state (kept when it
        reflects at least what is held), or a tombstone (the key dropped)."""
        if key == POSITION_KEY:
            if value is not None:
                self.position = max(self.position, decode_position(value))
            return
        if key == CLOCK_KEY:
            if value is not None:
                self.advance(from_micros(decode_position(value)))
                self.clock_dirty = False
            return
        if value is None:
            self.states.pop(key, None)
            self.upto.pop(key, None)
            self.empty.pop(key, None)
            return
        record = record_of(value)
        if int(record["upto"]) < self.upto.get(key, 0):
            return  # an older writer's record (a member that had not seen it lost the key)
        rule, scope = parse_entity_key(key)
        state, upto = from_record(record, rule, scope)
        self.states[key] = state
        self.upto[key] = upto
        if "count" in record or "rate" in record or "chain" in record:
            self.empty.pop(key, None)
        else:
            self.empty[key] = upto

    def restore(self, records: Iterable[tuple[str, bytes | None]]
                ) -> tuple[list[tuple[str, bytes | None]], list[str]]:
        """`load` each of a changelog's records, in order, in one pass that decodes only
        what is kept: per key, the records after its last tombstone that `load` would take
        (by `upto` alone, read without parsing) are narrowed to the newest one, and only it
        is decoded (a restore without a local store reads a tail that holds each key many
        times). Returns the records that give the same state when stored (a key's tombstone,
        then its kept record; the highest position), and the keys whose kept record could
        not be read: such a key keeps the newest of its earlier records that reads."""
        newest: dict[str, tuple[int, bytes]] = {}  # the position's and the clock's
        kept: dict[str, tuple[bool, list[tuple[int, bytes]]]] = {}
        unreadable: list[str] = []
        for key, value in records:
            if key in (POSITION_KEY, CLOCK_KEY):
                if value is not None:
                    try:
                        at = decode_position(value)
                    except ValueError:
                        unreadable.append(key)
                        continue
                    seen = newest.get(key)
                    if seen is None or at > seen[0]:
                        newest[key] = (at, value)
                continue
            if value is None:
                kept[key] = (True, [])
                continue
            try:
                upto = record_upto(value)
            except (ValueError, KeyError, TypeError):
                unreadable.append(key)
                continue
            dropped, taken = kept.get(key) or (False, [])
            held = taken[-1][0] if taken else (0 if dropped else self.upto.get(key, 0))
            if upto >= held:
                taken.append((upto, value))
            kept[key] = (dropped, taken)
        out: list[tuple[str, bytes | None]] = []
        for key, (dropped, taken) in kept.items():
            if dropped:
                self.load(key, None)
                out.append((key, None))
            for _upto, value in reversed(taken):
                try:
                    self.load(key, value)
                except (ValueError, KeyError, TypeError):
                    unreadable.append(key)
                    continue
                out.append((key, value))
                break
        for key, (_at, value) in sorted(newest.items()):
            self.load(key, value)
            out.append((key, value))
        return out, unreadable

    def snapshot(self, durable_position: int) -> list[tuple[str, bytes | None]]:
        """The records of the dirty keys (a key left empty as `{"upto": n}`), tombstones of
        empty keys whose `upto` is at or below `durable_position` (the position a confirmed
        snapshot holds), then the position record; clears `dirty`."""
        out: list[tuple[str, bytes | None]] = []
        for key, upto in list(self.empty.items()):
            if upto <= durable_position and key not in self.dirty:
                out.append((key, None))
                del self.empty[key]
                self.states.pop(key, None)
                self.upto.pop(key, None)
        for key in sorted(self.dirty):
            rule, scope = parse_entity_key(key)
            upto = self.upto.get(key, 0)
            record = to_record(self.states.get(key, RuleState()), rule, scope, upto)
            if record is None:
                self.empty[key] = upto
                record = {"upto": upto}
            else:
                self.empty.pop(key, None)
            out.append((key, json.dumps(record, separators=(",", ":")).encode()))
        self.dirty.clear()
        if self.clock_dirty and self.clock is not None:
            out.append((CLOCK_KEY, encode_position(micros(self.clock))))
            self.clock_dirty = False
        out.append((POSITION_KEY, encode_position(self.position)))
        return out
