"""Matching decoded events against rules, and turning decisions into the events they write.

Pure: no Kafka, no serde, no clock, so the worker (streams.runtime.matcher re-exports this
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
from dataclasses import dataclass, field

from streams.core.events import AppEvent, Envelope
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
    per_rule: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Forward:
    """A stateful rule matched: the event goes to the tenant's rules topic for the decider."""

    rule: Rule
    envelope: Envelope


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

    @property
    def has_stateful(self) -> bool:
        """Whether any rule needs the decider."""
        return bool(self._stateful)

    def knows(self, rule_name: str) -> bool:
        """Whether this process has the rule (a forwarded match may name a removed one)."""
        return rule_name in self._alone

    def wants(self, event_type: bytes | None) -> bool:
        """Whether an event with this `event_type` header may matter (a rule watches its
        type, or it starts a run), so others are skipped without decoding. No header, or a
        rule on any application event: it may."""
        return bool(self._any_app_event) or event_type is None or event_type in self._wanted

    def match(self, envelope: Envelope) -> list[Forward | Decision]:
        """For each rule watching this event's type, in order: a Forward when a stateful
        rule matches, the decisions of a stateless one. A rule whose predicate raises does
        not match (logged)."""
        out: list[Forward | Decision] = []
        candidates = self._by_type.get(envelope.event_type, [])
        if self._any_app_event and isinstance(envelope.event, AppEvent):
            candidates = candidates + self._any_app_event
        for rule in candidates:
            stateful = rule.name in self._stateful
            try:
                # A stateless rule's decision is its match, made by the engine itself.
                decisions = [] if stateful else evaluate(self._alone[rule.name], envelope,
                                                         RuleState())
                matched = rule.matches(envelope) if stateful else bool(decisions)
            except Exception:  # a rule's own predicate failed: that rule does not match
                log.exception("rule %s raised on %s", rule.name, envelope.event_id)
                continue
            if not matched:
                continue
            self.stats.matched += 1
            if stateful:
                self.stats.forwarded += 1
                out.append(Forward(rule, envelope))
            out += decisions
        return out

    def decide(self, rule_name: str, envelope: Envelope, state: RuleState) -> list[Decision]:
        """A forwarded match's decisions against the tenant's state (which they update);
        none for a rule this process no longer has."""
        alone = self._alone.get(rule_name)
        if alone is None:
            return []
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
