"""Online calibration: windows, measures, thresholds and alarm transitions (pure)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.core.app_events import app_event_types
from streams.core.errors import ValidationFailed
from streams.core.feedback import FeedbackRegistry
from streams.core.measures.agreement import VerdictPair, agreement_of
from streams.core.measures.calibration import (
    ALARM_EVENT,
    AlarmBook,
    CalibrationAlarm,
    CalibrationPolicy,
    alarm_book,
    calibrate,
    changed,
    evaluator_version,
    newest_pairs,
    parse_thresholds,
)

T0 = datetime(2026, 12, 1, tzinfo=UTC)
JUDGE = "evaluator:triage-judge@2"


def pair_factory(evaluator: str = JUDGE, feedback_type: str = "verdict",
                 ) -> Callable[..., VerdictPair]:
    """Pairs on field `ok` (bool) at increasing times."""
    count = [0]

    def make(judged: object, said: object, *, at: int | None = None) -> VerdictPair:
        count[0] += 1
        time = T0 + timedelta(seconds=count[0] if at is None else at)
        return VerdictPair(evaluator, feedback_type, {"ok": judged}, {"ok": said}, time)
    return make


def agreeing(make: Callable[..., VerdictPair], n: int) -> list[VerdictPair]:
    """n pairs on both labels where evaluator and person agree."""
    return [make(i % 2 == 0, i % 2 == 0) for i in range(n)]


def disagreeing(make: Callable[..., VerdictPair], n: int) -> list[VerdictPair]:
    return [make(i % 2 == 0, i % 2 == 1) for i in range(n)]


TYPES = FeedbackRegistry()


def test_evaluator_version_splits_the_participant() -> None:
    assert evaluator_version("evaluator:triage-judge@2") == ("triage-judge", "2")
    assert evaluator_version("evaluator:a@b@3") == ("a@b", "3")
    assert evaluator_version("evaluator:plain") == ("plain", "")


def test_a_version_threshold_wins_over_its_name() -> None:
    policy = CalibrationPolicy(thresholds={"triage-judge": 0.6, "triage-judge@3": 0.2})
    assert policy.threshold_for("evaluator:triage-judge@2") == 0.6
    assert policy.threshold_for("evaluator:triage-judge@3") == 0.2
    assert policy.threshold_for("evaluator:other@1") is None


@pytest.mark.parametrize(("text", "names"), [
    ("[1]", "JSON object"),
    ("{", "not JSON"),
    ('{"j": 2}', "between -1 and 1"),
    ('{"j": true}', "between -1 and 1"),
    ('{"evaluator:j": 0.5}', "without the 'evaluator:' prefix"),
])
def test_bad_thresholds_are_refused_saying_what_to_write(text: str, names: str) -> None:
    with pytest.raises(ValidationFailed, match=names):
        parse_thresholds(text)


def test_thresholds_parse() -> None:
    assert parse_thresholds("") == {}
    assert parse_thresholds('{"j": 0.5, "j@2": -0.1}') == {"j": 0.5, "j@2": -0.1}


@pytest.mark.parametrize(("window", "min_pairs", "margin"), [(0, 1, 0.0), (10, 11, 0.0),
                                                             (10, 0, 0.0), (10, 5, -0.1)])
def test_a_policy_out_of_range_is_refused(window: int, min_pairs: int, margin: float) -> None:
    with pytest.raises(ValidationFailed):
        CalibrationPolicy(window=window, min_pairs=min_pairs, margin=margin)


def test_only_the_newest_pairs_of_each_version_are_measured() -> None:
    make = pair_factory()
    other = pair_factory(evaluator="evaluator:triage-judge@3")
    old, new = disagreeing(make, 40), agreeing(make, 20)
    kept = newest_pairs([*old, *new, *agreeing(other, 5)], 20)
    assert sorted(p.time for p in kept if p.evaluator == JUDGE) == [p.time for p in new]
    assert len([p for p in kept if p.evaluator != JUDGE]) == 5
    [row] = [r for r in calibrate([*old, *new], CalibrationPolicy(window=20, min_pairs=10),
                                  types=TYPES)]
    assert row.n == 20 and row.value == 1.0 and row.observed == 1.0


def test_states_follow_the_threshold_with_a_margin_to_clear() -> None:
    policy = CalibrationPolicy(thresholds={"triage-judge": 0.5}, window=20, min_pairs=10,
                               margin=0.2)
    make = pair_factory()
    [row] = calibrate(agreeing(make, 9), policy, types=TYPES)
    assert row.state == "too_few" and row.measure == "kappa"
    [row] = calibrate(disagreeing(make, 20), policy, types=TYPES)
    assert row.state == "alarm" and row.value is not None and row.value < 0.5
    assert row.ci is not None and row.ci[0] <= row.value <= row.ci[1]
    # On balanced labels, 11 of 20 agreeing is kappa 0.1 (below the threshold) and 16 of 20
    # is kappa 0.6 (above the threshold, within its margin of 0.2).
    mixed = [*agreeing(make, 11), *disagreeing(make, 9)]
    assert calibrate(mixed, policy, types=TYPES)[0].state == "alarm"
    recovering = [*agreeing(make, 16), *disagreeing(make, 4)]
    [row] = calibrate(recovering, policy, types=TYPES)
    assert row.value == pytest.approx(0.6)
    assert calibrate(recovering, policy, previous={row.key: "alarm"}, types=TYPES)[0].state \
        == "alarm"
    assert calibrate(recovering, policy, previous={row.key: "ok"}, types=TYPES)[0].state \
        == "ok"
    clear = agreeing(make, 20)
    assert calibrate(clear, policy, previous={row.key: "alarm"}, types=TYPES)[0].state == "ok"


def test_an_unwatched_version_is_measured_without_a_state() -> None:
    [row] = calibrate(disagreeing(pair_factory(), 40), CalibrationPolicy(), types=TYPES)
    assert row.state == "unwatched" and row.threshold is None and row.n == 40
    with pytest.raises(ValueError, match="not watched"):
        row.alarm_event(episode=1)


def test_one_label_on_both_sides_is_undefined_not_an_alarm() -> None:
    make = pair_factory()
    policy = CalibrationPolicy(thresholds={"triage-judge": 0.5}, window=20, min_pairs=5)
    [row] = calibrate([make(True, True) for _ in range(10)], policy, types=TYPES)
    assert row.state == "undefined" and row.value is None


def test_numbers_are_calibrated_by_rank_correlation() -> None:
    policy = CalibrationPolicy(thresholds={"scorer": 0.8}, window=50, min_pairs=5)
    pairs = [VerdictPair("evaluator:scorer@1", "rating", {"score": float(i)},
                         {"score": float(10 - i)}, T0 + timedelta(seconds=i))
             for i in range(10)]
    [row] = calibrate(pairs, policy, types=TYPES)
    assert row.measure == "spearman" and row.value == pytest.approx(-1.0)
    assert row.state == "alarm" and row.observed is None


def test_changed_reports_raises_and_clears_only() -> None:
    policy = CalibrationPolicy(thresholds={"triage-judge": 0.5}, window=20, min_pairs=10)
    make = pair_factory()
    [bad] = calibrate(disagreeing(make, 20), policy, types=TYPES)
    assert changed({}, [bad]) == [bad]
    assert changed({bad.key: "alarm"}, [bad]) == []
    [good] = calibrate(agreeing(make, 20), policy, previous={bad.key: "alarm"}, types=TYPES)
    assert changed({bad.key: "alarm"}, [good]) == [good]
    assert changed({}, [good]) == []
    [few] = calibrate(agreeing(make, 3), policy, types=TYPES)
    assert changed({few.key: "alarm"}, [few]) == []


def test_the_alarm_event_carries_what_a_rule_needs() -> None:
    policy = CalibrationPolicy(thresholds={"triage-judge": 0.5}, window=20, min_pairs=10)
    [row] = calibrate(disagreeing(pair_factory(), 20), policy, types=TYPES)
    alarm = row.alarm_event(episode=3, queue="calibration.triage-judge.verdict")
    assert app_event_types.get(ALARM_EVENT) is CalibrationAlarm
    event = alarm.to_event()
    assert event.name == ALARM_EVENT
    back = CalibrationAlarm.of(event)
    assert (back.evaluator, back.version, back.field, back.raised, back.n) == \
        ("triage-judge", "2", "ok", True, 20)
    assert back.queue == "calibration.triage-judge.verdict" and back.threshold == 0.5
    assert back.episode == 3 and back.key == row.key


@given(st.lists(st.tuples(st.booleans(), st.booleans(), st.integers(0, 10_000)),
                min_size=1, max_size=60), st.integers(1, 30))
def test_the_window_measures_exactly_the_newest_pairs(
        raw: list[tuple[bool, bool, int]], window: int) -> None:
    pairs = [VerdictPair(JUDGE, "verdict", {"ok": a}, {"ok": b},
                         T0 + timedelta(seconds=t))
             for a, b, t in raw]
    policy = CalibrationPolicy(window=window, min_pairs=1)
    rows = calibrate(pairs, policy, types=TYPES)
    newest = sorted(pairs, key=lambda p: p.time, reverse=True)[:window]
    expected = agreement_of(newest, types=TYPES)
    assert [r.agreement for r in rows] == expected
    assert all(r.n == min(window, len(pairs)) for r in rows)


def test_a_rule_watches_raised_alarms_by_their_declared_type() -> None:
    from streams.core.events import Envelope
    from streams.core.rules import F, Fire, Rule, RuleEngine, RuleSet, on, run

    rules = RuleSet([Rule(name="ops:judge-drifted",
                          when=on(CalibrationAlarm).where(F.data.raised.eq(True)),
                          then=run("page-the-owner"))])
    rules.check_event_types()  # declared by the pipeline: no application declares it
    policy = CalibrationPolicy(thresholds={"triage-judge": 0.5}, window=20, min_pairs=10)
    [row] = calibrate(disagreeing(pair_factory(), 20), policy, types=TYPES)

    def envelope(raised: bool) -> Envelope:
        alarm = row.alarm_event(episode=1)
        event = alarm.model_copy(update={"raised": raised}).to_event()
        return Envelope.new(event, tenant="acme", workspace="prod")

    fired = RuleEngine(rules).evaluate(envelope(True))
    assert [d.rule.name for d in fired if isinstance(d, Fire)] == ["ops:judge-drifted"]
    assert RuleEngine(rules).evaluate(envelope(False)) == []


def test_an_alarm_stands_while_a_thin_window_says_nothing_either_way() -> None:
    policy = CalibrationPolicy(thresholds={"triage-judge": 0.5}, window=20, min_pairs=10)
    make = pair_factory()
    [few] = calibrate(agreeing(make, 3), policy, previous={(JUDGE, "verdict", "ok"): "alarm"},
                      types=TYPES)
    assert few.state == "too_few" and few.standing
    [fresh] = calibrate(agreeing(make, 3), policy, types=TYPES)
    assert not fresh.standing
    [good] = calibrate(agreeing(make, 20), policy,
                       previous={(JUDGE, "verdict", "ok"): "alarm"}, types=TYPES)
    assert good.state == "ok" and not good.standing


def test_the_book_is_each_keys_newest_alarm_and_episodes_go_on_from_it() -> None:
    policy = CalibrationPolicy(thresholds={"triage-judge": 0.5}, window=20, min_pairs=10)
    [row] = calibrate(disagreeing(pair_factory(), 20), policy, types=TYPES)
    raised = row.alarm_event(episode=1)
    cleared = raised.model_copy(update={"raised": False})
    def book_of(*alarms: CalibrationAlarm) -> AlarmBook:
        return alarm_book((a.key, a.raised, a.episode) for a in alarms)

    book = book_of(raised, cleared, raised.model_copy(update={"episode": 2}))
    assert book.states == {row.key: "alarm"} and book.episodes == {row.key: 2}
    assert book.next_episode(row.key, raised=False) == 2  # the clear of raise 2
    assert book.next_episode(row.key, raised=True) == 3
    assert book_of().next_episode(row.key, raised=True) == 1
    again = book_of(raised, raised)  # the same change written twice: one alarm
    assert again.states == {row.key: "alarm"} and again.episodes == {row.key: 1}


@pytest.mark.parametrize("odd", [[1, 2], {"a": 1}])
def test_a_value_no_measure_can_take_is_left_out_not_a_failure(odd: object) -> None:
    policy = CalibrationPolicy(thresholds={"triage-judge": 0.5}, window=40, min_pairs=10)
    make = pair_factory()
    pairs = [*disagreeing(make, 20), *(make(odd, True) for _ in range(5))]
    [row] = calibrate(pairs, policy, types=TYPES)
    # The 20 pairs of labels are measured; the five of another shape are not counted.
    assert (row.state, row.n) == ("alarm", 20)
    assert calibrate([make(odd, odd) for _ in range(12)], policy, types=TYPES) == []
