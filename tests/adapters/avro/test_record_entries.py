"""Index entries from a plain fastavro record (`record_entries`, what `streams index build`
and the workers' index writes use) are the entries of the pydantic path (`index_entries`)."""

import io
from typing import Any

import fastavro
import pytest

from streams.adapters.avro.codec import envelope_from_record, envelope_to_record
from streams.adapters.avro.fast import without_logical_types
from streams.adapters.avro.schemas import event_schemas, feedback_given_schema
from streams.core.actors import AgentActor, EvaluatorActor, UserActor
from streams.core.errors import ValidationFailed
from streams.core.events import (
    AppEvent,
    Envelope,
    Event,
    FeedbackGiven,
    RuleFired,
    RunFailed,
    RunStarted,
    RunSucceeded,
    TraceContext,
)
from streams.core.targets import RunTarget
from streams.core.view import index_entries, record_entries, record_entries_encoded
from streams.examples.ops import TriageQuality

TRACE = TraceContext(traceparent=f"00-{'a' * 32}-{'b' * 16}-01")
BAD_TRACE = TraceContext(traceparent="not-a-traceparent")


def _plain(schema: dict[str, Any], envelope: Envelope) -> dict[str, Any]:
    """The record as the batch path decodes it: fastavro, logical types dropped."""
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), envelope_to_record(envelope))
    buf.seek(0)
    record = fastavro.schemaless_reader(
        buf, fastavro.parse_schema(without_logical_types(schema)), None)
    assert isinstance(record, dict)
    return record


def _schema(event: Event) -> dict[str, Any]:
    if isinstance(event, FeedbackGiven):
        return feedback_given_schema(TriageQuality)
    kind = "app_event" if isinstance(event, AppEvent) else event.event_type
    return event_schemas()[kind]


HEAD = Envelope.new(AppEvent(name="ops:error_spike", data={"service": "api"}),
                    tenant="acme", workspace="prod", actor=UserActor(id="app"), trace=TRACE)
RULE = AgentActor(id="rule:ops:error-spike")


@pytest.mark.parametrize("envelope", [
    HEAD,
    Envelope.new(AppEvent(name="ops:note"), tenant="acme", workspace="w2"),  # no trace
    HEAD.follow(RuleFired(firing_id="fir_1", rule="ops:error-spike", matched=[HEAD.event_id]),
                actor=RULE),
    HEAD.follow(RunStarted(run_id="run_1", rule="ops:error-spike", action="triage",
                           firing_id="fir_1", scope={"service": "api"}), actor=RULE),
    HEAD.follow(RunSucceeded(run_id="run_1", rule="ops:error-spike", action="triage",
                             output={"ok": True}), actor=RULE),
    HEAD.follow(RunFailed(run_id="run_1", rule="ops:error-spike", action="triage",
                          error="boom", will_retry=False), actor=RULE, trace=BAD_TRACE),
    HEAD.follow(FeedbackGiven(feedback_type="triage_quality", target=RunTarget(run_id="run_1"),
                              target_trace_id="a" * 32,
                              value={"correct": False, "severity": "critical", "note": None}),
                actor=EvaluatorActor(name="j", version="1")),
], ids=lambda e: e.event_type)
def test_plain_record_entries_equal_the_pydantic_entries(envelope: Envelope) -> None:
    record = _plain(_schema(envelope.event), envelope)
    assert envelope_from_record(record) == envelope  # the same event on both paths
    plain = record_entries(record, 3, 1234)
    assert plain == index_entries(envelope, 3, 1234)
    assert plain == index_entries(envelope_from_record(record), 3, 1234)
    kinds = [k.split(":", 1)[0] for k, _ in plain]
    # Its own entry, then the chain it starts or, continuing one, the chain's newest event.
    head = envelope.event_id == envelope.correlation_id
    assert kinds[:2] == ["event", "chain" if head else "last"]
    # The bulk path's bytes are the entries' own encoding, key for key.
    assert record_entries_encoded(record, 3, 1234) == [(k, e.encode()) for k, e in plain]


def test_a_record_that_is_no_envelope_is_refused() -> None:
    with pytest.raises(ValidationFailed, match="not an event envelope"):
        record_entries({"name": "x"}, 0, 0)
    with pytest.raises(ValidationFailed, match="not an event envelope"):
        record_entries_encoded({"name": "x"}, 0, 0)
    with pytest.raises(ValidationFailed, match="not an event envelope"):
        record_entries({"envelope": {"event_type": "run_started", "workspace": "w",
                                     "correlation_id": "c", "event_id": "e"}}, 0, 0)
