"""The fast codec's framing and the batch path's score records, without a registry."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from typing import Any

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.adapters.avro.codec import SCORES_SHARE_FROM, score_records, score_to_record
from streams.adapters.avro.fast import FastCodec, WriterSchema, frame, without_logical_types
from streams.adapters.avro.schemas import score_schema
from streams.core.errors import SchemaError
from streams.core.scores import score_configs, scores_from_value
from streams.examples.ops import Resolution, TriageQuality


class _Registered:
    def __init__(self, schema_str: str) -> None:
        self.schema_str = schema_str


class OneSchemaRegistry:
    """A registry client that knows one schema under id 7 (no network in unit tests)."""

    def __init__(self, schema: dict[str, Any]) -> None:
        self.schema = schema
        self.subjects: list[str] = []

    def get_schema(self, schema_id: int) -> _Registered:
        if schema_id != 7:
            raise KeyError(schema_id)
        return _Registered(json.dumps(self.schema))

    def register_schema(self, subject: str, _schema: Any) -> int:
        self.subjects.append(subject)
        return 7


def _codec() -> FastCodec:
    return FastCodec(OneSchemaRegistry(score_schema()))  # type: ignore[arg-type]


def test_logical_types_are_dropped_at_every_depth() -> None:
    stripped = without_logical_types(score_schema())
    assert "logicalType" not in json.dumps(stripped)
    assert "logicalType" in json.dumps(score_schema())


@pytest.mark.parametrize(("cls", "value"), [
    (TriageQuality, {"correct": False, "severity": "critical", "note": "missed it"}),
    (TriageQuality, {"correct": True, "severity": "low", "note": None}),
    (TriageQuality, {"correct": True, "severity": "high", "note": ""}),
    (Resolution, {"resolved": True, "minutes_to_mitigate": 42}),
    (Resolution, {"resolved": False, "minutes_to_mitigate": None}),
])
@pytest.mark.parametrize("trace_id", [None, "a" * 32])
def test_score_records_equal_the_records_of_score_objects(
    cls: Any, value: dict[str, Any], trace_id: str | None,
) -> None:
    when = datetime(2026, 11, 30, 12, 0, 1, 234000, tzinfo=UTC)
    common: dict[str, Any] = dict(
        feedback_event_id="evt_1", tenant="acme", workspace="prod", target_kind="run",
        target_id="run_1", participant="user:ada", trace_id=trace_id, session_id="chain_1",
        seq="2:17", rule="ops:error-spike", action="triage")
    slow = [score_to_record(s) for s in scores_from_value(score_configs(cls), value,
                                                          timestamp=when, **common)]
    fast = score_records(score_configs(cls), value, timestamp=when, **common)
    assert fast == slow
    # And the bytes: the fast path writes epoch millis where the slow one had a datetime.
    codec = _codec()
    writer = codec.registered(score_schema(), "fs.acme.scores")
    millis = int(when.timestamp() * 1000)
    fast_ms = score_records(score_configs(cls), value, timestamp=millis, **common)
    parsed = fastavro.parse_schema(score_schema())
    for record, slow_record in zip(fast_ms, slow, strict=True):
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, slow_record)
        assert codec.encode(writer, record) == frame(7, out.getvalue())
    # The mirror encodes a feedback's scores in one call: the same bytes, in order.
    assert codec.encode_all(writer, fast_ms) == [codec.encode(writer, r) for r in fast_ms]


def _resolved_score() -> dict[str, Any]:
    """The one score record of a Resolution on a chain."""
    [record] = score_records(score_configs(Resolution), {"resolved": True},
                             feedback_event_id="e", timestamp=1_700_000_000_000,
                             tenant="t", workspace="w", target_kind="chain", target_id="c",
                             participant="user:a", trace_id=None, session_id="c", seq=None)
    return record


def test_encode_all_refuses_a_record_the_schema_cannot_write() -> None:
    codec = _codec()
    writer = codec.registered(score_schema(), "fs.acme.scores")
    good = _resolved_score()
    assert codec.encode_all(writer, []) == []
    with pytest.raises(SchemaError, match="cannot encode"):
        codec.encode_all(writer, [good, {**good, "numeric_value": "not a number"}])


def test_decode_round_trip_and_framing_errors() -> None:
    codec = _codec()
    writer = codec.registered(score_schema(), "fs.acme.scores")
    record = _resolved_score()
    data = codec.encode(writer, record)
    assert data[:5] == b"\x00\x00\x00\x00\x07"
    _w, back = codec.decode(data)
    assert back == record
    with pytest.raises(SchemaError, match="bad magic"):
        codec.decode(b"\x01" + data[1:])
    with pytest.raises(SchemaError, match="too short"):
        codec.decode(b"\x00\x00")
    with pytest.raises(SchemaError, match="undecodable"):
        codec.decode(data[:12])
    with pytest.raises(SchemaError, match="bytes after"):
        codec.decode(data + b"\x00\x00")


def test_logical_mode_reads_timestamps_as_aware_datetimes_and_the_default_as_millis() -> None:
    from streams.adapters.avro.codec import envelope_to_record
    from streams.adapters.avro.schemas import event_schemas
    from streams.core.actors import UserActor
    from streams.core.events import AppEvent, Envelope

    schema = event_schemas()["app_event"]
    when = datetime(2026, 5, 1, 12, 30, 1, 123000, tzinfo=UTC)
    envelope = Envelope.new(AppEvent(name="t:a", data={"n": 1}), tenant="acme",
                            workspace="prod", actor=UserActor(id="ada"), time=when)
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(schema), envelope_to_record(envelope))
    codec = FastCodec(OneSchemaRegistry(schema))  # type: ignore[arg-type]
    data = frame(7, body.getvalue())
    _writer, logical = codec.decode(data, logical=True)
    _writer, plain = codec.decode(data)
    assert logical["envelope"]["time"] == when and logical["envelope"]["time"].tzinfo is not None
    assert plain["envelope"]["time"] == int(when.timestamp() * 1000)
    assert {k: v for k, v in logical.items() if k != "envelope"} == \
        {k: v for k, v in plain.items() if k != "envelope"}


def test_a_schema_is_registered_once_under_each_tenants_subject() -> None:
    registry = OneSchemaRegistry(score_schema())
    codec = FastCodec(registry, "fs")  # type: ignore[arg-type]
    for topic in ("fs.acme.scores", "fs.acme.scores", "fs.globex.scores", "elsewhere"):
        codec.registered(score_schema(), topic)
    assert registry.subjects == ["fs.acme.streams.scores.Score",
                                 "fs.globex.streams.scores.Score",
                                 "fs._shared.streams.scores.Score"]


_TEXT = st.one_of(st.none(), st.text(max_size=12))


@settings(max_examples=300, deadline=None)
@given(values=st.lists(st.tuples(st.booleans(), st.floats(allow_nan=False), _TEXT),
                       min_size=1, max_size=5),
       trace=_TEXT, session=_TEXT, millis=st.integers(-2**62, 2**62),
       source=st.fixed_dictionaries({k: st.text(max_size=8) for k in (
           "tenant", "workspace", "feedback_type", "target_kind", "target_id",
           "participant", "feedback_event_id")} | {k: _TEXT for k in ("seq", "rule",
                                                                      "action")}))
def test_shared_fields_written_once_give_the_bytes_of_each_record_written_whole(
    values: list[tuple[bool, float, str | None]], trace: str | None, session: str | None,
    millis: int, source: dict[str, Any],
) -> None:
    # The mirror writes a feedback's time, trace and source once for all its scores: the
    # bytes must be exactly those of each score written whole, whatever the values.
    codec = _codec()
    writer = codec.registered(score_schema(), "fs.acme.scores")
    records = [{"id": f"s{i}", "name": f"n{i}", "data_type": "NUMERIC" if numeric else
                "CATEGORICAL", "numeric_value": number if numeric else None,
                "string_value": None if numeric else text, "timestamp": millis,
                "trace_id": trace, "session_id": session, "observation_id": None,
                "comment": None, "source": dict(source)}
               for i, (numeric, number, text) in enumerate(values)]
    whole = codec.encode_all(writer, records)
    assert codec.encode_all(writer, records, shared_from=SCORES_SHARE_FROM) == whole
    assert [codec.decode(data)[1] for data in whole] == records


def test_records_that_do_not_share_the_fields_are_written_whole(
        monkeypatch: pytest.MonkeyPatch) -> None:
    codec = _codec()
    writer = codec.registered(score_schema(), "fs.acme.scores")
    good = _resolved_score()
    split = writer.split(SCORES_SHARE_FROM)
    assert split is not None and split[2][0] == SCORES_SHARE_FROM and split[2][-1] == "source"
    # Each time the shared part is written (once per call that takes the split path).
    splits: list[int] = []
    real = fastavro.schemaless_writer

    def spy(out: Any, schema: Any, record: Any) -> None:
        if schema is split[1]:
            splits.append(1)
        real(out, schema, record)

    monkeypatch.setattr(fastavro, "schemaless_writer", spy)
    # Records that agree take the split path (the mirror's scores share one source dict).
    agreeing = [good, {**good, "id": "other", "name": "other"}]
    codec.encode_all(writer, agreeing, shared_from=SCORES_SHARE_FROM)
    assert splits == [1]
    others = [
        {**good, "timestamp": good["timestamp"] + 1},  # another time
        {**good, "source": {**good["source"], "seq": "9:9"}},  # another source
        {**good, "source": dict(good["source"])},  # an equal source, not the same dict
        {k: v for k, v in good.items() if k != "comment"},  # missing in one: its default
    ]
    for other in others:
        records = [good, other]
        assert codec.encode_all(writer, records, shared_from=SCORES_SHARE_FROM) == [
            codec.encode(writer, r) for r in records]
    assert splits == [1]  # each of those written whole
    # No such field, the first field (nothing before it) or logical types: written whole.
    assert writer.split("no_such_field") is None and writer.split("id") is None
    records = [good, {**good, "id": "other"}]
    for shared_from in ("no_such_field", "id"):
        assert codec.encode_all(writer, records, shared_from=shared_from) == [
            codec.encode(writer, r) for r in records]
    assert codec.encode_all(writer, records, logical=True, shared_from=SCORES_SHARE_FROM) \
        == [codec.encode(writer, r, logical=True) for r in records]
    assert splits == [1]
    # A bad value in the shared part is refused as a whole write refuses it, and so is a
    # record that is not a mapping.
    with pytest.raises(SchemaError, match="cannot encode"):
        codec.encode_all(writer, [{**good, "timestamp": "noon"}] * 2,
                         shared_from=SCORES_SHARE_FROM)
    with pytest.raises(SchemaError, match="cannot encode"):
        codec.encode_all(writer, [good, "not a record"],  # type: ignore[list-item]
                         shared_from=SCORES_SHARE_FROM)


def test_equal_values_of_other_types_are_written_by_their_own_branch() -> None:
    # 1 and 1.0 are equal, but a union of long and double writes them apart: a record whose
    # shared field holds the other type is written whole, with its own branch.
    raw = {"type": "record", "name": "R", "namespace": "t", "fields": [
        {"name": "id", "type": "string"},
        {"name": "n", "type": ["long", "double"]},
        {"name": "nested", "type": {"type": "record", "name": "N", "fields": [
            {"name": "m", "type": ["long", "double"]}]}}]}
    writer = WriterSchema(7, "t.R", fastavro.parse_schema(raw), raw)
    whole = FastCodec.encode_all
    records = [{"id": "a", "n": 1, "nested": {"m": 1}}, {"id": "b", "n": 1.0, "nested": {"m": 1}}]
    encoded = whole(writer, records, shared_from="n")
    assert encoded == whole(writer, records)
    assert encoded[0][7:] != encoded[1][7:]  # past the frame and the ids: apart
    nested = [{"id": "a", "n": 1, "nested": {"m": 1}}, {"id": "b", "n": 1, "nested": {"m": 1.0}}]
    assert whole(writer, nested, shared_from="n") == whole(writer, nested)
