"""Rules as data: the JSON form says what the DSL says, and bad JSON is refused by path."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path as FilePath
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import streams.examples.ops  # noqa: F401  (declares ops:error_spike)
from streams.core.events import AppEvent, FeedbackGiven, RunSucceeded
from streams.core.rules import (
    RULE_SCHEMA,
    F,
    InvalidRule,
    RetryPolicy,
    Rule,
    RuleEngine,
    on,
    parse_rule,
    rule_from_dict,
    rule_to_dict,
    rule_to_json,
    run,
)
from streams.core.rules.predicates import AllOf, AnyOf, Compare, Not, Path, Predicate
from tests.core.rules.samples import T0, WRONG_TRIAGE, feedback, spike, succeeded

SCHEMA_FILE = FilePath(__file__).parents[3] / "schemas" / "rule" / "v1.schema.json"

# Per watched source, the payload fields a path may start with (the DSL checks them).
SOURCES: dict[Any, list[str]] = {
    FeedbackGiven: ["value", "feedback_type", "target"],
    RunSucceeded: ["rule", "output", "action"],
    AppEvent: ["data", "name"],
    "ops:error_spike": ["data", "name", "anything"],
}

json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6),
                         st.floats(allow_nan=False, allow_infinity=False),
                         st.text(max_size=8))
json_values = st.recursive(json_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)),
    max_leaves=6)
keys = st.one_of(st.text(st.characters(categories=("Ll",)), min_size=1, max_size=6),
                 st.integers(0, 3))
durations = st.integers(1, 10**11).map(lambda us: timedelta(microseconds=us))


@st.composite
def paths(draw: st.DrawFn, heads: list[str]) -> Path:
    if draw(st.booleans()):
        head = draw(st.sampled_from(["workspace", "tenant", "actor", "event_type",
                                     "correlation_id"]))
        return Path("envelope", (head,))
    rest = draw(st.lists(keys, max_size=3))
    return Path("event", (draw(st.sampled_from(heads)), *rest))


def predicates(heads: list[str]) -> st.SearchStrategy[Predicate]:
    compare = st.one_of(
        st.builds(Compare, paths(heads), st.sampled_from(["eq", "ne", "lt", "le", "gt", "ge",
                                                          "contains"]), json_values),
        st.builds(Compare, paths(heads), st.just("isin"),
                  st.lists(json_scalars, max_size=3).map(tuple)),
        st.builds(Compare, paths(heads), st.just("exists"), st.none()),
    )
    return st.recursive(compare, lambda inner: st.one_of(
        st.lists(inner, min_size=1, max_size=3).map(lambda ps: AllOf(tuple(ps))),
        st.lists(inner, min_size=1, max_size=3).map(lambda ps: AnyOf(tuple(ps))),
        inner.map(Not)), max_leaves=5)


@st.composite
def rules(draw: st.DrawFn) -> Rule:
    source = draw(st.sampled_from(list(SOURCES)))
    heads = SOURCES[source]
    trigger = on(source)
    preds = draw(st.lists(predicates(heads), max_size=3))
    if preds:
        trigger = trigger.where(*preds)
    if draw(st.booleans()):
        trigger = trigger.sample(draw(st.floats(0.0001, 1.0)))
    if draw(st.booleans()):
        trigger = trigger.count(draw(st.integers(1, 50)), within=draw(durations))
    if draw(st.booleans()):
        trigger = trigger.at_most(draw(st.integers(1, 50)), per=draw(durations))
    if draw(st.booleans()):
        names = draw(st.lists(st.sampled_from(["a", "b", "service"]), min_size=1, max_size=2,
                              unique=True))
        trigger = trigger.scope(**{n: draw(paths(heads).filter(lambda p: bool(p.names)))
                                   for n in names})
    retry = None
    if draw(st.booleans()):
        backoff = draw(st.integers(0, 10**7).map(lambda ms: timedelta(milliseconds=ms)))
        retry = RetryPolicy(max_attempts=draw(st.integers(1, 9)), backoff=backoff,
                            multiplier=draw(st.floats(1, 10)),
                            max_backoff=backoff + draw(durations))
    name = draw(st.from_regex(r"[a-z0-9][a-z0-9:_.-]{0,15}", fullmatch=True))
    description = draw(st.one_of(st.none(), st.text(max_size=20)))
    action = draw(st.sampled_from(["triage", "escalate", "judge"]))
    return Rule(name=name, when=trigger, then=run(action, retry=retry), description=description)


def envelopes_for(i: int) -> list[Any]:
    return [feedback(False, at=T0 + timedelta(seconds=i)), feedback(True), spike("api"),
            spike(None), succeeded(), spike("db", at=T0 + timedelta(minutes=3))]


@settings(max_examples=300, deadline=None)
@given(rules())
def test_a_rules_json_form_round_trips_to_the_same_rule(rule: Rule) -> None:
    data = rule_to_dict(rule)
    # Through text, as it is stored: what comes back is the same rule, deciding the same.
    back = parse_rule(json.dumps(data), actions={"triage", "escalate", "judge"})
    assert back == rule
    assert rule_to_dict(back) == data
    events = [e for i in range(3) for e in envelopes_for(i)]
    assert RuleEngine([back]).replay(events) == RuleEngine([rule]).replay(events)


@settings(max_examples=100, deadline=None)
@given(rules())
def test_every_json_form_validates_against_the_committed_schema(rule: Rule) -> None:
    from jsonschema import Draft202012Validator

    Draft202012Validator(json.loads(SCHEMA_FILE.read_text())).validate(rule_to_dict(rule))


def test_the_committed_schema_is_the_codes_schema() -> None:
    from jsonschema import Draft202012Validator

    Draft202012Validator.check_schema(RULE_SCHEMA)
    assert json.loads(SCHEMA_FILE.read_text()) == RULE_SCHEMA


def test_the_documented_example() -> None:
    data = rule_to_dict(WRONG_TRIAGE)
    assert data == {
        "name": "ops:wrong-triage",
        "when": {"on": "feedback_given", "where": [
            {"path": ["event", "value", "correct"], "op": "eq", "value": False},
            {"path": ["event", "feedback_type"], "op": "eq", "value": "triage_quality"}]},
        "then": {"action": "escalate"},
    }
    spike_rule = Rule(name="ops:error-spike",
                      when=on(AppEvent).where(F.name.eq("ops:error_spike"))
                      .count(3, within=timedelta(minutes=5)).scope(F.data.service),
                      then=run("triage"))
    assert rule_to_dict(spike_rule)["when"] == {
        "on": "app_event",
        "where": [{"path": ["event", "name"], "op": "eq", "value": "ops:error_spike"}],
        "count": {"n": 3, "within_seconds": 300},
        "scope": {"service": ["event", "data", "service"]}}
    assert json.loads(rule_to_json(WRONG_TRIAGE)) == data


def test_python_functions_have_no_json_form() -> None:
    lam = Rule(name="x", when=on(FeedbackGiven).where(lambda e: True), then=run("a"))
    with pytest.raises(InvalidRule, match=r"when.where\[0\] is the Python function.*F paths"):
        rule_to_dict(lam)
    nested = Rule(name="x", when=on(FeedbackGiven).where(F.value.x.eq(1) | (lambda e: True)),
                  then=run("a"))
    with pytest.raises(InvalidRule, match=r"when.where\[0\].any\[1\]"):
        rule_to_dict(nested)

    def service(envelope: Any) -> str:
        return "api"

    scoped = Rule(name="x", when=on(FeedbackGiven).scope(service), then=run("a"))
    with pytest.raises(InvalidRule, match=r"when.scope.service is the Python function"):
        rule_to_dict(scoped)
    dated = Rule(name="x", when=on(FeedbackGiven).where(F.value.at.lt(T0)), then=run("a"))
    with pytest.raises(InvalidRule, match="no JSON form"):
        rule_to_dict(dated)


GOOD: dict[str, Any] = {"name": "r", "when": {"on": "feedback_given"},
                        "then": {"action": "escalate"}}


def with_(change: dict[str, Any]) -> dict[str, Any]:
    data = json.loads(json.dumps(GOOD))
    for dotted, value in change.items():
        *parents, last = dotted.split(".")
        node = data
        for p in parents:
            node = node[p]
        node[last] = value
    return data


@pytest.mark.parametrize(("data", "message"), [
    ([], r"at \$: \[\] is not of type 'object'"),
    ({**GOOD, "then": {}}, r"at \$.then: 'action' is a required property"),
    (with_({"when.where": [{"path": ["event", "x"], "op": "equals", "value": 1}]}),
     r"at \$.when.where\[0\].op: 'equals' is not one of"),
    (with_({"when.where": [{"path": ["body", "x"], "op": "eq", "value": 1}]}),
     r"at \$.when.where\[0\]"),
    (with_({"when.sample": 2}), r"at \$.when.sample: 2 is greater than the maximum of 1"),
    (with_({"when.count": {"n": 0, "within_seconds": 5}}), r"at \$.when.count.n"),
    (with_({"when.extra": 1}), r"at \$.when: Additional properties"),
    (with_({"name": "Bad Name"}), r"at \$.name"),
    (with_({"when.on": "ops:nothing_declared"}),
     r"at \$.when.on: no event type 'ops:nothing_declared'.*Known event types"),
    (with_({"when.on": "feedback_givn"}), r"at \$.when.on: no event type 'feedback_givn'"),
    (with_({"when.where": [{"path": ["event", "nope"], "op": "eq", "value": 1}]}),
     r"at \$.when: .*FeedbackGiven has no field 'nope'"),
    (with_({"when.where": [{"path": ["envelope", "nope"], "op": "exists"}]}),
     r"at \$.when.where\[0\].path: .*envelope has no field 'nope'"),
    (with_({"when.where": [{"path": ["event", "value"], "op": "isin", "value": 3}]}),
     r"at \$.when.where\[0\].value: 'isin' takes a list"),
    (with_({"when.where": [{"path": ["event", "value"], "op": "eq"}]}),
     r"at \$.when.where\[0\]: op 'eq' needs a 'value'"),
    (with_({"then.retry": {"backoff_seconds": 10, "max_backoff_seconds": 1}}),
     r"at \$.then: .*max_backoff"),
    (with_({"then.action": "missing"}),
     r"at \$.then.action: no action 'missing' in the action registry \(known: \['escalate'\]\)"),
])
def test_bad_json_is_refused_naming_the_field(data: Any, message: str) -> None:
    with pytest.raises(InvalidRule, match=message):
        rule_from_dict(data, actions={"escalate"})


def test_text_that_is_not_json_names_line_and_column() -> None:
    with pytest.raises(InvalidRule, match=r"not valid JSON: .* line 1 column"):
        parse_rule("{name: 1}")


def test_an_unknown_action_is_only_checked_against_a_registry_when_given() -> None:
    assert rule_from_dict(with_({"then.action": "anything"})).then.name == "anything"


def test_an_event_class_or_its_name_is_the_same_rule() -> None:
    by_name = Rule(name="j", when=on("run_succeeded").where(rule="x"), then=run("judge"))
    by_class = Rule(name="j", when=on(RunSucceeded).where(rule="x"), then=run("judge"))
    assert rule_to_dict(by_name) == rule_to_dict(by_class)
    back = rule_from_dict(rule_to_dict(by_name))
    assert back == by_class
    assert back.when.event_class is RunSucceeded
