"""The engine: decisions, firings, rule sets and their state."""

from datetime import timedelta

import pytest

from streams.core.errors import ValidationFailed
from streams.core.events import (
    FeedbackGiven,
    RuleFired,
)
from streams.core.rules import (
    Fire,
    Rule,
    RuleEngine,
    RuleSet,
    RuleState,
    count_key,
    evaluate,
    firing_id,
    on,
    rate_key,
    run,
)
from tests.core.rules.samples import JUDGE, SPIKE, T0, WRONG_TRIAGE, feedback, spike, succeeded


def test_state_keys() -> None:
    assert count_key("ops:error-spike", None) == "ops:error-spike"
    assert count_key("ops:error-spike", "service=api") == "ops:error-spike|service=api"
    assert rate_key("ops:judge", None, 7) == "ops:judge|7"
    assert rate_key("ops:judge", "service=a|b", 7) == "ops:judge|7|service=a|b"


def test_evaluate_plain_rule_fires_in_the_triggering_chain() -> None:
    env = feedback(False, correlation_id="chain_1")
    state = RuleState()
    [fire] = evaluate([WRONG_TRIAGE], env, state)
    assert isinstance(fire, Fire)
    assert fire.matched_event_ids == (env.event_id,)
    assert fire.correlation_id == "chain_1"
    assert fire.causation_id == env.event_id
    assert fire.scope_key is None
    assert fire.firing_id == firing_id("ops:wrong-triage", env.event_id)
    event = fire.to_event()
    assert isinstance(event, RuleFired)
    assert event.rule == "ops:wrong-triage" and event.matched == [env.event_id]
    assert evaluate([WRONG_TRIAGE], feedback(True), state) == []


def test_evaluate_several_rules_in_order() -> None:
    also = Rule(name="ops:any-feedback", when=on(FeedbackGiven), then=run("log"))
    decisions = evaluate(RuleSet([WRONG_TRIAGE, also]), feedback(False), RuleState())
    assert [d.rule.name for d in decisions] == ["ops:wrong-triage", "ops:any-feedback"]


def test_firing_ids_are_derived() -> None:
    assert firing_id("r", "evt_1") == firing_id("r", "evt_1")
    assert firing_id("r", "evt_1") != firing_id("s", "evt_1")
    assert firing_id("r", "evt_1").startswith("fir_")


def test_state_expiry() -> None:
    engine = RuleEngine([SPIKE, JUDGE])
    engine.evaluate(spike("api", at=T0))
    engine.evaluate(succeeded(at=T0))
    engine.state.expire(T0 + timedelta(minutes=4))
    assert engine.state.counts["ops:error-spike"].windows
    assert engine.state.rates["ops:judge-triage"].windows
    engine.state.expire(T0 + timedelta(hours=1))
    assert engine.state.counts["ops:error-spike"].windows == {}
    assert engine.state.rates["ops:judge-triage"].windows == {}


def test_ruleset_requires_unique_names() -> None:
    rules = RuleSet([WRONG_TRIAGE, SPIKE])
    assert rules.names() == ["ops:wrong-triage", "ops:error-spike"]
    assert "ops:error-spike" in rules and rules["ops:error-spike"] is SPIKE
    assert rules.get("nope") is None and len(rules) == 2
    with pytest.raises(ValidationFailed, match=r"unique.*ops:wrong-triage"):
        RuleSet([WRONG_TRIAGE, SPIKE, WRONG_TRIAGE])
    with pytest.raises(ValidationFailed, match="unique"):
        RuleEngine([SPIKE, SPIKE])
