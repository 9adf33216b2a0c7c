"""The end-to-end measures, as pure folds over envelopes built in memory."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.actors import EvaluatorActor, SystemActor, UserActor
from streams.core.events import (
    AppEvent,
    Envelope,
    Event,
    FeedbackGiven,
    RuleFired,
    RunDeadLettered,
    RunFailed,
    RunRetried,
    RunStarted,
    RunSucceeded,
)
from streams.core.feedback import FeedbackRegistry
from streams.core.measures import (
    MeasureError,
    cohen_kappa,
    fold_judge_agreement,
    fold_quality,
    fold_rule_outcomes,
    fold_time_to_resolution,
    rule_outcomes,
    spearman,
    time_to_resolution,
)
from streams.core.targets import ChainTarget, FiringTarget, RunTarget

T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def env(event: Event, minute: float = 0, *, chain: str = "evt_c", actor: Any = None,
        event_id: str | None = None) -> Envelope:
    return Envelope.new(event, tenant="acme", workspace="prod", actor=actor or SystemActor(),
                        correlation_id=chain, time=at(minute), event_id=event_id)


def run_events(run_id: str, rule: str, outcome: list[Event]) -> list[Envelope]:
    started = env(RunStarted(run_id=run_id, rule=rule, action="a", firing_id=f"fir_{run_id}"),
                  event_id=f"evt_{run_id}_started")
    return [started] + [env(e, i + 1, event_id=f"evt_{run_id}_{i}")
                        for i, e in enumerate(outcome)]


def feedback(target: Any, value: dict[str, Any], actor: Any, minute: float = 5,
             feedback_type: str = "triage_quality") -> Envelope:
    return env(FeedbackGiven(feedback_type=feedback_type, target=target, value=value), minute,
               actor=actor)


ADA = UserActor(id="ada")
BOB = UserActor(id="bob")
JUDGE1 = EvaluatorActor(name="judge", version="1")
JUDGE2 = EvaluatorActor(name="judge", version="2")


def _log() -> list[Envelope]:
    spike = "ops:error-spike"
    ok = run_events("run_1", spike, [RunSucceeded(run_id="run_1", rule=spike, action="a")])
    retried = run_events("run_2", spike, [
        RunFailed(run_id="run_2", rule=spike, action="a", error="boom", will_retry=True),
        RunRetried(run_id="run_2", rule=spike, action="a", attempt=2),
        RunStarted(run_id="run_2", rule=spike, action="a", firing_id="fir_run_2", attempt=2),
        RunSucceeded(run_id="run_2", rule=spike, action="a", attempt=2)])
    dead = run_events("run_3", spike, [
        RunFailed(run_id="run_3", rule=spike, action="a", error="x", will_retry=True),
        RunRetried(run_id="run_3", rule=spike, action="a", attempt=2),
        RunFailed(run_id="run_3", rule=spike, action="a", attempt=2, error="y"),
        RunDeadLettered(run_id="run_3", rule=spike, action="a", attempts=2, error="y")])
    open_ = run_events("run_4", spike, [])
    other = run_events("run_5", "ops:judge", [RunSucceeded(run_id="run_5", rule="ops:judge",
                                                           action="a")])
    people = [
        feedback(RunTarget(run_id="run_2"), {"correct": False}, ADA),
        feedback(RunTarget(run_id="run_1"), {"correct": True}, JUDGE1),  # not a person
        feedback(FiringTarget(firing_id="fir_run_3"), {"fired_rightly": False}, BOB,
                 feedback_type="should_have_fired"),
    ]
    return ok + retried + dead + open_ + other + people + ok  # ok again: a replayed repeat


def test_rule_outcomes_count_each_run_once_by_its_last_event() -> None:
    outcomes = fold_rule_outcomes(_log())
    spike = outcomes["ops:error-spike"]
    assert (spike.runs, spike.succeeded, spike.dead_lettered, spike.in_progress) == (4, 2, 1, 1)
    assert spike.finished == 3
    assert spike.failed_attempts == 3
    assert spike.dead_letter_rate == pytest.approx(1 / 3)
    assert spike.retry_rate == pytest.approx(2 / 3)  # run_2 and run_3 took two attempts
    assert spike.intervention_rate == pytest.approx(2 / 4)  # ada on run_2, bob on its firing
    judge = outcomes["ops:judge"]
    assert (judge.runs, judge.succeeded, judge.intervention_rate) == (1, 1, 0.0)


class _Workspace:
    def __init__(self, envelopes: list[Envelope]) -> None:
        self.envelopes = envelopes

    async def read(self) -> list[Envelope]:
        return list(self.envelopes)


async def test_the_seeds_measures_example_runs() -> None:
    workspace = _Workspace([
        *_log(),
        env(AppEvent(name="oncall:incident.opened"), 0, chain="evt_inc", event_id="evt_inc"),
        env(AppEvent(name="oncall:incident.resolved"), 42, chain="evt_inc"),
    ])
    # From seed 000, "End-to-end measures", unchanged but for the import line.
    outcomes = await rule_outcomes(workspace)
    spike = outcomes["ops:error-spike"]
    print(spike.runs, spike.dead_letter_rate, spike.retry_rate, spike.intervention_rate)

    resolved = await time_to_resolution(
        workspace, resolves=lambda envelope: envelope.event_type == "oncall:incident.resolved"
    )  # {correlation_id: timedelta}, for each chain that was resolved
    assert spike.runs == 4
    assert resolved == {"evt_inc": timedelta(minutes=42)}


def test_time_to_resolution_runs_from_the_event_that_began_the_chain() -> None:
    completing = env(AppEvent(name="ops:error_spike"), 10, chain="evt_third",
                     event_id="evt_third")
    log = [
        env(AppEvent(name="ops:error_spike"), 0, chain="evt_first", event_id="evt_first"),
        completing,  # the third spike completed a count: the firing joins its chain
        env(RuleFired(firing_id="fir_1", rule="ops:error-spike",
                      matched=["evt_first", "evt_third"]), 10.5, chain="evt_third"),
        env(AppEvent(name="oncall:incident.resolved"), 25, chain="evt_third"),
        env(AppEvent(name="oncall:incident.resolved"), 40, chain="evt_third"),  # later: ignored
        env(AppEvent(name="oncall:incident.opened"), 3, chain="evt_open", event_id="evt_open"),
    ]
    got = fold_time_to_resolution(log, lambda e: e.event_type == "oncall:incident.resolved")
    assert got == {"evt_third": timedelta(minutes=15)}


def test_a_raising_predicate_is_a_measure_error_naming_the_event() -> None:
    log = [env(AppEvent(name="ops:x"), 0, event_id="evt_bad")]

    def broken(envelope: Envelope) -> bool:
        raise KeyError("service")

    with pytest.raises(MeasureError, match=r"KeyError.*evt_bad.*evt_c"):
        fold_time_to_resolution(log, broken)


def test_cohen_kappa_of_a_textbook_table() -> None:
    pairs = ([(True, True)] * 20 + [(False, False)] * 15 + [(True, False)] * 5
             + [(False, True)] * 10)
    got = cohen_kappa(pairs)
    assert got.n == 50
    assert got.observed == pytest.approx(0.7)
    assert got.expected == pytest.approx(0.5)
    assert got.kappa == pytest.approx(0.4)
    assert got.ci is not None and got.ci[0] < 0.4 < got.ci[1]


def test_kappa_is_undefined_when_both_sides_always_say_the_same_label() -> None:
    assert cohen_kappa([("low", "low")] * 5).kappa is None
    assert cohen_kappa([]).n == 0


def test_spearman() -> None:
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 1, 2, 3], [1, 2, 3, 4]) == pytest.approx(0.9486832980505138)
    assert spearman([1, 1, 1], [1, 2, 3]) is None


def test_judge_agreement_pairs_each_version_with_people_on_the_same_targets() -> None:
    types = FeedbackRegistry()
    log: list[Envelope] = []
    # Version 1 agrees with ada on 3 of 4 runs; version 2 on all 4; ada changed her mind on
    # run 0 (only her latest counts).
    truth = [True, False, True, False]
    log.append(feedback(RunTarget(run_id="run_0"), {"correct": False, "minutes": 1}, ADA, 1))
    for i, correct in enumerate(truth):
        target = RunTarget(run_id=f"run_{i}")
        log.append(feedback(target, {"correct": correct, "minutes": i * 10}, ADA, 9))
        log.append(feedback(target, {"correct": correct if i else not correct,
                                     "minutes": i * 10 + 5}, JUDGE1, 3))
        log.append(feedback(target, {"correct": correct, "minutes": i * 10 + 1}, JUDGE2, 3))
    log.append(feedback(ChainTarget(correlation_id="evt_c"), {"correct": True}, JUDGE2, 3))
    found = {(a.evaluator, a.field): a for a in fold_judge_agreement(log, types=types)}
    v1 = found[("evaluator:judge@1", "correct")]
    v2 = found[("evaluator:judge@2", "correct")]
    assert v1.kind == "bool" and v1.n == 4
    assert v1.categorical is not None and v1.categorical.observed == pytest.approx(0.75)
    assert v2.categorical is not None and v2.categorical.kappa == pytest.approx(1.0)
    minutes = found[("evaluator:judge@1", "minutes")]
    assert minutes.numeric is not None
    assert minutes.numeric.mae == pytest.approx(5.0)
    assert minutes.numeric.spearman == pytest.approx(1.0)
    assert found[("evaluator:judge@2", "minutes")].numeric.mae == pytest.approx(1.0)  # type: ignore[union-attr]


def test_quality_per_rule_and_day() -> None:
    log = run_events("run_a", "email:triage", []) + run_events("run_b", "email:reply", [])
    review = "workflow_review"
    log += [
        feedback(RunTarget(run_id="run_a"), {"quality_score": 0.5}, JUDGE1, 1, review),
        feedback(RunTarget(run_id="run_a"), {"quality_score": 0.9}, JUDGE1, 60 * 24, review),
        feedback(RunTarget(run_id="run_b"), {"quality_score": 0.2}, JUDGE1, 2, review),
    ]
    got = fold_quality(log)
    assert got["email:triage"].n == 2
    assert got["email:triage"].mean == pytest.approx(0.7)
    assert list(got["email:triage"].by_day.values()) == [(1, 0.5), (1, 0.9)]
    assert got["email:reply"].mean == pytest.approx(0.2)


@settings(max_examples=60, deadline=None)
@given(scores=st.lists(st.floats(min_value=0, max_value=1, allow_nan=False), min_size=2,
                       max_size=12),
       data=st.data())
def test_quality_is_the_same_in_any_reading_order(scores: list[float], data: Any) -> None:
    # A tenant's log is read across partitions, so feedback arrives in a different order on
    # each read: the means must not depend on it to the last bit (the report's file is
    # compared with a fold of the log as written).
    log = run_events("run_a", "email:triage", [])
    log += [feedback(RunTarget(run_id="run_a"), {"quality_score": s}, JUDGE1, 1 + i,
                     "workflow_review") for i, s in enumerate(scores)]
    shuffled = data.draw(st.permutations(log))
    assert fold_quality(shuffled) == fold_quality(log)


def test_quality_means_do_not_depend_on_the_order_of_the_scores() -> None:
    # 0.1 + 0.2 + 0.3 and 0.3 + 0.2 + 0.1 differ in the last bit when summed in order.
    log = run_events("run_a", "email:triage", [])
    ordered = [feedback(RunTarget(run_id="run_a"), {"quality_score": s}, JUDGE1, 1,
                        "workflow_review") for s in (0.1, 0.2, 0.3)]
    forwards = fold_quality(log + ordered)["email:triage"]
    backwards = fold_quality(log + ordered[::-1])["email:triage"]
    assert forwards == backwards
    assert forwards.mean == pytest.approx(0.2)
