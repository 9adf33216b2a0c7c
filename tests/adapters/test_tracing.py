"""Trace context helpers and the spans they make (no broker: fake messages, the chat
stand-in)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from standins.chat_standin import ChatReply, ChatStandIn
from streams.adapters import tracing
from streams.adapters.chat import RetrievalEvaluator
from streams.adapters.tracing import (
    MAX_LINKS,
    batch_span,
    child_span,
    context_of,
    current_trace,
    span_context_of,
    traced_as,
    tracer,
)
from streams.core.actors import UserActor
from streams.core.evaluators import HandOff
from streams.core.events import AppEvent, Envelope, TraceContext
from streams.core.judges import ChatModel, RetrievalInput
from tests.kafka_fakes import FakeMessage
from tests.spans import named, spans

__all__ = ["spans"]  # the fixture, imported for the tests below

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"


def feedback_message(trace: str | None = None, topic_: str = "fs.acme.events",
                     partition_: int = 0, offset_: int = 0,
                     extra: list[tuple[str, bytes]] | None = None) -> FakeMessage:
    """What batch_span reads of a confluent-kafka message: a feedback event's headers,
    with `trace` as its traceparent when given."""
    headers = [("event_type", b"feedback_given"), *(extra or [])]
    if trace is not None:
        headers.append(("traceparent", trace.encode()))
    return FakeMessage(topic_, partition_, offset_, headers_=headers)


def traceparent(trace_id: str = TRACE, span_id: str = PARENT) -> str:
    return f"00-{trace_id}-{span_id}-01"


def test_a_traceparent_parses_into_a_remote_span_context() -> None:
    parsed = span_context_of(traceparent().encode(), b"vendor=x")
    assert parsed is not None
    assert (f"{parsed.trace_id:032x}", f"{parsed.span_id:016x}") == (TRACE, PARENT)
    assert parsed.is_remote and parsed.trace_flags.sampled
    assert parsed.trace_state.get("vendor") == "x"
    unsampled = span_context_of(f"00-{TRACE}-{PARENT}-00")
    assert unsampled is not None and not unsampled.trace_flags.sampled


@pytest.mark.parametrize("bad", [
    None, "", "garbage", f"00-{TRACE}-{PARENT}", f"00-{TRACE.upper()}-{PARENT}-01",
    f"00-{'0' * 32}-{PARENT}-01", f"00-{TRACE}-{'0' * 16}-01", f"ff-{TRACE}-{PARENT}-01",
    f"00-{TRACE[:-1]}-{PARENT}-01", f"00-{TRACE}-{PARENT}-01-extra", f"0x-{TRACE}-{PARENT}-01",
])
def test_a_malformed_traceparent_is_no_context(bad: str | None) -> None:
    assert span_context_of(bad) is None
    assert context_of(TraceContext(traceparent=bad or "-")) is None


def test_a_child_span_continues_an_envelopes_trace_and_traced_as_carries_it_on(
    spans: InMemorySpanExporter,
) -> None:
    cause = Envelope.new(AppEvent(name="ops:error_spike", data={}), tenant="acme",
                         workspace="prod", actor=UserActor(id="ada"),
                         trace=TraceContext(traceparent=traceparent()))
    with child_span("fire rule", cause.trace, attributes={"streams.rule": "r"}) as span:
        stamped = traced_as(cause, span)
        assert current_trace() == stamped.trace
    [done] = named(spans, "fire rule")
    assert f"{done.context.trace_id:032x}" == TRACE
    assert done.parent is not None and f"{done.parent.span_id:016x}" == PARENT
    assert stamped.trace == TraceContext(
        traceparent=f"00-{TRACE}-{done.context.span_id:016x}-01")
    assert stamped.event_id == cause.event_id  # only the trace context changes
    # Without a trace context the span starts a trace of its own.
    with child_span("alone", None) as span:
        pass
    [alone] = named(spans, "alone")
    assert alone.parent is None


def test_one_traced_record_makes_the_batch_span_its_child(
        spans: InMemorySpanExporter) -> None:
    with batch_span([feedback_message(traceparent(), partition_=2, offset_=41)],
                    group="fs-mirror") as span:
        assert span is not None
    [done] = named(spans, "process fs.acme.events")
    assert done.kind is SpanKind.CONSUMER
    assert f"{done.context.trace_id:032x}" == TRACE
    assert done.parent is not None and f"{done.parent.span_id:016x}" == PARENT
    assert dict(done.attributes or {}) == {
        "messaging.system": "kafka", "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": "fs.acme.events",
        "messaging.consumer.group.name": "fs-mirror", "messaging.kafka.consumer.group": "fs-mirror",
        "messaging.batch.message_count": 1, "messaging.destination.partition.id": "2",
        "messaging.kafka.offset": 41}


def test_records_of_one_trace_share_the_parent(spans: InMemorySpanExporter) -> None:
    # One feedback's three scores: three records, one trace context.
    with batch_span([feedback_message(traceparent(), offset_=i) for i in range(3)]):
        pass
    [done] = named(spans, "process fs.acme.events")
    assert f"{done.context.trace_id:032x}" == TRACE and not done.links
    assert (done.attributes or {})["messaging.batch.message_count"] == 3
    assert "messaging.kafka.offset" not in (done.attributes or {})


def test_a_batch_of_many_traces_links_each_once_up_to_the_limit(
        spans: InMemorySpanExporter) -> None:
    traces = [f"{i + 1:032x}" for i in range(MAX_LINKS + 20)]
    messages = [feedback_message(traceparent(t), topic_=f"fs.t{i % 2}.events")
                for i, t in enumerate(traces)]
    messages += [feedback_message(traceparent(traces[0])), feedback_message(None),
                 feedback_message("not-a-traceparent")]
    with batch_span(messages, group="g"):
        pass
    [done] = named(spans, "process")  # two topics: no single destination
    assert done.parent is None
    assert f"{done.context.trace_id:032x}" not in traces
    linked = [f"{link.context.trace_id:032x}" for link in done.links]
    assert linked == traces[:MAX_LINKS]
    assert "messaging.destination.name" not in (done.attributes or {})
    assert (done.attributes or {})["messaging.batch.message_count"] == len(messages)


def test_no_tracer_provider_no_batch_span(spans: InMemorySpanExporter,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tracing, "tracing_enabled", lambda: False)
    with batch_span([feedback_message(traceparent())]) as span:
        assert span is None
    with batch_span([]) as span:
        assert span is None
    assert spans.get_finished_spans() == ()


@pytest.fixture
def chat() -> Iterator[ChatStandIn]:
    with ChatStandIn() as server:
        yield server


QUESTION = RetrievalInput(question="What is the refund window?",
                          contexts=["Refunds are accepted within 30 days."])


async def test_a_judges_model_call_is_a_span_with_its_token_counts(
        chat: ChatStandIn, spans: InMemorySpanExporter) -> None:
    chat.enqueue(ChatReply.error(503),
                 json.dumps({"has_answer": True, "confidence": 0.9, "reason": "30 days"}))
    judge = RetrievalEvaluator(ChatModel(base_url=chat.url, model="judge-mini", backoff=0.0),
                               name="gate", version="3")
    with tracer().start_as_current_span("action judge") as action:
        verdict = await judge.evaluate(QUESTION)
    [call] = named(spans, "chat judge-mini")
    attributes = dict(call.attributes or {})
    assert call.kind is SpanKind.CLIENT
    assert call.parent is not None and call.parent.span_id == action.get_span_context().span_id
    assert attributes["gen_ai.operation.name"] == "chat"
    assert attributes["gen_ai.request.model"] == "judge-mini"
    assert attributes["gen_ai.response.model"] == verdict.trace["model"]
    assert attributes["server.address"] == "127.0.0.1"
    assert attributes["streams.evaluator"] == "gate"
    assert attributes["streams.attempts"] == 2
    # The counts the server reported, summed over the attempts as the verdict has them.
    assert attributes["gen_ai.usage.input_tokens"] == int(verdict.trace["prompt_tokens"]) > 0
    assert attributes["gen_ai.usage.output_tokens"] == \
        int(verdict.trace["completion_tokens"]) > 0
    assert call.status.status_code is not StatusCode.ERROR


async def test_a_hand_off_marks_the_model_span_as_an_error(
        chat: ChatStandIn, spans: InMemorySpanExporter) -> None:
    chat.enqueue(ChatReply.error(401))
    judge = RetrievalEvaluator(ChatModel(base_url=chat.url, model="judge-mini", backoff=0.0))
    with pytest.raises(HandOff):
        await judge.evaluate(QUESTION)
    [call] = named(spans, "chat judge-mini")
    assert call.status.status_code is StatusCode.ERROR
    assert (call.attributes or {})["error.type"] == "HandOff"
