"""The Langfuse stand-in's OTLP route, driven by OpenTelemetry's own OTLP/HTTP exporter (the
one `configure_telemetry` installs) and by hand for the JSON encoding and the refusals."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator

import httpx
import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from standins.langfuse_standin import LangfuseStandIn
from streams.adapters.tracing import LANGFUSE_OTLP_PATH, langfuse_exporter

TRACE = "5b8efff798038103d269b633813fc60c"
SPAN = "eee19b7ec3c1b174"


@pytest.fixture
def standin() -> Iterator[LangfuseStandIn]:
    with LangfuseStandIn() as server:
        yield server


def provider(standin: LangfuseStandIn, secret: str | None = None) -> TracerProvider:
    """A tracer provider of its own (not the process's) exporting each span at once."""
    made = TracerProvider(resource=Resource.create({"service.name": "unit"}))
    made.add_span_processor(SimpleSpanProcessor(langfuse_exporter(
        standin.url, standin.public_key, secret or standin.secret_key)))
    return made


def test_spans_from_the_otlp_exporter_are_kept_with_their_ids_and_attributes(
        standin: LangfuseStandIn) -> None:
    traced = provider(standin)
    tracer = traced.get_tracer("unit")
    with tracer.start_as_current_span("outer", attributes={"tenant": "acme", "n": 3}) as outer, \
            tracer.start_as_current_span("inner"):
        pass
    traced.shutdown()
    spans = {s["name"]: s for s in standin.traces()}
    trace_id = format(outer.get_span_context().trace_id, "032x")
    assert set(spans) == {"outer", "inner"}
    assert {s["trace_id"] for s in spans.values()} == {trace_id}
    assert spans["inner"]["parent_span_id"] == spans["outer"]["span_id"]
    assert spans["outer"]["parent_span_id"] == ""
    assert spans["outer"]["attributes"] == {"tenant": "acme", "n": 3}
    assert spans["outer"]["service"] == "unit"
    sent = [r for r in standin.request_log() if r.path == LANGFUSE_OTLP_PATH]
    assert sent and all({k.lower(): v for k, v in r.headers.items()}.get(
        "x-langfuse-ingestion-version") == "4" for r in sent)


def test_wrong_keys_are_refused_and_nothing_is_kept(standin: LangfuseStandIn) -> None:
    traced = provider(standin, secret="sk-wrong")
    with traced.get_tracer("unit").start_as_current_span("refused"):
        pass
    traced.shutdown()
    assert standin.traces() == []
    assert [r.status for r in standin.request_log() if r.path == LANGFUSE_OTLP_PATH] == [401]


def _request(span_name: str) -> dict[str, object]:
    """An ExportTraceServiceRequest in OTLP's JSON encoding (hex ids)."""
    return {"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "js"}}]},
        "scopeSpans": [{"spans": [{
            "traceId": TRACE, "spanId": SPAN, "name": span_name, "kind": 1,
            "startTimeUnixNano": "1", "endTimeUnixNano": "2",
            "attributes": [{"key": "k", "value": {"boolValue": True}}]}]}]}]}


def test_the_json_encoding_and_gzip_are_taken(standin: LangfuseStandIn) -> None:
    auth = (standin.public_key, standin.secret_key)
    url = f"{standin.url}{LANGFUSE_OTLP_PATH}"
    plain = httpx.post(url, auth=auth, json=_request("plain"))
    zipped = httpx.post(url, auth=auth, content=gzip.compress(json.dumps(
        _request("zipped")).encode()), headers={"Content-Type": "application/json",
                                                "Content-Encoding": "gzip"})
    assert (plain.status_code, zipped.status_code) == (200, 200)
    assert plain.json() == {}
    spans = standin.traces()
    assert [s["name"] for s in spans] == ["plain", "zipped"]
    assert spans[0] | {"name": "x"} == {"trace_id": TRACE, "span_id": SPAN, "parent_span_id": "",
                                        "name": "x", "attributes": {"k": True}, "service": "js"}


@pytest.mark.parametrize(("headers", "body", "status"), [
    ({"Content-Type": "text/plain"}, b"spans", 415),
    ({"Content-Type": "application/x-protobuf"}, b"\xff\xff\xff", 400),
    ({"Content-Type": "application/json"}, b"{not json", 400),
    ({"Content-Type": "application/json", "Content-Encoding": "gzip"}, b"not gzip", 400),
    ({"Content-Type": "application/json"},
     json.dumps(_request("short id")).replace(TRACE, "abcd").encode(), 400),
])
def test_bodies_that_are_not_otlp_are_refused(
        standin: LangfuseStandIn, headers: dict[str, str], body: bytes, status: int) -> None:
    answer = httpx.post(f"{standin.url}{LANGFUSE_OTLP_PATH}", content=body, headers=headers,
                        auth=(standin.public_key, standin.secret_key))
    assert answer.status_code == status, answer.text
    assert standin.traces() == []
