"""The serde against confluent-kafka's in-process registry (a registry double, not Kafka)."""

import struct

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient

from streams.adapters.avro.codec import envelope_from_record
from streams.adapters.avro.serde import AvroSerde
from streams.core.errors import SchemaError
from streams.core.events import AppEvent, Envelope


@pytest.fixture
def serde() -> AvroSerde:
    return AvroSerde(SchemaRegistryClient.new_client({"url": "mock://serde-tests"}))


def test_confluent_wire_format_and_the_tenants_record_subject(serde: AvroSerde) -> None:
    envelope = Envelope.new(AppEvent(name="x", data={"a": 1}), tenant="acme", workspace="w")
    data = serde.encode_envelope(envelope, "fs.acme.events")
    assert data[0] == 0
    schema_id = struct.unpack(">I", data[1:5])[0]
    assert schema_id >= 1
    assert serde.client.get_subjects() == ["fs.acme.streams.events.AppEvent"]  # the tenant's
    assert envelope_from_record(serde.decode(data, "fs.acme.events")) == envelope


@pytest.mark.parametrize("data", [b"", b"\x01\x00\x00\x00\x01abc", b"garbage!"])
def test_undecodable_bytes_raise_schema_error(serde: AvroSerde, data: bytes) -> None:
    with pytest.raises(SchemaError):
        serde.decode(data, "fs.acme.events")
