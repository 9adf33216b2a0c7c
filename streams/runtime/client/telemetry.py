"""The client's OpenTelemetry instruments, shared by the single and the batch paths."""

from __future__ import annotations

from opentelemetry import metrics, trace

__all__ = ["feedback_counter", "tracer"]

feedback_counter = metrics.get_meter("streams").create_counter(
    "streams.feedback", description="feedback given, by tenant, type and participant")
"""Feedback recorded, by tenant, workspace, type and participant."""


def tracer() -> trace.Tracer:
    """The client's tracer, looked up per call so a provider configured after import is
    used."""
    return trace.get_tracer("streams")
