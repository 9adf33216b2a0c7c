"""The engine: rules, rule sets, their in-memory state, and the decisions they make.

`evaluate` takes one envelope through every rule of a set: a rule whose trigger matches
either fires (`Fire`), is held back by its rate limit (`Throttled`), or, while counting,
decides nothing yet. `RuleEngine` keeps the rules and their state together for tests and
offline replays; the Kafka layer runs the same `evaluate`.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Final

from streams.core.app_events import (
    AppEventTypes,
    app_event_types,
    known_event_types,
    own_record,
)
from streams.core.events import EVENT_TYPES, Envelope, RuleFired
from streams.core.ids import firing_id
from streams.core.plain import PlainEvent
from streams.core.rules.actions import Action
from streams.core.rules.chains import ChainWindow
from streams.core.rules.checks import InvalidRule
from streams.core.rules.triggers import CountState, RateLimit, RateState, Scope, Trigger

__all__ = [
    "RULE_NAME",
    "Decision",
    "Fire",
    "Rule",
    "RuleEngine",
    "RuleSet",
    "RuleState",
    "Throttled",
    "chain_due",
    "evaluate",
]

RULE_NAME: Final = re.compile(r"^[a-z0-9][a-z0-9:_.-]*$")
"""What a rule name must match; `|` is excluded, so state keys can use it as a separator."""


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

    def matches_plain(self, event: PlainEvent) -> bool | None:
        """`matches` on a decoded event's plain form: True or False when that is exactly
        what `matches` gives on its envelope, None when only the envelope can tell."""
        return self.when.matches_plain(event, rule=self.name)

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

    def check_event_types(self, types: AppEventTypes | None = None) -> None:
        """Refuse rules watching an event type that neither a built-in type nor a declared
        app event type (in `types`, by default the process-wide registry) has: such a rule
        would never fire. A worker calls this when it loads its rules.
        """
        known = types if types is not None else app_event_types
        unknown = [
            f"{rule.name!r} {what} {name!r}" for rule in self
            for what, name in (("watches", rule.when.event_type_name),
                               ("completes(terminal=) names",
                                rule.when.completion.terminal if rule.when.completion
                                else None))
            if name is not None
            and name not in EVENT_TYPES and name not in known and not own_record(name)
        ]
        if unknown:
            raise InvalidRule(
                f"rules watch event types no type has: {'; '.join(unknown)}. Declare each app "
                f"event type, class X(AppEventType, name='ns:name') or app_event_type('ns:name'), "
                f"in a module imported before the rules are loaded, or fix the name. "
                f"Known event types: {known_event_types(known)}"
            )


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
    """The counts, rate windows and chains of rules, in memory, keyed by rule name (a
    completion rule's state is one chain: the decider holds a RuleState per key)."""

    def __init__(self) -> None:
        self.counts: dict[str, CountState] = {}
        self.rates: dict[str, RateState] = {}
        self.chains: dict[tuple[str, str], ChainWindow] = {}  # by (rule, chain)

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
        """The rule's rate state. A limit whose `n` alone changed keeps the windows'
        counts (a budget raised mid-window has spent what it spent: raising 450 tokens to
        750 leaves 300 more, not 750); another window length or weight starts afresh (the
        windows' numbers or units differ)."""
        limit = rule.when.rate_limit
        if limit is None:
            raise ValueError(f"rule {rule.name!r} has no rate limit")
        state = self.rates.get(rule.name)
        if state is None or state.limit != limit:
            kept = state.windows if state is not None and \
                (state.limit.per, state.limit.weight) == (limit.per, limit.weight) else {}
            state = self.rates[rule.name] = RateState(limit)
            state.windows = kept
        return state

    def expire(self, now: datetime) -> None:
        """Forget what no event at or after `now` (event time) can be decided with."""
        for count in self.counts.values():
            count.expire(now)
        for rate in self.rates.values():
            rate.expire(now)


def _gathers(rule: Rule, envelope: Envelope) -> bool:
    """Whether a completion rule gathers the envelope into its chain (its watched type and
    filters; a terminal event of another type is not gathered)."""
    trigger = rule.when
    try:
        return trigger.watches(envelope) and all(p.test(envelope) for p in trigger.predicates)
    except Exception:  # a rule's own predicate failed: not gathered, as in matching
        return False


def _chain_fire(rule: Rule, window: ChainWindow, cause: str) -> Fire:
    scope = {"chain": window.chain}
    return Fire(rule, window.event_ids, Scope.key_of(scope), window.chain, cause, scope)


def _decide_chain(rule: Rule, envelope: Envelope, state: RuleState) -> Decision | None:
    """A completion rule's decision (streams.core.rules.chains): gather, end, or judge a
    late event again; a firing carries the whole gathered chain."""
    completion = rule.when.completion
    assert completion is not None
    at = (rule.name, envelope.correlation_id)
    window = state.chains.get(at) or ChainWindow(envelope.correlation_id)
    cause: str | None = None
    if _gathers(rule, envelope) and not window.holds(envelope.event_id) and not window.full:
        if window.ended is None:
            window = window.gather(envelope)
            if window.full:  # the chain is as long as a chain may be: judged now
                cause = envelope.event_id
                window = window.end(envelope.time, None)
        elif completion.late == "rejudge":
            window = window.gather(envelope)
            if completion.quiet is None or window.full:
                cause = envelope.event_id
                window = window.end(envelope.time, None)
            else:  # judged again once the late events have been quiet for the period
                window = window.late(envelope)
        # late == "ignore": the chain was judged as it stood
    if rule.when.ends_chain(envelope) and window.ended is None:
        if window.events:
            cause = envelope.event_id
        window = window.end(envelope.time, envelope.event_id)
    state.chains[at] = window
    return None if cause is None else _chain_fire(rule, window, cause)


def chain_due(rule: Rule, state: RuleState, clock: datetime, grace: timedelta,
              chain: str | None = None) -> list[Fire]:
    """A completion rule's chains (`chain` alone, when given) on the partition's clock
    (event time): the firings of chains (or of late events) quiet for the rule's period. A
    chain grace past its last event (ended, or never ended on a rule without a quiet period)
    is forgotten. Nothing changes for a chain not yet due."""
    completion = rule.when.completion
    if completion is None:
        return []
    fires: list[Fire] = []
    chosen = [(rule.name, chain)] if chain is not None else \
        [at for at in state.chains if at[0] == rule.name]
    for at in chosen:
        window = state.chains.get(at)
        deadline = None if window is None else window.deadline(completion, grace)
        if window is None or deadline is None or clock < deadline:
            continue
        if completion.quiet is not None and window.pending:
            state.chains[at] = window.end(deadline, None)
            fires.append(_chain_fire(rule, window, window.late_id))
        elif completion.quiet is not None and window.ended is None and window.events:
            state.chains[at] = window.end(deadline, None)
            fires.append(_chain_fire(rule, window, window.last_id))
        else:
            del state.chains[at]
    return fires


def _decide(rule: Rule, envelope: Envelope, state: RuleState) -> Decision | None:
    if not rule.matches(envelope):
        return None
    trigger = rule.when
    if trigger.completion is not None:
        return _decide_chain(rule, envelope, state)
    scope = trigger.scope_values(envelope)
    key = Scope.key_of(scope) if trigger.scope_by is not None else None
    matched: tuple[str, ...] = (envelope.event_id,)
    if trigger.counting is not None:
        done = state.counter(rule).add(envelope, key)
        if done is None:
            return None
        matched = tuple(done)
    if trigger.rate_limit is not None:
        weight = trigger.rate_limit.weight_of(envelope)
        if weight is None:  # a weight that is not a positive whole number: held back
            admitted, window = False, state.limiter(rule).window_at(envelope.time, key)
        else:
            admitted, window = state.limiter(rule).admit(envelope.time, key, weight)
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

    def __init__(self, rules: RuleSet | Iterable[Rule], state: RuleState | None = None,
                 *, grace: timedelta = timedelta(hours=1)) -> None:
        self.rules = rules if isinstance(rules, RuleSet) else RuleSet(rules)
        self.state = state if state is not None else RuleState()
        self.grace = grace
        # When completion rules' chains may be due: (when, rule, chain), stale entries
        # asked again and dropped, so `due` costs the chains it ends, not every chain.
        self._deadlines: list[tuple[datetime, str, str]] = []

    def evaluate(self, envelope: Envelope) -> list[Decision]:
        """The decisions about one envelope."""
        decisions = evaluate(self.rules, envelope, self.state)
        for rule in self.rules:
            completion = rule.when.completion
            if completion is not None:
                self._schedule(rule, envelope.correlation_id)
        return decisions

    def _schedule(self, rule: Rule, chain: str) -> None:
        window = self.state.chains.get((rule.name, chain))
        completion = rule.when.completion
        if window is not None and completion is not None:
            when = window.deadline(completion, self.grace)
            if when is not None:
                heapq.heappush(self._deadlines, (when, rule.name, chain))

    def replay(self, envelopes: Iterable[Envelope]) -> list[Decision]:
        """The decisions about envelopes taken in order."""
        return [d for envelope in envelopes for d in self.evaluate(envelope)]

    def due(self, clock: datetime) -> list[Fire]:
        """The firings of completion rules' chains quiet at event time `clock` (see
        `chain_due`; the decider calls it as its partition's clock moves); an ended chain is
        remembered for the engine's `grace`."""
        fires: list[Fire] = []
        while self._deadlines and self._deadlines[0][0] <= clock:
            _when, name, chain = heapq.heappop(self._deadlines)
            rule = self.rules.get(name)
            if rule is None:
                continue
            fires += chain_due(rule, self.state, clock, self.grace, chain)
            self._schedule(rule, chain)
        return fires
