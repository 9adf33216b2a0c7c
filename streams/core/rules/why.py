"""Why a rule did (or did not) act on an event: the record of what a rule considered.

For one rule and one event (the target it considered) the answer is an `Outcome` and a
detail saying why, in the order a decision is made:

- `not_watched`: the event is not of the type the rule watches;
- `filtered_out`: a `where` filter did not hold (the detail names the first that failed), or
  a scope value is missing;
- `sampled_out`: the rule's `sample(fraction)` left the event out (the point is derived from
  the rule and the event id, so the answer is the one every worker gave);
- `counting`: a counting rule counted the event, and the count it belongs to has not fired
  on it (a count fires on the event that completes it; the others are in its `matched`);
- `throttled`: the rule's `at_most` window was full (recorded by the decider as a
  `streams:throttled` app event in the event's chain);
- `undecided`: it matched, and neither a firing nor a throttle was recorded for it (the
  decider is behind, or the rule was not live when the event came);
- `fired`, then the run's state: `judged` (succeeded), `handed_off` (the evaluator handed
  it to a person), `over_budget` (its budget refused the claim: no call was made),
  `running`, `retrying` or `dead_lettered` (its attempts failed).

The stateless part (`considered`) is pure and decides exactly what the workers decided; the
stateful part reads records with derived ids (`firing_id`, `throttled_event_id`), so one
answer costs a few index look-ups whatever the log's length.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from streams.core.events import (
    AppEvent,
    Envelope,
    RuleFired,
    RunDeadLettered,
    RunFailed,
    RunSucceeded,
)
from streams.core.ids import (
    fired_event_id,
    firing_id,
    run_id_of,
    sample_point,
    throttled_event_id,
)
from streams.core.rules.chains import MAX_CHAIN_EVENTS
from streams.core.rules.engine import Rule, Throttled
from streams.core.rules.triggers import conjuncts

__all__ = [
    "OUTCOMES",
    "THROTTLED_RECORD",
    "Outcome",
    "Why",
    "considered",
    "decided_why",
    "fold_why",
    "run_outcome",
    "throttle_data",
    "throttled_why",
]

Outcome = Literal["not_watched", "filtered_out", "sampled_out", "counting", "gathered",
                  "late", "throttled", "undecided", "judged", "handed_off", "over_budget",
                  "running", "retrying", "dead_lettered"]
OUTCOMES: Final[tuple[str, ...]] = Outcome.__args__  # type: ignore[attr-defined]
"""Every outcome, in the order a decision reaches it."""

THROTTLED_RECORD: Final = "streams:throttled"
"""The app event name of a throttle's record (its data: `throttle_data`)."""


@dataclass(frozen=True)
class Why:
    """What a rule did with one event, and why: `judged` is True only when a run of the
    rule's action succeeded on it without handing it off."""

    rule: str
    event_id: str
    outcome: Outcome
    detail: str
    firing_id: str | None = None
    run_id: str | None = None
    attempts: int = 0
    output: Mapping[str, Any] | None = field(default=None, compare=False)

    @property
    def judged(self) -> bool:
        """Whether the rule's action ran to completion on the event."""
        return self.outcome == "judged"

    def as_dict(self) -> dict[str, Any]:
        """The answer as plain data (what the REST route and the CLI print)."""
        return {"rule": self.rule, "event_id": self.event_id, "outcome": self.outcome,
                "judged": self.judged, "detail": self.detail, "firing_id": self.firing_id,
                "run_id": self.run_id, "attempts": self.attempts,
                "output": None if self.output is None else dict(self.output)}


def considered(rule: Rule, envelope: Envelope) -> Why | None:
    """The stateless part of a decision: why the rule let the event go (not watched,
    filtered out, sampled out), or None when it matched, so counts, limits and firings
    decide. Exactly `rule.matches(envelope)`, with the reason. A completion rule samples
    whole chains (by correlation id) and takes a chain's terminal event whatever its
    filters say."""
    trigger = rule.when
    name, event_id = rule.name, envelope.event_id
    in_chain = trigger.completion is not None
    fraction = trigger.sample_fraction
    if in_chain and fraction is not None:
        sampled = _sampled_out(name, event_id, fraction, envelope.correlation_id, "chain")
        if sampled is not None:
            return sampled
        fraction = None
    if in_chain and trigger.ends_chain(envelope):
        return None
    if not trigger.watches(envelope):
        watched = trigger.event_type_name or "app events"
        return Why(name, event_id, "not_watched",
                   f"the rule watches {watched}, this is a {envelope.event_type}")
    for predicate in conjuncts(trigger.predicates):
        if not predicate.test(envelope):
            return Why(name, event_id, "filtered_out", f"where {predicate!r} does not hold")
    if trigger.scope_by is not None and trigger.scope_by.values(envelope) is None:
        names = ", ".join(n for n, _ in trigger.scope_by.parts)
        return Why(name, event_id, "filtered_out",
                   f"a scope value ({names}) is missing or null")
    if fraction is not None:
        return _sampled_out(name, event_id, fraction, event_id, "event")
    return None


def _sampled_out(rule: str, event_id: str, fraction: float, by: str,
                 what: str) -> Why | None:
    point = sample_point(rule, by)
    if point < fraction:
        return None
    return Why(rule, event_id, "sampled_out",
               f"sample({fraction:g}) keeps points below {fraction:g}; this {what}'s "
               f"is {point:.4f}")


def throttle_data(throttled: Throttled) -> dict[str, Any]:
    """The data of a throttle's record: the rule, its scope key, the full window (its
    number, counted from the epoch in windows of `per`) and the limit."""
    limit = throttled.limit
    return {"rule": throttled.rule.name, "scope_key": throttled.scope_key,
            "window": throttled.window, "at_most": limit.n,
            "per_seconds": limit.per.total_seconds(),
            "window_start": limit.window_start(throttled.window).isoformat(),
            "matched": list(throttled.matched_event_ids)}


def throttled_why(rule: Rule, event_id: str, firing: str, record: Envelope) -> Why:
    """The answer for an event whose throttle record is `record`."""
    event = record.event
    data = event.data if isinstance(event, AppEvent) else {}
    detail = (f"at_most({data.get('at_most')}, per={data.get('per_seconds')}s): the window "
              f"from {data.get('window_start')} was full")
    if data.get("scope_key"):
        detail += f" for scope {data['scope_key']}"
    return Why(rule.name, event_id, "throttled", detail, firing_id=firing)


def run_outcome(rule: Rule, event_id: str, firing: str, run_id: str,
                emitted: Sequence[Envelope]) -> Why:
    """The answer for an event that fired the rule, from its run's lifecycle events."""
    attempts = 1
    outcome: Outcome = "running"
    detail = "the run has started and not finished"
    output: Mapping[str, Any] | None = None
    for envelope in emitted:
        event = envelope.event
        if isinstance(event, RunSucceeded) and event.run_id == run_id:
            attempts = max(attempts, event.attempt)
            output = event.output
            if "handed_off" in event.output:
                outcome, detail = "handed_off", f"handed off to {event.output['handed_off']}"
            elif "over_budget" in event.output:
                outcome = "over_budget"
                detail = (f"budget {event.output['over_budget']!r} refused the claim of "
                          f"{event.output.get('claimed_tokens')} tokens: no call was made")
            else:
                outcome, detail = "judged", f"the run succeeded on attempt {event.attempt}"
        elif isinstance(event, RunFailed) and event.run_id == run_id \
                and outcome in ("running", "retrying"):
            attempts = max(attempts, event.attempt)
            outcome, detail = "retrying", f"attempt {event.attempt} failed: {event.error}"
        elif isinstance(event, RunDeadLettered) and event.run_id == run_id:
            attempts = max(attempts, event.attempts)
            outcome = "dead_lettered"
            detail = f"dead-lettered after {event.attempts} attempts: {event.error}"
    return Why(rule.name, event_id, outcome, detail, firing_id=firing, run_id=run_id,
               attempts=attempts, output=output)


def decided_why(rule: Rule, event_id: str, find: Callable[[str], Envelope | None],
                run_events: Sequence[Envelope]) -> Why:
    """What the stateful part decided for an event the rule's checks let through: fired
    (with its run's state from `run_events`), throttled, counting or undecided, from the
    records `find` gives by their derived ids (the event's chain, or a whole log)."""
    completion = rule.when.completion
    if completion is not None:
        # A chain's firing lists every gathered event as matched: its newest judgement.
        judged = [e.event for e in run_events if isinstance(e.event, RuleFired)
                  and e.event.rule == rule.name and event_id in e.event.matched]
        if judged:
            firing = judged[-1].firing_id
            return run_outcome(rule, event_id, firing, run_id_of(firing), run_events)
        target = find(event_id)
        if target is not None and rule.when.ends_chain(target):
            return Why(rule.name, event_id, "undecided",
                       "it ends its chain; no judgement of the chain is recorded yet: it "
                       "gathered no event of the rule, or the decider is behind")
        sizes = [len(e.event.matched) for e in run_events
                 if isinstance(e.event, RuleFired) and e.event.rule == rule.name]
        if sizes and (completion.late == "ignore" or max(sizes) >= MAX_CHAIN_EVENTS):
            return Why(rule.name, event_id, "late",
                       "it came after its chain was judged (or was full), and the rule "
                       "ignores late events")
        return Why(rule.name, event_id, "gathered",
                   f"gathered into its chain, judged when the chain ends ({_ending(rule)})")
    firing = firing_id(rule.name, event_id)
    if find(fired_event_id(firing)) is not None:
        return run_outcome(rule, event_id, firing, run_id_of(firing), run_events)
    throttle = find(throttled_event_id(firing))
    if throttle is not None:
        return throttled_why(rule, event_id, firing, throttle)
    count = rule.when.counting
    if count is not None:
        return Why(rule.name, event_id, "counting",
                   f"counted for count({count.n}, within={count.within}); a count fires "
                   "on the event that completes it, and lists the others as matched")
    return Why(rule.name, event_id, "undecided",
               "it matched; no firing or throttle is recorded for it yet: the decider "
               "is behind, or the rule was not live when the event came")


def _ending(rule: Rule) -> str:
    completion = rule.when.completion
    assert completion is not None
    parts = [f"on {completion.terminal}"] if completion.terminal else []
    if completion.quiet is not None:
        parts.append(f"after {completion.quiet} of event time without its events")
    return " or ".join(parts)


def fold_why(rules: Iterable[Rule], envelopes: Sequence[Envelope],
             chosen: Iterable[Envelope] | None = None) -> dict[str, dict[str, int]]:
    """Per rule, how many of the events it watches (of `chosen`, by default all of
    `envelopes`) reached each outcome: what `why` answers one event at a time, counted over
    a log (offline: the report). Firings, throttles and runs are looked up among
    `envelopes`, which should hold what followed the chosen events. An outcome no event
    reached is left out; `not_watched` is never counted."""
    rules = list(rules)
    if not rules:
        return {}  # what follows indexes every envelope for the rules' look-ups
    by_id = {e.event_id: e for e in envelopes}
    runs: dict[str, list[Envelope]] = defaultdict(list)
    for envelope in envelopes:
        run_id = getattr(envelope.event, "run_id", None)
        if isinstance(run_id, str) and isinstance(
                envelope.event, RunSucceeded | RunFailed | RunDeadLettered):
            runs[run_id].append(envelope)
    # A completion rule's firing names every event of its chain: per rule, each event's
    # newest firing envelope (folded in log order).
    chain_fired: dict[tuple[str, str], tuple[Envelope, str]] = {}
    for envelope in envelopes:
        if isinstance(envelope.event, RuleFired):
            for matched in envelope.event.matched:
                chain_fired[(envelope.event.rule, matched)] = (envelope,
                                                              envelope.event.firing_id)
    counts: dict[str, Counter[str]] = {}
    targets = list(envelopes if chosen is None else chosen)
    for rule in rules:
        tally = counts.setdefault(rule.name, Counter())
        for envelope in targets:
            if not rule.when.watches(envelope):
                continue
            event_id = envelope.event_id
            if rule.when.completion is not None:
                fired = chain_fired.get((rule.name, event_id))
                run_events = [] if fired is None else [
                    fired[0], *runs.get(run_id_of(fired[1]), [])]
            else:
                run_events = runs.get(run_id_of(firing_id(rule.name, event_id)), [])
            why = considered(rule, envelope) or decided_why(rule, event_id, by_id.get,
                                                            run_events)
            tally[why.outcome] += 1
    return {name: {o: tally[o] for o in OUTCOMES if tally[o]} for name, tally in counts.items()}

