"""Evaluators as rule actions (streams.core.evaluation): a verdict is recorded before it is
given, and judging the same input again (a retried attempt, another run, a backfill) reuses
the record instead of calling the evaluator; a new version judges afresh."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from streams.core.actors import UserActor
from streams.core.budgets import Budget
from streams.core.errors import IndexBehind
from streams.core.evaluation import (
    VERDICT_RECORD,
    EvaluatorAction,
    promoted_name,
    recorded_verdict,
    verdict_key,
    with_promotions,
)
from streams.core.evaluators import FunctionEvaluator, HandOff
from streams.core.events import AppEvent, Envelope, FeedbackGiven
from streams.core.feedback import Feedback
from streams.core.ids import verdict_event_id
from streams.core.runs import Reaction
from streams.core.targets import RunTarget


class Graded(Feedback, name="graded_for_evaluation_tests", targets={"run"}):
    good: bool


@dataclasses.dataclass(frozen=True)
class Judged:
    text: str
    tags: tuple[str, ...] = ()


class Log:
    """An in-memory workspace: appends land in `envelopes`; `fail_feedback` makes the next
    so many feedback gives raise (a broker away after the verdict was recorded)."""

    def __init__(self, envelopes: list[Envelope] | None = None, actor: Any = None,
                 fail_feedback: list[int] | None = None) -> None:
        self.tenant, self.workspace = "acme", "prod"
        self.envelopes = [] if envelopes is None else envelopes
        self.actor = actor or UserActor(id="ada")
        self.fail_feedback = [0] if fail_feedback is None else fail_feedback

    async def append(self, event: Any, *, correlation_id: str | None = None,
                     causation_id: str | None = None, trace: Any = None,
                     event_id: str | None = None) -> Any:
        envelope = Envelope.new(event, tenant=self.tenant, workspace=self.workspace,
                                actor=self.actor, correlation_id=correlation_id,
                                causation_id=causation_id, event_id=event_id)
        self.envelopes.append(envelope)
        return type("Recorded", (), {"id": envelope.event_id, "seq": len(self.envelopes)})

    async def give_feedback(self, value: Any, *, on: Any, feedback_type: str | None = None,
                            ) -> Any:
        if self.fail_feedback[0]:
            self.fail_feedback[0] -= 1
            raise ConnectionError("the broker is away")
        return await self.append(FeedbackGiven(feedback_type=value.feedback_name, target=on,
                                               value=value.model_dump()))

    def as_actor(self, actor: Any) -> Log:
        return Log(self.envelopes, actor, self.fail_feedback)

    async def read(self) -> list[Envelope]:
        return list(self.envelopes)

    def feedback(self) -> list[Envelope]:
        return [e for e in self.envelopes if isinstance(e.event, FeedbackGiven)]


def counting_judge(version: str = "1") -> tuple[FunctionEvaluator[Judged, Graded], list[str]]:
    calls: list[str] = []

    def judge(judged: Judged) -> Graded:
        calls.append(judged.text)
        if judged.text == "unsure":
            raise HandOff("cannot tell")
        return Graded(good=judged.text.startswith("good"))

    return FunctionEvaluator(judge, verdict_type=Graded, name="grader", version=version), calls


def action_for(evaluator: Any, text: str = "good answer", **options: Any,
               ) -> EvaluatorAction[Judged]:
    async def judged(_reaction: Reaction) -> Judged:
        return Judged(text=text, tags=("a", "b"))

    async def target(reaction: Reaction) -> RunTarget:
        return RunTarget(run_id=reaction.run.run_id)

    return EvaluatorAction(evaluator, input=judged, target=target, **options)


async def test_the_same_input_is_judged_once_and_its_verdict_given_again(
        reaction_in: Callable[..., Reaction]) -> None:
    log = Log()
    evaluator, calls = counting_judge()
    action = action_for(evaluator)
    first = await action(reaction_in(log, "run_1"))
    second = await action(reaction_in(log, "run_2"))  # another run (a backfill, a refire)
    assert calls == ["good answer"]
    assert (first["reused"], second["reused"]) == (False, True)
    assert first["verdict_key"] == second["verdict_key"]
    assert first["value"] == second["value"] == {"good": True}
    # Both runs got the verdict as feedback, from the evaluator's participant.
    given = log.feedback()
    assert [e.event.target for e in given] == [RunTarget(run_id="run_1"),  # type: ignore
                                               RunTarget(run_id="run_2")]
    assert {e.actor.participant for e in given} == {"evaluator:grader@1"}
    # Recorded once, before the first feedback, under its derived id in the run's chain.
    [record] = [e for e in log.envelopes if isinstance(e.event, AppEvent)]
    assert record.event_id == verdict_event_id("prod", first["verdict_key"])
    assert record.event.name == VERDICT_RECORD  # type: ignore[attr-defined]
    assert log.envelopes.index(record) < log.envelopes.index(given[0])


async def test_two_runs_of_one_process_on_the_same_input_at_once_call_the_judge_once(
        reaction_in: Callable[..., Reaction]) -> None:
    # Runs of an unscoped rule run side by side: without taking turns per verdict key, both
    # would miss the look-up while the first judge call is under way.
    log = Log()
    calls: list[str] = []

    async def slow(judged: Judged) -> Graded:
        calls.append(judged.text)
        await asyncio.sleep(0.02)  # a model call's latency: the other run looks up meanwhile
        return Graded(good=True)

    action = action_for(FunctionEvaluator(slow, verdict_type=Graded, name="grader",
                                          version="1"))
    first, second = await asyncio.gather(action(reaction_in(log, "run_1")),
                                         action(reaction_in(log, "run_2")))
    assert calls == ["good answer"]
    assert sorted([first["reused"], second["reused"]]) == [False, True]
    assert len(log.feedback()) == 2


async def test_a_retried_attempt_reuses_the_verdict_recorded_before_it_failed(
        reaction_in: Callable[..., Reaction]) -> None:
    log = Log(fail_feedback=[1])
    evaluator, calls = counting_judge()
    action = action_for(evaluator)
    with pytest.raises(ConnectionError):
        await action(reaction_in(log, attempt=1))
    retried = await action(reaction_in(log, attempt=2))
    assert calls == ["good answer"] and retried["reused"] is True
    assert len(log.feedback()) == 1


async def test_a_new_version_judges_afresh_and_reuse_can_be_turned_off(
        reaction_in: Callable[..., Reaction]) -> None:
    log = Log()
    v1, calls1 = counting_judge("1")
    v2, calls2 = counting_judge("2")
    await action_for(v1)(reaction_in(log))
    fresh = await action_for(v2)(reaction_in(log))
    assert (calls1, calls2, fresh["reused"]) == (["good answer"], ["good answer"], False)
    unrecorded, calls = counting_judge("1")
    off = action_for(unrecorded, reuse=False)
    await off(reaction_in(log))
    await off(reaction_in(log))
    assert calls == ["good answer"] * 2
    assert len([e for e in log.envelopes if isinstance(e.event, AppEvent)]) == 2  # v1's, v2's


async def test_a_hand_off_records_nothing_and_asks_again_next_time(
        reaction_in: Callable[..., Reaction]) -> None:
    log = Log()
    evaluator, calls = counting_judge()
    action = action_for(evaluator, text="unsure")
    assert await action(reaction_in(log)) == {"handed_off": "grader"}
    assert await action(reaction_in(log)) == {"handed_off": "grader"}
    assert calls == ["unsure", "unsure"] and log.envelopes == []


async def test_a_record_that_no_longer_validates_is_judged_again(
        reaction_in: Callable[..., Reaction]) -> None:
    log = Log()
    evaluator, calls = counting_judge()
    action = action_for(evaluator)
    key = verdict_key(evaluator, Judged(text="good answer", tags=("a", "b")))
    # An older record of the key whose value the feedback type refuses now.
    await log.append(AppEvent(name=VERDICT_RECORD, data={
        "key": key, "value": {"good": "maybe", "extra": 1}, "evaluator": "grader",
        "version": "1"}), event_id=verdict_event_id("prod", key))
    assert await recorded_verdict(log, key) is not None
    output = await action(reaction_in(log))
    assert calls == ["good answer"] and output["reused"] is False


async def test_an_index_too_far_behind_is_a_miss_not_a_failed_run(
        reaction_in: Callable[..., Reaction]) -> None:
    class Behind(Log):
        async def event(self, _event_id: str) -> Envelope | None:
            raise IndexBehind("run `streams index build --tenant acme`")

        def as_actor(self, actor: Any) -> Behind:
            return Behind(self.envelopes, actor, self.fail_feedback)

    log = Behind()
    evaluator, calls = counting_judge()
    action = action_for(evaluator)
    await action(reaction_in(log))
    output = await action(reaction_in(log))
    assert calls == ["good answer"] * 2 and output["reused"] is False


def test_the_key_is_the_evaluators_identity_and_a_digest_of_the_inputs_canonical_json(
) -> None:
    evaluator, _ = counting_judge("3")
    key = verdict_key(evaluator, {"b": 1, "a": [1, 2]})
    assert key.startswith("grader@3:") and len(key.split(":")[1]) == 64
    assert key == verdict_key(evaluator, {"a": [1, 2], "b": 1})  # key order does not count
    assert verdict_key(evaluator, Judged("x", ("t",))) == verdict_key(
        evaluator, {"text": "x", "tags": ["t"]})  # a dataclass is its fields
    assert verdict_key(evaluator, Judged("x")) != verdict_key(evaluator, Judged("y"))
    assert verdict_key(counting_judge("4")[0], Judged("x")) != verdict_key(
        evaluator, Judged("x"))


async def test_a_shadow_version_judges_the_same_inputs_apart_and_never_gives_feedback(
        reaction_in: Callable[..., Reaction]) -> None:
    log = Log()
    current, current_calls = counting_judge("1")
    candidate, candidate_calls = counting_judge("2")
    action = action_for(current, shadow=candidate)
    first = await action(reaction_in(log, "run_1"))
    second = await action(reaction_in(log, "run_2"))
    assert current_calls == candidate_calls == ["good answer"]  # each paid once
    assert (first["shadow"]["reused"], second["shadow"]["reused"]) == (False, True)
    assert first["shadow"]["version"] == "2" and first["shadow"]["value"] == {"good": True}
    # Only the current version's verdicts are feedback; the shadow's is a record apart.
    assert {e.actor.participant for e in log.feedback()} == {"evaluator:grader@1"}
    def shadows() -> list[Envelope]:
        return [e for e in log.envelopes if isinstance(e.event, AppEvent)
                and e.event.data.get("shadow") is True]

    # Reused on run_2 (the same input), the verdict is recorded on run_2 too (no call), so
    # the measures count the version's verdict on each target it judged.
    first_record, on_second = shadows()
    assert first_record.event.data["target"] == {"kind": "run", "id": "run_1"}  # type: ignore
    assert on_second.event.data["target"] == {"kind": "run", "id": "run_2"}  # type: ignore
    assert on_second.event.data["reused"] is True  # type: ignore[union-attr]
    assert on_second.event.data["key"] == first_record.event.data["key"]  # type: ignore
    key = first_record.event.data["key"]  # type: ignore[union-attr]
    assert first_record.event_id == verdict_event_id("prod", key)
    assert on_second.event_id != first_record.event_id
    # A retry on run_2 finds that record and writes nothing more; no call either.
    await action(reaction_in(log, "run_2"))
    assert shadows() == [first_record, on_second] and candidate_calls == ["good answer"]
    # Promoted (the candidate becomes the action's evaluator), it reuses its shadow verdicts.
    promoted = await action.promoted()(reaction_in(log, "run_3"))
    assert promoted["reused"] is True and candidate_calls == ["good answer"]
    assert "shadow" not in promoted and promoted["version"] == "2"
    assert {e.actor.participant for e in log.feedback()} == {"evaluator:grader@1",
                                                             "evaluator:grader@2"}


def test_each_shadowed_action_is_also_registered_promoted_under_its_versions_name() -> None:
    current, _ = counting_judge("1")
    candidate, _ = counting_judge("2")
    judges = Budget("judges", tokens=10_000, per=timedelta(hours=1))
    shadowed = action_for(current, shadow=candidate, budget=judges, cost=100)
    plain = action_for(current)
    registry = with_promotions({"grade": shadowed, "plain": plain, "grade@2": plain,
                                "other": plain, "fn": len})
    assert set(registry) == {"grade", "plain", "grade@2", "other", "fn"}
    assert registry["grade@2"] is plain  # a name the registry gives is never replaced
    promoted = with_promotions({"grade": shadowed})[promoted_name("grade", "2")]
    assert promoted.evaluator is candidate and promoted.shadow is None
    assert (promoted.budget, promoted.cost) == (judges, 100)  # the same budget, same cost
    with pytest.raises(ValueError, match="no shadow version to promote"):
        plain.promoted()


async def test_a_shadow_share_picks_the_same_inputs_every_time_and_a_shadow_never_fails_a_run(
        reaction_in: Callable[..., Reaction]) -> None:
    log = Log()
    current, _ = counting_judge("1")
    candidate, calls = counting_judge("2")
    texts = [f"good {i}" for i in range(200)]
    for text in texts:
        await action_for(current, text, shadow=candidate, shadow_share=0.25)(
            reaction_in(log))
    picked = list(calls)
    assert 25 <= len(picked) <= 75  # about a quarter of the 200 (fixed inputs: fixed count)
    again, calls_again = counting_judge("2")
    for text in texts:  # a fresh log: nothing recorded, the same inputs picked
        await action_for(current, text, shadow=again, shadow_share=0.25)(
            reaction_in(Log()))
    assert calls_again == picked
    broken = FunctionEvaluator(lambda _j: 1 / 0, verdict_type=Graded, name="grader",
                               version="4")
    output = await action_for(current, "good too", shadow=broken)(reaction_in(log))
    assert output["value"] == {"good": True}
    assert output["shadow"]["failed"].startswith("ZeroDivisionError")


def test_a_shadow_must_be_another_version_and_its_share_within_zero_and_one() -> None:
    evaluator, _ = counting_judge("1")
    with pytest.raises(ValueError, match="another evaluator version"):
        action_for(evaluator, shadow=counting_judge("1")[0])
    for share in (0.0, 1.5):
        with pytest.raises(ValueError, match="in \\(0, 1\\]"):
            action_for(evaluator, shadow=counting_judge("2")[0], shadow_share=share)
