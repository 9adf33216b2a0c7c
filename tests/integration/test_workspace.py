from collections.abc import Callable
from typing import Any

import pytest

from streams.core.actors import EvaluatorActor, UserActor
from streams.core.errors import NotFound, ValidationFailed
from streams.core.events import AppEvent, FeedbackGiven, RuleFired, RunStarted, TraceContext
from streams.core.targets import ChainTarget, FiringTarget, RunTarget
from streams.examples.ops import Resolution, ShouldHaveFired, TriageQuality
from streams.runtime.client.workspace import Workspace

TRACE = TraceContext(traceparent=f"00-{'e' * 32}-{'f' * 16}-01")


async def _incident(ws: Workspace) -> dict[str, Any]:
    spike = await ws.append(AppEvent(name="ops:error_spike", data={"service": "api"}),
                            trace=TRACE)
    fired = await ws.append(RuleFired(firing_id="fir_1", rule="ops:error-spike",
                                      matched=[spike.id]),
                            correlation_id=spike.id, causation_id=spike.id, trace=TRACE)
    run = await ws.append(RunStarted(run_id="run_1", rule="ops:error-spike", action="triage",
                                     firing_id="fir_1"),
                          correlation_id=spike.id, causation_id=fired.id, trace=TRACE)
    return {"spike": spike, "fired": fired, "run": run}


async def test_give_feedback_on_run_firing_and_chain(
    tenant_factory: Callable[..., str], client_factory: Callable[..., Any],
) -> None:
    tenant = tenant_factory()
    ada = client_factory().workspace(tenant, "prod", actor=UserActor(id="ada"))
    chain = await _incident(ada)

    on_run = await ada.give_feedback(
        TriageQuality(correct=False, severity="critical", note="It missed the bad deploy."),
        on=RunTarget(run_id="run_1"))
    judge = ada.as_actor(EvaluatorActor(name="triage-judge", version="2026-09-28"))
    by_judge = await judge.give_feedback(TriageQuality(correct=True, severity="high"),
                                         on=RunTarget(run_id="run_1"))
    on_firing = await ada.give_feedback(ShouldHaveFired(fired_rightly=True),
                                        on=FiringTarget(firing_id="fir_1"))
    on_chain = await ada.give_feedback(Resolution(resolved=True, minutes_to_mitigate=42),
                                       on=ChainTarget(correlation_id=chain["spike"].id))

    # Everything in one chain shares a key, so it lands on one partition, in order.
    seqs = [chain["run"].seq, on_run.seq, by_judge.seq, on_firing.seq, on_chain.seq]
    assert len({s.partition for s in seqs}) == 1
    assert [s.offset for s in seqs] == sorted(s.offset for s in seqs)

    reader = client_factory().workspace(tenant, "prod")
    verdicts = [
        (e.actor.participant, e.event.value) for e in await reader.read()
        if isinstance(e.event, FeedbackGiven) and e.event.feedback_type == "triage_quality"
    ]
    assert verdicts == [
        ("user:ada", {"correct": False, "severity": "critical",
                      "note": "It missed the bad deploy."}),
        ("evaluator:triage-judge@2026-09-28", {"correct": True, "severity": "high",
                                               "note": None}),
    ]
    given = {e.event_id: e for e in await reader.feedback()}
    run_fb = given[on_run.id]
    assert run_fb.correlation_id == chain["spike"].id
    assert run_fb.causation_id == chain["run"].id
    assert run_fb.seq == on_run.seq
    assert isinstance(run_fb.event, FeedbackGiven)
    assert run_fb.event.target_trace_id == "e" * 32
    by_participant = await reader.feedback(participant="evaluator:triage-judge@2026-09-28")
    assert [e.event_id for e in by_participant] == [by_judge.id]
    by_type = await reader.feedback(feedback_type=Resolution)
    assert [e.event_id for e in by_type] == [on_chain.id]


async def test_feedback_validation(
    tenant_factory: Callable[..., str], client_factory: Callable[..., Any],
) -> None:
    tenant = tenant_factory()
    ws = client_factory().workspace(tenant, "prod", actor=UserActor(id="ada"))
    chain = await _incident(ws)
    with pytest.raises(ValidationFailed, match="cannot be given on a run"):
        await ws.give_feedback(Resolution(resolved=True), on=RunTarget(run_id="run_1"))
    with pytest.raises(NotFound, match="no run 'run_missing'"):
        await ws.give_feedback(TriageQuality(correct=True, severity="low"),
                               on=RunTarget(run_id="run_missing"))
    with pytest.raises(ValidationFailed, match=chain["spike"].id):
        await ws.give_feedback(Resolution(resolved=True),
                               on=ChainTarget(correlation_id=chain["run"].id))
    with pytest.raises(NotFound):
        other = ws.client.workspace(tenant, "staging", actor=UserActor(id="ada"))
        await other.give_feedback(TriageQuality(correct=True, severity="low"),
                                  on=RunTarget(run_id="run_1"))
    with pytest.raises(ValidationFailed, match="invalid triage_quality value"):
        await ws.give_feedback({"correct": "maybe", "severity": "low"},
                               feedback_type="triage_quality", on=RunTarget(run_id="run_1"))


async def test_bad_input_is_refused_before_anything_is_sent(
    tenant_factory: Callable[..., str], client_factory: Callable[..., Any],
) -> None:
    tenant = tenant_factory()
    ws = client_factory().workspace(tenant, "prod", actor=UserActor(id="ada"))
    await _incident(ws)
    before = len(await ws.read())
    run = RunTarget(run_id="run_1")
    refused: list[tuple[Any, dict[str, Any], str]] = [
        (TriageQuality.model_construct(correct=True, severity="urgent"), {"on": run},
         "severity"),
        (7, {"on": run, "feedback_type": "triage_quality"}, "must be a mapping"),
        (TriageQuality(correct=True, severity="low"), {"on": "run_1"}, "on= must be"),
        ({"resolved": True, "minutes_to_mitigate": 2**64}, {
            "on": ChainTarget(correlation_id="x"), "feedback_type": "resolution"},
         "minutes_to_mitigate"),
    ]
    for value, kwargs, message in refused:
        with pytest.raises(ValidationFailed, match=message):
            await ws.give_feedback(value, **kwargs)
    assert len(await ws.read()) == before


async def test_sees_runs_written_by_another_process(
    tenant_factory: Callable[..., str], client_factory: Callable[..., Any],
) -> None:
    tenant = tenant_factory()
    writer = client_factory().workspace(tenant, "prod")
    ada = client_factory().workspace(tenant, "prod", actor=UserActor(id="ada"))
    with pytest.raises(NotFound):
        await ada.give_feedback(TriageQuality(correct=True, severity="low"),
                                on=RunTarget(run_id="run_1"))
    await _incident(writer)
    recorded = await ada.give_feedback(TriageQuality(correct=True, severity="low"),
                                       on=RunTarget(run_id="run_1"))
    assert recorded.seq.offset >= 0


async def test_unknown_tenant_is_not_found(client_factory: Callable[..., Any]) -> None:
    ws = client_factory().workspace("never-created", "prod", actor=UserActor(id="ada"))
    with pytest.raises(NotFound, match="create the tenant first"):
        await ws.append(AppEvent(name="ops:error_spike"))
    with pytest.raises(NotFound, match="create the tenant first"):
        await ws.give_feedback(TriageQuality(correct=True, severity="low"),
                               on=RunTarget(run_id="run_1"))


async def test_feedback_is_traced_and_carries_its_trace_context(
    tenant_factory: Callable[..., str], client_factory: Callable[..., Any],
) -> None:
    from tests.spans import span_exporter

    # The process's one tracer provider is shared with other tests that capture spans.
    exporter = span_exporter()
    tenant = tenant_factory()
    ws = client_factory().workspace(tenant, "prod", actor=UserActor(id="ada"))
    await _incident(ws)
    recorded = await ws.give_feedback(TriageQuality(correct=True, severity="low"),
                                      on=RunTarget(run_id="run_1"))
    [span] = [s for s in exporter.get_finished_spans()
              if s.name == "streams.feedback triage_quality"]
    assert span.attributes is not None
    assert span.attributes["streams.participant"] == "user:ada"
    assert span.attributes["streams.event_id"] == recorded.id
    assert recorded.envelope.trace is not None
    assert recorded.envelope.trace.trace_id == f"{span.context.trace_id:032x}"
