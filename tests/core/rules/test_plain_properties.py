"""The plain prefilter never rejects what the full match accepts, and decides as before.

Random events (app events, feedback, run lifecycle, proposals; every actor kind; with and
without a trace; the time as a datetime or as epoch millis) and random rules (comparisons
on payload, envelope, model and missing paths; user functions that pass, fail or raise; all,
any and not; sampling; scopes and counts, which make a rule stateful). For each event the
plain form is built from its record and the envelope from the same record, and:

- a rule's plain answer, when sure, is the full match's (exceptions: no match);
- `Matcher.match_plain` keeps every rule the full match accepts;
- `Matcher.match(envelope, match_plain(...))` gives what `Matcher.match(envelope)` gives, and
  what the engine gave before (a stateless rule through `evaluate` with a fresh RuleState).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from streams.adapters.avro.codec import envelope_from_record, envelope_to_record, plain_from_record
from streams.core.actors import AgentActor, EvaluatorActor, SystemActor, UserActor
from streams.core.events import (
    AppEvent,
    Change,
    Envelope,
    Event,
    FeedbackGiven,
    ProposalMade,
    RunStarted,
    RunSucceeded,
    Seq,
    TraceContext,
)
from streams.core.matching import Forward, Matcher, is_stateful
from streams.core.rules import (
    F,
    InvalidRule,
    Path,
    Predicate,
    Rule,
    RuleSet,
    RuleState,
    all_of,
    any_of,
    evaluate,
    not_,
    on,
    run,
)
from streams.core.targets import ChainTarget, FiringTarget, RunTarget

KEYS = st.sampled_from(["a", "b", "n", "s", "flag"])
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from([0.5, 1.0]),
                    st.sampled_from(["x", "y", "", "s1"]))
JSON = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(KEYS, inner, max_size=3)), max_leaves=6)
DATA = st.dictionaries(KEYS, JSON, max_size=4)
NAMES = st.sampled_from(["x", "y", "s1"])

ACTORS = st.one_of(st.builds(UserActor, id=NAMES), st.builds(AgentActor, id=NAMES),
                   st.builds(EvaluatorActor, name=NAMES, version=st.sampled_from(["0", "2"])),
                   st.just(SystemActor()))
TARGETS = st.one_of(st.builds(RunTarget, run_id=NAMES), st.builds(FiringTarget, firing_id=NAMES),
                    st.builds(ChainTarget, correlation_id=NAMES))
CHANGES = st.builds(Change, set=st.dictionaries(KEYS, NAMES, max_size=2),
                    unset=st.lists(KEYS, max_size=2))
EVENTS: st.SearchStrategy[Event] = st.one_of(
    st.builds(AppEvent, name=st.sampled_from(["t:a", "t:b"]), data=DATA),
    st.builds(FeedbackGiven, feedback_type=st.sampled_from(["q", "r"]), target=TARGETS,
              value=DATA, target_trace_id=st.none() | NAMES, target_rule=st.none() | NAMES,
              target_action=st.none() | NAMES),
    st.builds(RunSucceeded, run_id=NAMES, rule=NAMES, action=NAMES, attempt=st.integers(1, 3),
              output=DATA),
    st.builds(RunStarted, run_id=NAMES, rule=NAMES, action=NAMES, firing_id=NAMES,
              attempt=st.integers(1, 3), scope=st.dictionaries(KEYS, NAMES, max_size=2)),
    st.builds(ProposalMade, proposal_id=NAMES, artifact_id=NAMES, kind=NAMES,
              action=st.just("revise"), change=CHANGES, run_id=st.none() | NAMES),
)
TIMES = st.integers(1_600_000_000_000, 1_900_000_000_000).map(
    lambda ms: datetime.fromtimestamp(ms / 1000, UTC))
ENVELOPES = st.builds(
    lambda event, actor, time, trace, caused: Envelope.new(
        event, tenant="acme", workspace="prod", actor=actor, time=time, trace=trace,
        causation_id=caused),
    EVENTS, ACTORS, TIMES,
    st.none() | st.just(TraceContext(traceparent="00-" + "a" * 32 + "-" + "b" * 16 + "-01")),
    st.none() | NAMES)

COMMON: list[Path] = [
    F.nothing, F.actor, F.workspace, F.tenant, F.event_type, F.envelope.time,
    F.envelope.trace, F.envelope.trace.traceparent, F.envelope.causation_id,
    F.envelope.seq.offset, F.envelope.event, F.envelope.event_id, F.envelope.actor.kind,
]
# The paths a rule on each kind of event reads (and some that lead nowhere in it).
PATHS: dict[str, list[Path]] = {
    "app": [F.data.a, F.data.n, F.data.a.b, F.data.a[0], F.data["flag"], F.name, F.data],
    "feedback_given": [F.value.a, F.value.n.b, F.value, F.target, F.target.kind,
                       F.target.run_id, F.target.firing_id, F.target.correlation_id,
                       F.target.id, F.target.run_id[0], F.feedback_type, F.target_rule],
    "run_succeeded": [F.rule, F.output.a, F.output, F.attempt, F.run_id],
    "run_started": [F.rule, F.scope.a, F.scope, F.attempt, F.firing_id],
    "proposal_made": [F.change, F.change.set.a, F.change.unset, F.run_id, F.kind],
}
SOURCES: dict[str, list[Any]] = {
    "app": [AppEvent, "t:a", "t:b"], "feedback_given": [FeedbackGiven, "feedback_given"],
    "run_succeeded": [RunSucceeded], "run_started": [RunStarted],
    "proposal_made": [ProposalMade, "proposal_made"],
}


def kind_of(envelope: Envelope) -> str:
    return "app" if isinstance(envelope.event, AppEvent) else envelope.event_type
OPERANDS = st.one_of(SCALARS, st.sampled_from(["user:x", "system", "evaluator:x@0", "run",
                                              "acme", "prod", "t:a", "q"]),
                     TIMES, st.just({"a": "x"}), st.just([None]))


def _raises(envelope: Envelope) -> bool:
    raise ZeroDivisionError("a predicate's bug")


def _reads_data(envelope: Envelope) -> bool:
    return bool(envelope.data.get("a"))


FUNCTIONS = st.sampled_from([lambda e: True, lambda e: False, _raises, _raises, _reads_data])


@st.composite
def compares(draw: st.DrawFn, kind: str) -> Predicate:
    path = draw(st.sampled_from(PATHS[kind] + COMMON))
    op = draw(st.sampled_from(["eq", "ne", "lt", "le", "gt", "ge", "isin", "contains",
                               "exists"]))
    if op == "isin":
        return path.isin(draw(st.lists(OPERANDS.filter(lambda v: not isinstance(v, dict | list)),
                                       max_size=3)))
    if op == "exists":
        return path.exists()
    return getattr(path, op)(draw(OPERANDS))  # type: ignore[no-any-return]


def predicates(kind: str) -> st.SearchStrategy[Predicate]:
    return st.recursive(
        st.one_of(compares(kind), compares(kind), FUNCTIONS), lambda inner: st.one_of(
            st.lists(inner, min_size=1, max_size=3).map(lambda ps: all_of(*ps)),
            st.lists(inner, min_size=1, max_size=3).map(lambda ps: any_of(*ps)),
            inner.map(not_)), max_leaves=5)


@st.composite
def rules(draw: st.DrawFn, index: int, near: str) -> Rule:
    # Mostly rules on the event's own kind, so that their paths lead somewhere.
    kind = near if draw(st.integers(0, 3)) else draw(st.sampled_from(sorted(SOURCES)))
    trigger = on(draw(st.sampled_from(SOURCES[kind])))
    try:
        preds = draw(st.lists(predicates(kind), max_size=3))
        equals = draw(st.dictionaries(st.sampled_from(["feedback_type", "rule", "workspace"]),
                                      st.sampled_from(["q", "x", "prod"]), max_size=1))
        if preds or equals:
            trigger = trigger.where(*preds, **equals)
        if draw(st.booleans()):
            trigger = trigger.sample(draw(st.sampled_from([0.3, 0.7, 1.0])))
        step = draw(st.sampled_from(["none", "none", "scope", "scope_fn", "count"]))
        if step == "scope":
            trigger = trigger.scope(draw(st.sampled_from(PATHS[kind] + [F.actor])))
        elif step == "scope_fn":
            trigger = trigger.scope(fn=draw(FUNCTIONS))
        elif step == "count":
            trigger = trigger.count(2, within=timedelta(minutes=1))
    except InvalidRule:
        assume(False)
    return Rule(name=f"p:rule-{index}", when=trigger, then=run("act"))


def rule_lists(near: str) -> st.SearchStrategy[list[Rule]]:
    return st.integers(1, 6).flatmap(
        lambda n: st.tuples(*(rules(i, near) for i in range(n))).map(list))


def _full(rule: Rule, envelope: Envelope) -> bool:
    try:
        return rule.matches(envelope)
    except Exception:  # a raising rule does not match
        return False


def _before(rule: Rule, envelope: Envelope) -> list[Any]:
    """What the matcher gave for one rule before plain matching: the engine's decisions with
    a fresh state for a stateless rule, a Forward for a stateful match."""
    try:
        if is_stateful(rule):
            return [Forward(rule, envelope)] if rule.matches(envelope) else []
        return list(evaluate(RuleSet([rule]), envelope, RuleState()))
    except Exception:  # as the matcher: no match
        return []


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.filter_too_much])
@given(st.data(), ENVELOPES, st.booleans(), st.integers(0, 1000))
def test_the_plain_prefilter_never_rejects_a_match_and_decides_as_before(
    data: st.DataObject, envelope: Envelope, millis: bool, offset: int,
) -> None:
    rule_list = data.draw(rule_lists(kind_of(envelope)))
    record = envelope_to_record(envelope)
    if millis:  # the mirror's codec mode: the time as epoch milliseconds
        record["envelope"]["time"] = int(envelope.time.timestamp() * 1000)
    plain = plain_from_record(record, 0, offset)
    assert plain is not None  # every valid envelope has a plain form
    full = envelope_from_record(record, Seq(partition=0, offset=offset))

    for rule in rule_list:
        answer = rule.matches_plain(plain)
        if answer is not None:
            assert answer is _full(rule, full), (rule, answer)

    matcher = Matcher(RuleSet(rule_list))
    hits = matcher.match_plain(plain)
    kept = {h.rule.name for h in hits}
    for rule in rule_list:
        if _full(rule, full):
            assert rule.name in kept, rule  # never rejected
    for hit in hits:
        if hit.sure:
            assert _full(hit.rule, full), hit.rule

    decided = matcher.match(full, hits)
    assert decided == Matcher(RuleSet(rule_list)).match(full)
    order = {r.name: i for i, r in enumerate(rule_list)}
    candidates = [r for r in rule_list if r.when.watches(full)]
    # The matcher's order: the rules of the event's type, then those on every app event.
    candidates.sort(key=lambda r: (r.when.event_type_name is None, order[r.name]))
    assert decided == [d for r in candidates for d in _before(r, full)]
