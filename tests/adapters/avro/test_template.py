"""RecordTemplate's bytes are fastavro's bytes of the whole record, without a registry."""

from __future__ import annotations

from typing import Any

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.adapters.avro.codec import feedback_record
from streams.adapters.avro.fast import FastCodec, WriterSchema, frame, without_logical_types
from streams.adapters.avro.schemas import feedback_given_schema
from streams.adapters.avro.template import RecordTemplate
from streams.core.errors import SchemaError
from streams.examples.ops import Resolution, TriageQuality

VARYING = ("envelope.event_id", "value")


def writer_of(cls: type[Any]) -> WriterSchema:
    schema = feedback_given_schema(cls)
    return WriterSchema(7, "FeedbackGiven", fastavro.parse_schema(without_logical_types(schema)),
                        schema)


texts = st.text(max_size=12)
maybe = st.none() | texts
heads = st.fixed_dictionaries({
    "event_id": texts, "tenant": texts, "workspace": texts, "event_type": texts,
    "time": st.integers(min_value=-2**62, max_value=2**62),
    "actor": st.fixed_dictionaries({"kind": st.sampled_from(["user", "agent", "system"]),
                                    "id": texts, "version": maybe}),
    "correlation_id": texts, "causation_id": maybe,
    "trace": st.none() | st.fixed_dictionaries({"traceparent": texts, "tracestate": maybe})})
triage = st.fixed_dictionaries({"correct": st.booleans(),
                                "severity": st.sampled_from(["low", "high", "critical"]),
                                "note": maybe})
resolution = st.fixed_dictionaries({
    "resolved": st.booleans(),
    "minutes_to_mitigate": st.none() | st.integers(min_value=0, max_value=1440)})


def record(head: dict[str, Any], value: dict[str, Any], kind: str, target: str,
           trace_id: str | None, rule: str | None, action: str | None) -> dict[str, Any]:
    return feedback_record(head, "triage_quality", kind, target, trace_id, value, rule, action)


def flat(rec: dict[str, Any]) -> dict[str, Any]:
    out = {f"envelope.{k}": v for k, v in rec["envelope"].items()}
    out.update({k: v for k, v in rec.items() if k != "envelope"})
    return out


traces = st.none() | st.fixed_dictionaries({"traceparent": texts, "tracestate": maybe})


@settings(max_examples=300)
@given(head=heads, values=st.lists(triage, min_size=1, max_size=4),
       ids=st.lists(texts, min_size=4, max_size=4),
       contexts=st.lists(traces, min_size=4, max_size=4),
       varying=st.sampled_from([VARYING, ("envelope.event_id", "envelope.trace", "value")]),
       kind=st.sampled_from(["run", "firing", "chain"]), target=texts, trace_id=maybe,
       rule=maybe, action=maybe)
def test_a_records_bytes_are_fastavros_bytes_of_the_whole_record(
        head: dict[str, Any], values: list[dict[str, Any]], ids: list[str],
        contexts: list[dict[str, Any] | None], varying: tuple[str, ...], kind: str,
        target: str, trace_id: str | None, rule: str | None, action: str | None) -> None:
    writer = writer_of(TriageQuality)
    template = RecordTemplate(writer, varying)
    fixed = template.fixed(flat(record(head, values[0], kind, target, trace_id, rule, action)))
    for event_id, value, context in zip(ids, values, contexts, strict=False):
        per_record = {"event_id": event_id}
        if "envelope.trace" in varying:
            per_record["trace"] = context  # type: ignore[assignment]
        whole = record({**head, **per_record}, value, kind, target, trace_id, rule, action)
        assert template.encode(fixed, {**{f"envelope.{k}": v for k, v in per_record.items()},
                                       "value": value}) == FastCodec.encode(writer, whole)


@given(head=heads, value=resolution)
def test_another_types_value_record_too(head: dict[str, Any], value: dict[str, Any]) -> None:
    writer = writer_of(Resolution)
    template = RecordTemplate(writer, VARYING)
    whole = feedback_record(head, "resolution", "chain", "evt_1", None, value, None, None)
    assert template.encode(template.fixed(flat(whole)), flat(whole)) == \
        FastCodec.encode(writer, whole)


def test_runs_alternate_and_start_with_the_framing() -> None:
    template = RecordTemplate(writer_of(TriageQuality), VARYING)
    assert [run.varying for run in template.runs] == [True, False, True]
    assert template.encode((b"",), {"envelope.event_id": "", "value": {
        "correct": True, "severity": "low", "note": None}}).startswith(frame(7, b""))


def test_unknown_fields_and_bad_values_are_schema_errors() -> None:
    writer = writer_of(TriageQuality)
    with pytest.raises(SchemaError, match="no fields"):
        RecordTemplate(writer, ("envelope.nope",))
    template = RecordTemplate(writer, VARYING)
    with pytest.raises(SchemaError, match="cannot encode"):
        template.encode((b"",), {"envelope.event_id": "e", "value": {"correct": "yes"}})


def test_kept_fixed_runs_are_bounded_oldest_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("streams.adapters.avro.template.KEPT", 2)
    template = RecordTemplate(writer_of(TriageQuality), VARYING)
    assert template.keep("a", (b"1",)) == (b"1",)
    template.keep("b", (b"2",))
    template.keep("c", (b"3",))
    assert (template.cached("a"), template.cached("b"), template.cached("c")) == (
        None, (b"2",), (b"3",))


BATCH_VARYING = ("envelope.event_id", "envelope.time", "envelope.trace", "value")


@settings(max_examples=200)
@given(head=heads, value=triage, event_id=texts, context=traces,
       time=st.integers(min_value=-2**62, max_value=2**62))
def test_fields_encoded_once_give_the_same_bytes(head: dict[str, Any], value: dict[str, Any],
                                                 event_id: str,
                                                 context: dict[str, Any] | None,
                                                 time: int) -> None:
    # What give_feedback_many does: a batch's time and trace context encoded once, passed
    # to every record of the batch as `known`.
    writer = writer_of(TriageQuality)
    template = RecordTemplate(writer, BATCH_VARYING)
    whole = record({**head, "event_id": event_id, "time": time, "trace": context}, value,
                   "run", "run_1", None, None, None)
    known = {"envelope.time": template.encode_field("envelope.time", time),
             "envelope.trace": template.encode_field("envelope.trace", context)}
    assert template.encode(template.fixed(flat(whole)),
                           {"envelope.event_id": event_id, "value": value}, known) == \
        FastCodec.encode(writer, whole)


def test_only_a_varying_field_of_its_own_is_encoded_alone() -> None:
    template = RecordTemplate(writer_of(TriageQuality), ("envelope.event_id", "envelope.tenant",
                                                         "value"))
    with pytest.raises(SchemaError, match="not a varying field of its own"):
        template.encode_field("envelope.event_id", "e")  # it shares its run with tenant
    with pytest.raises(SchemaError, match="not a varying field of its own"):
        template.encode_field("envelope.time", 1)  # a fixed field
    # true, the enum's first symbol ("low"), the null branch of the note's union
    assert template.encode_field("value", {"correct": True, "severity": "low",
                                           "note": None}) == b"\x01\x00\x00"
