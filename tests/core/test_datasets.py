"""Datasets from feedback, built in memory from a log, saved and loaded."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from streams.core.actors import EvaluatorActor, SystemActor, UserActor
from streams.core.datasets import (
    Dataset,
    DatasetError,
    FeedbackContext,
    LogFeedbackSource,
    collect,
)
from streams.core.events import (
    AppEvent,
    Envelope,
    FeedbackGiven,
    RuleFired,
    RunStarted,
    Seq,
    TraceContext,
)
from streams.core.targets import ChainTarget, RunTarget
from streams.examples.ops import Resolution, TriageQuality

TRACE_1 = "00-" + "1" * 32 + "-" + "a" * 16 + "-01"
TRACE_2 = "00-" + "2" * 32 + "-" + "b" * 16 + "-01"


class TriageInput(BaseModel):
    service: str
    errors: int
    opened_incident: bool


def _with_seq(envelopes: list[Envelope]) -> list[Envelope]:
    return [e.model_copy(update={"seq": Seq(partition=0, offset=i)})
            for i, e in enumerate(envelopes)]


def incident_log() -> list[Envelope]:
    system = SystemActor()
    spikes = [Envelope.new(AppEvent(name="ops:error_spike", data={"service": "api"}),
                           tenant="acme", workspace="prod", actor=system)]
    head = spikes[0]
    spikes += [head.follow(AppEvent(name="ops:error_spike", data={"service": "api"}))
               for _ in range(2)]
    fired = spikes[-1].follow(RuleFired(firing_id="fir_1", rule="ops:error-spike",
                                        matched=[e.event_id for e in spikes]),
                              trace=TraceContext(traceparent=TRACE_1))
    started = fired.follow(RunStarted(run_id="run_1", rule="ops:error-spike", action="triage",
                                      firing_id="fir_1", scope={"service": "api"}))
    opened = started.follow(AppEvent(name="oncall:incident.opened"))
    retry = started.follow(RunStarted(run_id="run_1", rule="ops:error-spike", action="triage",
                                      firing_id="fir_1", attempt=2, scope={"service": "api"}),
                           trace=TraceContext(traceparent=TRACE_2))
    ada, judge = UserActor(id="ada"), EvaluatorActor(name="triage-judge", version="2026-09-28")
    on_run = RunTarget(run_id="run_1")

    def given(actor: Any, feedback_type: str, target: Any, value: dict[str, Any]) -> Envelope:
        return started.follow(FeedbackGiven(feedback_type=feedback_type, target=target,
                                            value=value), actor=actor, trace=None)

    return _with_seq([
        *spikes, fired, started, opened, retry,
        given(ada, "triage_quality", on_run,
              {"correct": False, "severity": "critical", "note": "It missed the bad deploy."}),
        given(judge, "triage_quality", on_run,
              {"correct": True, "severity": "high", "note": None}),
        given(ada, "resolution", ChainTarget(correlation_id=head.event_id),
              {"resolved": True, "minutes_to_mitigate": 12}),
    ])


class _Workspace:
    def __init__(self, envelopes: list[Envelope]) -> None:
        self.envelopes = envelopes

    async def read(self) -> list[Envelope]:
        return self.envelopes


async def test_the_seeds_dataset_example_runs() -> None:
    workspace = _Workspace(incident_log())

    # From seed 000, "Datasets from feedback", unchanged but for the imports above.
    def triage_input(context: FeedbackContext[TriageQuality]) -> TriageInput:
        assert context.run is not None  # triage_quality is given on runs
        record = context.run
        return TriageInput(
            service=str(record.run.scope["service"]),
            errors=len(record.matched),
            opened_incident=any(e.event_type == "oncall:incident.opened"
                                for e in record.emitted),
        )

    source = LogFeedbackSource(
        workspace, feedback_type=TriageQuality, input_type=TriageInput, input=triage_input
    )
    dataset = await collect("triage-quality", source)

    [example] = dataset.examples  # the evaluator's verdict is left out
    feedback = workspace.envelopes[-3]
    assert example.id == feedback.event_id
    assert example.input == TriageInput(service="api", errors=3, opened_incident=True)
    assert example.verdict == TriageQuality(correct=False, severity="critical",
                                            note="It missed the bad deploy.")
    assert example.trace_id == "2" * 32  # the latest attempt's trace
    assert example.metadata == {"tenant": "acme", "workspace": "prod", "target_kind": "run",
                                "given_by": "user:ada", "seq": str(feedback.seq)}


async def test_evaluators_are_included_on_request_and_targets_filter() -> None:
    workspace = _Workspace(incident_log())

    async def built(context: FeedbackContext[TriageQuality]) -> TriageInput:  # async builder
        assert context.run is not None
        return TriageInput(service="api", errors=len(context.run.matched), opened_incident=True)

    both = await collect("t", LogFeedbackSource(
        workspace, feedback_type=TriageQuality, input_type=TriageInput, input=built,
        include_evaluators=True))
    assert [e.metadata["given_by"] for e in both.examples] == [
        "user:ada", "evaluator:triage-judge@2026-09-28"]
    none = await collect("t", LogFeedbackSource(
        workspace, feedback_type=TriageQuality, input_type=TriageInput, input=built,
        targets={"chain"}))
    assert none.examples == []


class ChainInput(BaseModel):
    events: int


async def test_feedback_on_a_chain_gets_the_chains_envelopes() -> None:
    log = incident_log()
    dataset = await collect("r", LogFeedbackSource(
        _Workspace(log), feedback_type=Resolution, input_type=ChainInput,
        input=lambda c: ChainInput(events=len(c.chain or []))))
    [example] = dataset.examples
    assert example.input.events == len(log)
    assert example.metadata["target_kind"] == "chain"


async def test_save_and_load_round_trip_and_refuse_bad_files(tmp_path: Path) -> None:
    dataset = await collect("r", LogFeedbackSource(
        _Workspace(incident_log()), feedback_type=Resolution, input_type=ChainInput,
        input=lambda c: ChainInput(events=1)))
    path = dataset.save(tmp_path / "r.jsonl")
    again = Dataset.load(path, feedback_type=Resolution, input_type=ChainInput)
    assert again.examples == dataset.examples and again.name == "r"
    text = path.read_text().splitlines()
    (tmp_path / "cut.jsonl").write_text(text[0] + "\n")
    with pytest.raises(DatasetError, match="truncated"):
        Dataset.load(tmp_path / "cut.jsonl", feedback_type=Resolution, input_type=ChainInput)
    (tmp_path / "old.jsonl").write_text('{"format": "feedback-streams.dataset/0"}\n')
    with pytest.raises(DatasetError, match="format"):
        Dataset.load(tmp_path / "old.jsonl", feedback_type=Resolution, input_type=ChainInput)
    with pytest.raises(DatasetError, match="holds 'resolution' feedback"):
        Dataset.load(path, feedback_type=TriageQuality, input_type=ChainInput)
    (tmp_path / "half.jsonl").write_text(text[0] + "\n" + text[1][: len(text[1]) // 2] + "\n")
    with pytest.raises(DatasetError, match=r"half\.jsonl:2"):
        Dataset.load(tmp_path / "half.jsonl", feedback_type=Resolution, input_type=ChainInput)


async def test_a_failing_builder_names_the_feedback() -> None:
    log = incident_log()

    def broken(context: FeedbackContext[Resolution]) -> ChainInput:
        raise KeyError("service")

    with pytest.raises(DatasetError, match=f"{log[-1].event_id}.*KeyError"):
        await collect("r", LogFeedbackSource(_Workspace(log), feedback_type=Resolution,
                                             input_type=ChainInput, input=broken))
    with pytest.raises(DatasetError, match="unknown target kinds"):
        LogFeedbackSource(_Workspace(log), feedback_type=Resolution, input_type=ChainInput,
                          input=broken, targets={"trace"})


async def test_a_dataset_of_corrections_keeps_where_people_overrule_the_judge() -> None:
    log = incident_log()
    started = next(e for e in log if isinstance(e.event, RunStarted))
    bo, old_judge = UserActor(id="bo"), EvaluatorActor(name="triage-judge", version="2026-01")
    other = EvaluatorActor(name="other-judge", version="1")

    def given(actor: Any, value: dict[str, Any], minutes: float) -> Envelope:
        return started.follow(FeedbackGiven(feedback_type="triage_quality",
                                            target=RunTarget(run_id="run_1"), value=value),
                              actor=actor, trace=None).model_copy(
            update={"time": started.time + timedelta(minutes=minutes)})

    log = _with_seq([
        *log,
        # bo first agreed with the judge, then changed his mind: only his latest counts.
        given(bo, {"correct": True, "severity": "high", "note": None}, 1),
        given(bo, {"correct": True, "severity": "low", "note": "minor"}, 2),
        # An older version of the judge, and another judge: not the latest triage-judge.
        given(old_judge, {"correct": False, "severity": "critical", "note": None}, -1),
        given(other, {"correct": False, "severity": "low", "note": None}, 3),
    ])

    def built(context: FeedbackContext[TriageQuality]) -> TriageInput:
        return TriageInput(service="api", errors=1, opened_incident=True)

    corrections = await collect("c", LogFeedbackSource(
        _Workspace(log), feedback_type=TriageQuality, input_type=TriageInput, input=built,
        corrections_of="triage-judge"))
    # The judge (2026-09-28, its latest) said correct/high: ada overruled both fields, bo
    # the severity; the free-text note never counts.
    got = {e.metadata["given_by"]: e for e in corrections.examples}
    assert set(got) == {"user:ada", "user:bo"}
    assert got["user:ada"].verdict.severity == "critical"  # the person's value is the label
    assert got["user:ada"].metadata["differs_on"] == "correct,severity"
    assert got["user:bo"].metadata["differs_on"] == "severity"
    assert got["user:bo"].verdict.note == "minor"
    assert got["user:bo"].metadata["judged_by"] == "evaluator:triage-judge@2026-09-28"
    assert json.loads(got["user:bo"].metadata["judge_verdict"]) == {
        "correct": True, "note": None, "severity": "high"}
    # One version by name: the old one said correct=False/critical, which ada agreed with.
    old = await collect("c", LogFeedbackSource(
        _Workspace(log), feedback_type=TriageQuality, input_type=TriageInput, input=built,
        corrections_of="triage-judge@2026-01"))
    assert [e.metadata["given_by"] for e in old.examples] == ["user:bo"]
    assert old.examples[0].metadata["differs_on"] == "correct,severity"
    with pytest.raises(DatasetError, match="corrections_of names an evaluator"):
        LogFeedbackSource(_Workspace(log), feedback_type=TriageQuality,
                          input_type=TriageInput, input=built, corrections_of=" ")
