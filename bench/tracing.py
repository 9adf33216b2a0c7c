"""Tracing on, for the benches' `--traced` runs: an SDK tracer provider whose spans go
through a BatchSpanProcessor (as with an OTLP exporter) to an exporter that counts and drops
them, so a run pays for making, linking and handing on spans but not for a network."""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from streams.core.events import TraceContext


class CountingExporter(SpanExporter):
    """Counts the spans handed to it and drops them."""

    def __init__(self) -> None:
        self.spans = 0
        self.links = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans += len(spans)
        self.links += sum(len(s.links) for s in spans)
        return SpanExportResult.SUCCESS


def install_tracing() -> tuple[TracerProvider, CountingExporter]:
    """Install the process's tracer provider; `provider.force_flush()` before reading."""
    exporter = CountingExporter()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return provider, exporter


def trace_context(i: int) -> TraceContext:
    """A distinct, well-formed trace context for the i-th record (as if each came from its
    own request)."""
    return TraceContext(traceparent=f"00-{i + 1:032x}-{i + 1:016x}-01")
