"""What the rules write, as records (streams.runtime.worker.records), against confluent-kafka's
in-process registry (a registry double, not Kafka)."""

from datetime import UTC, datetime

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient

from streams.adapters.avro.fast import FastCodec
from streams.adapters.avro.serde import AvroSerde
from streams.core.actors import AgentActor, UserActor
from streams.core.events import (
    AppEvent,
    Envelope,
    FeedbackGiven,
    RuleFired,
    RunFailed,
    RunStarted,
    RunSucceeded,
    TraceContext,
)
from streams.core.matching import ReactorStats
from streams.core.targets import RunTarget
from streams.examples.ops import TriageQuality  # noqa: F401  (registers triage_quality)
from streams.runtime.worker.records import RuleRecords

SPIKE = Envelope.new(AppEvent(name="ops:error_spike", data={"service": "api", "n": 3}),
                     tenant="acme", workspace="prod", actor=UserActor(id="app"),
                     trace=TraceContext(traceparent=f"00-{'a' * 32}-{'b' * 16}-01"),
                     time=datetime(2026, 12, 7, 12, 30, 1, 123000, tzinfo=UTC))
RULE = AgentActor(id="rule:ops:error-spike")
FIRED = SPIKE.follow(RuleFired(firing_id="fir_1", rule="ops:error-spike",
                               matched=[SPIKE.event_id]), actor=RULE)
STARTED = FIRED.follow(RunStarted(run_id="run_1", rule="ops:error-spike", action="triage",
                                  firing_id="fir_1", scope={"service": "api"}), actor=RULE)


@pytest.mark.parametrize("envelope", [
    SPIKE, FIRED, STARTED,
    STARTED.follow(RunSucceeded(run_id="run_1", rule="ops:error-spike", action="triage",
                                output={"ok": True, "at": "now"}), actor=RULE),
    STARTED.follow(RunFailed(run_id="run_1", rule="ops:error-spike", action="triage",
                             error="boom", will_retry=True), actor=RULE),
    STARTED.follow(FeedbackGiven(feedback_type="triage_quality",
                                 target=RunTarget(run_id="run_1"),
                                 value={"correct": True, "severity": "low", "note": None})),
], ids=lambda e: e.event_type)
def test_a_written_envelope_is_the_serdes_bytes_under_the_same_subject(
    envelope: Envelope,
) -> None:
    registry = SchemaRegistryClient.new_client({"url": "mock://rule-records"})
    serde = AvroSerde(registry)
    records = RuleRecords(serde, "fs", ReactorStats(), codec=FastCodec(registry, "fs"))
    out = records.envelope(envelope)
    assert out.topic == "fs.acme.events"
    assert out.key == envelope.correlation_id.encode()
    assert out.value == serde.encode_envelope(envelope, "fs.acme.events")
    assert serde.decode(out.value, "fs.acme.events")["envelope"]["event_id"] == \
        envelope.event_id
