"""Evaluators: FunctionEvaluator, HandOff, Fallback and verdict validation (in memory)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any, Literal, cast

import pytest
from pydantic import BaseModel

from streams.core.actors import EvaluatorActor, actor_from_participant
from streams.core.evaluators import (
    Evaluator,
    EvaluatorBase,
    Fallback,
    FunctionEvaluator,
    HandOff,
    Verdict,
    check_verdict,
)
from streams.core.feedback import Feedback, FeedbackRegistry

# Test types join a registry of their own, so the process-wide one stays as it was.
TYPES = FeedbackRegistry()


class TriageQuality(Feedback, name="triage_quality", targets={"run"}, registry=TYPES):
    correct: bool
    severity: Literal["low", "high", "critical"]


class OtherVerdict(Feedback, name="other_verdict", targets={"run"}, registry=TYPES):
    fine: bool


class Base(Feedback, abstract=True):
    pass


class TriageInput(BaseModel):
    service: str
    errors: int
    opened_incident: bool


def opened_an_incident(judged: TriageInput) -> TriageQuality:
    if judged.errors < 3:
        raise HandOff("not enough to go on")
    return TriageQuality(correct=judged.opened_incident, severity="high")


def returning(result: Any) -> Callable[[TriageInput], Any]:
    """A function of the input that returns `result`, whatever it is."""
    return lambda _: result


INPUT = TriageInput(service="api", errors=5, opened_incident=True)
FEW = TriageInput(service="api", errors=1, opened_incident=True)


# -- FunctionEvaluator -----------------------------------------------------------------------


async def test_sync_function_gives_a_verdict_from_its_actor() -> None:
    judge = FunctionEvaluator(
        opened_an_incident, verdict_type=TriageQuality, name="opened-incident", version="1"
    )
    verdict = await judge.evaluate(INPUT)
    assert verdict.value == TriageQuality(correct=True, severity="high")
    assert (verdict.evaluator, verdict.version) == ("opened-incident", "1")
    assert verdict.confidence is None
    assert verdict.latency_ms >= 0
    assert verdict.trace is None
    assert verdict.actor == EvaluatorActor(name="opened-incident", version="1")
    assert verdict.actor.participant == "evaluator:opened-incident@1"
    assert judge.actor.participant == "evaluator:opened-incident@1"
    assert actor_from_participant(verdict.actor.participant) == verdict.actor
    assert verdict.feedback_type == "triage_quality"
    assert isinstance(judge, Evaluator)


async def test_async_function_may_return_value_and_confidence() -> None:
    async def judge_it(judged: TriageInput) -> tuple[TriageQuality, float]:
        await asyncio.sleep(0)
        return TriageQuality(correct=judged.opened_incident, severity="low"), 0.75

    judge = FunctionEvaluator(judge_it, verdict_type=TriageQuality, name="async-judge")
    verdict = await judge.evaluate(INPUT)
    assert verdict.value.severity == "low"
    assert verdict.confidence == 0.75
    assert verdict.version == "0"


async def test_latency_is_measured() -> None:
    async def slow(judged: TriageInput) -> TriageQuality:
        await asyncio.sleep(0.03)
        return TriageQuality(correct=True, severity="low")

    verdict = await FunctionEvaluator(slow, verdict_type=TriageQuality).evaluate(INPUT)
    assert verdict.latency_ms >= 25


def test_name_defaults_to_the_function_name() -> None:
    judge = FunctionEvaluator(opened_an_incident, verdict_type=TriageQuality)
    assert (judge.name, judge.version) == ("opened_an_incident", "0")
    assert judge.verdict_type is TriageQuality
    assert judge.fn is opened_an_incident
    assert "opened_an_incident" in repr(judge)


async def test_hand_off_propagates_with_its_reason() -> None:
    judge = FunctionEvaluator(opened_an_incident, verdict_type=TriageQuality, name="j")
    with pytest.raises(HandOff) as raised:
        await judge.evaluate(FEW)
    assert raised.value.reason == "not enough to go on"
    assert str(raised.value) == "not enough to go on"
    bare = HandOff()
    assert bare.reason is None
    assert str(bare) == "handed off"


async def test_a_value_of_another_type_is_a_type_error() -> None:
    judge = FunctionEvaluator(returning(OtherVerdict(fine=True)), verdict_type=TriageQuality,
                              name="liar")
    with pytest.raises(TypeError, match="not its verdict_type TriageQuality"):
        await judge.evaluate(INPUT)

    dict_judge = FunctionEvaluator(returning({"correct": True, "severity": "low"}),
                                   verdict_type=TriageQuality, name="d")
    with pytest.raises(TypeError):
        await dict_judge.evaluate(INPUT)


async def test_bad_tuples_and_confidences_are_refused() -> None:
    value = TriageQuality(correct=True, severity="low")
    three = FunctionEvaluator(returning((value, 0.5, "x")), verdict_type=TriageQuality, name="t")
    with pytest.raises(TypeError, match="tuple of 3"):
        await three.evaluate(INPUT)
    too_sure = FunctionEvaluator(returning((value, 1.5)), verdict_type=TriageQuality, name="t")
    with pytest.raises(ValueError, match=r"within \[0, 1\]"):
        await too_sure.evaluate(INPUT)
    wordy = FunctionEvaluator(returning((value, "high")), verdict_type=TriageQuality, name="t")
    with pytest.raises(TypeError, match="confidence"):
        await wordy.evaluate(INPUT)


def test_construction_checks_identity_and_verdict_type() -> None:
    with pytest.raises(TypeError, match="Feedback subclass"):
        FunctionEvaluator(returning(None), verdict_type=cast(Any, TriageInput), name="x")
    with pytest.raises(TypeError, match="abstract"):
        FunctionEvaluator(returning(None), verdict_type=Base, name="x")
    with pytest.raises(ValueError, match="name"):
        FunctionEvaluator(opened_an_incident, verdict_type=TriageQuality, name="")
    with pytest.raises(ValueError, match="version"):
        FunctionEvaluator(opened_an_incident, verdict_type=TriageQuality, name="x", version="")
    with pytest.raises(ValueError, match="'@'"):
        FunctionEvaluator(opened_an_incident, verdict_type=TriageQuality, name="x", version="a@b")
    with pytest.raises(TypeError, match="callable"):
        FunctionEvaluator(42, verdict_type=TriageQuality, name="x")  # type: ignore[call-overload]


async def test_other_exceptions_propagate() -> None:
    def broken(_: TriageInput) -> TriageQuality:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        await FunctionEvaluator(broken, verdict_type=TriageQuality).evaluate(INPUT)


# -- Verdict -------------------------------------------------------------------------------


def test_verdict_validates_itself() -> None:
    value = TriageQuality(correct=True, severity="low")
    with pytest.raises(TypeError, match="concrete Feedback"):
        Verdict(value={"correct": True}, evaluator="e", version="1")  # type: ignore[type-var]
    with pytest.raises(ValueError, match="latency_ms"):
        Verdict(value=value, evaluator="e", version="1", latency_ms=-1.0)
    with pytest.raises(ValueError, match="confidence"):
        Verdict(value=value, evaluator="e", version="1", confidence=float("nan"))
    with pytest.raises(TypeError, match="trace"):
        Verdict(value=value, evaluator="e", version="1", trace={"tokens": 3})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="name"):
        Verdict(value=value, evaluator="", version="1")
    verdict = Verdict(value=value, evaluator="e", version="1", confidence=1, trace={"a": "b"})
    assert verdict.confidence == 1.0
    assert isinstance(verdict.confidence, float)


def test_check_verdict_refuses_the_wrong_type() -> None:
    verdict = Verdict(value=OtherVerdict(fine=True), evaluator="e", version="1")
    assert check_verdict(verdict, OtherVerdict) is verdict
    with pytest.raises(TypeError, match="not the declared TriageQuality"):
        check_verdict(verdict, TriageQuality)
    with pytest.raises(TypeError, match="must return a Verdict"):
        check_verdict(OtherVerdict(fine=True), OtherVerdict)


def test_verdict_output_is_json_ready() -> None:
    verdict = Verdict(
        value=TriageQuality(correct=False, severity="critical"), evaluator="e", version="2",
        confidence=0.5, latency_ms=1.5, trace={"model": "m"},
    )
    output = verdict.as_output()
    assert json.loads(json.dumps(output)) == {
        "feedback_type": "triage_quality",
        "value": {"correct": False, "severity": "critical"},
        "evaluator": "e",
        "version": "2",
        "confidence": 0.5,
        "latency_ms": 1.5,
        "trace": {"model": "m"},
    }


# -- Fallback ------------------------------------------------------------------------------


class Recording(EvaluatorBase[TriageInput, TriageQuality]):
    """Hands off or answers as told, and counts its calls."""

    def __init__(self, name: str, *, hand_off: bool, confidence: float | None = None) -> None:
        super().__init__(name=name, version="3", verdict_type=TriageQuality)
        self.hand_off = hand_off
        self.confidence = confidence
        self.calls = 0

    async def evaluate(self, input: TriageInput, /) -> Verdict[TriageQuality]:
        self.calls += 1
        if self.hand_off:
            raise HandOff(f"{self.name} declines")
        return self.verdict(TriageQuality(correct=True, severity="low"),
                            confidence=self.confidence, trace={"model": self.name})


async def test_fallback_passes_a_hand_off_to_the_next_member() -> None:
    cheap = Recording("cheap", hand_off=True)
    llm = Recording("llm", hand_off=False, confidence=0.9)
    never = Recording("never", hand_off=False)
    both = Fallback(cheap, llm, never, name="triage-judge", version="7")
    verdict = await both.evaluate(INPUT)
    assert (cheap.calls, llm.calls, never.calls) == (1, 1, 0)
    assert verdict.actor.participant == "evaluator:triage-judge@7"
    assert verdict.confidence == 0.9
    assert verdict.trace == {"model": "llm", "evaluator": "llm", "evaluator_version": "3",
                             "handed_off": "cheap"}
    assert verdict.latency_ms >= 0
    assert both.members == (cheap, llm, never)
    assert both.verdict_type is TriageQuality


async def test_fallback_takes_the_first_verdict() -> None:
    first = Recording("first", hand_off=False)
    second = Recording("second", hand_off=False)
    verdict = await Fallback(first, second, name="f").evaluate(INPUT)
    assert (first.calls, second.calls) == (1, 0)
    assert verdict.trace is not None
    assert verdict.trace["evaluator"] == "first"
    assert "handed_off" not in verdict.trace


async def test_fallback_hands_off_when_every_member_does() -> None:
    a, b = Recording("a", hand_off=True), Recording("b", hand_off=True)
    with pytest.raises(HandOff) as raised:
        await Fallback(a, b, name="all-decline").evaluate(INPUT)
    assert (a.calls, b.calls) == (1, 1)
    assert raised.value.reason is not None
    assert "a@3: a declines" in raised.value.reason
    assert "b@3: b declines" in raised.value.reason


async def test_fallback_of_functions_sync_and_async() -> None:
    async def always(_: TriageInput) -> TriageQuality:
        return TriageQuality(correct=False, severity="critical")

    rule = FunctionEvaluator(opened_an_incident, verdict_type=TriageQuality, name="rule")
    backup = FunctionEvaluator(always, verdict_type=TriageQuality, name="backup", version="2")
    judge = Fallback(rule, backup, name="combined", version="1")
    decided = await judge.evaluate(INPUT)
    assert decided.trace == {"evaluator": "rule", "evaluator_version": "0"}
    passed = await judge.evaluate(FEW)
    assert passed.value.severity == "critical"
    assert passed.trace == {"evaluator": "backup", "evaluator_version": "2",
                            "handed_off": "rule"}


async def test_fallback_lets_other_errors_through() -> None:
    def broken(_: TriageInput) -> TriageQuality:
        raise RuntimeError("boom")

    after = Recording("after", hand_off=False)
    judge = Fallback(FunctionEvaluator(broken, verdict_type=TriageQuality), after, name="f")
    with pytest.raises(RuntimeError):
        await judge.evaluate(INPUT)
    assert after.calls == 0


def test_fallback_members_must_share_the_verdict_type() -> None:
    other = FunctionEvaluator(returning(OtherVerdict(fine=True)), verdict_type=OtherVerdict,
                              name="other")
    with pytest.raises(TypeError, match="gives OtherVerdict"):
        Fallback(Recording("a", hand_off=False), cast(Any, other), name="mixed")
    with pytest.raises(TypeError, match="must be evaluators"):
        Fallback(Recording("a", hand_off=False), object(), name="x")  # type: ignore[arg-type]


async def test_fallback_checks_member_verdicts() -> None:
    class Liar:
        name = "liar"
        version = "1"
        verdict_type = TriageQuality

        async def evaluate(self, input: TriageInput, /) -> Verdict[TriageQuality]:
            return Verdict(value=OtherVerdict(fine=True), evaluator="liar",  # type: ignore[arg-type]
                           version="1")

    with pytest.raises(TypeError, match="not the declared TriageQuality"):
        await Fallback(Liar(), name="f").evaluate(INPUT)
