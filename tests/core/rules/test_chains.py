"""Completion-aware triggers (streams.core.rules.chains): a chain judged once when it ends,
by its terminal event or a quiet period in event time; late events ignored or judged again;
chains sampled whole; bad input refused naming the field; the state as a record and back."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import pytest

from streams.core.app_events import AppEventTypes, app_event_type
from streams.core.events import AppEvent, Envelope, FeedbackGiven, RunSucceeded
from streams.core.matching import Forward, Matcher
from streams.core.rules import (
    F,
    Fire,
    InvalidRule,
    Rule,
    RuleEngine,
    RuleSet,
    RuleState,
    on,
    rule_from_dict,
    rule_to_dict,
    run,
)
from streams.core.rules.chains import ChainWindow
from streams.core.rules.snapshots import (
    CLOCK_KEY,
    PartitionState,
    entity_key,
    from_record,
    to_record,
)
from tests.core.rules.samples import T0, envelope

GRACE = timedelta(hours=1)


def step(chain: str, at: datetime, *, kind: str = "plan", name: str = "agent:step",
         **kw: Any) -> Envelope:
    return envelope(AppEvent(name=name, data={"kind": kind}), at=at, correlation_id=chain,
                    **kw)


def done(chain: str, at: datetime) -> Envelope:
    return envelope(AppEvent(name="agent:done", data={}), at=at, correlation_id=chain)


def rule(late: str = "ignore", **completes: Any) -> Rule:
    return Rule(name="judge:chain",
                when=on("agent:step").where(F.data.kind.ne("noise")).completes(
                    late=late, **completes),  # type: ignore[arg-type]
                then=run("judge"))


def fires(decisions: list[Any]) -> list[Fire]:
    assert all(isinstance(d, Fire) for d in decisions)
    return list(decisions)


# -- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize(("build", "says"), [
    (lambda: on("agent:step").completes(), "needs terminal="),
    (lambda: on("agent:step").completes(quiet=timedelta(0)), "completes(quiet=) must be"),
    (lambda: on("agent:step").completes(quiet=5), "completes(quiet=) must be"),  # type: ignore[arg-type]
    (lambda: on("agent:step").completes(terminal="agent:done", late="again"),  # type: ignore[arg-type]
     "completes(late=) takes one of ['ignore', 'rejudge']"),
    (lambda: on("agent:step").completes(terminal="no such"), "completes(terminal=)"),
    (lambda: on("agent:step").completes(terminal=AppEvent), "name one event type"),
    (lambda: on("agent:step").count(2, within=timedelta(minutes=1)).completes(
        terminal="agent:done"), "completes() and count() do not go together"),
    (lambda: on("agent:step").completes(terminal="agent:done").at_most(
        1, per=timedelta(minutes=1)), "at_most() and completes() do not go together"),
    (lambda: on("agent:step").completes(terminal="agent:done").scope(F.data.kind),
     "scope() and completes() do not go together"),
    (lambda: on("agent:step").completes(terminal="agent:done").completes(
        terminal="agent:done"), "completes() was already given"),
])
def test_a_bad_completion_is_refused_naming_the_field(build: Any, says: str) -> None:
    with pytest.raises(InvalidRule, match=None) as raised:
        build()
    assert says in str(raised.value)


def test_a_terminal_type_nothing_declares_is_refused_when_rules_load() -> None:
    types = AppEventTypes()
    app_event_type("agent:step", registry=types)
    rules = RuleSet([rule(terminal="agent:done")])
    with pytest.raises(InvalidRule, match=r"'judge:chain' completes\(terminal=\) names "
                                          r"'agent:done'"):
        rules.check_event_types(types)
    app_event_type("agent:done", registry=types)
    rules.check_event_types(types)


def test_a_completion_rule_round_trips_as_data_and_bad_json_names_its_path() -> None:
    types = AppEventTypes()
    app_event_type("agent:step", registry=types)
    app_event_type("agent:done", registry=types)
    original = rule(terminal="agent:done", quiet=timedelta(minutes=5), late="rejudge")
    data = rule_to_dict(original)
    assert data["when"]["completes"] == {"terminal": "agent:done", "quiet_seconds": 300,
                                         "late": "rejudge"}
    back = rule_from_dict(json.loads(json.dumps(data)), types=types)
    assert back == original
    bad = {**data, "when": {**data["when"], "completes": {"terminal": "agent:gone"}}}
    with pytest.raises(InvalidRule, match=r"\$\.when\.completes\.terminal"):
        rule_from_dict(bad, types=types)
    with pytest.raises(InvalidRule, match="needs terminal="):
        rule_from_dict({**data, "when": {**data["when"], "completes": {"late": "ignore"}}},
                       types=types)
    with pytest.raises(InvalidRule, match="rule JSON"):
        rule_from_dict({**data, "when": {**data["when"],
                                         "completes": {"quiet_seconds": -1}}}, types=types)


# -- ending by a terminal event -------------------------------------------------------------


def test_a_terminal_event_judges_the_whole_chain_once() -> None:
    engine = RuleEngine([rule(terminal="agent:done")], grace=GRACE)
    a2 = step("c1", T0 + timedelta(seconds=2))
    a1 = step("c1", T0 + timedelta(seconds=1))
    noise = step("c1", T0 + timedelta(seconds=3), kind="noise")  # filtered out
    other = step("c2", T0 + timedelta(seconds=1))
    assert engine.replay([a2, a1, noise, other, a2]) == []  # a2 delivered twice
    end = done("c1", T0 + timedelta(seconds=4))
    [fire] = fires(engine.evaluate(end))
    assert fire.matched_event_ids == (a1.event_id, a2.event_id)  # oldest first, once each
    assert fire.causation_id == end.event_id and fire.correlation_id == "c1"
    assert fire.scope == {"chain": "c1"} and fire.scope_key == "chain=c1"
    assert engine.evaluate(end) == []  # the terminal again: judged once
    assert engine.evaluate(done("c1", T0 + timedelta(seconds=9))) == []  # another terminal


def test_a_terminal_event_of_a_chain_with_nothing_gathered_judges_nothing() -> None:
    engine = RuleEngine([rule(terminal="agent:done")], grace=GRACE)
    assert engine.evaluate(done("c1", T0)) == []
    assert engine.evaluate(step("c1", T0 + timedelta(seconds=1))) == []  # late: ignored


def test_late_events_are_ignored_or_judged_again_at_once_without_a_quiet_period() -> None:
    ignoring = RuleEngine([rule(terminal="agent:done")])
    again = RuleEngine([rule(terminal="agent:done", late="rejudge")])
    first = step("c1", T0)
    end = done("c1", T0 + timedelta(seconds=1))
    late = step("c1", T0 + timedelta(seconds=2))
    for engine in (ignoring, again):
        assert engine.evaluate(first) == []
        assert len(engine.evaluate(end)) == 1
    assert ignoring.evaluate(late) == []
    [fire] = fires(again.evaluate(late))
    assert fire.matched_event_ids == (first.event_id, late.event_id)
    assert fire.causation_id == late.event_id  # a new firing id: judged again
    assert again.evaluate(late) == []  # delivered twice: once


# -- ending by a quiet period ---------------------------------------------------------------


def test_a_quiet_period_in_event_time_ends_a_chain_at_its_newest_event() -> None:
    quiet = timedelta(minutes=5)
    engine = RuleEngine([rule(quiet=quiet)], grace=GRACE)
    a = step("c1", T0)
    b = step("c1", T0 + timedelta(minutes=2))
    engine.replay([b, a])
    assert engine.due(T0 + timedelta(minutes=6)) == []  # b + 5 min not reached
    [fire] = engine.due(T0 + timedelta(minutes=7))
    assert fire.matched_event_ids == (a.event_id, b.event_id)
    assert fire.causation_id == b.event_id
    assert engine.due(T0 + timedelta(minutes=30)) == []  # ended: once
    assert engine.evaluate(step("c1", T0 + timedelta(minutes=8))) == []  # late: ignored
    assert engine.due(T0 + timedelta(minutes=30)) == []


def test_a_terminal_before_the_quiet_period_ends_the_chain_and_no_second_firing() -> None:
    engine = RuleEngine([rule(terminal="agent:done", quiet=timedelta(minutes=5))], grace=GRACE)
    engine.evaluate(step("c1", T0))
    assert len(engine.evaluate(done("c1", T0 + timedelta(minutes=1)))) == 1
    assert engine.due(T0 + timedelta(minutes=20)) == []


def test_late_events_with_a_quiet_period_are_judged_once_they_are_quiet() -> None:
    quiet = timedelta(minutes=5)
    engine = RuleEngine([rule(quiet=quiet, late="rejudge")], grace=GRACE)
    a = step("c1", T0)
    engine.evaluate(a)
    [first] = engine.due(T0 + quiet)
    late1 = step("c1", T0 + timedelta(minutes=10))
    late2 = step("c1", T0 + timedelta(minutes=11))
    assert engine.evaluate(late1) == [] and engine.evaluate(late2) == []  # a burst
    assert engine.due(T0 + timedelta(minutes=15)) == []
    [again] = engine.due(T0 + timedelta(minutes=16))
    assert again.matched_event_ids == (a.event_id, late1.event_id, late2.event_id)
    assert again.causation_id == late2.event_id != first.causation_id


def test_chains_are_forgotten_grace_after_their_last_event_ended_or_not() -> None:
    engine = RuleEngine([rule(terminal="agent:done")], grace=GRACE)
    engine.evaluate(step("open", T0))  # its terminal never comes
    engine.evaluate(step("ended", T0))
    engine.evaluate(done("ended", T0 + timedelta(seconds=1)))
    assert len(engine.state.chains) == 2
    assert engine.due(T0 + GRACE - timedelta(seconds=1)) == []
    assert len(engine.state.chains) == 2
    assert engine.due(T0 + GRACE + timedelta(seconds=1)) == []  # unjudged, dropped
    assert engine.state.chains == {}
    # Past that, an event of the chain starts a new one.
    engine.evaluate(step("ended", T0 + 2 * GRACE))
    assert len(engine.evaluate(done("ended", T0 + 2 * GRACE))) == 1


def test_sampling_keeps_or_drops_whole_chains() -> None:
    sampled = Rule(name="judge:some", when=on("agent:step").sample(0.5).completes(
        terminal="agent:done"), then=run("judge"))
    engine = RuleEngine([sampled], grace=GRACE)
    judged = 0
    for i in range(200):
        chain = f"c{i}"
        steps = [step(chain, T0 + timedelta(seconds=s)) for s in range(3)]
        kept = [sampled.matches(s) for s in steps]
        assert len(set(kept)) == 1  # the whole chain or none of it
        engine.replay(steps)
        found = engine.evaluate(done(chain, T0 + timedelta(seconds=5)))
        assert len(found) == (1 if kept[0] else 0)
        judged += len(found)
    assert 60 < judged < 140


# -- the state as records, the partition's clock --------------------------------------------


def test_a_chains_state_round_trips_through_its_record() -> None:
    r = rule(terminal="agent:done", quiet=timedelta(minutes=5), late="rejudge")
    state = RuleState()
    traced = step("c1", T0, trace={"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"})
    RuleEngine([r], state).evaluate(traced)
    record = to_record(state, r.name, "chain=c1", upto=7)
    assert record is not None
    back, upto = from_record(json.loads(json.dumps(record)), r.name, "chain=c1")
    assert upto == 7 and back.chains == state.chains
    window = back.chains[(r.name, "c1")]
    assert window.trace is not None and window.cause("acme", "x").workspace == "prod"
    assert ChainWindow.from_record(window.as_record()) == window


def test_a_partitions_clock_is_kept_by_its_snapshot_and_restored() -> None:
    part = PartitionState()
    assert part.advance(T0) and not part.advance(T0 - timedelta(seconds=1))
    part.schedule("b", T0 + timedelta(minutes=2))
    part.schedule("a", T0 + timedelta(minutes=1))
    part.schedule("a", T0 + timedelta(minutes=1))
    assert part.due() == []
    part.advance(T0 + timedelta(minutes=3))
    assert part.due() == ["a", "b"]  # in deadline order, each once
    records = part.snapshot(0)
    assert (CLOCK_KEY, str(int((T0 + timedelta(minutes=3)).timestamp() * 1_000_000))
            .encode()) in records
    restored = PartitionState()
    restored.restore(records)
    assert restored.clock == part.clock
    assert CLOCK_KEY not in dict(restored.snapshot(0))  # unchanged since: not written again


# -- matching: terminal events reach the chain's key ----------------------------------------


def test_the_matcher_forwards_terminal_events_keyed_by_their_chain() -> None:
    r = rule(terminal="agent:done")
    other = Rule(name="ops:feedback", when=on(FeedbackGiven), then=run("log"))
    matcher = Matcher(RuleSet([r, other]))
    assert matcher.wants(b"agent:done") and matcher.wants(b"agent:step")
    assert matcher.has_stateful and matcher.completion_rules("acme") == [r]
    end = done("c9", T0)
    [forward] = matcher.match(end)
    assert isinstance(forward, Forward) and forward.rule is r
    assert entity_key(r.name, r.scope_key(end)) == "judge:chain|chain=c9"
    assert matcher.moves_clock(end) and matcher.moves_clock(step("c9", T0))
    succeeded = envelope(RunSucceeded(run_id="r", rule="x", action="y", output={}))
    assert not matcher.moves_clock(succeeded)  # the pipeline's own records: not watched


def test_plain_matching_leaves_completion_rules_to_the_envelope() -> None:
    from streams.adapters.avro.codec import envelope_to_record, plain_from_record

    r = rule(terminal="agent:done")
    matcher = Matcher(RuleSet([r]))
    for env in (done("c3", T0), step("c3", T0), step("c3", T0, kind="noise")):
        plain = plain_from_record(envelope_to_record(env), 0, 1)
        assert plain is not None
        [hit] = matcher.match_plain(plain)
        assert hit.rule is r and not hit.sure  # the terminal's own data fails the filter
    assert r.matches_plain(plain) is None


def test_why_answers_for_a_chains_events_before_and_after_its_judgement() -> None:
    from streams.core.rules.why import considered, decided_why, fold_why
    from streams.core.runs import fire_envelopes

    r = rule(terminal="agent:done")
    a, b = step("c1", T0), step("c1", T0 + timedelta(seconds=1))
    noise = step("c1", T0, kind="noise")
    end = done("c1", T0 + timedelta(seconds=2))
    filtered = considered(r, noise)
    assert filtered is not None and filtered.outcome == "filtered_out"
    assert considered(r, end) is None  # a terminal event is taken whatever the filters
    before = [a, b, noise, end]
    by_id = {e.event_id: e for e in before}
    assert decided_why(r, a.event_id, by_id.get, before).outcome == "gathered"
    assert "on agent:done" in decided_why(r, a.event_id, by_id.get, before).detail
    assert decided_why(r, end.event_id, by_id.get, before).outcome == "undecided"
    engine = RuleEngine([r], grace=GRACE)
    engine.replay([a, b])
    [fire] = fires(engine.evaluate(end))
    fired, started = fire_envelopes(fire, end)
    after = [*before, fired, started]
    by_id = {e.event_id: e for e in after}
    why = decided_why(r, b.event_id, by_id.get, after)
    assert why.outcome == "running" and why.firing_id == fire.firing_id
    assert fold_why([r], after, [a, b, noise]) == {r.name: {"filtered_out": 1,
                                                           "running": 2}}
    sampled = Rule(name="judge:few", when=on("agent:step").sample(0.01).completes(
        terminal="agent:done"), then=run("judge"))
    left = [considered(sampled, step(f"c{i}", T0)) for i in range(50)]
    out = [w for w in left if w is not None]
    assert out and all(w.outcome == "sampled_out" and "this chain's" in w.detail for w in out)


def test_each_late_burst_is_judged_under_its_own_id_after_its_own_quiet_period() -> None:
    quiet = timedelta(minutes=5)
    engine = RuleEngine([rule(quiet=quiet, late="rejudge")], grace=GRACE)
    a, b = step("c1", T0), step("c1", T0 + timedelta(minutes=3))
    engine.replay([a, b])
    [first] = engine.due(T0 + timedelta(minutes=8))
    # Late events older than the chain's newest (b): each burst still has a cause of its
    # own, and its quiet period runs from the burst's newest event.
    old1 = step("c1", T0 + timedelta(minutes=1))
    engine.evaluate(old1)
    assert engine.due(T0 + timedelta(minutes=5, seconds=59)) == []
    [second] = engine.due(T0 + timedelta(minutes=6))
    old2 = step("c1", T0 + timedelta(minutes=2))
    engine.evaluate(old2)
    [third] = engine.due(T0 + timedelta(minutes=7))
    assert [f.causation_id for f in (first, second, third)] == \
        [b.event_id, old1.event_id, old2.event_id]
    assert len({f.firing_id for f in (first, second, third)}) == 3
    assert third.matched_event_ids == (a.event_id, old1.event_id, old2.event_id, b.event_id)


def test_a_chain_is_judged_when_full_and_gathers_nothing_after() -> None:
    from streams.core.rules.chains import MAX_CHAIN_EVENTS

    for late in ("ignore", "rejudge"):
        engine = RuleEngine([rule(quiet=timedelta(minutes=5), late=late)], grace=GRACE)
        steps = [step("long", T0 + timedelta(seconds=i)) for i in range(MAX_CHAIN_EVENTS + 5)]
        fired = engine.replay(steps)
        assert len(fired) == 1 and len(fired[0].matched_event_ids) == MAX_CHAIN_EVENTS
        assert fired[0].causation_id == steps[MAX_CHAIN_EVENTS - 1].event_id
        assert engine.due(T0 + timedelta(hours=2, minutes=30)) == []


def test_an_event_moves_a_clock_at_most_a_little_past_the_wall_clock() -> None:
    from streams.core.rules.chains import FUTURE_SKEW, clock_time

    assert clock_time(T0, T0 + timedelta(days=1)) == T0
    assert clock_time(T0 + timedelta(days=365), T0) == T0 + FUTURE_SKEW


def test_why_says_late_for_an_event_gathered_after_its_chain_was_judged() -> None:
    from streams.core.rules.why import decided_why
    from streams.core.runs import fire_envelopes

    r = rule(terminal="agent:done")
    a, end = step("c1", T0), done("c1", T0 + timedelta(seconds=1))
    engine = RuleEngine([r], grace=GRACE)
    engine.evaluate(a)
    [fire] = fires(engine.evaluate(end))
    late = step("c1", T0 + timedelta(seconds=2))
    log = [a, end, *fire_envelopes(fire, end), late]
    by_id = {e.event_id: e for e in log}
    assert decided_why(r, late.event_id, by_id.get, log).outcome == "late"
    again = rule(terminal="agent:done", late="rejudge")
    assert decided_why(again, late.event_id, by_id.get, log).outcome == "gathered"
