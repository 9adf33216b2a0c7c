"""Traces across every hop, followed with an in-memory span exporter on the shared broker:
one feedback from give_feedback through the mirror and the Langfuse sink (its stand-in), and
one error spike through the decider's firing, the run, the LLM judge (the chat stand-in) and
the escalation. The worker's loops, decider and actions run in this process, as
`streams worker` runs them, so the exporter sees their spans."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from langfuse import Langfuse
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from standins.chat_standin import ChatStandIn
from standins.langfuse_standin import LangfuseStandIn
from streams import F, Reaction, Rule, on, run
from streams.adapters.chat import RetrievalEvaluator
from streams.adapters.langfuse import LangfuseScoreSink
from streams.core.actors import UserActor
from streams.core.app_events import app_event_type
from streams.core.evaluation import EvaluatorAction
from streams.core.events import AppEvent, FeedbackGiven, RunStarted, RunSucceeded
from streams.core.judges import ChatModel, RetrievalInput
from streams.core.targets import RunTarget
from streams.core.tenancy import tenant_topics
from streams.examples.ops import TriageQuality
from streams.runtime.root import Runtime
from streams.runtime.sink.runner import SinkRunner
from streams.runtime.worker.app import Worker
from streams.settings import Settings
from tests.conftest import wait_until
from tests.spans import named, spans

__all__ = ["spans"]  # the fixture, imported for the tests below

SPIKE, ESCALATED = "traces:error_spike", "traces:escalated"
for _name in (SPIKE, ESCALATED):
    app_event_type(_name)


@contextmanager
def running(worker: Worker) -> Iterator[Worker]:
    """The worker's mirror and reactor loops, decider and actions' event loop, in threads of
    this process (what `Worker.run` starts beside Faust), stopped on the way out."""
    worker.start()
    stop = threading.Event()
    actions_loop = asyncio.new_event_loop()
    threads = [threading.Thread(target=actions_loop.run_forever, daemon=True)]
    reactor = worker.reactor
    if reactor is not None:
        reactor.bind(actions_loop)
    loops = [worker.mirror] + ([worker.reactor_loop] if worker.reactor_loop else [])
    if worker.deciding and worker.decider_loop is not None:
        loops.append(worker.decider_loop)
    threads += [threading.Thread(target=loop.run, args=(stop,), daemon=True) for loop in loops]
    for thread in threads:
        thread.start()
    try:
        yield worker
    finally:
        stop.set()
        for thread in threads[1:]:
            thread.join(30)
        actions_loop.call_soon_threadsafe(actions_loop.stop)
        threads[0].join(10)
        worker.runtime.close()


def hex_id(span: ReadableSpan) -> str:
    return f"{span.context.trace_id:032x}"


def parent_of(child: ReadableSpan, parent: ReadableSpan) -> bool:
    return child.parent is not None and child.parent.span_id == parent.context.span_id


async def test_one_feedback_is_one_trace_through_the_mirror_and_the_langfuse_sink(
    settings: Settings, tenant_factory: Callable[..., str], client_factory: Callable[..., Any],
    standin_factory: Callable[[], LangfuseStandIn], spans: InMemorySpanExporter,
) -> None:
    tenant = tenant_factory()
    ada = client_factory().workspace(tenant, "prod", actor=UserActor(id="ada"))
    spike = await ada.append(AppEvent(name=SPIKE, data={"service": "api"}))
    await ada.append(RunStarted(run_id="run_1", rule="ops:error-spike", action="triage",
                                firing_id="fir_1"), correlation_id=spike.id,
                     causation_id=spike.id)
    recorded = await ada.give_feedback(TriageQuality(correct=False, severity="high",
                                                     note="missed the deploy"),
                                       on=RunTarget(run_id="run_1"))
    [given] = named(spans, "streams.feedback triage_quality")
    assert recorded.envelope.trace is not None
    assert recorded.envelope.trace.trace_id == hex_id(given)

    topics = tenant_topics(tenant, settings.topic_prefix)
    with running(Worker(Runtime(settings), batch_within=0.2)) as worker:
        wait_until(lambda: worker.step.stats.scores >= 3, 60, "the feedback's three scores")
    standin = standin_factory()
    sink = LangfuseScoreSink(Langfuse(public_key=standin.public_key,
                                      secret_key=standin.secret_key, host=standin.url,
                                      tracing_enabled=False))
    await asyncio.wait_for(SinkRunner(Runtime(settings), sink, cursor="traces").run(
        until=lambda s: s.scores >= 3), 60)
    assert len(standin.scores()) == 3

    # The mirror's batch (the incident's events, untraced, and the feedback) continues the
    # feedback's trace: one trace context in the batch makes the batch span its child.
    mirrored = [s for s in named(spans, f"process {topics.events}")
                if (s.attributes or {}).get("messaging.kafka.consumer.group")
                == worker.mirror_group]
    assert mirrored, "no span of the mirror's batch"
    assert all(hex_id(s) == hex_id(given) and parent_of(s, given) for s in mirrored)
    attributes = dict(mirrored[0].attributes or {})
    assert attributes["messaging.system"] == "kafka"
    assert attributes["messaging.operation.type"] == "process"
    assert attributes["messaging.destination.name"] == topics.events
    assert attributes["messaging.batch.message_count"] >= 1
    # The scores carry the feedback's context, so the sink's delivery to Langfuse (the
    # stand-in) continues that trace too.
    [delivered] = named(spans, f"process {topics.scores}")
    assert hex_id(delivered) == hex_id(given) and parent_of(delivered, given)
    attributes = dict(delivered.attributes or {})
    assert attributes["messaging.batch.message_count"] == 3
    assert attributes["streams.scores"] == 3
    assert attributes["streams.sink"] == sink.identity
    assert attributes["messaging.consumer.group.name"] == f"{settings.topic_prefix}.sink.traces"


async def test_feedback_of_several_traces_in_one_batch_is_linked_not_parented(
    settings: Settings, tenant_factory: Callable[..., str], client_factory: Callable[..., Any],
    spans: InMemorySpanExporter,
) -> None:
    tenant = tenant_factory()
    ada = client_factory().workspace(tenant, "prod", actor=UserActor(id="ada"))
    spike = await ada.append(AppEvent(name=SPIKE, data={"service": "api"}))
    await ada.append(RunStarted(run_id="run_1", rule="ops:error-spike", action="triage",
                                firing_id="fir_1"), correlation_id=spike.id,
                     causation_id=spike.id)
    for severity in ("low", "high", "critical"):  # three give_feedback calls: three traces
        await ada.give_feedback(TriageQuality(correct=True, severity=severity, note="n"),
                                on=RunTarget(run_id="run_1"))
    given = named(spans, "streams.feedback triage_quality")
    assert len({s.context.trace_id for s in given}) == 3
    # Given before the mirror starts, so its first batches hold several of them.
    with running(Worker(Runtime(settings), batch_within=0.5)) as worker:
        wait_until(lambda: worker.step.stats.scores >= 9, 60, "the feedback's nine scores")
    events = tenant_topics(tenant, settings.topic_prefix).events
    batches = [s for s in named(spans, f"process {events}")
               if (s.attributes or {}).get("messaging.kafka.consumer.group")
               == worker.mirror_group]
    for feedback in given:
        # Each feedback is reached from the mirror: a batch span is its child, or links it.
        assert any(parent_of(b, feedback) or any(
            link.context.span_id == feedback.context.span_id
            and link.context.trace_id == feedback.context.trace_id for link in b.links)
            for b in batches), "a feedback the mirror's spans do not reach"
    for batch in batches:
        # A batch span either continues its one trace or starts its own and links many.
        assert (batch.parent is None and len(batch.links) >= 2) or \
            (batch.parent is not None and not batch.links)
    shared = [b for b in batches if b.links]
    assert shared, "no batch held several traces (the test's premise)"
    assert all(b.context.trace_id not in {f.context.trace_id for f in given} for b in shared)


def rules(judge: EvaluatorAction[RetrievalInput]) -> tuple[list[Rule], dict[str, Any]]:
    """A spike of three errors runs triage; triage's success runs the LLM judge; the judge's
    negative verdict (feedback) runs the escalation."""

    async def triage(reaction: Reaction) -> Mapping[str, Any]:
        return {"errors": len(reaction.events)}

    async def escalate(reaction: Reaction) -> Mapping[str, Any]:
        because = reaction.events[-1].event_id
        await reaction.emit(AppEvent(name=ESCALATED, data={"because": because}))
        return {"escalated": True}

    spike = Rule(name="traces:error-spike",
                 when=on(SPIKE).count(3, within=timedelta(minutes=5)).scope(F.data.service),
                 then=run("triage"))
    judged = Rule(name="traces:judge-triage",
                  when=on(RunSucceeded).where(rule="traces:error-spike"), then=run(judge))
    wrong = Rule(name="traces:escalate",
                 when=on(FeedbackGiven).where(F.value.has_answer.eq(False),
                                              feedback_type="retrieval_verdict"),
                 then=run("escalate"))
    return [spike, judged, wrong], {"triage": triage, judge.name: judge, "escalate": escalate}


async def test_an_error_spike_is_one_trace_through_firing_run_judge_and_escalation(
    settings: Settings, tenant_factory: Callable[..., str], client_factory: Callable[..., Any],
    spans: InMemorySpanExporter,
) -> None:
    with ChatStandIn() as chat:
        chat.enqueue(json.dumps({"has_answer": False, "confidence": 0.8,
                                 "reason": "the triage found nothing"}))

        async def judged_input(reaction: Reaction) -> RetrievalInput:
            return RetrievalInput(question="Did triage find the cause?",
                                  contexts=[json.dumps(dict(reaction.events[-1].data))])

        async def judged_run(reaction: Reaction) -> RunTarget:
            return RunTarget(run_id=str(reaction.events[-1].data["run_id"]))

        judge = EvaluatorAction(RetrievalEvaluator(ChatModel(base_url=chat.url,
                                                             model="judge-mini")),
                                input=judged_input, target=judged_run, name="triage-judge")
        rule_list, actions = rules(judge)
        tenant = tenant_factory()
        app = client_factory().workspace(tenant, "prod", actor=UserActor(id="app"))
        worker = Worker(Runtime(settings), rules=rule_list, actions=actions, batch_within=0.2)
        with running(worker):
            from streams.adapters.tracing import tracer

            # The application's own span: the spike's events carry its context.
            with tracer().start_as_current_span("app request") as root:
                for _ in range(3):
                    await app.append(AppEvent(name=SPIKE, data={"service": "api"}))
            wait_until(lambda: named(spans, "action escalate"), 120, "the escalation")
            escalated = await wait_for_event(app, ESCALATED)
        assert chat.calls == 1

    trace_id = f"{root.get_span_context().trace_id:032x}"
    [app_span] = named(spans, "app request")

    def one(name: str) -> ReadableSpan:
        [span] = named(spans, name)
        assert hex_id(span) == trace_id, f"{name} is not in the spike's trace"
        return span

    fired = one("fire traces:error-spike")
    assert parent_of(fired, app_span)
    assert (fired.attributes or {})["streams.stage"] == "decider"
    triage_run = one("run traces:error-spike")
    assert parent_of(triage_run, fired)
    triage = one("action triage")
    assert parent_of(triage, triage_run)
    assert (triage.attributes or {})["streams.attempt"] == 1
    judge_fired = one("fire traces:judge-triage")
    assert (judge_fired.attributes or {})["streams.stage"] == "reactor"
    assert parent_of(judge_fired, triage_run)  # run_succeeded carries the run span's context
    judge_run = one("run traces:judge-triage")
    assert parent_of(judge_run, judge_fired)
    judging = one("action triage-judge")
    assert parent_of(judging, judge_run)
    model_call = one("chat judge-mini")
    assert parent_of(model_call, judging)
    attributes = dict(model_call.attributes or {})
    assert attributes["gen_ai.usage.input_tokens"] > 0
    assert attributes["gen_ai.usage.output_tokens"] > 0
    verdict = one("streams.feedback retrieval_verdict")
    assert parent_of(verdict, judging)
    escalation_fired = one("fire traces:escalate")
    assert parent_of(escalation_fired, verdict)
    escalation_run = one("run traces:escalate")
    assert parent_of(escalation_run, escalation_fired)
    escalation = one("action escalate")
    assert parent_of(escalation, escalation_run)
    # What the escalation emitted carries its span's context, for whoever reads it next.
    assert escalated.trace is not None
    assert escalated.trace.traceparent == \
        f"00-{trace_id}-{escalation.context.span_id:016x}-01"


async def wait_for_event(ws: Any, name: str) -> Any:
    for _ in range(100):
        found = [e for e in await ws.read() if e.event_type == name]
        if found:
            return found[0]
        await asyncio.sleep(0.2)
    raise AssertionError(f"no {name} event in the log")


class Collector:
    """A stand-in OTLP/HTTP traces receiver on loopback: keeps every export request."""

    def __init__(self) -> None:
        received: list[ExportTraceServiceRequest] = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                received.append(request)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()
                self.wfile.write(b"")

            def log_message(self, *_args: Any) -> None:
                pass

        self.received = received
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def spans(self) -> list[tuple[str, str, Any]]:
        """(service name, span name, span) of everything received."""
        out = []
        for request in list(self.received):
            for resource_spans in request.resource_spans:
                service = next((a.value.string_value for a in resource_spans.resource.attributes
                                if a.key == "service.name"), "")
                for scope in resource_spans.scope_spans:
                    out += [(service, span.name, span) for span in scope.spans]
        return out

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


async def test_a_worker_exports_its_spans_over_otlp_to_the_configured_endpoint(
    settings: Settings, tenant_factory: Callable[..., str], client_factory: Callable[..., Any],
    worker_factory: Callable[..., Any], spans: InMemorySpanExporter,
) -> None:
    collector = Collector()
    try:
        worker_factory(STREAMS_OTLP_TRACES_ENDPOINT=collector.url, OTEL_BSP_SCHEDULE_DELAY="200")
        tenant = tenant_factory()
        ada = client_factory().workspace(tenant, "prod", actor=UserActor(id="ada"))
        spike = await ada.append(AppEvent(name=SPIKE, data={"service": "api"}))
        await ada.append(RunStarted(run_id="run_1", rule="ops:error-spike", action="triage",
                                    firing_id="fir_1"), correlation_id=spike.id,
                         causation_id=spike.id)
        await ada.give_feedback(TriageQuality(correct=True, severity="low"),
                                on=RunTarget(run_id="run_1"))
        [given] = named(spans, "streams.feedback triage_quality")
        events = tenant_topics(tenant, settings.topic_prefix).events
        exported = wait_until(
            lambda: [s for service, name, s in collector.spans()
                     if service == "streams-worker" and name == f"process {events}"
                     and s.trace_id == given.context.trace_id.to_bytes(16, "big")],
            90, "the worker's span of the feedback at the collector")
        assert exported[0].parent_span_id == given.context.span_id.to_bytes(8, "big")
    finally:
        collector.stop()
