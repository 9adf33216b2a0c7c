"""Rules: declarative triggers on a workspace's events, and the actions they run.

    wrong_triage = Rule(
        name="ops:wrong-triage",
        when=on(FeedbackGiven).where(F.value.correct.eq(False), feedback_type="triage_quality"),
        then=run("escalate"),
    )
    spike = Rule(
        name="ops:error-spike",
        when=on("ops:error_spike").count(3, within=timedelta(minutes=5)).scope(F.data.service),
        then=run("triage", retry=RetryPolicy(max_attempts=3, backoff=timedelta(seconds=1))),
    )

A trigger names the events it watches (`on`), filters them (`where`, `sample`), and may count
them (`count`), throttle its firings (`at_most`) and give them a scope key (`scope`). An event
passes through those steps in that order, whatever order the trigger was written in: filters
and sampling first, then counting, then the rate limit.

Everything here is pure: matching reads only the envelope, and the stateful steps (counts
and rate limits) keep their state in explicit values (`CountWindow`, `RateWindow`) that
`RuleState` holds in memory for tests and offline replays, and that the Kafka layer keeps in
tables under `count_key` and `rate_key`. Every decision depends on event time and event
ids only, never on the wall clock, so a replay decides what the live run decided.
"""

from __future__ import annotations

import hashlib
import json
import re
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Final, Protocol
from urllib.parse import urlencode

from pydantic import BaseModel

from streams.core.actors import AgentActor, EvaluatorActor, SystemActor, UserActor
from streams.core.errors import ValidationFailed
from streams.core.events import EVENT_TYPES, AppEvent, Envelope, Event, RuleFired

__all__ = [
    "ENVELOPE_NAMES",
    "MISSING",
    "Action",
    "Count",
    "CountState",
    "CountWindow",
    "Decision",
    "F",
    "Fire",
    "InvalidRule",
    "NamedAction",
    "Path",
    "Predicate",
    "PredicateLike",
    "RateLimit",
    "RateState",
    "RateWindow",
    "RetryPolicy",
    "Rule",
    "RuleEngine",
    "RuleSet",
    "RuleState",
    "Scope",
    "Throttled",
    "Trigger",
    "all_of",
    "any_of",
    "count_key",
    "evaluate",
    "firing_id",
    "not_",
    "on",
    "rate_key",
    "run",
    "sample_point",
]

RULE_NAME: Final = re.compile(r"^[a-z0-9][a-z0-9:_.-]*$")
"""What a rule name must match; `|` is excluded, so state keys can use it as a separator."""

ENVELOPE_NAMES: Final = frozenset({"workspace", "tenant", "actor", "event_type"})
"""Names that `where(name=...)` and `F.name` read from the envelope, not the payload."""

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_ACTORS: Final = (UserActor, EvaluatorActor, AgentActor, SystemActor)
_OPS: Final = frozenset({"eq", "ne", "lt", "le", "gt", "ge", "isin", "contains", "exists"})


class InvalidRule(ValidationFailed, ValueError):
    """A rule, trigger, predicate or action was defined wrongly; raised at definition."""


class _Missing:
    """What a path resolves to when the envelope has nothing there."""

    _instance: _Missing | None = None

    def __new__(cls) -> _Missing:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "<missing>"


MISSING: Final = _Missing()


def _utc(time: datetime) -> datetime:
    # Naive times are taken as UTC, so they can be compared with the aware ones the wire keeps.
    return time if time.tzinfo is not None else time.replace(tzinfo=UTC)


def _step(value: object, part: str | int) -> object:
    # Plain dicts (feedback values, app event data) are the common case: check them first.
    if type(value) is dict:
        return value.get(part, MISSING)
    if isinstance(value, BaseModel):
        if isinstance(part, str) and part in type(value).__pydantic_fields__:
            return getattr(value, part)
        return MISSING
    if isinstance(value, Mapping):
        return value.get(part, MISSING)
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        if isinstance(part, int):
            index = part
        else:
            index = int(part) if part.isascii() and part.isdigit() else -1
        return value[index] if 0 <= index < len(value) else MISSING
    return MISSING


class Path:
    """A place in an envelope, built from `F`: `F.value.correct`, `F.envelope.workspace`.

    Payload paths step through the payload's fields, then through dict keys (for
    `FeedbackGiven.value`, `AppEvent.data`, `RunSucceeded.output`) and list indexes. A name
    that clashes with a method here is reached by indexing: `F.data["contains"]`. Resolving a
    path that leads nowhere gives `MISSING`, never an error.
    """

    __slots__ = ("_parts", "_root")

    _root: str
    _parts: tuple[str | int, ...]

    def __init__(self, root: str, parts: tuple[str | int, ...] = ()) -> None:
        if root not in ("event", "envelope"):
            raise InvalidRule(f"a path starts at 'event' or 'envelope', not {root!r}")
        if root == "envelope" and parts and parts[0] not in Envelope.model_fields:
            raise InvalidRule(
                f"the envelope has no field {parts[0]!r}; it has {sorted(Envelope.model_fields)}"
            )
        object.__setattr__(self, "_root", root)
        object.__setattr__(self, "_parts", parts)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("a Path is immutable")

    def __getattr__(self, name: str) -> Path:
        if name.startswith("_"):
            raise AttributeError(name)
        return Path(self._root, (*self._parts, name))

    def __getitem__(self, key: str | int) -> Path:
        return Path(self._root, (*self._parts, key))

    def __eq__(self, other: object) -> bool:
        # Equality is identity of place, not a predicate: F.x == 1 must not look like a filter,
        # and where() refuses the bool it gives with a hint to write F.x.eq(1).
        if not isinstance(other, Path):
            return NotImplemented
        return (self._root, self._parts) == (other._root, other._parts)

    def __hash__(self) -> int:
        return hash((self._root, self._parts))

    def __reduce__(self) -> tuple[type[Path], tuple[str, tuple[str | int, ...]]]:
        return (Path, (self._root, self._parts))

    def __repr__(self) -> str:
        text = "F.envelope" if self._root == "envelope" else "F"
        for part in self._parts:
            text += f"[{part}]" if isinstance(part, int) else f".{part}"
        return text

    @property
    def on_envelope(self) -> bool:
        """Whether the path starts at the envelope rather than the payload."""
        return self._root == "envelope"

    @property
    def names(self) -> tuple[str | int, ...]:
        """The steps of the path after its root."""
        return self._parts

    def resolve(self, envelope: Envelope) -> object:
        """The value at this place, or `MISSING`. The envelope's actor is its participant."""
        parts = self._parts
        if self._root == "envelope":
            if not parts:
                return MISSING
            head = parts[0]
            value: object = (
                envelope.actor.participant if head == "actor" else getattr(envelope, str(head))
            )
            parts = parts[1:]
        else:
            value = envelope.event
        for part in parts:
            value = _step(value, part)
            if value is MISSING:
                break
        return value

    def _compare(self, op: str, operand: object) -> Compare:
        if not self._parts:
            raise InvalidRule(f"{self!r} is a root, not a value: name a field, e.g. F.value.x")
        return Compare(self, op, operand)

    def eq(self, value: object) -> Predicate:
        """The value is present and equal (True is not 1: JSON booleans are not numbers)."""
        return self._compare("eq", value)

    def ne(self, value: object) -> Predicate:
        """The value is present and not equal; a missing value does not match."""
        return self._compare("ne", value)

    def lt(self, value: object) -> Predicate:
        """The value is present, comparable with `value`, and less."""
        return self._compare("lt", value)

    def le(self, value: object) -> Predicate:
        """The value is present, comparable with `value`, and less or equal."""
        return self._compare("le", value)

    def gt(self, value: object) -> Predicate:
        """The value is present, comparable with `value`, and greater."""
        return self._compare("gt", value)

    def ge(self, value: object) -> Predicate:
        """The value is present, comparable with `value`, and greater or equal."""
        return self._compare("ge", value)

    def isin(self, values: Iterable[object]) -> Predicate:
        """The value is present and equal to one of `values`."""
        if isinstance(values, str | bytes):
            raise InvalidRule(f"{self!r}.isin() takes a collection of values, not the string "
                              f"{values!r}; for a substring use contains()")
        return self._compare("isin", tuple(values))

    def contains(self, item: object) -> Predicate:
        """The value is a string holding `item`, a dict with key `item`, or a list with it."""
        return self._compare("contains", item)

    def exists(self) -> Predicate:
        """The path leads somewhere (a present None counts as present)."""
        return self._compare("exists", None)


class _FieldRoot:
    """The start of every path. `F.x` is the payload's `x`, except for `ENVELOPE_NAMES`."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Path:
        if name.startswith("_"):
            raise AttributeError(name)
        if name in ("envelope", "event"):
            return Path(name)
        if name in ENVELOPE_NAMES:
            return Path("envelope", (name,))
        return Path("event", (name,))

    def __getitem__(self, name: str) -> Path:
        return Path("event", (name,))

    def __repr__(self) -> str:
        return "F"


F: Final = _FieldRoot()
"""Paths into an envelope: `F.value.correct`, `F.data.service`, `F.actor`, `F.envelope.time`.

`F.workspace`, `F.tenant`, `F.actor` (the participant string) and `F.event_type` are the
envelope's; `F.envelope.<field>` reaches any envelope field, `F.event.<field>` forces the
payload's field of that name.
"""


def _same(a: object, b: object) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    return a == b


def _ordered(op: str, a: object, b: object) -> bool:
    if isinstance(a, bool) != isinstance(b, bool):
        return False
    try:
        if op == "lt":
            return bool(a < b)  # type: ignore[operator]
        if op == "le":
            return bool(a <= b)  # type: ignore[operator]
        if op == "gt":
            return bool(a > b)  # type: ignore[operator]
        return bool(a >= b)  # type: ignore[operator]
    except TypeError:
        return False


def _contains(container: object, item: object) -> bool:
    if isinstance(container, str):
        return isinstance(item, str) and item in container
    if isinstance(container, Mapping):
        try:
            return item in container
        except TypeError:
            return False
    if isinstance(container, Sequence | set | frozenset) and not isinstance(container, bytes):
        return any(_same(x, item) for x in container)
    return False


class Predicate:
    """A test of an envelope. Combine with `&`, `|` and `~` (or all_of, any_of, not_)."""

    __slots__ = ()

    def test(self, envelope: Envelope) -> bool:
        """Whether the envelope passes."""
        raise NotImplementedError

    def paths(self) -> tuple[Path, ...]:
        """The paths the predicate reads (checked against the trigger's event class)."""
        return ()

    def __call__(self, envelope: Envelope) -> bool:
        return self.test(envelope)

    def __and__(self, other: Predicate) -> Predicate:
        return all_of(self, other)

    def __or__(self, other: Predicate) -> Predicate:
        return any_of(self, other)

    def __invert__(self) -> Predicate:
        return not_(self)


@dataclass(frozen=True, slots=True)
class Compare(Predicate):
    """`path op operand`; ops are eq, ne, lt, le, gt, ge, isin, contains and exists."""

    path: Path
    op: str
    operand: object

    def __post_init__(self) -> None:
        if self.op not in _OPS:
            raise InvalidRule(f"unknown comparison {self.op!r}; one of {sorted(_OPS)}")

    def test(self, envelope: Envelope) -> bool:
        value = self.path.resolve(envelope)
        if value is MISSING:
            return False
        if self.op == "exists":
            return True
        if self.op == "eq":
            return _same(value, self.operand)
        if self.op == "ne":
            return not _same(value, self.operand)
        if self.op == "isin":
            return any(_same(value, x) for x in self.operand)  # type: ignore[attr-defined]
        if self.op == "contains":
            return _contains(value, self.operand)
        return _ordered(self.op, value, self.operand)

    def paths(self) -> tuple[Path, ...]:
        return (self.path,)

    def __repr__(self) -> str:
        return f"{self.path!r}.{self.op}({'' if self.op == 'exists' else repr(self.operand)})"


@dataclass(frozen=True, slots=True)
class AllOf(Predicate):
    """Every part passes."""

    parts: tuple[Predicate, ...]

    def test(self, envelope: Envelope) -> bool:
        return all(p.test(envelope) for p in self.parts)

    def paths(self) -> tuple[Path, ...]:
        return tuple(path for p in self.parts for path in p.paths())


@dataclass(frozen=True, slots=True)
class AnyOf(Predicate):
    """At least one part passes."""

    parts: tuple[Predicate, ...]

    def test(self, envelope: Envelope) -> bool:
        return any(p.test(envelope) for p in self.parts)

    def paths(self) -> tuple[Path, ...]:
        return tuple(path for p in self.parts for path in p.paths())


@dataclass(frozen=True, slots=True)
class Not(Predicate):
    """The part fails; so `~F.x.eq(1)` matches an envelope without `x`, and F.x.ne(1) not."""

    part: Predicate

    def test(self, envelope: Envelope) -> bool:
        return not self.part.test(envelope)

    def paths(self) -> tuple[Path, ...]:
        return self.part.paths()


@dataclass(frozen=True, slots=True)
class Check(Predicate):
    """A plain function of the envelope used as a predicate."""

    fn: Callable[[Envelope], object]

    def test(self, envelope: Envelope) -> bool:
        return bool(self.fn(envelope))


PredicateLike = Predicate | Callable[[Envelope], object]
"""A predicate, or a plain function of the envelope used as one."""


def _as_predicate(item: object, where: str) -> Predicate:
    if isinstance(item, Predicate):
        return item
    if isinstance(item, Path):
        raise InvalidRule(f"{where}: {item!r} is a path, not a test; write e.g. {item!r}.eq(...) "
                          f"or {item!r}.exists()")
    if callable(item):
        return Check(item)
    hint = " (did you write F.x == v? use F.x.eq(v))" if isinstance(item, bool) else ""
    raise InvalidRule(
        f"{where} takes predicates built from F, such as F.value.correct.eq(False), or functions "
        f"of the envelope; got {item!r} ({type(item).__name__}){hint}"
    )


def all_of(*predicates: PredicateLike) -> Predicate:
    """Passes when every predicate passes."""
    if not predicates:
        raise InvalidRule("all_of() needs at least one predicate")
    parts: list[Predicate] = []
    for p in predicates:
        pred = _as_predicate(p, "all_of()")
        parts.extend(pred.parts if isinstance(pred, AllOf) else (pred,))
    return parts[0] if len(parts) == 1 else AllOf(tuple(parts))


def any_of(*predicates: PredicateLike) -> Predicate:
    """Passes when at least one predicate passes."""
    if not predicates:
        raise InvalidRule("any_of() needs at least one predicate")
    parts: list[Predicate] = []
    for p in predicates:
        pred = _as_predicate(p, "any_of()")
        parts.extend(pred.parts if isinstance(pred, AnyOf) else (pred,))
    return parts[0] if len(parts) == 1 else AnyOf(tuple(parts))


def not_(predicate: PredicateLike) -> Predicate:
    """Passes when the predicate fails."""
    pred = _as_predicate(predicate, "not_()")
    return pred.part if isinstance(pred, Not) else Not(pred)


def _positive(what: str, value: timedelta) -> None:
    if not isinstance(value, timedelta) or value <= timedelta(0):
        raise InvalidRule(f"{what} must be a positive timedelta, got {value!r}")


def _count_arg(what: str, n: object) -> None:
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise InvalidRule(f"{what} must be a whole number of at least 1, got {n!r}")


@dataclass(frozen=True)
class RateLimit:
    """At most `n` firings per fixed window of length `per`, windows counted by event time.

    Windows are fixed, numbered `floor((event_time - epoch) / per)`, rather than sliding.
    A fixed window's state is one counter under a key that names the window, so the Kafka
    layer keeps exactly one integer per (rule, scope, window) key (a tumbling table), any
    worker replaying the same events computes the same keys and counts, and an event that
    arrives late is judged against its own window. A sliding window would need every admitted
    timestamp. The price: up to 2n firings can fall in a span of length `per` that straddles
    a window boundary.
    """

    n: int
    per: timedelta

    def __post_init__(self) -> None:
        _count_arg("at_most(n): n", self.n)
        _positive("at_most(per=)", self.per)

    def window(self, time: datetime) -> int:
        """The number of the fixed window holding `time`."""
        return (_utc(time) - _EPOCH) // self.per

    def window_start(self, window: int) -> datetime:
        """When window number `window` begins (it ends where the next begins)."""
        return _EPOCH + self.per * window


@dataclass(frozen=True)
class RateWindow:
    """Firings admitted so far in one window of one rule and scope: the persisted counter."""

    window: int
    admitted: int = 0

    def admit(self, limit: RateLimit) -> tuple[bool, RateWindow]:
        """Whether one more firing fits, and the window after deciding."""
        if self.admitted < limit.n:
            return True, replace(self, admitted=self.admitted + 1)
        return False, self


@dataclass(frozen=True)
class Count:
    """Fire when `n` matching events have times within `within` of each other (inclusive)."""

    n: int
    within: timedelta

    def __post_init__(self) -> None:
        _count_arg("count(n): n", self.n)
        _positive("count(within=)", self.within)


@dataclass(frozen=True)
class CountWindow:
    """Events counted so far for one rule and scope, oldest first: the persisted deque.

    It never holds n entries: the add that makes n empties it.
    """

    entries: tuple[tuple[datetime, str], ...] = ()

    def add(
        self, count: Count, time: datetime, event_id: str
    ) -> tuple[tuple[str, ...] | None, CountWindow]:
        """Count one event; the ids that completed the count (oldest first) or None, and the
        window after. Entries more than `within` older than the newest are dropped, so an event
        that arrives that late completes nothing; an id already counted is not counted again,
        since Kafka may deliver an event twice.
        """
        if any(eid == event_id for _, eid in self.entries):
            return None, self
        time = _utc(time)
        entries = list(self.entries)
        entries.insert(bisect_right([t for t, _ in entries], time), (time, event_id))
        newest = entries[-1][0]
        kept = tuple((t, e) for t, e in entries if newest - t <= count.within)
        if len(kept) >= count.n and any(e == event_id for _, e in kept):
            return tuple(e for _, e in kept), CountWindow()
        return None, CountWindow(kept)

    def expire(self, count: Count, now: datetime) -> CountWindow:
        """Without the entries no event at or after `now` can be counted with."""
        now = _utc(now)
        return CountWindow(tuple((t, e) for t, e in self.entries if now - t <= count.within))


class CountState:
    """The counting state of one rule: a CountWindow per scope key (None when unscoped)."""

    def __init__(self, count: Count) -> None:
        self.count = count
        self.windows: dict[str | None, CountWindow] = {}

    def add(self, envelope: Envelope, scope_key: str | None = None) -> list[str] | None:
        """Count the envelope; the matched event ids when it completes the count, else None."""
        window = self.windows.get(scope_key, CountWindow())
        done, after = window.add(self.count, envelope.time, envelope.event_id)
        if after.entries:
            self.windows[scope_key] = after
        else:
            self.windows.pop(scope_key, None)
        return list(done) if done is not None else None

    def expire(self, now: datetime) -> None:
        """Drop entries too old to be counted with events at or after `now`."""
        for key, window in list(self.windows.items()):
            kept = window.expire(self.count, now)
            if kept.entries:
                self.windows[key] = kept
            else:
                del self.windows[key]


class RateState:
    """The rate-limit state of one rule: a RateWindow per (scope key, window number)."""

    def __init__(self, limit: RateLimit) -> None:
        self.limit = limit
        self.windows: dict[tuple[str | None, int], RateWindow] = {}

    def admit(self, time: datetime, scope_key: str | None = None) -> tuple[bool, RateWindow]:
        """Whether a firing at event time `time` fits its window, and the window after."""
        number = self.limit.window(time)
        admitted, after = self.windows.get((scope_key, number), RateWindow(number)).admit(
            self.limit
        )
        self.windows[(scope_key, number)] = after
        return admitted, after

    def expire(self, now: datetime) -> None:
        """Drop the windows that ended at or before `now`."""
        current = self.limit.window(now)
        self.windows = {k: w for k, w in self.windows.items() if w.window >= current}


def count_key(rule: str, scope_key: str | None) -> str:
    """The state key of a rule's count: `rule` or `rule|scope`."""
    return rule if scope_key is None else f"{rule}|{scope_key}"


def rate_key(rule: str, scope_key: str | None, window: int) -> str:
    """The state key of a rule's rate counter: `rule|window` or `rule|window|scope`."""
    base = f"{rule}|{window}"
    return base if scope_key is None else f"{base}|{scope_key}"


def sample_point(rule: str, event_id: str) -> float:
    """Where an event falls in [0, 1) for a rule's sampling; the same inputs, the same point.

    Salted with the rule's name so that two rules sampling 10% do not pick the same events.
    """
    digest = hashlib.sha256(f"{rule}\n{event_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def firing_id(rule: str, causation_id: str) -> str:
    """A firing's id, derived from its rule and the event that made it fire.

    Derived, not random, so an event delivered twice or replayed gives the same firing and
    the Kafka layer can drop the repeat.
    """
    return "fir_" + hashlib.sha256(f"{rule}\n{causation_id}".encode()).hexdigest()[:32]


ScopeSource = Path | Callable[[Envelope], object]


def _scope_text(value: object) -> str | None:
    if value is MISSING or value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, datetime):
        return _utc(value).isoformat()
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


@dataclass(frozen=True)
class Scope:
    """Named values that split a rule's counts, limits and firings (one run at a time per key).

    The key is the values url-encoded in name order (`service=api`), so the same values give
    the same key whatever order the scope was declared in.
    """

    parts: tuple[tuple[str, ScopeSource], ...]

    def values(self, envelope: Envelope) -> dict[str, str] | None:
        """The scope's values, or None when any of them is missing or null."""
        found: dict[str, str] = {}
        for name, source in self.parts:
            raw = source.resolve(envelope) if isinstance(source, Path) else source(envelope)
            text = _scope_text(raw)
            if text is None:
                return None
            found[name] = text
        return found

    @staticmethod
    def key_of(values: Mapping[str, str]) -> str:
        """The scope key of some values."""
        return urlencode(sorted(values.items()))

    def key(self, envelope: Envelope) -> str | None:
        """The scope key of an envelope, or None when a value is missing."""
        values = self.values(envelope)
        return None if values is None else self.key_of(values)


def _check_source(source: object) -> None:
    if isinstance(source, str):
        if not source.strip():
            raise InvalidRule("on() needs a non-empty event type or app event name")
        return
    known = sorted(cls.__name__ for cls in EVENT_TYPES.values())
    if isinstance(source, type) and issubclass(source, Event):
        if source is AppEvent or EVENT_TYPES.get(source.event_type) is source:
            return
        raise InvalidRule(
            f"on({source.__qualname__}): not an event the log carries; use one of "
            f"{[*known, 'AppEvent']}, or an app event's name as a string"
        )
    raise InvalidRule(
        f"on() takes an Event class ({', '.join(known)}, AppEvent) or an event type string, "
        f"got {source!r}"
    )


@dataclass(frozen=True)
class Trigger:
    """When a rule fires: built with `on(...)` and refined by its methods, each returning a
    new trigger. `on(AppEvent)` watches every app event; a string watches that event type
    (an app event's name, or a built-in type such as `run_succeeded`).
    """

    source: type[Event] | str
    predicates: tuple[Predicate, ...] = ()
    sample_fraction: float | None = None
    counting: Count | None = None
    rate_limit: RateLimit | None = None
    scope_by: Scope | None = None

    def __post_init__(self) -> None:
        _check_source(self.source)

    @property
    def event_class(self) -> type[Event] | None:
        """The payload class watched, when the trigger was given one."""
        return None if isinstance(self.source, str) else self.source

    def _check_path(self, path: Path, what: str) -> None:
        cls = self.event_class
        if cls is None or path.on_envelope or not path.names:
            return
        head = path.names[0]
        if head not in cls.model_fields:
            raise InvalidRule(
                f"{what}: {cls.__name__} has no field {head!r}; its fields are "
                f"{sorted(cls.model_fields)}, and the envelope's are reached as "
                f"{sorted(ENVELOPE_NAMES)} or F.envelope.<field>"
            )

    def where(self, *predicates: PredicateLike, **equals: object) -> Trigger:
        """Keep the events that pass every predicate and whose fields equal `equals`.

        A keyword names a payload field, except `workspace`, `tenant`, `actor` (a
        participant such as "user:ada", or an actor) and `event_type`, which are the
        envelope's and win over a payload field of the same name (use
        `F.event.<name>.eq(...)` for that). Calls of `where` add up: all must pass.
        """
        if not predicates and not equals:
            raise InvalidRule("where() needs at least one predicate or field=value")
        added = [_as_predicate(p, "where()") for p in predicates]
        for name, value in equals.items():
            if name in ENVELOPE_NAMES:
                if name == "actor" and isinstance(value, _ACTORS):
                    value = value.participant
                added.append(Compare(Path("envelope", (name,)), "eq", value))
            else:
                added.append(Compare(Path("event", (name,)), "eq", value))
        for pred in added:
            for path in pred.paths():
                self._check_path(path, f"where({path!r})")
        return replace(self, predicates=(*self.predicates, *added))

    def sample(self, fraction: float) -> Trigger:
        """Keep a deterministic `fraction` of events (0 < fraction <= 1), chosen by event id."""
        if self.sample_fraction is not None:
            raise InvalidRule("sample() was already given for this trigger")
        if (
            not isinstance(fraction, int | float)
            or isinstance(fraction, bool)
            or not 0 < fraction <= 1
        ):
            raise InvalidRule(f"sample(fraction) needs 0 < fraction <= 1, got {fraction!r}")
        return replace(self, sample_fraction=float(fraction))

    def count(self, n: int, *, within: timedelta) -> Trigger:
        """Fire once `n` matching events (of one scope) fall within `within` of each other.

        The firing belongs to the event that completed the count: its chain, as cause.
        """
        if self.counting is not None:
            raise InvalidRule("count() was already given for this trigger")
        return replace(self, counting=Count(n, within))

    def at_most(self, n: int, *, per: timedelta) -> Trigger:
        """Allow at most `n` firings (of one scope) per fixed window of `per`; see RateLimit."""
        if self.rate_limit is not None:
            raise InvalidRule("at_most() was already given for this trigger")
        return replace(self, rate_limit=RateLimit(n, per))

    def scope(self, *by: ScopeSource, **named: ScopeSource) -> Trigger:
        """Split counts, rate limits and runs by values of the event: `.scope(F.data.service)`.

        A path is named by its last step, a function by its `__name__`; keywords name
        either explicitly. An event whose scope value is missing or null does not match.
        """
        if self.scope_by is not None:
            raise InvalidRule("scope() was already given for this trigger")
        if not by and not named:
            raise InvalidRule("scope() needs at least one path or function")
        parts: list[tuple[str, ScopeSource]] = []
        for source in by:
            parts.append((self._scope_name(source), source))
        parts.extend(named.items())
        names = [n for n, _ in parts]
        if len(set(names)) != len(names):
            raise InvalidRule(f"scope() names must differ, got {names}; name them: scope(a=..)")
        for name, source in parts:
            if isinstance(source, Path):
                if not source.names:
                    raise InvalidRule(f"scope({name}={source!r}): name a field of it")
                self._check_path(source, f"scope({source!r})")
            elif not callable(source):
                raise InvalidRule(
                    f"scope() takes paths such as F.data.service or functions of the envelope, "
                    f"got {source!r}"
                )
        return replace(self, scope_by=Scope(tuple(parts)))

    @staticmethod
    def _scope_name(source: object) -> str:
        if isinstance(source, Path):
            if not source.names:
                raise InvalidRule(f"scope({source!r}): name a field of it")
            return str(source.names[-1])
        name = getattr(source, "__name__", "")
        if not isinstance(name, str) or not name.isidentifier():
            raise InvalidRule(f"scope(): name the function {source!r}, as scope(name=fn)")
        return name

    def watches(self, envelope: Envelope) -> bool:
        """Whether the envelope is of the watched type (before any filter)."""
        if self.source is AppEvent:
            return isinstance(envelope.event, AppEvent)
        wanted = self.source if isinstance(self.source, str) else self.source.event_type
        return envelope.event_type == wanted

    def matches(self, envelope: Envelope, *, rule: str = "") -> bool:
        """Type, filters, scope and sampling (salted with `rule`); not counts or limits."""
        if not self.watches(envelope):
            return False
        if not all(p.test(envelope) for p in self.predicates):
            return False
        if self.scope_by is not None and self.scope_by.values(envelope) is None:
            return False
        return self.sample_fraction is None or (
            sample_point(rule, envelope.event_id) < self.sample_fraction
        )

    def scope_values(self, envelope: Envelope) -> dict[str, str]:
        """The envelope's scope values; empty when the trigger has no scope."""
        if self.scope_by is None:
            return {}
        return self.scope_by.values(envelope) or {}

    def scope_key(self, envelope: Envelope) -> str | None:
        """The envelope's scope key; None when the trigger has no scope or a value is missing."""
        return None if self.scope_by is None else self.scope_by.key(envelope)


def on(source: type[Event] | str) -> Trigger:
    """A trigger watching an Event class or an event type / app event name."""
    return Trigger(source)


@dataclass(frozen=True)
class RetryPolicy:
    """How a failing action is tried again: up to `max_attempts` attempts in all, waiting
    `backoff * multiplier ** (attempt - 1)` after a failed attempt, capped at `max_backoff`.
    No jitter, so a replay waits what the live run waited.
    """

    max_attempts: int = 3
    backoff: timedelta = timedelta(seconds=1)
    multiplier: float = 2.0
    max_backoff: timedelta = timedelta(minutes=5)

    def __post_init__(self) -> None:
        _count_arg("RetryPolicy(max_attempts=)", self.max_attempts)
        if not isinstance(self.backoff, timedelta) or self.backoff < timedelta(0):
            raise InvalidRule(f"RetryPolicy(backoff=) must be a timedelta >= 0, got "
                              f"{self.backoff!r}")
        if (
            not isinstance(self.multiplier, int | float)
            or isinstance(self.multiplier, bool)
            or not self.multiplier >= 1
        ):
            raise InvalidRule(f"RetryPolicy(multiplier=) must be >= 1, got {self.multiplier!r}")
        if not isinstance(self.max_backoff, timedelta) or self.max_backoff < self.backoff:
            raise InvalidRule(f"RetryPolicy(max_backoff=) must be a timedelta >= backoff "
                              f"({self.backoff!r}), got {self.max_backoff!r}")

    def retries_after(self, attempt: int) -> bool:
        """Whether a failed attempt number `attempt` (from 1) is tried again."""
        return attempt < self.max_attempts

    def delay(self, attempt: int) -> timedelta:
        """How long to wait after failed attempt number `attempt` (from 1) before the next."""
        if attempt < 1:
            raise ValueError(f"attempts are numbered from 1, got {attempt}")
        wait = self.backoff
        for _ in range(attempt - 1):
            if wait >= self.max_backoff or not wait or self.multiplier == 1:
                break
            wait = min(wait * self.multiplier, self.max_backoff)
        return min(wait, self.max_backoff)


class NamedAction(Protocol):
    """Anything with a name can be run: an evaluator action, an action function's wrapper."""

    @property
    def name(self) -> str:
        """The name actions are registered under."""
        ...


@dataclass(frozen=True)
class Action:
    """What a rule runs when it fires: an action's name, and its retry policy."""

    name: str
    retry: RetryPolicy = field(default_factory=RetryPolicy)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or self.name != self.name.strip():
            raise InvalidRule(f"an action name must be a non-empty string without surrounding "
                              f"spaces, got {self.name!r}")
        if not isinstance(self.retry, RetryPolicy):
            raise InvalidRule(f"retry= takes a RetryPolicy, got {self.retry!r}")


def run(action: str | NamedAction, *, retry: RetryPolicy | None = None) -> Action:
    """The action to run when a rule fires, by name or by an object with a `name`."""
    name = action if isinstance(action, str) else getattr(action, "name", None)
    if not isinstance(name, str):
        raise InvalidRule(f"run() takes an action name or an object with a name, got {action!r}")
    return Action(name, retry if retry is not None else RetryPolicy())


@dataclass(frozen=True)
class Rule:
    """A named trigger and the action it runs. Checked when defined: InvalidRule otherwise."""

    name: str
    when: Trigger
    then: Action
    description: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not RULE_NAME.match(self.name):
            raise InvalidRule(
                f"rule name {self.name!r} must be non-empty and match {RULE_NAME.pattern} "
                f"(lower case, digits and : _ . -), e.g. 'ops:error-spike'"
            )
        if not isinstance(self.when, Trigger):
            raise InvalidRule(f"rule {self.name!r}: when= takes a trigger built with on(...), "
                              f"got {self.when!r}")
        if not isinstance(self.then, Action):
            raise InvalidRule(f"rule {self.name!r}: then= takes run(...), got {self.then!r}")
        if self.description is not None and not isinstance(self.description, str):
            raise InvalidRule(f"rule {self.name!r}: description must be a string")

    def matches(self, envelope: Envelope) -> bool:
        """Whether the envelope passes the trigger's type, filters, scope and sampling.

        Counts and rate limits need state: see `evaluate`.
        """
        return self.when.matches(envelope, rule=self.name)

    def scope_key(self, envelope: Envelope) -> str | None:
        """The envelope's scope key for this rule (None when unscoped)."""
        return self.when.scope_key(envelope)


class RuleSet:
    """Rules with distinct names, in the order given."""

    def __init__(self, rules: Iterable[Rule] = ()) -> None:
        self._rules: dict[str, Rule] = {}
        duplicates: list[str] = []
        for rule in rules:
            if not isinstance(rule, Rule):
                raise InvalidRule(f"a RuleSet holds rules, got {rule!r}")
            if rule.name in self._rules:
                duplicates.append(rule.name)
            self._rules[rule.name] = rule
        if duplicates:
            raise InvalidRule(f"rule names must be unique; repeated: {sorted(set(duplicates))}")

    def __iter__(self) -> Iterator[Rule]:
        return iter(self._rules.values())

    def __len__(self) -> int:
        return len(self._rules)

    def __contains__(self, name: object) -> bool:
        return name in self._rules

    def __getitem__(self, name: str) -> Rule:
        return self._rules[name]

    def get(self, name: str) -> Rule | None:
        """The rule called `name`, or None."""
        return self._rules.get(name)

    def names(self) -> list[str]:
        """The rules' names, in order."""
        return list(self._rules)


@dataclass(frozen=True)
class Fire:
    """A rule fired: run its action for `matched_event_ids`.

    `causation_id` is the event that made it fire (for a count, the one that completed it)
    and `correlation_id` that event's chain, which the firing joins.
    """

    rule: Rule
    matched_event_ids: tuple[str, ...]
    scope_key: str | None
    correlation_id: str
    causation_id: str
    scope: dict[str, str] = field(default_factory=dict, hash=False)

    @property
    def firing_id(self) -> str:
        """The firing's derived id (see `firing_id`)."""
        return firing_id(self.rule.name, self.causation_id)

    def to_event(self) -> RuleFired:
        """The `RuleFired` payload recording this firing."""
        return RuleFired(
            firing_id=self.firing_id, rule=self.rule.name, matched=list(self.matched_event_ids),
            scope_key=self.scope_key,
        )


@dataclass(frozen=True)
class Throttled:
    """A rule would have fired, but its rate limit's window `window` was full."""

    rule: Rule
    matched_event_ids: tuple[str, ...]
    scope_key: str | None
    correlation_id: str
    causation_id: str
    window: int
    limit: RateLimit


Decision = Fire | Throttled


class RuleState:
    """The counts and rate windows of rules, in memory, keyed by rule name."""

    def __init__(self) -> None:
        self.counts: dict[str, CountState] = {}
        self.rates: dict[str, RateState] = {}

    def counter(self, rule: Rule) -> CountState:
        """The rule's count state (a new one if the rule's count changed)."""
        count = rule.when.counting
        if count is None:
            raise ValueError(f"rule {rule.name!r} does not count")
        state = self.counts.get(rule.name)
        if state is None or state.count != count:
            state = self.counts[rule.name] = CountState(count)
        return state

    def limiter(self, rule: Rule) -> RateState:
        """The rule's rate state (a new one if the rule's limit changed)."""
        limit = rule.when.rate_limit
        if limit is None:
            raise ValueError(f"rule {rule.name!r} has no rate limit")
        state = self.rates.get(rule.name)
        if state is None or state.limit != limit:
            state = self.rates[rule.name] = RateState(limit)
        return state

    def expire(self, now: datetime) -> None:
        """Forget what no event at or after `now` (event time) can be decided with."""
        for count in self.counts.values():
            count.expire(now)
        for rate in self.rates.values():
            rate.expire(now)


def _decide(rule: Rule, envelope: Envelope, state: RuleState) -> Decision | None:
    if not rule.matches(envelope):
        return None
    trigger = rule.when
    scope = trigger.scope_values(envelope)
    key = Scope.key_of(scope) if trigger.scope_by is not None else None
    matched: tuple[str, ...] = (envelope.event_id,)
    if trigger.counting is not None:
        done = state.counter(rule).add(envelope, key)
        if done is None:
            return None
        matched = tuple(done)
    if trigger.rate_limit is not None:
        admitted, window = state.limiter(rule).admit(envelope.time, key)
        if not admitted:
            return Throttled(
                rule, matched, key, envelope.correlation_id, envelope.event_id,
                window.window, trigger.rate_limit,
            )
    return Fire(rule, matched, key, envelope.correlation_id, envelope.event_id, scope)


def evaluate(
    rules: RuleSet | Iterable[Rule], envelope: Envelope, state: RuleState
) -> list[Decision]:
    """What each rule decides about one envelope, updating `state`; rules in order."""
    ruleset = rules if isinstance(rules, RuleSet) else RuleSet(rules)
    decisions: list[Decision] = []
    for rule in ruleset:
        decision = _decide(rule, envelope, state)
        if decision is not None:
            decisions.append(decision)
    return decisions


class RuleEngine:
    """Rules and their state in memory: for tests and offline replays of a log."""

    def __init__(self, rules: RuleSet | Iterable[Rule], state: RuleState | None = None) -> None:
        self.rules = rules if isinstance(rules, RuleSet) else RuleSet(rules)
        self.state = state if state is not None else RuleState()

    def evaluate(self, envelope: Envelope) -> list[Decision]:
        """The decisions about one envelope."""
        return evaluate(self.rules, envelope, self.state)

    def replay(self, envelopes: Iterable[Envelope]) -> list[Decision]:
        """The decisions about envelopes taken in order."""
        return [d for envelope in envelopes for d in self.evaluate(envelope)]
