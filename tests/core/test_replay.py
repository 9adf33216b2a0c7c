"""Replay experiments: a rule and a candidate action replayed in an isolated in-memory
workspace through the worker's pure matcher and run executor (sampling, counts, throttles,
retries, dead letters), with failing examples recorded, never dropped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from datetime import timedelta
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, Field

from streams.core.actors import EvaluatorActor, UserActor
from streams.core.app_events import AppEventType
from streams.core.datasets import Dataset, Example
from streams.core.errors import NotFound, ValidationFailed
from streams.core.evaluators import FunctionEvaluator
from streams.core.events import (
    AppEvent,
    FeedbackGiven,
    RunFailed,
    RunRetried,
    RunSucceeded,
)
from streams.core.experiments import InMemoryExperimentTracker
from streams.core.feedback import Feedback, FeedbackRegistry
from streams.core.replay import MemoryLog, MemoryWorkspace, Replay, Replayer, ReplayError
from streams.core.rules import F, RetryPolicy, Rule, RuleEngine, on, run
from streams.core.runs import Reaction
from streams.core.targets import ChainTarget, RunTarget
from streams.examples.ops import Escalated, IncidentOpened
from tests.conftest import REPO

_TYPES = FeedbackRegistry()


# -- the pieces seed 000's experiment leaves to the reader ------------------------------------


class ServiceError(AppEventType, name="replaytest:service_error"):
    """A service reported an error of some severity (0-10)."""

    service: str
    severity: Annotated[int, Field(ge=0, le=10)]


class IncidentCall(Feedback, name="incident_call", targets={"run"}, registry=_TYPES):
    right: bool


class IncidentInput(BaseModel):
    service: str
    expect_incident: bool


error_spike = Rule(
    name="ops:error-spike",
    when=on(ServiceError).count(3, within=timedelta(minutes=5)).scope(F.data.service),
    then=run("triage", retry=RetryPolicy(max_attempts=3, backoff=timedelta(seconds=1))),
)
deps: Mapping[str, Any] = {"threshold": 20}


async def candidate_triage(reaction: Reaction[Mapping[str, Any]]) -> dict[str, Any]:
    """The candidate: open an incident when the matched errors' severities add up."""
    errors = [ServiceError.of(e.event) for e in reaction.events
              if isinstance(e.event, AppEvent)]
    total = sum(e.severity for e in errors)
    service = str(reaction.run.scope["service"])
    if total >= reaction.deps["threshold"] and service != "batch":  # the candidate's blind spot
        await reaction.emit(IncidentOpened(service=service, errors=len(errors)).to_event())
        return {"opened": True, "severity": total}
    return {"opened": False, "severity": total}


def _incidents(services: list[str]) -> Dataset[IncidentInput, IncidentCall]:
    return Dataset("incidents", IncidentCall, IncidentInput, [
        Example(id=f"inc_{i}", input=IncidentInput(service=s, expect_incident=True),
                verdict=IncidentCall(right=True))
        for i, s in enumerate(services)])


incidents = _incidents(["api", "batch", "web"])


def _judge_incident(outcome: Any) -> IncidentCall:
    return IncidentCall(right=outcome.opened_incident)


incident_judge = FunctionEvaluator(_judge_incident, verdict_type=IncidentCall,
                                   name="incident-judge", version="1")


async def test_the_seed_experiment_runs_as_written() -> None:
    # --- seed 000, "Experiments": only the import lines changed --------------------------
    from streams.core.experiments import InMemoryExperimentTracker  # noqa: I001

    from streams.core.replay import Replay, replay_task  # noqa: F401  (used in annotations)

    class Outcome(BaseModel):
        opened_incident: bool

    def replayed(replay: Replay) -> Outcome:
        return Outcome(
            opened_incident=any(e.event_type == "oncall:incident.opened" for e in replay.emitted)
        )

    task = replay_task(
        rule=error_spike,
        action=candidate_triage,
        deps=deps,
        events=lambda example: [ServiceError(service=example.input.service, severity=9)] * 3,
        output=replayed,
        event_types=[ServiceError, IncidentOpened],
    )
    result = await InMemoryExperimentTracker().run_experiment(
        "candidate-triage", dataset=incidents, task=task, evaluators=[incident_judge]
    )
    # --- end of the seed's block ---------------------------------------------------------
    assert [r.example_id for r in result.results] == ["inc_0", "inc_1", "inc_2"]
    assert not result.failed
    assert [r.output for r in result.results] == [
        Outcome(opened_incident=True), Outcome(opened_incident=False),
        Outcome(opened_incident=True)]
    assert result.summary["evaluator:incident-judge@1"]["right.mean"] == pytest.approx(2 / 3)


async def _replay(rule: Rule, action: Any, events: list[Any], **kw: Any) -> Replay:
    replayer = Replayer(rule=rule, action=action, deps=deps,
                        event_types=[ServiceError, IncidentOpened], **kw)
    return await replayer.replay(events)


async def test_a_replay_holds_runs_oldest_first_the_whole_log_and_what_runs_emitted() -> None:
    events = [ServiceError(service=s, severity=9) for s in ["api", "web"] * 3]
    replay = await _replay(error_spike, candidate_triage, events)
    assert [r.run.scope for r in replay.runs] == [{"service": "api"}, {"service": "web"}]
    assert replay.runs[0].started.time <= replay.runs[1].started.time
    assert [len(r.matched) for r in replay.runs] == [3, 3]
    assert all(m.data["service"] == r.run.scope["service"]
               for r in replay.runs for m in r.matched)
    kinds = [e.event_type for e in replay.log]
    assert kinds.count("replaytest:service_error") == 6
    assert kinds.count("rule_fired") == kinds.count("run_started") == 2
    assert kinds.count("run_succeeded") == 2
    assert [e.event_type for e in replay.emitted] == ["oncall:incident.opened"] * 2
    # What a run emitted joins its chain, caused by its run_started, as in the worker.
    for record in replay.runs:
        [opened] = [e for e in record.emitted if e.event_type == "oncall:incident.opened"]
        assert opened.causation_id == record.started.event_id
        assert opened.actor.participant == "agent:rule:ops:error-spike"
    assert [e.seq.offset for e in replay.log if e.seq] == list(range(len(replay.log)))


async def test_sampling_and_throttles_decide_as_the_engine_does() -> None:
    sampled = Rule(name="t:sampled", when=on(ServiceError).sample(0.5), then=run("act"))

    async def act(reaction: Reaction) -> None:
        return None

    replay = await _replay(sampled, act, [ServiceError(service="api", severity=1)] * 40)
    expected = RuleEngine([sampled]).replay(replay.published)
    assert 0 < len(replay.runs) < 40
    assert [r.matched[0].event_id for r in replay.runs] == \
        [d.matched_event_ids[0] for d in expected]

    limited = Rule(name="t:limited",
                   when=on(ServiceError).scope(F.data.service).at_most(2, per=timedelta(hours=1)),
                   then=run("act"))
    replay = await _replay(limited, act, [ServiceError(service=s, severity=1)
                                          for s in ["api"] * 5 + ["web"] * 3])
    assert [r.run.scope["service"] for r in replay.runs] == ["api", "api", "web", "web"]


async def test_a_completion_rule_judges_each_chain_once_and_the_storys_end_ends_the_rest(
) -> None:
    from datetime import UTC, datetime

    from streams.core.events import Envelope

    whole = Rule(name="t:whole", when=on(ServiceError).completes(quiet=timedelta(minutes=5)),
                 then=run("act"))

    async def act(reaction: Reaction) -> dict[str, int]:
        return {"seen": len(reaction.events)}

    t0 = datetime(2026, 12, 1, tzinfo=UTC)

    def error(chain: str, minutes: int) -> Envelope:
        return Envelope.new(ServiceError(service="api", severity=1).to_event(), tenant="t",
                            workspace="w", correlation_id=chain,
                            time=t0 + timedelta(minutes=minutes))

    story = [error("a", 0), error("a", 1), error("b", 10), error("c", 11)]
    replay = await _replay(whole, act, story)
    # a ends when b's time passes its quiet period; b and c when the story ends.
    assert [(r.run.scope["chain"], len(r.matched)) for r in replay.runs] == \
        [("a", 2), ("b", 1), ("c", 1)]


async def test_retries_are_the_rules_policy_and_their_delays_are_not_waited() -> None:
    attempts: list[int] = []

    async def flaky(reaction: Reaction) -> dict[str, Any]:
        attempts.append(reaction.attempt)
        if reaction.attempt < 3:
            raise ConnectionError("pager unreachable")
        return {"ok": True}

    replay = await _replay(error_spike, flaky, [ServiceError(service="api", severity=1)] * 3)
    assert attempts == [1, 2, 3]
    [record] = replay.runs
    assert [type(e.event) for e in record.emitted] == [
        RunFailed, RunRetried, RunFailed, RunRetried, RunSucceeded]
    assert replay.waited == pytest.approx(1.0 + 2.0)  # 1 s doubling, skipped


async def test_what_runs_emit_is_matched_in_turn_and_a_loop_is_bounded() -> None:
    cascade = Rule(name="t:cascade", when=on(ServiceError).where(F.data.severity.gt(5)),
                   then=run("calm"))

    async def calm(reaction: Reaction) -> None:
        error = ServiceError.of(reaction.events[0].event)  # type: ignore[arg-type]
        await reaction.emit(ServiceError(service=error.service,
                                         severity=error.severity - 1).to_event())

    replay = await _replay(cascade, calm, [ServiceError(service="api", severity=9)])
    assert [r.matched[0].data["severity"] for r in replay.runs] == [9, 8, 7, 6]
    assert [e.data["severity"] for e in replay.emitted] == [8, 7, 6, 5]

    forever = Rule(name="t:forever", when=on(ServiceError), then=run("echo"))

    async def echo(reaction: Reaction) -> None:
        await reaction.emit(ServiceError(service="api", severity=1).to_event())

    with pytest.raises(ReplayError, match=r"did not settle within 50 events"):
        await _replay(forever, echo, [ServiceError(service="api", severity=1)],
                      step_limit=50)


async def test_failing_examples_are_recorded_with_their_error() -> None:
    from streams.core.replay import replay_task

    async def broken(reaction: Reaction) -> None:
        raise RuntimeError(f"candidate broke on attempt {reaction.attempt}")

    stories: dict[str, list[Any]] = {
        "ok": [ServiceError(service="api", severity=9)] * 3,
        "undeclared": [Escalated(because="x")],
        "invalid": [AppEvent(name="replaytest:service_error", data={"service": "api",
                                                                    "severity": 99})],
        "not-an-event": [{"service": "api"}],
    }

    def events(example: Example[Any, Any]) -> list[Any]:
        if example.id == "bad-value":
            return [ServiceError(service="api", severity=11)]  # raises when built
        return stories[example.id]

    ids = ["ok", "undeclared", "invalid", "not-an-event", "bad-value"]
    dataset = Dataset("stories", IncidentCall, IncidentInput, [
        Example(id=i, input=IncidentInput(service="api", expect_incident=True),
                verdict=IncidentCall(right=True)) for i in ids])
    task = replay_task(rule=error_spike, action=candidate_triage, deps=deps, events=events,
                       output=lambda r: len(r.runs), event_types=[ServiceError, IncidentOpened])
    result = await InMemoryExperimentTracker().run_experiment("stories", dataset=dataset,
                                                              task=task)
    by_id = {r.example_id: r for r in result.results}
    assert [r.example_id for r in result.results] == ids
    assert by_id["ok"].output == 1 and not by_id["ok"].failed
    assert by_id["undeclared"].error is not None
    assert "ReplayError" in by_id["undeclared"].error
    assert "'oncall:escalated' is not among the replay's event_types" in by_id["undeclared"].error
    assert "example 'undeclared'" in by_id["undeclared"].error
    assert by_id["invalid"].error is not None and "severity" in by_id["invalid"].error
    assert by_id["not-an-event"].error is not None
    assert "event 0 is a dict" in by_id["not-an-event"].error
    assert by_id["bad-value"].error is not None
    assert by_id["bad-value"].error.startswith("ValidationError")

    task = replay_task(rule=error_spike, action=broken, events=events,
                       output=lambda r: len(r.runs),
                       event_types=[ServiceError, IncidentOpened])
    result = await InMemoryExperimentTracker().run_experiment("broken", dataset=Dataset(
        "one", IncidentCall, IncidentInput, dataset.examples[:1]), task=task)
    [failed] = result.failed
    assert failed.error is not None
    assert "dead-lettered after 3 attempt(s): RuntimeError: candidate broke on attempt 3" \
        in failed.error


async def test_an_action_emitting_an_undeclared_type_fails_its_attempts() -> None:
    async def pages(reaction: Reaction) -> None:
        await reaction.emit(Escalated(because="spike").to_event())

    with pytest.raises(ReplayError, match="dead-lettered after 3") as caught:
        await _replay(error_spike, pages, [ServiceError(service="api", severity=1)] * 3)
    assert "oncall:escalated" in str(caught.value)


def test_a_rule_watching_an_undeclared_type_is_refused_when_built() -> None:
    async def act(reaction: Reaction) -> None:
        return None

    with pytest.raises(ReplayError, match="watches 'replaytest:service_error'"):
        Replayer(rule=error_spike, action=act, event_types=[IncidentOpened])
    with pytest.raises(ReplayError, match="takes AppEventType classes"):
        Replayer(rule=error_spike, action=act, event_types=["replaytest:service_error"])  # type: ignore[list-item]


async def test_the_memory_workspace_validates_feedback_as_the_handle_does() -> None:
    replay = await _replay(error_spike, candidate_triage,
                           [ServiceError(service="api", severity=9)] * 3)
    log = MemoryLog("replay", {ServiceError.app_event_name: ServiceError,
                               IncidentOpened.app_event_name: IncidentOpened})
    for envelope in replay.log:
        log.append(envelope)
    ada = MemoryWorkspace(log, "replay", UserActor(id="ada"), types=_TYPES)
    [record] = await ada.runs(rule="ops:error-spike")
    recorded = await ada.give_feedback(IncidentCall(right=False),
                                       on=RunTarget(run_id=record.id))
    given = recorded.envelope
    assert isinstance(given.event, FeedbackGiven)
    assert given.correlation_id == record.started.correlation_id
    assert given.causation_id == record.started.event_id
    assert given.event.value == {"right": False}
    assert given.actor.participant == "user:ada"
    judge = ada.as_actor(EvaluatorActor(name="j", version="1"))
    again = await judge.give_feedback({"right": True}, on=RunTarget(run_id=record.id),
                                      feedback_type="incident_call")
    assert again.envelope.actor.participant == "evaluator:j@1"
    with pytest.raises(ValidationFailed, match="cannot be given on a chain"):
        await ada.give_feedback(IncidentCall(right=True),
                                on=ChainTarget(correlation_id=record.started.correlation_id))
    with pytest.raises(NotFound, match="no run 'run_nope' in workspace replay/replay"):
        await ada.give_feedback(IncidentCall(right=True), on=RunTarget(run_id="run_nope"))
    with pytest.raises(ValidationFailed, match="on= must be"):
        await ada.give_feedback(IncidentCall(right=True), on="run")  # type: ignore[arg-type]
    other = MemoryWorkspace(log, "elsewhere", UserActor(id="ada"), types=_TYPES)
    with pytest.raises(NotFound):
        await other.give_feedback(IncidentCall(right=True), on=RunTarget(run_id=record.id))
    assert await other.read() == []


def test_a_replay_touches_no_broker() -> None:
    """Run a replay experiment in a fresh process whose brokers are a closed port: it
    finishes, and no Kafka client library was even imported."""
    script = """
import asyncio, json, sys
from tests.core import test_replay as t
from streams.core.experiments import InMemoryExperimentTracker
from streams.core.replay import replay_task

task = replay_task(rule=t.error_spike, action=t.candidate_triage, deps=t.deps,
                   events=lambda e: [t.ServiceError(service=e.input.service, severity=9)] * 3,
                   output=lambda r: len(r.emitted), event_types=[t.ServiceError, t.IncidentOpened])
result = asyncio.run(InMemoryExperimentTracker().run_experiment(
    "isolated", dataset=t.incidents, task=task))
print(json.dumps({"outputs": [r.output for r in result.results],
                  "kafka": sorted(m for m in sys.modules if m.split(".")[0] in
                                  ("confluent_kafka", "faust", "aiokafka", "httpx"))}))
"""
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1",
           "SCHEMA_REGISTRY_URL": "http://127.0.0.1:1"}
    out = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, check=True,
                         capture_output=True, text=True, timeout=120)
    answer = json.loads(out.stdout.strip().splitlines()[-1])
    assert answer == {"outputs": [1, 0, 1], "kafka": []}



async def test_an_action_past_its_timeout_is_a_failed_attempt() -> None:
    import asyncio

    async def slow(reaction: Reaction) -> None:
        await asyncio.sleep(30)

    with pytest.raises(ReplayError, match=r"dead-lettered after 3 attempt\(s\): TimeoutError"):
        await _replay(error_spike, slow, [ServiceError(service="api", severity=1)] * 3,
                      action_timeout=0.01)


async def test_a_replays_clock_moves_on_every_watched_event_as_the_reactors_ticks_do() -> None:
    from datetime import UTC, datetime

    from streams.core.events import Envelope

    only_high = Rule(name="t:high", when=on(ServiceError).where(F.data.severity.ge(5))
                     .completes(quiet=timedelta(minutes=5)), then=run("act"))

    async def act(reaction: Reaction) -> dict[str, int]:
        return {"seen": len(reaction.events)}

    t0 = datetime(2026, 12, 1, tzinfo=UTC)

    def error(chain: str, minutes: int, severity: int) -> Envelope:
        return Envelope.new(ServiceError(service="api", severity=severity).to_event(),
                            tenant="t", workspace="w", correlation_id=chain,
                            time=t0 + timedelta(minutes=minutes))

    # The low-severity event is filtered out, yet it moves the clock past a's quiet period
    # (as the reactor's ticks do in a worker): a's late event is then ignored.
    story = [error("a", 0, 9), error("x", 10, 1), error("a", 11, 9)]
    replay = await _replay(only_high, act, story)
    assert [(r.run.scope["chain"], len(r.matched)) for r in replay.runs] == [("a", 1)]
