"""The run executor's spans: a run continues its run_started's context, each attempt of its
action is a span inside it (a failed one marked as an error), what the action emits carries
the action span's context and the run's outcomes the run span's."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from streams import Reaction, RetryPolicy, Rule, on, run
from streams.core.actors import AgentActor
from streams.core.app_events import app_event_type
from streams.core.events import AppEvent, Envelope, Event, RunStarted, TraceContext
from streams.core.rules import RuleSet
from streams.runtime.worker.executor import RunExecutor
from tests.spans import named, spans

__all__ = ["spans"]  # the fixture, imported for the tests below

TRACE, PARENT = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
app_event_type("traces:checked")


class Appended:
    """A stand-in workspace that keeps what an action appends."""

    tenant, workspace = "acme", "prod"

    def __init__(self) -> None:
        self.traces: list[TraceContext | None] = []

    async def append(self, event: Event, *, correlation_id: str | None = None,
                     causation_id: str | None = None, trace: Any = None) -> Any:
        self.traces.append(trace)


async def test_a_run_and_each_attempt_are_spans_continuing_the_firing(
        spans: InMemorySpanExporter) -> None:
    attempts: list[int] = []
    workspace = Appended()

    async def check(reaction: Reaction) -> Mapping[str, Any]:
        attempts.append(reaction.attempt)
        if reaction.attempt == 1:
            raise RuntimeError("the service did not answer")
        await reaction.emit(AppEvent(name="traces:checked", data={}))
        return {"ok": True}

    rule = Rule(name="traces:check", when=on("traces:checked"),
                then=run("check", retry=RetryPolicy(max_attempts=2,
                                                    backoff=timedelta(seconds=0))))
    emitted: list[Envelope] = []

    async def emit(envelopes: Sequence[Envelope]) -> None:
        emitted.extend(envelopes)

    executor = RunExecutor(RuleSet([rule]), {"check": check}, client=lambda: None,  # type: ignore[arg-type, return-value]
                           emit=emit)
    started = Envelope.new(
        RunStarted(run_id="run_1", rule=rule.name, action="check", firing_id="fir_1"),
        tenant="acme", workspace="prod", actor=AgentActor(id=f"rule:{rule.name}"),
        trace=TraceContext(traceparent=f"00-{TRACE}-{PARENT}-01"))

    async def reaction(envelope: Envelope, attempt: int, deps: Mapping[str, Any]) -> Reaction:
        assert isinstance(envelope.event, RunStarted)
        return Reaction(run=envelope.event, started=envelope, events=[], workspace=workspace,
                        attempt=attempt)

    executor._reaction = reaction  # the log's reaction needs a broker; this test does not
    await executor.execute(started)

    assert attempts == [1, 2]
    [run_span] = named(spans, "run traces:check")
    assert f"{run_span.context.trace_id:032x}" == TRACE
    assert run_span.parent is not None and f"{run_span.parent.span_id:016x}" == PARENT
    assert (run_span.attributes or {})["streams.run_id"] == "run_1"
    failed, succeeded = named(spans, "action check")
    for span, attempt in ((failed, 1), (succeeded, 2)):
        assert span.parent is not None and span.parent.span_id == run_span.context.span_id
        assert (span.attributes or {})["streams.attempt"] == attempt
    assert failed.status.status_code is StatusCode.ERROR
    assert [e.name for e in failed.events] == ["exception"]
    assert succeeded.status.status_code is StatusCode.OK
    # What the action emitted carries its attempt's span; the outcomes the run's.
    assert workspace.traces == [TraceContext(
        traceparent=f"00-{TRACE}-{succeeded.context.span_id:016x}-01")]
    assert [e.event_type for e in emitted] == ["run_failed", "run_retried", "run_succeeded"]
    assert {e.trace for e in emitted} == {TraceContext(
        traceparent=f"00-{TRACE}-{run_span.context.span_id:016x}-01")}
