"""What the rules read and write, as records: decoding events for the matcher, encoding the
envelopes firings and runs write, and forwarding stateful matches to a tenant's rules topic.
The reactor agent and the decider share one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from streams.adapters.avro.codec import (
    envelope_from_record,
    envelope_to_record,
    plain_from_record,
)
from streams.adapters.avro.fast import FastCodec
from streams.adapters.avro.serde import AvroSerde
from streams.adapters.kafka.log import envelope_headers
from streams.adapters.kafka.outputs import HEADER_RULE, Output, rule_forward
from streams.adapters.tracing import child_span, traced_as, tracing_enabled
from streams.core.errors import SchemaError
from streams.core.events import Envelope, Seq
from streams.core.matching import Decision, Forward, Matcher, ReactorStats
from streams.core.plain import PlainEvent
from streams.core.rules import Fire
from streams.core.runs import Cause
from streams.core.tenancy import tenant_topics

__all__ = ["HEADER_RULE", "RECENT_EVENTS", "RecentEvents", "RuleRecords", "firing_outputs"]


class RuleRecords:
    """Decodes events for the rules, and encodes what they write as records."""

    def __init__(self, serde: AvroSerde, prefix: str, stats: ReactorStats, *,
                 codec: FastCodec) -> None:
        self.serde = serde
        self.prefix = prefix
        self.stats = stats
        # Decoding is the batch path's: fastavro against writer schemas cached per id (the
        # runtime's codec, on the serde's registry client).
        self.codec = codec
        # Whether `read` keeps logical types (timestamps as datetimes). Off, as on the
        # mirror's path: the plain head converts its one timestamp itself, for less.
        self.logical = False

    def decode(self, value: bytes | None, topic: str, partition: int,
               offset: int) -> Envelope | None:
        """The envelope of a record, or None (counted) if it cannot be decoded. Raises
        RegistryUnavailable when the writer's schema cannot be fetched now (an outage)."""
        try:
            _writer, record = self.codec.decode(value or b"")
            return envelope_from_record(record, Seq(partition=partition, offset=offset))
        except (SchemaError, KeyError, TypeError, ValueError):
            self.stats.undecodable += 1  # the feedback mirror dead-letters these
            return None

    def read(self, value: bytes | None, partition: int, offset: int,
             ) -> tuple[dict[str, Any], PlainEvent | None] | None:
        """The hot path's decode: a record and its plain form (None
        when the plain form cannot hold it: build the envelope, which says why), or None
        (counted) if the bytes are not a record. Raises RegistryUnavailable as `decode`."""
        try:
            _writer, record = self.codec.decode(value or b"", logical=self.logical)
        except SchemaError:
            self.stats.undecodable += 1
            return None
        return record, plain_from_record(record, partition, offset)

    def envelope_of(self, record: dict[str, Any], partition: int,
                    offset: int) -> Envelope | None:
        """The envelope of a record `read` gave, or None (counted) if it is not one."""
        try:
            return envelope_from_record(record, Seq(partition=partition, offset=offset))
        except (SchemaError, KeyError, TypeError, ValueError):
            self.stats.undecodable += 1
            return None

    def envelope(self, envelope: Envelope) -> Output:
        """An envelope as a record for its tenant's events topic, keyed by its chain."""
        topic = tenant_topics(envelope.tenant, self.prefix).events
        # fastavro through the codec, registered under the same subject: the serde's bytes
        # (confluent-kafka's serializer walks the schema per record, a third of a firing).
        writer = self.codec.registered(self.serde.envelope_schema_for(envelope), topic)
        return Output(topic, envelope.correlation_id.encode(),
                      self.codec.encode(writer, envelope_to_record(envelope), logical=True),
                      envelope_headers(envelope))

    def forward(self, forward: Forward, raw: bytes | None) -> Output:
        """A stateful rule's match as a record for the tenant's rules topic (see
        streams.adapters.kafka.outputs.rule_forward)."""
        envelope = forward.envelope
        return rule_forward(tenant_topics(envelope.tenant, self.prefix).rules,
                            forward.rule.name, forward.rule.scope_key(envelope),
                            envelope.event_type, raw or b"")


def firing_outputs(records: RuleRecords, matcher: Matcher, decision: Decision, cause: Cause,
                   *, stage: str) -> list[Output]:
    """The records a decision writes (`rule_fired`, `run_started`; a throttle's record).
    With tracing on, a firing is a span `fire <rule>`, child of the causing event's trace
    context, and its envelopes carry that span's context, so the run continues it."""
    fired = matcher.fired(decision, cause)
    if fired and isinstance(decision, Fire) and tracing_enabled():
        rule = decision.rule.name
        with child_span(f"fire {rule}", cause.trace, attributes={
                "streams.rule": rule, "streams.tenant": cause.tenant,
                "streams.workspace": cause.workspace, "streams.stage": stage,
                "streams.cause_event_id": cause.event_id,
                "streams.event_id": fired[0].event_id}) as span:
            fired = [traced_as(e, span) for e in fired]
    return [records.envelope(e) for e in fired]


RECENT_EVENTS = 10_000
"""How many envelopes a reactor remembers (`RecentEvents`): a live run's firing and causes
are read moments before its `run_started`, in the same partition; 10,000 is tens of MB."""


class RecentEvents:
    """The envelopes a reactor decoded last (firings, the events its rules matched, runs
    started), by tenant and event id (ids derive from workspace names, which tenants share),
    at most `capacity` of them, oldest forgotten first: what a run's reaction needs without
    a read, where the run is live. A run whose events are older (a backfill's matched
    events) finds them through the index.

    Written by the reactor's thread, read by the event loop's, mostly while that thread
    waits for the batch's runs: each read is one dict look-up, safe under the GIL even when
    a batch is redone while runs of the last one still read."""

    def __init__(self, capacity: int = RECENT_EVENTS) -> None:
        self.capacity = capacity
        self._by_id: dict[tuple[str, str], Envelope] = {}

    def add(self, envelope: Envelope) -> None:
        """Remember an envelope (again: it moves to the newest)."""
        by_id = self._by_id
        key = (envelope.tenant, envelope.event_id)
        by_id.pop(key, None)
        by_id[key] = envelope
        while len(by_id) > self.capacity:
            del by_id[next(iter(by_id))]

    def get(self, tenant: str, event_id: str) -> Envelope | None:
        """The envelope of that id in `tenant`, if it is among the remembered ones."""
        return self._by_id.get((tenant, event_id))

    def found(self, tenant: str, event_ids: Sequence[str]) -> dict[str, Envelope]:
        """The remembered envelopes of `tenant` among `event_ids`."""
        get = self._by_id.get
        found = {i: get((tenant, i)) for i in event_ids}
        return {i: e for i, e in found.items() if e is not None}

    def __len__(self) -> int:
        return len(self._by_id)
