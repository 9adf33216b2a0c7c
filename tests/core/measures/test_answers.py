"""How each side answered, and feedback and agreement per period: pure folds over envelopes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.actors import EvaluatorActor, SystemActor, UserActor
from streams.core.events import AppEvent, Envelope, FeedbackGiven
from streams.core.feedback import FeedbackRegistry
from streams.core.measures import fold_answers, fold_judge_agreement, fold_trends
from streams.core.measures.answers import label_of, period_of
from streams.core.targets import RunTarget

T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)  # a Monday
ADA = UserActor(id="ada")
BOB = UserActor(id="bob")
JUDGE = EvaluatorActor(name="judge", version="1")


def given_at(run: int, value: dict[str, Any], actor: Any, hours: float,
             event_id: str | None = None) -> Envelope:
    return Envelope.new(FeedbackGiven(feedback_type="triage_quality",
                                      target=RunTarget(run_id=f"run_{run}"), value=value),
                        tenant="acme", workspace="prod", actor=actor,
                        time=T0 + timedelta(hours=hours), event_id=event_id)


def test_each_side_answers_from_its_latest_verdicts() -> None:
    log = [
        given_at(1, {"correct": False, "minutes": 9}, ADA, 0),
        given_at(1, {"correct": True, "minutes": 1}, ADA, 1),  # ada changed her mind
        given_at(2, {"correct": True, "minutes": 3}, ADA, 1),
        given_at(3, {"correct": False, "minutes": 5}, BOB, 1),
        given_at(1, {"correct": False, "minutes": 2}, JUDGE, 1),
        given_at(2, {"correct": False, "minutes": None}, JUDGE, 1),
        Envelope.new(AppEvent(name="x"), tenant="acme", workspace="prod", actor=SystemActor(),
                     time=T0),
    ]
    found = {(a.field, a.who): a for a in fold_answers(log, types=FeedbackRegistry())}
    people = found[("correct", "people")]
    assert people.kind == "bool" and people.n == 3
    assert people.counts == (("yes", 2), ("no", 1))  # most given first
    assert found[("correct", "evaluator:judge@1")].counts == (("no", 2),)
    minutes = found[("minutes", "people")].numbers
    assert minutes is not None and (minutes.min, minutes.p50, minutes.max) == (1, 3, 5)
    assert minutes.mean == pytest.approx(3.0)
    judged = found[("minutes", "evaluator:judge@1")]
    assert judged.n == 1  # an unset value is not an answer
    # People come before the evaluator versions, per field.
    assert [a.who for a in fold_answers(log, types=FeedbackRegistry())][:2] == [
        "people", "evaluator:judge@1"]


def test_trends_count_feedback_once_per_event_id_in_its_day_or_week() -> None:
    log = [
        given_at(1, {"correct": True}, ADA, 0, event_id="evt_a"),
        given_at(1, {"correct": True}, ADA, 0, event_id="evt_a"),  # a replayed repeat
        given_at(1, {"correct": True}, JUDGE, 1),
        given_at(2, {"correct": True}, ADA, 30),  # Tuesday
        given_at(2, {"correct": False}, JUDGE, 31),
        given_at(3, {"correct": True, "minutes": 4}, JUDGE, 24 * 7),  # the next Monday
    ]
    days = fold_trends(log, period="day", types=FeedbackRegistry())
    assert [(t.period, t.people, t.evaluators, t.scores) for t in days] == [
        ("2026-11-30", 1, 1, 2), ("2026-12-01", 1, 1, 2), ("2026-12-07", 0, 1, 2)]
    monday, tuesday, _ = days
    assert [(a.n, a.categorical.observed) for a in monday.agreement  # type: ignore[union-attr]
            ] == [(1, 1.0)]
    assert [(a.n, a.categorical.observed) for a in tuesday.agreement  # type: ignore[union-attr]
            ] == [(1, 0.0)]
    weeks = fold_trends(log, period="week", types=FeedbackRegistry())
    assert [(t.period, t.starts.isoformat(), t.people, t.evaluators) for t in weeks] == [
        ("2026-W49", "2026-11-30", 2, 2), ("2026-W50", "2026-12-07", 0, 1)]
    assert weeks[0].agreement[0].n == 2
    with pytest.raises(ValueError, match="period 'month' is one of"):
        fold_trends(log, period="month")


def test_a_pair_counts_in_the_period_of_its_later_verdict() -> None:
    log = [given_at(1, {"correct": True}, JUDGE, 0),   # Monday
           given_at(1, {"correct": True}, ADA, 26)]    # Tuesday: comparable from then
    days = fold_trends(log, types=FeedbackRegistry())
    assert [(t.period, len(t.agreement)) for t in days] == [("2026-11-30", 0),
                                                           ("2026-12-01", 1)]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.booleans(), st.sampled_from([ADA, BOB, JUDGE]),
                          st.floats(0, 24 * 20)), max_size=40),
       st.sampled_from(["day", "week"]))
def test_the_periods_pairs_add_up_to_the_whole_agreement(
        verdicts: list[tuple[int, bool, Any, float]], period: str) -> None:
    log = [given_at(run, {"correct": correct}, actor, hours)
           for run, correct, actor, hours in verdicts]
    types = FeedbackRegistry()
    whole = {(a.evaluator, a.field): a.n for a in fold_judge_agreement(log, types=types)}
    summed: dict[tuple[str, str], int] = {}
    agreeing: dict[tuple[str, str], float] = {}
    for trend in fold_trends(log, period=period, types=types):
        for a in trend.agreement:
            key = (a.evaluator, a.field)
            summed[key] = summed.get(key, 0) + a.n
            assert a.categorical is not None
            agreeing[key] = agreeing.get(key, 0.0) + a.categorical.observed * a.n
    assert summed == whole
    for a in fold_judge_agreement(log, types=types):
        assert a.categorical is not None
        assert agreeing[(a.evaluator, a.field)] == pytest.approx(a.categorical.observed * a.n)


def test_labels_and_periods() -> None:
    assert (label_of(True), label_of(False), label_of("high"), label_of(3)) == (
        "yes", "no", "high", "3")
    assert period_of(datetime(2027, 1, 1, tzinfo=UTC), "week") == (
        "2026-W53", datetime(2026, 12, 28).date())
    assert period_of(datetime(2026, 12, 1, 23, 30, tzinfo=UTC), "day")[0] == "2026-12-01"
