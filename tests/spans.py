"""Capturing the spans a test makes: an in-memory exporter on the process's tracer provider.

OpenTelemetry lets a process set its global tracer provider once, so every test that
captures spans shares one SDK provider (installed by the first) and adds its own exporter.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


def span_exporter() -> InMemorySpanExporter:
    """A new exporter receiving every span ended from now on in this process."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        trace.set_tracer_provider(TracerProvider())
        provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider), "another tracer provider is installed"
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The spans ended during the test (`spans.get_finished_spans()`)."""
    exporter = span_exporter()
    yield exporter
    exporter.shutdown()


def named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    """The finished spans called `name`, in the order they ended."""
    return [s for s in exporter.get_finished_spans() if s.name == name]
