"""Trace context across every hop: reading it from envelopes and record headers, writing it
into produced records, and the spans of the data path, after the OpenTelemetry messaging
semantic conventions.

The core knows trace context only as `TraceContext` (W3C `traceparent`/`tracestate` strings
in every envelope, and as record headers); this module is the one place that turns it into
OpenTelemetry `SpanContext`s and back, so OpenTelemetry stays out of `streams.core`.

Batches. A consumer that handles a batch starts one span for it (`batch_span`): when every
record of the batch carries the same trace context (one feedback, the usual case at low
rates) the span is that context's child, so a single piece of work stays one trace;
otherwise it is a new trace with a link to each record's context (at most `MAX_LINKS`
distinct ones, the SDK's default link limit), as the conventions say for batch processing.
Spans are started only when a tracer provider is installed (`tracing_enabled`): a process
without one pays nothing per record.

Export: `configure_tracing(settings.otlp_traces_endpoint, service)` installs an SDK tracer
provider that sends spans over OTLP/HTTP to that URL (`STREAMS_OTLP_TRACES_ENDPOINT`);
without one it does nothing, and an application that installed its own provider keeps it.
`langfuse_exporter` sends them to a Langfuse project's OTLP endpoint instead (or as well:
`install_exporters`); `streams.runtime.client.telemetry.configure_telemetry` chooses, per tenant.
"""

from __future__ import annotations

import base64
import logging
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    ProxyTracerProvider,
    Span,
    SpanContext,
    SpanKind,
    TraceFlags,
    TraceState,
)

from streams.core.events import Envelope, TraceContext

__all__ = [
    "HEADER_TRACEPARENT",
    "HEADER_TRACESTATE",
    "LANGFUSE_OTLP_PATH",
    "MAX_LINKS",
    "TRACER_NAME",
    "batch_span",
    "child_span",
    "configure_tracing",
    "context_of",
    "current_trace",
    "install_exporters",
    "langfuse_exporter",
    "messaging_attributes",
    "otlp_exporter",
    "span_context_of",
    "traced_as",
    "tracer",
    "tracing_enabled",
]

log = logging.getLogger(__name__)

TRACER_NAME = "streams"
HEADER_TRACEPARENT = "traceparent"
HEADER_TRACESTATE = "tracestate"
MAX_LINKS = 128
"""The most links a batch span gets (OpenTelemetry's default OTEL_SPAN_LINK_COUNT_LIMIT)."""
LANGFUSE_OTLP_PATH = "/api/public/otel/v1/traces"
"""Where Langfuse takes OpenTelemetry spans (OTLP/HTTP, protobuf or JSON), under its URL."""

_HEX = frozenset("0123456789abcdef")


def tracer() -> trace.Tracer:
    """The project's tracer, looked up per call so a provider installed later is used."""
    return trace.get_tracer(TRACER_NAME)


def tracing_enabled() -> bool:
    """Whether a tracer provider is installed (spans would be recorded somewhere)."""
    provider = trace.get_tracer_provider()
    return not isinstance(provider, ProxyTracerProvider | trace.NoOpTracerProvider)


def span_context_of(traceparent: str | bytes | None,
                    tracestate: str | bytes | None = None) -> SpanContext | None:
    """The remote SpanContext a W3C `traceparent` names, or None if it is missing or not
    well formed (version 00 layout, lower-case hex, non-zero ids)."""
    if not traceparent:
        return None
    text = traceparent.decode("ascii", "replace") if isinstance(traceparent, bytes) \
        else traceparent
    parts = text.split("-")
    if len(parts) < 4 or len(parts[0]) != 2 or len(parts[1]) != 32 or len(parts[2]) != 16 \
            or len(parts[3]) != 2 or parts[0] == "ff" or (parts[0] == "00" and len(parts) != 4):
        return None
    if not _HEX.issuperset(parts[1] + parts[2] + parts[3] + parts[0]):
        return None
    trace_id, span_id = int(parts[1], 16), int(parts[2], 16)
    if not trace_id or not span_id:
        return None
    state = None
    if tracestate:
        raw = tracestate.decode("ascii", "replace") if isinstance(tracestate, bytes) \
            else tracestate
        state = TraceState.from_header([raw])
    return SpanContext(trace_id, span_id, is_remote=True,
                       trace_flags=TraceFlags(int(parts[3], 16) & 0x01), trace_state=state)


def context_of(trace_context: TraceContext | SpanContext | None) -> otel_context.Context | None:
    """An OpenTelemetry Context whose parent is the given trace context (None when there is
    none, or it is malformed: the span then starts a trace of its own)."""
    if isinstance(trace_context, TraceContext):
        span_context = span_context_of(trace_context.traceparent, trace_context.tracestate)
    else:
        span_context = trace_context
    if span_context is None:
        return None
    return trace.set_span_in_context(NonRecordingSpan(span_context))


def _traceparent(span_context: SpanContext) -> TraceContext | None:
    if not span_context.is_valid:
        return None
    return TraceContext(
        traceparent=f"00-{span_context.trace_id:032x}-{span_context.span_id:016x}-"
                    f"{int(span_context.trace_flags):02x}",
        tracestate=span_context.trace_state.to_header() or None)


def current_trace(span: Span | None = None) -> TraceContext | None:
    """The W3C trace context of `span` (default: the active span), None without one."""
    return _traceparent((span or trace.get_current_span()).get_span_context())


def traced_as(envelope: Envelope, span: Span) -> Envelope:
    """The envelope carrying `span`'s context, so whoever reads it continues that span;
    unchanged when the span records nothing (then the envelope's own context travels on)."""
    if not span.is_recording():
        return envelope
    here = current_trace(span)
    return envelope if here is None else envelope.model_copy(update={"trace": here})


def _header(headers: Iterable[tuple[str, Any]] | None, name: str) -> Any:
    for key, value in headers or ():
        if key == name:
            return value
    return None


def messaging_attributes(*, operation: str, destination: str | None = None,
                         group: str | None = None, count: int | None = None,
                         partition: int | None = None, offset: int | None = None,
                         ) -> dict[str, Any]:
    """The messaging semantic conventions' attributes of a Kafka span."""
    attributes: dict[str, Any] = {"messaging.system": "kafka",
                                  "messaging.operation.type": operation,
                                  "messaging.operation.name": operation}
    if destination is not None:
        attributes["messaging.destination.name"] = destination
    if group is not None:
        attributes["messaging.consumer.group.name"] = group
        # The name older conventions (and many backends) use.
        attributes["messaging.kafka.consumer.group"] = group
    if count is not None:
        attributes["messaging.batch.message_count"] = count
    if partition is not None:
        attributes["messaging.destination.partition.id"] = str(partition)
    if offset is not None:
        attributes["messaging.kafka.offset"] = offset
    return attributes


@contextmanager
def batch_span(messages: Sequence[Any], *, group: str | None = None,
               operation: str = "process",
               attributes: Mapping[str, Any] | None = None) -> Iterator[Span | None]:
    """One span over a batch of confluent-kafka messages (None, and no cost, when no tracer
    provider is installed): `process <topic>` with the messaging attributes; the child of
    the records' trace context when they all carry the same one, else a new trace linking
    each record's context. The span is current inside the block."""
    if not messages or not tracing_enabled():
        yield None
        return
    topics = {m.topic() for m in messages}
    topic = next(iter(topics)) if len(topics) == 1 else None
    parents: dict[bytes, Any] = {}
    for msg in messages:
        headers = msg.headers()
        value = _header(headers, HEADER_TRACEPARENT)
        if value is not None:
            key = value.encode() if isinstance(value, str) else value
            if key not in parents:
                parents[key] = _header(headers, HEADER_TRACESTATE)
    one = messages[0] if len(messages) == 1 else None
    attrs = messaging_attributes(
        operation=operation, destination=topic, group=group, count=len(messages),
        partition=one.partition() if one is not None else None,
        offset=one.offset() if one is not None else None)
    if attributes:
        attrs.update(attributes)
    parent: otel_context.Context | None = None
    links: list[Link] = []
    if len(parents) == 1:
        [(traceparent, state)] = parents.items()
        parent = context_of(span_context_of(traceparent, state))
    else:
        for traceparent, state in parents.items():
            span_context = span_context_of(traceparent, state)
            if span_context is not None:
                links.append(Link(span_context))
                if len(links) >= MAX_LINKS:
                    break
    name = f"{operation} {topic}" if topic else operation
    with tracer().start_as_current_span(name, context=parent, kind=SpanKind.CONSUMER,
                                        attributes=attrs, links=links) as span:
        yield span


@contextmanager
def child_span(name: str, parent: TraceContext | None, *,
               attributes: Mapping[str, Any] | None = None,
               kind: SpanKind = SpanKind.INTERNAL) -> Iterator[Span]:
    """A span continuing `parent` (an envelope's trace context; a new trace without one),
    current inside the block; exceptions are recorded on it and propagate."""
    with tracer().start_as_current_span(name, context=context_of(parent), kind=kind,
                                        attributes=attributes) as span:
        yield span


def configure_tracing(endpoint: str | None, service: str) -> bool:
    """Install an SDK tracer provider exporting over OTLP/HTTP to `endpoint` (the
    STREAMS_OTLP_TRACES_ENDPOINT setting), with `service` as service.name unless
    OTEL_SERVICE_NAME says otherwise. Does nothing without an endpoint, or when a provider
    is installed already (an application's own). Returns whether it installed one."""
    if not endpoint:
        return False
    return install_exporters(service, [otlp_exporter(endpoint)]) is not None


def otlp_exporter(endpoint: str, headers: Mapping[str, str] | None = None) -> Any:
    """OpenTelemetry's OTLP/HTTP span exporter to `endpoint` (protobuf), with `headers`."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(endpoint=endpoint, headers=dict(headers or {}))


def langfuse_exporter(host: str, public_key: str, secret_key: str) -> Any:
    """An OTLP/HTTP exporter to a Langfuse project: `<host>/api/public/otel/v1/traces`, HTTP
    Basic auth with the project's keys, and the ingestion-version header Langfuse asks direct
    exporters to send."""
    token = base64.b64encode(f"{public_key}:{secret_key}".encode()).decode()
    return otlp_exporter(f"{host.rstrip('/')}{LANGFUSE_OTLP_PATH}",
                         {"Authorization": f"Basic {token}",
                          "x-langfuse-ingestion-version": "4"})


def install_exporters(service: str, exporters: Sequence[Any]) -> Any:
    """Install an SDK tracer provider sending every span to each of `exporters` (batched),
    with `service` as service.name unless OTEL_SERVICE_NAME says otherwise; returns it, or
    None when there is no exporter or a provider is installed already (an application's own,
    which is kept)."""
    if not exporters:
        return None
    if tracing_enabled():
        log.info("a tracer provider is installed already; the configured exporters are unused")
        return None
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    # OTEL_SERVICE_NAME (read by the SDK) names the service when it is set.
    named = {} if os.environ.get("OTEL_SERVICE_NAME") else {SERVICE_NAME: service}
    provider = TracerProvider(resource=Resource.create(named))
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return provider
