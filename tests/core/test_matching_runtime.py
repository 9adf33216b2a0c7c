"""The matcher: rules by event type, stateless decisions at once, stateful matches forwarded,
decisions against replayed state (pure: no broker)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from streams.core.actors import UserActor
from streams.core.events import AppEvent, Envelope, RuleFired, RunStarted
from streams.core.ids import firing_id, throttled_event_id
from streams.core.matching import Forward, Matcher, is_stateful
from streams.core.rules import F, Fire, Rule, RuleSet, RuleState, Throttled, on, run

PLAIN = Rule(name="t:plain", when=on("t:a").where(F.data.n.gt(1)), then=run("act"))
ANY_APP = Rule(name="t:any", when=on(AppEvent).where(F.data.any.eq(True)), then=run("act"))
LIMITED = Rule(name="t:limited", when=on("t:a").at_most(1, per=timedelta(hours=1)),
               then=run("act"))
def _broken(envelope: Envelope) -> bool:
    raise ZeroDivisionError("a predicate's bug")


BROKEN = Rule(name="t:broken", when=on("t:a").where(F.data.n.gt(0), _broken), then=run("act"))


def event(name: str, **data: object) -> Envelope:
    return Envelope.new(AppEvent(name=name, data=dict(data)), tenant="acme", workspace="prod",
                        actor=UserActor(id="ada"))


def test_a_stateless_rule_fires_at_once_and_writes_its_firing_and_run() -> None:
    matcher = Matcher(RuleSet([PLAIN]))
    cause = event("t:a", n=2)
    [decision] = matcher.match(cause)
    assert isinstance(decision, Fire)
    fired, started = matcher.fired(decision, cause)
    assert isinstance(fired.event, RuleFired) and isinstance(started.event, RunStarted)
    assert started.correlation_id == cause.correlation_id
    assert matcher.stats.fired == 1 and matcher.stats.per_rule == {"t:plain": 1}
    assert matcher.match(event("t:a", n=1)) == []


def test_only_rules_watching_the_type_are_checked() -> None:
    matcher = Matcher(RuleSet([PLAIN]))
    assert matcher.match(event("t:other", n=5)) == []
    assert matcher.wants(b"t:a") and matcher.wants(b"run_started") and matcher.wants(None)
    assert not matcher.wants(b"t:other")
    # A rule on any application event needs every event decoded.
    assert Matcher(RuleSet([ANY_APP])).wants(b"t:other")
    assert len(Matcher(RuleSet([ANY_APP])).match(event("t:other", any=True))) == 1


def test_a_stateful_match_is_forwarded_not_decided() -> None:
    matcher = Matcher(RuleSet([LIMITED, PLAIN]))
    cause = event("t:a", n=2)
    out = matcher.match(cause)
    assert [type(o) for o in out] == [Forward, Fire]
    assert out[0] == Forward(LIMITED, cause)
    assert (matcher.stats.matched, matcher.stats.forwarded) == (2, 1)
    assert is_stateful(LIMITED) and not is_stateful(PLAIN)
    assert matcher.has_stateful and not Matcher(RuleSet([PLAIN])).has_stateful


def test_the_decider_decides_against_the_tenants_state() -> None:
    matcher = Matcher(RuleSet([LIMITED]))
    state = RuleState()
    first = matcher.decide("t:limited", event("t:a"), state)
    second = matcher.decide("t:limited", event("t:a"), state)
    assert [type(d) for d in first + second] == [Fire, Throttled]
    # A throttle writes its record, in the cause's chain, by the id `why` looks up.
    cause = event("t:a")
    [record] = matcher.fired(second[0], cause)
    assert isinstance(record.event, AppEvent) and record.event.name == "streams:throttled"
    assert record.event.data["rule"] == "t:limited" and record.event.data["at_most"] == 1
    assert record.event_id == throttled_event_id(firing_id("t:limited",
                                                           second[0].causation_id))
    assert record.correlation_id == second[0].correlation_id
    assert matcher.stats.throttled == 1
    # A fresh state (a replay from the start) decides the same again.
    assert [type(d) for d in matcher.decide("t:limited", event("t:a"), RuleState())] == [Fire]
    assert matcher.decide("t:gone", event("t:a"), state) == []
    assert not matcher.knows("t:gone") and matcher.knows("t:limited")


def test_a_rule_that_raises_does_not_match_and_the_others_still_do(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The rule's own predicate raises (it used to be the engine's evaluate, patched to
    # raise; stateless rules no longer go through it).
    matcher = Matcher(RuleSet([BROKEN, PLAIN]))
    out = matcher.match(event("t:a", n=3))
    assert [type(o) for o in out] == [Fire]
    assert out[0].rule.name == "t:plain"  # type: ignore[union-attr]
    assert "rule t:broken raised" in caplog.text
