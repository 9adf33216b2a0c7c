"""LangfuseExperimentTracker against the Langfuse stand-in: the dataset and its items, the
run's id as Langfuse derives it, per-item scores from the evaluators, failures as scores,
run-level scores on the dataset run, and a refused score named."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from langfuse import Langfuse

from standins.langfuse_standin import LangfuseStandIn
from streams.adapters.langfuse_experiments import (
    ExperimentTrackingError,
    LangfuseExperimentTracker,
    item_id,
    item_trace_id,
)
from streams.core.datasets import Dataset, Example
from streams.core.evaluators import FunctionEvaluator
from streams.core.feedback import Feedback, FeedbackRegistry
from streams.core.replay import Replay, replay_task
from tests.core import test_replay as story

_TYPES = FeedbackRegistry()


class AVeryLongFeedbackTypeNameForScores(Feedback, targets={"run"}, registry=_TYPES):
    right: bool


@pytest.fixture
def standin() -> Iterator[LangfuseStandIn]:
    with LangfuseStandIn() as server:
        yield server


@pytest.fixture
def client(standin: LangfuseStandIn) -> Langfuse:
    return Langfuse(public_key=standin.public_key, secret_key=standin.secret_key,
                    host=standin.url, tracing_enabled=False)


def _opened(replay: Replay) -> Any:
    return type("Outcome", (), {"opened_incident": any(
        e.event_type == "oncall:incident.opened" for e in replay.emitted)})()


def _dataset() -> Dataset[Any, Any]:
    broken = Example(id="inc_broken",
                     input=story.IncidentInput(service="api", expect_incident=True),
                     verdict=story.IncidentCall(right=True), trace_id="ab" * 16)
    examples = [*story.incidents.examples, broken]
    return Dataset("incidents", story.IncidentCall, story.IncidentInput, examples)


def _events(example: Example[Any, Any]) -> list[Any]:
    if example.id == "inc_broken":
        return [story.Escalated(because="not declared")]
    return [story.ServiceError(service=example.input.service, severity=9)] * 3


TASK = replay_task(rule=story.error_spike, action=story.candidate_triage, deps=story.deps,
                   events=_events, output=_opened,
                   event_types=[story.ServiceError, story.IncidentOpened])


async def test_an_experiment_is_a_dataset_run_with_per_item_scores(
        standin: LangfuseStandIn, client: Langfuse) -> None:
    tracker = LangfuseExperimentTracker(client)
    dataset = _dataset()
    result = await tracker.run_experiment("candidate-triage", dataset=dataset, task=TASK,
                                          evaluators=[story.incident_judge])
    assert [r.example_id for r in result.failed] == ["inc_broken"]

    [pushed] = standin.datasets()
    assert pushed["name"] == "incidents"
    assert pushed["metadata"]["feedback_type"] == "incident_call"
    items = {i["id"]: i for i in standin.dataset_items("incidents")}
    assert set(items) == {item_id("incidents", e.id) for e in dataset.examples}
    first = items[item_id("incidents", "inc_0")]
    assert first["input"] == {"service": "api", "expect_incident": True}
    assert first["expectedOutput"] == {"right": True}
    assert first["metadata"]["example_id"] == "inc_0"
    assert items[item_id("incidents", "inc_broken")]["sourceTraceId"] == "ab" * 16

    run_id = tracker.runs["candidate-triage"]
    assert run_id == client._create_experiment_id(  # the SDK's own derivation
        project_id=standin.project_id, dataset_id=pushed["id"], run_name="candidate-triage")
    scores = standin.scores()
    per_item = {(s["traceId"], s["name"]): s for s in scores if s["traceId"]}
    for example, expected in [("inc_0", 1), ("inc_1", 0), ("inc_2", 1)]:
        trace = item_trace_id(run_id, item_id("incidents", example))
        score = per_item[(trace, "incident_call.right")]
        assert (score["dataType"], score["value"]) == ("BOOLEAN", expected)
        assert score["metadata"]["evaluator"] == "evaluator:incident-judge@1"
        assert score["metadata"]["example_id"] == example
        assert score["metadata"]["experiment_id"] == run_id
    broken = per_item[(item_trace_id(run_id, item_id("incidents", "inc_broken")),
                       "experiment.error")]
    assert broken["dataType"] == "TEXT"
    assert "'oncall:escalated' is not among the replay's event_types" in broken["stringValue"]
    on_run = {s["name"]: s for s in scores if s["datasetRunId"] == run_id}
    assert on_run["experiment.failed"]["value"] == 1
    assert on_run["incident_call.right.mean"]["value"] == pytest.approx(2 / 3)
    assert len(scores) == 3 + 1 + 2

    # The same run again: the same run id, the scores replaced, not added.
    await tracker.run_experiment("candidate-triage", dataset=dataset, task=TASK,
                                 evaluators=[story.incident_judge])
    assert tracker.runs["candidate-triage"] == run_id
    assert len(standin.scores()) == len(scores)
    assert len(standin.dataset_items("incidents")) == len(items)
    assert len(tracker.experiments) == 2


async def test_a_refused_score_is_an_error_naming_it(standin: LangfuseStandIn,
                                                     client: Langfuse) -> None:
    judge = FunctionEvaluator(lambda o: AVeryLongFeedbackTypeNameForScores(right=True),
                              verdict_type=AVeryLongFeedbackTypeNameForScores,
                              name="long", version="1")
    tracker = LangfuseExperimentTracker(client)
    with pytest.raises(ExperimentTrackingError,
                       match=r"a_very_long_feedback_type_name_for_scores\.right: .*35"):
        await tracker.run_experiment("long-names", dataset=_dataset(), task=TASK,
                                     evaluators=[judge])
