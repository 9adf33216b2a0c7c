"""Matching decoded events against rules, and turning decisions into the events they write.

Pure: no Kafka, no serde, no clock, so the worker (streams.core.matching re-exports this
module) and the in-memory replay (streams.core.replay) share it. The reactor agent asks
`match` for each decoded event: a stateless rule's decision is made here at once (the
engine's own match, fire or throttle); a stateful rule's match comes back as a `Forward`, for
the tenant's rules topic, where one decider makes the decision with `decide` and the tenant's
replayed state (the replay decides at once, with its own state). `fired` gives the
envelopes a firing writes (`rule_fired`, `run_started`). The reactor and the decider encode
those; this module never does.

The hot path matches a decoded event's plain form first (streams.core.plain): `match_plain`
looks the rules up by event type and, within a type, by the value of a field their filters
require with `eq` or `isin`, and asks each candidate's trigger on the plain event; it returns
the rules that match (sure) or may match (the plain form cannot tell), so an event no rule
matches costs no Envelope. `match(envelope, hits)` then decides those: a sure stateless match
fires at once, a maybe is matched on the envelope, a stateful one is matched and forwarded.
A stateless rule's decision is made here, not through the engine with a fresh state: the
same `Fire` as `evaluate` gives (the event alone, no scope).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, NamedTuple

from streams.core.app_events import own_record
from streams.core.events import AppEvent, Envelope
from streams.core.plain import PlainEvent, layout_of
from streams.core.rulebook import LiveRule
from streams.core.rules import Fire, Rule, RuleSet, RuleState, Throttled, evaluate
from streams.core.rules.compiled import compile_path, compile_trigger
from streams.core.rules.predicates import MISSING, UNKNOWN, Compare, Path
from streams.core.rules.triggers import conjuncts
from streams.core.runs import Cause, fire_envelopes, throttle_envelope

__all__ = ["Decision", "Forward", "Hit", "Matcher", "ReactorStats", "is_stateful"]

log = logging.getLogger(__name__)

Decision = Fire | Throttled


def _any_app(envelope: Envelope) -> bool:
    """Whether `on(AppEvent)` rules see the envelope: an app event not of the pipeline's own
    records (streams.core.app_events.own_record)."""
    event = envelope.event
    return isinstance(event, AppEvent) and not own_record(event.name)


def is_stateful(rule: Rule) -> bool:
    """Whether a rule's decision depends on other events (count, rate limit, scope, a
    chain's completion)."""
    when = rule.when
    return when.counting is not None or when.rate_limit is not None or \
        when.scope_by is not None or when.completion is not None


@dataclass
class ReactorStats:
    """What the reactor, its runs and the decider have done (one object, shared)."""

    events: int = 0
    matched: int = 0
    forwarded: int = 0
    fired: int = 0
    throttled: int = 0
    runs: int = 0
    succeeded: int = 0
    failed_attempts: int = 0
    dead_lettered: int = 0
    undecodable: int = 0
    caught_up: int = 0
    # Batches that ran actions: each waits for its runs before the next batch is read, so
    # runs / run_batches is how many runs share that wait.
    run_batches: int = 0
    per_rule: dict[str, int] = field(default_factory=dict)
    budget_refusals: dict[str, int] = field(default_factory=dict)  # by budget name


@dataclass(frozen=True)
class Forward:
    """A stateful rule matched: the event goes to the tenant's rules topic for the decider."""

    rule: Rule
    envelope: Envelope


class Hit(NamedTuple):
    """A rule that matches a plain event (`sure`) or may match it (only its envelope can
    tell): what `Matcher.match_plain` gives and `Matcher.match` decides."""

    rule: Rule
    stateful: bool
    sure: bool


# Operands an index may hold: their equality is their hash's (a rule's own value type with
# an __eq__ of its own is matched without the index).
_INDEXABLE: Final = (str, int, float, bool, type(None))


def _keys(rule: Rule) -> dict[Path, tuple[object, ...]]:
    """The values a rule requires at a path (`eq`, `isin`): no other value there matches."""
    found: dict[Path, tuple[object, ...]] = {}
    if rule.when.completion is not None:
        return found  # its terminal events need not pass its filters: not indexed by them
    for p in conjuncts(rule.when.predicates):
        if isinstance(p, Compare) and p.op in ("eq", "isin") and p.path not in found:
            values = (p.operand,) if p.op == "eq" else p.operand
            if isinstance(values, tuple) and all(type(v) in _INDEXABLE for v in values):
                found[p.path] = values
    return found


class _TypeIndex:
    """The rules watching one event type (or every app event), in order, by the value of
    the field most of them require (then the next field, for the rest)."""

    def __init__(self, event_type: str | None, rules: Sequence[tuple[Rule, bool]]) -> None:
        self.rules = list(rules)
        layout = layout_of(event_type or "")  # None: every app event, an app event's layout
        self.tests = [compile_trigger(rule.when, rule.name) for rule, _ in self.rules]
        keys = [_keys(rule) for rule, _ in self.rules]
        left = set(range(len(self.rules)))
        # (the path's getter, value -> positions, every position the path's table holds)
        self.tables: list[tuple[Callable[[PlainEvent], object], dict[object, list[int]],
                                list[int]]] = []
        while left:
            counts: dict[Path, int] = {}
            for i in left:
                for path in keys[i]:
                    counts[path] = counts.get(path, 0) + 1
            if not counts:
                break
            path = max(counts, key=lambda p: counts[p])
            table: dict[object, list[int]] = {}
            members = sorted(i for i in left if path in keys[i])
            for i in members:
                for value in keys[i][path]:
                    positions = table.setdefault(value, [])
                    if not positions or positions[-1] != i:
                        positions.append(i)
            self.tables.append((compile_path(path, layout), table, members))
            left -= set(members)
        self.rest = sorted(left)
        self.all = list(range(len(self.rules)))

    def hits(self, event: PlainEvent) -> list[Hit]:
        """The rules that match or may match, in order."""
        if not self.tables:
            positions = self.all
        else:
            positions = list(self.rest)
            sources = 1 if positions else 0
            for get, table, members in self.tables:
                value = get(event)
                if value is MISSING:
                    continue  # eq and isin never match a missing value
                if value is UNKNOWN:
                    found: list[int] | None = members
                else:
                    try:
                        found = table.get(value)
                    except TypeError:  # an unhashable value equals no indexed operand
                        found = None
                if found:
                    positions += found
                    sources += 1
            if sources > 1:
                positions.sort()
        out: list[Hit] = []
        rules, tests = self.rules, self.tests
        for i in positions:
            try:
                answer = tests[i](event)
            except Exception:  # the envelope's match says (and logs) why
                answer = None
            if answer is False:
                continue
            rule, stateful = rules[i]
            out.append(Hit(rule, stateful, answer is True))
        return out


class _PlainRules:
    """Rules indexed for plain events: by event type, then by a field value."""

    def __init__(self, rules: Iterable[tuple[Rule, bool]]) -> None:
        by_type: dict[str, list[tuple[Rule, bool]]] = {}
        any_app: list[tuple[Rule, bool]] = []
        for rule, stateful in rules:
            for name in rule.when.watched_types:
                if name is None:
                    any_app.append((rule, stateful))
                else:
                    by_type.setdefault(name, []).append((rule, stateful))
        self.by_type = {name: _TypeIndex(name, found) for name, found in by_type.items()}
        self.any_app = _TypeIndex(None, any_app) if any_app else None

    def hits(self, event: PlainEvent) -> list[Hit]:
        index = self.by_type.get(event.event_type)
        found = index.hits(event) if index is not None else []
        if self.any_app is not None and event.app and not own_record(event.event_type):
            found += self.any_app.hits(event)
        return found


class _Live:
    """One tenant's live rules, indexed by the event type they watch."""

    def __init__(self, rules: Mapping[str, LiveRule]) -> None:
        self.rules = dict(rules)
        self.by_type: dict[str, list[LiveRule]] = {}
        self.any_app_event: list[LiveRule] = []
        for found in self.rules.values():
            for name in found.rule.when.watched_types:
                if name is None:
                    self.any_app_event.append(found)
                else:
                    self.by_type.setdefault(name, []).append(found)
        self.wanted = frozenset(t.encode() for t in self.by_type)
        self.alone = {name: RuleSet([found.rule]) for name, found in self.rules.items()}
        self.stateful_names = {name for name, found in self.rules.items()
                               if is_stateful(found.rule)}
        self.stateful = bool(self.stateful_names)
        self.plain = _PlainRules((found.rule, found.rule.name in self.stateful_names)
                                 for found in self.rules.values())

    def candidates(self, envelope: Envelope) -> list[LiveRule]:
        found = self.by_type.get(envelope.event_type, [])
        if self.any_app_event and _any_app(envelope):
            found = found + self.any_app_event
        return found


class Matcher:
    """The rules indexed by the event type they watch; decisions for one event at a time."""

    def __init__(self, rules: RuleSet, stats: ReactorStats | None = None) -> None:
        self.rules = rules
        self.stats = stats or ReactorStats()
        # Rules by the event type they watch, so an event is checked only against its own.
        self._by_type: dict[str, list[Rule]] = {}
        self._any_app_event: list[Rule] = []
        # Each rule alone, for the engine: built once, not per event.
        self._alone = {rule.name: RuleSet([rule]) for rule in rules}
        self._stateful = {rule.name for rule in rules if is_stateful(rule)}
        self._completes = [rule for rule in rules if rule.when.completion is not None]
        for rule in rules:
            for name in rule.when.watched_types:
                if name is None:
                    self._any_app_event.append(rule)
                else:
                    self._by_type.setdefault(name, []).append(rule)
        self._wanted = {t.encode() for t in self._by_type} | {b"run_started"}
        self._plain = _PlainRules((rule, rule.name in self._stateful) for rule in rules)
        # Rules installed as data, per tenant (streams.core.rulebook), replaced as a whole by
        # `set_live`; `fallback` finds a live rule this matcher has not been given yet (the
        # decider may see a match before its own reactor's next batch applied the rule).
        self._live: dict[str, _Live] = {}
        self._live_wanted: frozenset[bytes] = frozenset()
        self._live_any_app_event = False
        self.fallback: Callable[[str, str], LiveRule | None] | None = None
        # The same, allowed to read the rulebook there and then (blocking): for the decider,
        # whose claims may name a backfill budget installed a moment ago.
        self.fallback_now: Callable[[str, str], LiveRule | None] | None = None

    def completion_rules(self, tenant: str) -> list[Rule]:
        """The tenant's rules that judge chains when they end (streams.core.rules.chains)."""
        live = self._live.get(tenant)
        if live is None:
            return self._completes
        return self._completes + [found.rule for found in live.rules.values()
                                  if found.rule.when.completion is not None]

    def moves_clock(self, envelope: Envelope) -> bool:
        """Whether the envelope's time moves its tenant's completion clock: a completion
        rule watches its type or ends chains with it (the pipeline's own records, stamped
        when written, do not, unless a completion rule watches them)."""
        return any(rule.when.watches(envelope) or rule.when.ends_chain(envelope)
                   for rule in self.completion_rules(envelope.tenant))

    @property
    def has_stateful(self) -> bool:
        """Whether any rule needs the decider."""
        return bool(self._stateful) or any(live.stateful for live in self._live.values())

    def knows(self, rule_name: str) -> bool:
        """Whether this process may have the rule (a forwarded match may name a removed
        one); a live rule is looked up by the envelope's tenant in `decide`."""
        return rule_name in self._alone or bool(self._live) or self.fallback is not None

    def set_live(self, tenant: str, rules: Mapping[str, LiveRule]) -> None:
        """Make `rules` (installed as data) the tenant's live rules, replacing the ones
        before; each matches only events past its installation point."""
        if rules:
            self._live[tenant] = _Live(rules)
        else:
            self._live.pop(tenant, None)
        self._live_wanted = frozenset(t for live in self._live.values() for t in live.wanted)
        self._live_any_app_event = any(live.any_app_event for live in self._live.values())

    def live(self, tenant: str) -> Mapping[str, LiveRule]:
        """The tenant's live rules as this matcher has them."""
        live = self._live.get(tenant)
        return live.rules if live is not None else {}

    def rule(self, tenant: str, name: str) -> Rule | None:
        """The rule called `name` for a tenant: a rules module's, or a live one."""
        alone = self._alone.get(name)
        if alone is not None:
            return alone[name]
        found = self._live_rule(tenant, name)
        return found.rule if found is not None else None

    def rule_now(self, tenant: str, name: str) -> Rule | None:
        """`rule`, a miss asked of `fallback_now` (which may block on a read): for a thread
        that may wait, never an event loop."""
        found = self.rule(tenant, name)
        if found is None and self.fallback_now is not None:
            live = self.fallback_now(tenant, name)
            found = live.rule if live is not None else None
        return found

    def _live_rule(self, tenant: str, name: str) -> LiveRule | None:
        live = self._live.get(tenant)
        if live is not None and name in live.rules:
            return live.rules[name]
        return self.fallback(tenant, name) if self.fallback is not None else None

    def wants(self, event_type: bytes | None) -> bool:
        """Whether an event with this `event_type` header may matter (a rule watches its
        type, or it starts a run), so others are skipped without decoding. No header, or a
        rule on any application event: it may."""
        return bool(self._any_app_event) or self._live_any_app_event or event_type is None \
            or event_type in self._wanted or event_type in self._live_wanted

    def match_plain(self, event: PlainEvent) -> list[Hit]:
        """The rules that match a plain event or may (the live ones past their installation
        point), in `match`'s order; empty when none can, so no envelope is needed."""
        hits = self._plain.hits(event)
        live = self._live.get(event.head["tenant"])
        if live is not None:
            found = live.plain.hits(event)
            if found:
                seq = event.seq
                hits += [h for h in found if live.rules[h.rule.name].is_live_at(seq)]
        return hits

    def match(self, envelope: Envelope, hits: Sequence[Hit] | None = None,
              ) -> list[Forward | Decision]:
        """For each rule watching this event's type, in order: a Forward when a stateful
        rule matches, the decisions of a stateless one. A rule whose predicate raises does
        not match (logged). With `hits` (`match_plain` of the same event), only those rules
        are matched, a sure one without matching it again."""
        if hits is not None:
            out: list[Forward | Decision] = []
            for hit in hits:
                out += self._match_one(hit.rule, hit.stateful, envelope, sure=hit.sure)
            return out
        out = []
        candidates = self._by_type.get(envelope.event_type, [])
        if self._any_app_event and _any_app(envelope):
            candidates = candidates + self._any_app_event
        for rule in candidates:
            out += self._match_one(rule, rule.name in self._stateful, envelope)
        live = self._live.get(envelope.tenant)
        if live is not None:
            for found in live.candidates(envelope):
                if found.is_live_at(envelope.seq):
                    out += self._match_one(found.rule, found.rule.name in live.stateful_names,
                                           envelope)
        return out

    def match_live(self, found: LiveRule, envelope: Envelope) -> list[Forward | Decision]:
        """`match` for one live rule alone (a catch-up over events the rule was installed
        before this process had it); events before its installation point do not match."""
        when = found.rule.when
        if not (when.watches(envelope) or when.ends_chain(envelope)) or \
                not found.is_live_at(envelope.seq):
            return []
        return self._match_one(found.rule, is_stateful(found.rule), envelope)

    def _match_one(self, rule: Rule, stateful: bool, envelope: Envelope, *,
                   sure: bool = False) -> list[Forward | Decision]:
        if not sure:
            try:
                matched = rule.matches(envelope)
            except Exception:  # a rule's own predicate failed: that rule does not match
                log.exception("rule %s raised on %s", rule.name, envelope.event_id)
                return []
            if not matched:
                return []
        self.stats.matched += 1
        if stateful:
            self.stats.forwarded += 1
            return [Forward(rule, envelope)]
        # A stateless rule (no count, limit or scope) fires for the event alone: the Fire
        # the engine's evaluate gives it, without a RuleState per event.
        return [Fire(rule, (envelope.event_id,), None, envelope.correlation_id,
                     envelope.event_id, {})]

    def decide(self, rule_name: str, envelope: Envelope, state: RuleState) -> list[Decision]:
        """A forwarded match's decisions against the tenant's state (which they update);
        none for a rule this process no longer has."""
        alone = self._alone.get(rule_name)
        if alone is None:
            found = self._live_rule(envelope.tenant, rule_name)
            if found is None:
                return []
            alone = RuleSet([found.rule])
        return list(evaluate(alone, envelope, state))

    def fired(self, decision: Decision, cause: Cause) -> list[Envelope]:
        """The envelopes a decision writes: `rule_fired` and `run_started` for a firing,
        the throttle's record for a throttle (counted either way)."""
        if isinstance(decision, Throttled):
            self.stats.throttled += 1
            return [throttle_envelope(decision, cause)]
        self.stats.fired += 1
        self.stats.per_rule[decision.rule.name] = \
            self.stats.per_rule.get(decision.rule.name, 0) + 1
        return list(fire_envelopes(decision, cause))
