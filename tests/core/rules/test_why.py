"""Why a rule did or did not act on an event: the stateless reasons agree with `matches`,
and a run's lifecycle events give its state."""

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.core.app_events import app_event_type, own_record
from streams.core.errors import ValidationFailed
from streams.core.events import (
    AppEvent,
    RunDeadLettered,
    RunFailed,
    RunStarted,
    RunSucceeded,
)
from streams.core.matching import Matcher
from streams.core.rules import Rule, RuleEngine, RuleSet, RuleState, Throttled, on, run
from streams.core.rules.why import OUTCOMES, considered, fold_why, run_outcome, throttle_data
from tests.core.rules.samples import (
    JUDGE,
    SPIKE,
    WRONG_TRIAGE,
    envelope,
    feedback,
    limited_log,
    spike,
    succeeded,
)

SAMPLED = Rule(name="t:sampled", when=on("ops:error_spike").sample(0.3), then=run("a"))
ANY_APP = Rule(name="t:any", when=on(AppEvent).at_most(1, per=timedelta(hours=1)),
               then=run("a"))


def test_each_stateless_reason_names_what_left_the_event_out() -> None:
    why = considered(WRONG_TRIAGE, succeeded())
    assert why is not None and why.outcome == "not_watched"
    assert "feedback_given" in why.detail and "run_succeeded" in why.detail
    why = considered(WRONG_TRIAGE, feedback(True))
    assert why is not None and why.outcome == "filtered_out"
    assert "value.correct" in why.detail
    why = considered(SPIKE, spike(None))
    assert why is not None and why.outcome == "filtered_out" and "service" in why.detail
    assert considered(WRONG_TRIAGE, feedback(False)) is None
    assert not why.judged


def test_sampled_out_events_are_the_ones_the_engine_leaves_out() -> None:
    events = [spike("api") for _ in range(200)]
    fired = {d.causation_id for e in events for d in RuleEngine([SAMPLED]).evaluate(e)}
    reasons = {e.event_id: considered(SAMPLED, e) for e in events}
    assert {i for i, why in reasons.items() if why is None} == fired
    left = [why for why in reasons.values() if why is not None]
    assert left and all(w.outcome == "sampled_out" and "sample(0.3)" in w.detail
                        for w in left)


@given(correct=st.sampled_from([True, False, None, 1, "no"]),
       feedback_type=st.sampled_from(["triage_quality", "resolution"]),
       rule=st.sampled_from([WRONG_TRIAGE, JUDGE, SPIKE, SAMPLED]))
def test_an_event_is_left_out_exactly_when_the_rule_does_not_match_it(
    correct: object, feedback_type: str, rule: Rule,
) -> None:
    for event in (feedback(correct, feedback_type), spike("api"), spike(None), succeeded()):
        assert (considered(rule, event) is None) == rule.matches(event)


def _started(run_id: str = "run_1") -> RunStarted:
    return RunStarted(run_id=run_id, rule="t:r", action="a", firing_id="fir_1")


def test_a_runs_state_comes_from_its_lifecycle_events() -> None:
    started = envelope(_started())
    ok = envelope(RunSucceeded(run_id="run_1", rule="t:r", action="a", attempt=2,
                               output={"value": 1}))
    failed = envelope(RunFailed(run_id="run_1", rule="t:r", action="a", attempt=1,
                                error="ValueError: no", will_retry=True))
    why = run_outcome(JUDGE, "evt_1", "fir_1", "run_1", [started])
    assert (why.outcome, why.attempts) == ("running", 1)
    why = run_outcome(JUDGE, "evt_1", "fir_1", "run_1", [started, failed])
    assert why.outcome == "retrying" and "ValueError: no" in why.detail
    why = run_outcome(JUDGE, "evt_1", "fir_1", "run_1", [started, failed, ok])
    assert (why.outcome, why.attempts, why.judged) == ("judged", 2, True)
    assert why.output == {"value": 1} and why.as_dict()["run_id"] == "run_1"
    handed = envelope(RunSucceeded(run_id="run_1", rule="t:r", action="a",
                                   output={"handed_off": "judge"}))
    why = run_outcome(JUDGE, "evt_1", "fir_1", "run_1", [started, handed])
    assert why.outcome == "handed_off" and not why.judged
    dead = envelope(RunDeadLettered(run_id="run_1", rule="t:r", action="a", attempts=3,
                                    error="ValueError: always"))
    why = run_outcome(JUDGE, "evt_1", "fir_1", "run_1", [started, failed, dead])
    assert (why.outcome, why.attempts) == ("dead_lettered", 3)
    # Another run's events in the same chain say nothing about this one.
    other = envelope(RunSucceeded(run_id="run_2", rule="t:r", action="a"))
    assert run_outcome(JUDGE, "evt_1", "fir_1", "run_1", [started, other]).outcome == "running"
    assert set(OUTCOMES) >= {"judged", "throttled", "sampled_out", "dead_lettered"}


def test_a_throttle_record_names_its_full_window_and_limit() -> None:
    limited = Rule(name="t:one", when=on(RunSucceeded).at_most(1, per=timedelta(hours=1)),
                   then=run("a"))
    engine = RuleEngine([limited])
    engine.evaluate(succeeded())
    [throttle] = engine.evaluate(succeeded())
    assert isinstance(throttle, Throttled)
    data = throttle_data(throttle)
    assert (data["rule"], data["at_most"], data["per_seconds"]) == ("t:one", 1, 3600.0)
    assert data["window_start"] == "2026-09-28T12:00:00+00:00"


def test_a_rule_watching_every_app_event_never_sees_the_pipelines_own_records() -> None:
    # Else a rate-limited on(AppEvent) rule would match its own throttle records, for ever.
    matcher = Matcher(RuleSet([ANY_APP]))
    state = RuleState()
    first = spike("api")
    assert matcher.decide("t:any", first, state)  # fires
    [throttle] = matcher.decide("t:any", spike("api"), state)
    [record] = matcher.fired(throttle, first)
    assert own_record(record.event_type)
    assert not ANY_APP.matches(record) and matcher.match(record) == []
    assert considered(ANY_APP, record) is not None


def test_the_pipelines_namespace_cannot_be_declared() -> None:
    with pytest.raises(ValidationFailed, match="the 'streams:' namespace"):
        app_event_type("streams:mine")


def test_the_counts_per_outcome_of_a_log_are_each_events_answer() -> None:
    limited, log = limited_log()
    assert fold_why([limited, WRONG_TRIAGE], log) == {
        "t:two": {"filtered_out": 2, "throttled": 3, "judged": 1, "running": 1},
        "ops:wrong-triage": {}}
    # Only the chosen events are counted; their firings are found among all.
    assert fold_why([limited], log, log[:1]) == {"t:two": {"judged": 1}}


def test_no_rules_count_nothing_whatever_the_log() -> None:
    _limited, log = limited_log()
    assert fold_why([], log) == {}
    assert fold_why(iter([]), log, log[:1]) == {}
