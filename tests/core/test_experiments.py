"""Experiments over datasets: results per example, failures recorded, summaries."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from streams.core.datasets import Dataset, Example
from streams.core.evaluators import FunctionEvaluator, HandOff
from streams.core.experiments import InMemoryExperimentTracker
from streams.core.feedback import Feedback, FeedbackRegistry

_TYPES = FeedbackRegistry()


class Outcome(BaseModel):
    opened_incident: bool
    errors: int


class IncidentCall(Feedback, targets={"run"}, registry=_TYPES):
    right: bool
    urgency: Literal["low", "high"]


def _dataset(n: int) -> Dataset[Outcome, IncidentCall]:
    examples = [Example(id=f"evt_{i}", input=Outcome(opened_incident=i % 2 == 0, errors=i),
                        verdict=IncidentCall(right=True, urgency="high")) for i in range(n)]
    return Dataset("incidents", IncidentCall, Outcome, examples)


def judge_outcome(outcome: Outcome) -> IncidentCall:
    if outcome.errors == 1:
        raise HandOff("one error is not enough to judge")
    if outcome.errors == 3:
        raise RuntimeError("judge broke")
    return IncidentCall(right=outcome.opened_incident,
                        urgency="high" if outcome.errors > 2 else "low")


async def test_every_example_is_a_result_and_failures_are_recorded() -> None:
    judge = FunctionEvaluator(judge_outcome, verdict_type=IncidentCall, name="incident-judge",
                              version="1")

    async def task(example: Example[Outcome, IncidentCall]) -> Outcome:
        if example.id == "evt_5":
            raise ValueError("replay found no events")
        return example.input

    seen: list[tuple[int, int]] = []
    tracker = InMemoryExperimentTracker()
    result = await tracker.run_experiment("candidate", dataset=_dataset(6), task=task,
                                          evaluators=[judge],
                                          progress=lambda d, t: seen.append((d, t)))
    assert [r.example_id for r in result.results] == [f"evt_{i}" for i in range(6)]
    [failed] = result.failed
    assert failed.example_id == "evt_5" and failed.error == "ValueError: replay found no events"
    assert result.results[1].verdicts["evaluator:incident-judge@1"] is None  # handed off
    assert "RuntimeError" in result.results[3].evaluator_errors["evaluator:incident-judge@1"]
    summary = result.summary["evaluator:incident-judge@1"]
    # judged: evt_0 (right, low), evt_2 (right, low), evt_4 (right, high)
    assert summary == {"n": 3.0, "handed_off": 1.0, "failed": 1.0, "right.mean": 1.0,
                       "urgency=high": 1 / 3, "urgency=low": 2 / 3}
    assert seen[-1] == (6, 6) and len(seen) == 6
    assert tracker.experiments == [result]
