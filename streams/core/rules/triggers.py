"""Triggers: which events a rule watches (`on`), how it filters, samples, scopes, counts
and throttles them, and the explicit state of counts and rate windows.

An event passes through a trigger's steps in a fixed order, whatever order the trigger was
written in: filters and sampling first, then counting, then the rate limit. The stateful
steps keep their state in explicit values (`CountWindow`, `RateWindow`) that `RuleState`
holds in memory and that a decider can rebuild by replaying; every decision depends on event
time and event ids only, never on the wall clock, so a replay decides what the live run did.
"""

from __future__ import annotations

import json
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Final

from pydantic import BaseModel

from streams.core.actors import AgentActor, EvaluatorActor, SystemActor, UserActor
from streams.core.app_events import (
    APP_EVENT_NAME,
    AppEventType,
    known_event_types,
    own_record,
)
from streams.core.events import EVENT_TYPES, AppEvent, Envelope, Event
from streams.core.ids import sample_point, scope_key
from streams.core.plain import PlainEvent
from streams.core.rules.chains import Completion, LateRule
from streams.core.rules.checks import InvalidRule, check_count, check_positive, utc
from streams.core.rules.predicates import (
    ENVELOPE_NAMES,
    MISSING,
    UNKNOWN,
    AllOf,
    Compare,
    Path,
    Predicate,
    PredicateLike,
    as_predicate,
)

__all__ = [
    "Count",
    "CountState",
    "CountWindow",
    "RateLimit",
    "RateState",
    "RateWindow",
    "Scope",
    "ScopeSource",
    "Trigger",
    "on",
]

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_ACTORS: Final = (UserActor, EvaluatorActor, AgentActor, SystemActor)


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
    weight: Path | None = None
    """A field of the event holding how much of `n` a firing takes (a positive whole
    number); None: one each. A budget's claims weigh their worst-case tokens."""

    def __post_init__(self) -> None:
        check_count("at_most(n): n", self.n)
        check_positive("at_most(per=)", self.per)

    def weight_of(self, envelope: Envelope) -> int | None:
        """How much of the window a firing of `envelope` takes: 1 without a weight, else
        its weight field's value, or None when that is not a positive whole number (the
        match is refused, as over the limit)."""
        if self.weight is None:
            return 1
        value = self.weight.resolve(envelope)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            return None
        return value

    def window(self, time: datetime) -> int:
        """The number of the fixed window holding `time`."""
        return (utc(time) - _EPOCH) // self.per

    def window_start(self, window: int) -> datetime:
        """When window number `window` begins (it ends where the next begins)."""
        return _EPOCH + self.per * window


@dataclass(frozen=True)
class RateWindow:
    """Firings admitted so far in one window of one rule and scope: the persisted counter."""

    window: int
    admitted: int = 0

    def admit(self, limit: RateLimit, weight: int = 1) -> tuple[bool, RateWindow]:
        """Whether one more firing (taking `weight` of it) fits, and the window after."""
        if self.admitted + weight <= limit.n:
            return True, replace(self, admitted=self.admitted + weight)
        return False, self


@dataclass(frozen=True)
class Count:
    """Fire when `n` matching events have times within `within` of each other (inclusive)."""

    n: int
    within: timedelta

    def __post_init__(self) -> None:
        check_count("count(n): n", self.n)
        check_positive("count(within=)", self.within)


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
        time = utc(time)
        entries = list(self.entries)
        entries.insert(bisect_right([t for t, _ in entries], time), (time, event_id))
        newest = entries[-1][0]
        kept = tuple((t, e) for t, e in entries if newest - t <= count.within)
        if len(kept) >= count.n and any(e == event_id for _, e in kept):
            return tuple(e for _, e in kept), CountWindow()
        return None, CountWindow(kept)

    def expire(self, count: Count, now: datetime) -> CountWindow:
        """Without the entries no event at or after `now` can be counted with."""
        now = utc(now)
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

    def admit(self, time: datetime, scope_key: str | None = None,
              weight: int = 1) -> tuple[bool, RateWindow]:
        """Whether a firing at event time `time` (taking `weight`) fits its window, and the
        window after."""
        number = self.limit.window(time)
        admitted, after = self.windows.get((scope_key, number), RateWindow(number)).admit(
            self.limit, weight
        )
        self.windows[(scope_key, number)] = after
        return admitted, after

    def window_at(self, time: datetime, scope_key: str | None = None) -> RateWindow:
        """The window holding event time `time`, as it stands (nothing admitted)."""
        number = self.limit.window(time)
        return self.windows.get((scope_key, number), RateWindow(number))

    def expire(self, now: datetime) -> None:
        """Drop the windows that ended at or before `now`."""
        current = self.limit.window(now)
        self.windows = {k: w for k, w in self.windows.items() if w.window >= current}



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
        return utc(value).isoformat()
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
        """The scope key of some values (see `streams.core.ids.scope_key`)."""
        return scope_key(values)

    def key(self, envelope: Envelope) -> str | None:
        """The scope key of an envelope, or None when a value is missing."""
        values = self.values(envelope)
        return None if values is None else self.key_of(values)


def _check_source(source: object) -> None:
    if isinstance(source, str):
        # A name that no type can ever have is refused here; a well-formed app event name is
        # checked against the declarations when the rules are loaded (RuleSet.check_event_types),
        # since its declaration may be imported after the rule is defined.
        if source in EVENT_TYPES or APP_EVENT_NAME.match(source):
            return
        if not source.strip():
            raise InvalidRule(f"on() needs a non-empty event type name; known event types: "
                              f"{known_event_types()}")
        raise InvalidRule(
            f"on({source!r}): no event type can have that name. Name a built-in event type, "
            f"or an app event type: namespaced, 'namespace:name' matching "
            f"{APP_EVENT_NAME.pattern}, and declared with class X(AppEventType, "
            f"name='ns:name') or app_event_type('ns:name'). Known event types: "
            f"{known_event_types()}"
        )
    known = sorted(cls.__name__ for cls in EVENT_TYPES.values())
    if isinstance(source, type) and issubclass(source, Event):
        if source is AppEvent or EVENT_TYPES.get(source.event_type) is source:
            return
        raise InvalidRule(
            f"on({source.__qualname__}): not an event the log carries; use one of "
            f"{[*known, 'AppEvent']}, an AppEventType class, or an event type's name"
        )
    raise InvalidRule(
        f"on() takes an Event class ({', '.join(known)}, AppEvent), an AppEventType class or "
        f"an event type's name, got {source!r}"
    )


@dataclass(frozen=True)
class Trigger:
    """When a rule fires: built with `on(...)` and refined by its methods, each returning a
    new trigger. `on(AppEvent)` watches every app event; a string watches that event type
    (a declared app event type's name, or a built-in type such as `run_succeeded`).
    """

    source: type[Event] | str
    predicates: tuple[Predicate, ...] = ()
    sample_fraction: float | None = None
    counting: Count | None = None
    rate_limit: RateLimit | None = None
    scope_by: Scope | None = None
    completion: Completion | None = None

    def __post_init__(self) -> None:
        _check_source(self.source)

    @property
    def watched_types(self) -> tuple[str | None, ...]:
        """The event types the trigger's rule must see: the watched type (None: every app
        event) and a completion's terminal type."""
        terminal = self.completion.terminal if self.completion is not None else None
        if terminal is None or terminal == self.event_type_name:
            return (self.event_type_name,)
        return (self.event_type_name, terminal)

    def ends_chain(self, envelope: Envelope) -> bool:
        """Whether the envelope is a terminal event of a completion trigger (of any chain:
        `matches` samples the chain)."""
        return self.completion is not None and self.completion.terminal is not None and \
            envelope.event_type == self.completion.terminal

    @property
    def event_type_name(self) -> str | None:
        """The event type watched; None for `on(AppEvent)`, which watches every app event."""
        if isinstance(self.source, str):
            return self.source
        return None if self.source is AppEvent else self.source.event_type

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
        added = [as_predicate(p, "where()") for p in predicates]
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
        self._not_with_completion("count()")
        return replace(self, counting=Count(n, within))

    def at_most(self, n: int, *, per: timedelta, weight: Path | None = None) -> Trigger:
        """Allow at most `n` firings (of one scope) per fixed window of `per`; see RateLimit.
        With `weight` (a path such as F.data.tokens), each firing takes that field's value
        of `n` instead of 1: a budget. An event whose weight is not a positive whole number
        is held back."""
        if self.rate_limit is not None:
            raise InvalidRule("at_most() was already given for this trigger")
        self._not_with_completion("at_most()")
        if weight is not None:
            if not isinstance(weight, Path) or not weight.names:
                raise InvalidRule(f"at_most(weight=) takes a path such as F.data.tokens, "
                                  f"got {weight!r}")
            self._check_path(weight, f"at_most(weight={weight!r})")
        return replace(self, rate_limit=RateLimit(n, per, weight))

    def scope(self, *by: ScopeSource, **named: ScopeSource) -> Trigger:
        """Split counts, rate limits and runs by values of the event: `.scope(F.data.service)`.

        A path is named by its last step, a function by its `__name__`; keywords name
        either explicitly. An event whose scope value is missing or null does not match.
        """
        if self.scope_by is not None:
            raise InvalidRule("scope() was already given for this trigger")
        self._not_with_completion("scope()")
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

    def completes(self, *, terminal: type[Event] | type[AppEventType] | str | None = None,
                  quiet: timedelta | None = None, late: LateRule = "ignore") -> Trigger:
        """Fire once per chain (correlation id), when it ends: on its `terminal` event (an
        event type's name, an Event or AppEventType class), or after `quiet` of event time
        without the chain's matched events, whichever first; with the whole gathered chain
        as the matched events. `late` ("ignore" or "rejudge") says what an event gathered
        after the end does. See streams.core.rules.chains."""
        if self.completion is not None:
            raise InvalidRule("completes() was already given for this trigger")
        for given, what in ((self.counting, "count()"), (self.rate_limit, "at_most()"),
                            (self.scope_by, "scope()")):
            if given is not None:
                raise InvalidRule(f"completes() and {what} do not go together: a completion "
                                  f"rule decides per chain, and its key is the chain")
        name: str | None = None
        if terminal is not None:
            if isinstance(terminal, type) and issubclass(terminal, AppEventType):
                terminal = terminal.app_event_name
            if terminal is AppEvent:
                raise InvalidRule("completes(terminal=AppEvent): name one event type that "
                                  "ends a chain, not every app event")
            try:
                _check_source(terminal)
            except InvalidRule as exc:
                raise InvalidRule(f"completes(terminal=): {exc}") from None
            name = terminal if isinstance(terminal, str) else terminal.event_type
        return replace(self, completion=Completion(name, quiet, late))

    def _not_with_completion(self, what: str) -> None:
        if self.completion is not None:
            raise InvalidRule(f"{what} and completes() do not go together: a completion rule "
                              f"decides per chain, and its key is the chain")

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
        if self.source is AppEvent:  # every app event but the pipeline's own records
            return isinstance(envelope.event, AppEvent) and not own_record(envelope.event.name)
        wanted = self.source if isinstance(self.source, str) else self.source.event_type
        return envelope.event_type == wanted

    def matches(self, envelope: Envelope, *, rule: str = "") -> bool:
        """Type, filters, scope and sampling (salted with `rule`); not counts or limits.
        A completion trigger samples whole chains, and matches its chains' terminal events
        (unfiltered) too."""
        if self.completion is not None:
            fraction = self.sample_fraction
            if fraction is not None and sample_point(rule, envelope.correlation_id) >= fraction:
                return False
            if self.ends_chain(envelope):
                return True
            return self.watches(envelope) and all(p.test(envelope) for p in self.predicates)
        if not self.watches(envelope):
            return False
        if not all(p.test(envelope) for p in self.predicates):
            return False
        if self.scope_by is not None and self.scope_by.values(envelope) is None:
            return False
        return self.sample_fraction is None or (
            sample_point(rule, envelope.event_id) < self.sample_fraction
        )

    def matches_plain(self, event: PlainEvent, *, rule: str = "") -> bool | None:
        """`matches` on a plain event where the plain form tells exactly (the same answer
        as `matches` on the event's envelope), None where only the envelope can tell."""
        if self.completion is not None:
            return None  # chains are sampled by correlation id, which the envelope holds
        if self.source is AppEvent:
            if not event.app or own_record(event.event_type):
                return False
        elif event.event_type != (self.source if isinstance(self.source, str)
                                  else self.source.event_type):
            return False
        # An unsure step may raise on the envelope: True only when none was; a sure False
        # anywhere in the conjunction is a no-match (raising is one too).
        unsure = False
        for predicate in conjuncts(self.predicates):
            answer = predicate.plain(event)
            if answer is False:
                return False
            if answer is None:
                unsure = True
        if self.scope_by is not None:
            for _name, source in self.scope_by.parts:
                value = source.resolve_plain(event) if isinstance(source, Path) else UNKNOWN
                if value is UNKNOWN:
                    unsure = True
                elif value is MISSING or value is None:
                    return False
        if self.sample_fraction is not None and \
                sample_point(rule, event.event_id) >= self.sample_fraction:
            return False
        return None if unsure else True

    def scope_values(self, envelope: Envelope) -> dict[str, str]:
        """The envelope's scope values; empty when the trigger has no scope. A completion
        trigger's scope is its chain: `{"chain": <correlation id>}`."""
        if self.completion is not None:
            return {"chain": envelope.correlation_id}
        if self.scope_by is None:
            return {}
        return self.scope_by.values(envelope) or {}

    def scope_key(self, envelope: Envelope) -> str | None:
        """The envelope's scope key; None when the trigger has no scope or a value is missing.
        A completion trigger's is its chain's (`chain=<correlation id>`)."""
        if self.completion is not None:
            return Scope.key_of(self.scope_values(envelope))
        return None if self.scope_by is None else self.scope_by.key(envelope)


def conjuncts(predicates: Iterable[Predicate]) -> Iterator[Predicate]:
    """The predicates a trigger requires, AllOf taken apart (at any depth of AllOf)."""
    for p in predicates:
        if isinstance(p, AllOf):
            yield from conjuncts(p.parts)
        else:
            yield p


def on(source: type[Event] | type[AppEventType] | str) -> Trigger:
    """A trigger watching an Event class, an app event type (its class or its name), or a
    built-in event type's name. `on(AppEvent)` watches every app event."""
    if isinstance(source, type) and issubclass(source, AppEventType):
        return Trigger(source.app_event_name)
    return Trigger(source)
