"""Matching decoded events against rules, and turning decisions into the events they write.

Pure: no Kafka, no serde, no clock, so the worker (streams.core.matching re-exports this
module) and the in-memory replay (streams.core.replay) share it. The reactor agent asks
`match` for each decoded event: a stateless rule's decision is made here at once (the
engine's own match, fire or throttle); a stateful rule's match comes back as a `Forward`, for
the tenant's rules topic, where one decider makes the decision with `decide` and the tenant's
replayed state (the replay decides at once, with its own state). `fired` gives the
envelopes a firing writes (`rule_fired`, `run_started`). The reactor and the decider encode
those; this module never does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from streams.core.events import AppEvent, Envelope
from streams.core.rulebook import LiveRule
from streams.core.rules import Fire, Rule, RuleSet, RuleState, Throttled, evaluate
from streams.core.runs import fire_envelopes

__all__ = ["Decision", "Forward", "Matcher", "ReactorStats", "is_stateful"]

log = logging.getLogger(__name__)

Decision = Fire | Throttled


def is_stateful(rule: Rule) -> bool:
    """Whether a rule's decision depends on other events (count, rate limit, scope)."""
    when = rule.when
    return when.counting is not None or when.rate_limit is not None or when.scope_by is not None


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
    per_rule: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Forward:
    """A stateful rule matched: the event goes to the tenant's rules topic for the decider."""

    rule: Rule
    envelope: Envelope


class _Live:
    """One tenant's live rules, indexed by the event type they watch."""

    def __init__(self, rules: Mapping[str, LiveRule]) -> None:
        self.rules = dict(rules)
        self.by_type: dict[str, list[LiveRule]] = {}
        self.any_app_event: list[LiveRule] = []
        for found in self.rules.values():
            name = found.rule.when.event_type_name
            if name is None:
                self.any_app_event.append(found)
            else:
                self.by_type.setdefault(name, []).append(found)
        self.wanted = frozenset(t.encode() for t in self.by_type)
        self.alone = {name: RuleSet([found.rule]) for name, found in self.rules.items()}
        self.stateful_names = {name for name, found in self.rules.items()
                               if is_stateful(found.rule)}
        self.stateful = bool(self.stateful_names)

    def candidates(self, envelope: Envelope) -> list[LiveRule]:
        found = self.by_type.get(envelope.event_type, [])
        if self.any_app_event and isinstance(envelope.event, AppEvent):
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
        for rule in rules:
            source = rule.when.source
            if source is AppEvent:
                self._any_app_event.append(rule)
            else:
                name = source if isinstance(source, str) else source.event_type
                self._by_type.setdefault(name, []).append(rule)
        self._wanted = {t.encode() for t in self._by_type} | {b"run_started"}
        # Rules installed as data, per tenant (streams.core.rulebook), replaced as a whole by
        # `set_live`; `fallback` finds a live rule this matcher has not been given yet (the
        # decider may see a match before its own reactor's next batch applied the rule).
        self._live: dict[str, _Live] = {}
        self._live_wanted: frozenset[bytes] = frozenset()
        self._live_any_app_event = False
        self.fallback: Callable[[str, str], LiveRule | None] | None = None

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

    def match(self, envelope: Envelope) -> list[Forward | Decision]:
        """For each rule watching this event's type, in order: a Forward when a stateful
        rule matches, the decisions of a stateless one. A rule whose predicate raises does
        not match (logged)."""
        out: list[Forward | Decision] = []
        candidates = self._by_type.get(envelope.event_type, [])
        if self._any_app_event and isinstance(envelope.event, AppEvent):
            candidates = candidates + self._any_app_event
        for rule in candidates:
            out += self._match_one(rule, rule.name in self._stateful, self._alone[rule.name],
                                   envelope)
        live = self._live.get(envelope.tenant)
        if live is not None:
            for found in live.candidates(envelope):
                if found.is_live_at(envelope.seq):
                    out += self._match_one(found.rule, found.rule.name in live.stateful_names,
                                           live.alone[found.rule.name], envelope)
        return out

    def match_live(self, found: LiveRule, envelope: Envelope) -> list[Forward | Decision]:
        """`match` for one live rule alone (a catch-up over events the rule was installed
        before this process had it); events before its installation point do not match."""
        if not found.rule.when.watches(envelope) or not found.is_live_at(envelope.seq):
            return []
        return self._match_one(found.rule, is_stateful(found.rule), RuleSet([found.rule]),
                               envelope)

    def _match_one(self, rule: Rule, stateful: bool, alone: RuleSet,
                   envelope: Envelope) -> list[Forward | Decision]:
        try:
            # A stateless rule's decision is its match, made by the engine itself.
            decisions = [] if stateful else evaluate(alone, envelope, RuleState())
            matched = rule.matches(envelope) if stateful else bool(decisions)
        except Exception:  # a rule's own predicate failed: that rule does not match
            log.exception("rule %s raised on %s", rule.name, envelope.event_id)
            return []
        if not matched:
            return []
        self.stats.matched += 1
        if stateful:
            self.stats.forwarded += 1
            return [Forward(rule, envelope)]
        return list(decisions)

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

    def fired(self, decision: Decision, cause: Envelope) -> list[Envelope]:
        """The envelopes a decision writes: `rule_fired` and `run_started` for a firing,
        nothing for a throttle (counted either way)."""
        if isinstance(decision, Throttled):
            self.stats.throttled += 1
            return []
        self.stats.fired += 1
        self.stats.per_rule[decision.rule.name] = \
            self.stats.per_rule.get(decision.rule.name, 0) + 1
        return list(fire_envelopes(decision, cause))
